// Command demo shows ptah's governed flow on a fresh machine: it starts a
// throwaway PostgreSQL server, builds an example app's database from
// examples/app/v1, and takes it to the changed declaration in
// examples/app/v2 and, beside it on the same database, runs the versioned
// files of examples/app/migrations: plan, apply (refused: not approved),
// approve each plan, apply, status. Everything it creates is removed at
// the end, also on error or Ctrl-C.
//
//	go run ./examples/demo            (or: make demo)
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"sort"
	"strings"
	"syscall"

	"github.com/jackc/pgx/v5"

	"github.com/ptah-run/ptah/internal/cli"
	"github.com/ptah-run/ptah/internal/pgserver"
)

// urlVar is how ptah.yaml finds the database: the URL stays out of the file
// and off the command line.
const urlVar = "DEMO_DATABASE_URL"

func main() {
	appDir := flag.String("app", filepath.Join("examples", "app"), "the example app: v1/ and v2/ declarations, migrations/, seed.sql")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, *appDir)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
}

func step(format string, args ...any) {
	fmt.Printf("\n==> "+format+"\n", args...)
}

func run(ctx context.Context, appDir string) (err error) {
	appDir, err = filepath.Abs(appDir)
	if err != nil {
		return err
	}
	if _, err := os.Stat(filepath.Join(appDir, "v1")); err != nil {
		return fmt.Errorf("example app not found (run from the repository root, or pass -app): %w", err)
	}

	step("Starting a throwaway PostgreSQL server (initdb + pg_ctl, unix socket only)")
	srv, err := pgserver.Start()
	if err != nil {
		return err
	}
	fmt.Printf("    binaries: %s\n    directory: %s\n", srv.BinDir, srv.Dir)
	defer func() {
		step("Stopping the server and removing %s", srv.Dir)
		if stopErr := srv.Stop(); stopErr != nil && err == nil {
			err = stopErr
		}
	}()

	step("Creating database \"shop\" and loading examples/app/v1 and seed.sql, the way the app's database looks today")
	if err := execSQL(ctx, srv.URL("postgres"), "CREATE DATABASE shop TEMPLATE template0"); err != nil {
		return err
	}
	dbURL := srv.URL("shop")
	files, err := filepath.Glob(filepath.Join(appDir, "v1", "*.sql"))
	if err != nil {
		return err
	}
	sort.Strings(files)
	for _, f := range append(files, filepath.Join(appDir, "seed.sql")) {
		sql, err := os.ReadFile(f)
		if err != nil {
			return err
		}
		fmt.Printf("    %s\n", rel(f))
		if err := execSQL(ctx, dbURL, string(sql)); err != nil {
			return fmt.Errorf("loading %s: %w", f, err)
		}
	}

	work, err := os.MkdirTemp("", "ptah-demo")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	yamlPath := filepath.Join(work, "ptah.yaml")
	yaml := fmt.Sprintf(`apiVersion: ptah.run/v1alpha1
kind: PtahSchema
metadata:
  name: shop
spec:
  target:
    urlFrom: {env: %s}
    sharedRealm: true                # the migration below shares the database
  source:
    path: %s
  schemas: [public]
  policy:
    apply: OnApproval
    allowDestructive: true           # v2 drops a column; a person still approves it
    lockTimeout: 5s
---
apiVersion: ptah.run/v1alpha1
kind: PtahMigration
metadata:
  name: shop-reporting
spec:
  target:
    urlFrom: {env: %s}
    sharedRealm: true
  source:
    path: %s                         # versioned files, each run once, in order
  policy:
    apply: OnApproval
`, urlVar, filepath.Join(appDir, "v2"), urlVar, filepath.Join(appDir, "migrations"))
	if err := os.WriteFile(yamlPath, []byte(yaml), 0o644); err != nil {
		return err
	}
	step("Declaring the new schema, examples/app/v2, and the migrations of examples/app/migrations, in %s", yamlPath)
	fmt.Print(indent(yaml))
	fmt.Printf("    (%s holds the URL; it is set in this process's environment)\n", urlVar)
	if err := os.Setenv(urlVar, dbURL); err != nil {
		return err
	}

	ptah := func(want int, args ...string) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		step("ptah %s", strings.Join(args, " "))
		if code := cli.Run(ctx, append(args, "-f", yamlPath), os.Stdout, os.Stderr); code != want {
			return fmt.Errorf("ptah %s exited with %d, want %d", args[0], code, want)
		}
		return nil
	}

	if err := ptah(0, "plan"); err != nil {
		return err
	}
	fmt.Println("\nBoth plans are published in the database (schema ptah) under the UIDs above; nothing ran.")

	if err := ptah(cli.ExitAwaitingApproval, "apply"); err != nil {
		return err
	}
	fmt.Printf("    exit code %d: apply runs only an approved plan\n", cli.ExitAwaitingApproval)

	step("ptah plan -o json: a script reads each plan's UID and fingerprint")
	var out bytes.Buffer
	if code := cli.Run(ctx, []string{"plan", "-f", yamlPath, "-o", "json"}, &out, os.Stderr); code != 0 {
		return fmt.Errorf("ptah plan -o json exited with %d", code)
	}
	var doc struct {
		Items []struct {
			Resource struct{ Kind, Name string }
			Plan     struct {
				Metadata struct{ UID string }
				Spec     struct{ Fingerprint string }
			}
		}
	}
	if err := json.Unmarshal(out.Bytes(), &doc); err != nil || len(doc.Items) != 2 {
		return fmt.Errorf("reading the plans' UIDs from ptah plan -o json: %v", err)
	}
	type call struct {
		want int
		args []string
	}
	var calls []call
	for _, it := range doc.Items {
		uid, fp := it.Plan.Metadata.UID, it.Plan.Spec.Fingerprint
		if uid == "" {
			return fmt.Errorf("ptah plan -o json published no plan for %s %s", it.Resource.Kind, it.Resource.Name)
		}
		fmt.Printf("    %s %s: uid %s\n      fingerprint %s\n", it.Resource.Kind, it.Resource.Name, uid, fp)
		calls = append(calls, call{0, []string{"approve", uid, "--fingerprint", fp, "--as", "demo", "--reason", "reviewed in the demo"}})
	}
	calls = append(calls, call{0, []string{"apply"}}, call{0, []string{"status"}}, call{0, []string{"plan", "--detailed-exitcode"}})
	for _, c := range calls {
		if err := ptah(c.want, c.args...); err != nil {
			return err
		}
	}
	fmt.Println("\nThe database now matches examples/app/v2, and its migration history holds every file of")
	fmt.Println("examples/app/migrations (ptah.migration_history); each run is recorded in the journal (schema ptah).")
	fmt.Println("Had a run stopped part way through a file, ptah would run nothing more for it until")
	fmt.Println("ptah resolve-run shows a person the evidence and records what they found (see README.md).")
	return nil
}

func execSQL(ctx context.Context, url, sql string) error {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, sql)
	return err
}

func rel(p string) string {
	if wd, err := os.Getwd(); err == nil {
		if r, err := filepath.Rel(wd, p); err == nil {
			return r
		}
	}
	return p
}

func indent(s string) string {
	return "    " + strings.ReplaceAll(strings.TrimRight(s, "\n"), "\n", "\n    ") + "\n"
}
