package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/rogpeppe/go-internal/testscript"

	"github.com/ptah-run/ptah/internal/pgserver"
	"github.com/ptah-run/ptah/internal/pgtest"
)

// TestMain serves two roles. Run by `go test`, it runs the tests through
// pgtest.Main, which stops the throwaway PostgreSQL server afterwards. Run as
// "ptah" (testscript copies the test binary under that name onto PATH), it
// is ptah itself: cli.Main, in-process code, so coverage and the race
// detector see it.
func TestMain(m *testing.M) {
	testscript.Main(pgtestM{m}, map[string]func(){
		"ptah": func() { os.Exit(Main()) },
	})
}

// scriptBinDir is where testscript put the "ptah" copy of the test binary.
var scriptBinDir string

// pgtestM hands testscript's m.Run to pgtest.Main. pgtest.Main exits the
// process itself, so testscript never gets to remove its directory of
// command binaries; pgtest.Main's after hook removes it instead.
type pgtestM struct{ m *testing.M }

func (p pgtestM) Run() int {
	// testscript has just put its command directory first on PATH; it is
	// removed once every test has run (-count=N runs TestScripts N times).
	scriptBinDir, _, _ = strings.Cut(os.Getenv("PATH"), string(os.PathListSeparator))
	pgtest.Main(p.m, func() {
		if dir := filepath.Dir(scriptBinDir); strings.HasPrefix(filepath.Base(dir), "testscript-main") {
			os.RemoveAll(dir)
		}
	})
	return 0 // not reached: pgtest.Main exits
}

// TestScripts runs testscripts/*.txtar. Each script gets its own fresh
// database, named by $DATABASE_URL (and $DATABASE_NAME), and these commands
// besides the standard ones:
//
//	exits CODE COMMAND [ARGS...]  run COMMAND, require exit status CODE;
//	                              stdout and stderr are kept for assertions
//	sql URL SQL | sql URL -f FILE run SQL (one or more statements) on URL
//	                              and print the rows of every result
//	dbrole VAR                    create a LOGIN role without CREATEDB and set
//	                              VAR to $DATABASE_URL connecting as it
//	dbcreate VAR                  create another database on the same server
//	                              and set VAR to its URL
//	dbserver VAR                  start a server of the script's own and set
//	                              VAR to the URL of a database "app" on it
//	setjson VAR PATH              set VAR to the value at PATH (dot-separated
//	                              keys and array indexes, e.g.
//	                              items.0.plan.metadata.uid) in the JSON of
//	                              the last command's stdout
func TestScripts(t *testing.T) {
	testscript.Run(t, testscript.Params{
		Dir:                 filepath.Join("..", "..", "testscripts"),
		RequireExplicitExec: true,
		Setup: func(env *testscript.Env) error {
			dbURL := pgtest.NewDB(env.T().(testing.TB))
			u, err := url.Parse(dbURL)
			if err != nil {
				return err
			}
			env.Setenv("DATABASE_URL", dbURL)
			env.Setenv("DATABASE_NAME", strings.TrimPrefix(u.Path, "/"))
			// Each script keeps its own desired-state cache (--cache-dir's
			// default is under the user's cache directory).
			env.Setenv("XDG_CACHE_HOME", filepath.Join(env.WorkDir, ".cache"))
			// psql ships beside initdb; Debian does not always link it onto PATH.
			if dir, err := pgserver.FindBinDir(); err == nil {
				env.Setenv("PATH", env.Getenv("PATH")+string(os.PathListSeparator)+dir)
			}
			return nil
		},
		Cmds: map[string]func(ts *testscript.TestScript, neg bool, args []string){
			"exits":    cmdExits,
			"sql":      cmdSQL,
			"dbrole":   cmdDBRole,
			"dbcreate": cmdDBCreate,
			"dbserver": cmdDBServer,
			"setjson":  cmdSetJSON,
		},
	})
}

func cmdExits(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) < 2 {
		ts.Fatalf("usage: exits CODE COMMAND [ARGS...]")
	}
	want, err := strconv.Atoi(args[0])
	if err != nil {
		ts.Fatalf("exits: %q is not an exit code", args[0])
	}
	got := 0
	if err := ts.Exec(args[1], args[2:]...); err != nil {
		var ee *exec.ExitError
		if !errors.As(err, &ee) {
			ts.Fatalf("running %s: %v", args[1], err)
		}
		got = ee.ExitCode()
	}
	if got != want {
		ts.Fatalf("%s exited with %d, want %d", args[1], got, want)
	}
}

func cmdSQL(ts *testscript.TestScript, neg bool, args []string) {
	var conn, sql string
	switch {
	case len(args) == 2:
		conn, sql = args[0], args[1]
	case len(args) == 3 && args[1] == "-f":
		conn, sql = args[0], ts.ReadFile(args[2])
	default:
		ts.Fatalf("usage: sql URL SQL | sql URL -f FILE")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := pgx.Connect(ctx, conn)
	if err != nil {
		ts.Fatalf("sql: connecting: %v", err)
	}
	defer c.Close(ctx)
	// The simple protocol runs several statements in one call, like psql -c.
	results, err := c.PgConn().Exec(ctx, sql).ReadAll()
	if err != nil {
		if !neg {
			ts.Fatalf("sql: %v", err)
		}
		fmt.Fprintln(ts.Stderr(), err)
		return
	}
	if neg {
		ts.Fatalf("sql: succeeded unexpectedly")
	}
	for _, r := range results {
		for _, row := range r.Rows {
			vals := make([]string, len(row))
			for i, v := range row {
				if v == nil {
					vals[i] = "NULL"
				} else {
					vals[i] = string(v)
				}
			}
			fmt.Fprintln(ts.Stdout(), strings.Join(vals, "\t"))
		}
	}
}

var roleCounter atomic.Int64

func cmdDBRole(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 1 {
		ts.Fatalf("usage: dbrole VAR")
	}
	base := ts.Getenv("DATABASE_URL")
	role := fmt.Sprintf("ptahtest_role_%d_%d", os.Getpid(), roleCounter.Add(1))
	exec := func(sql string) error { return execOn(base, sql) }
	// The password matters only on a server that asks for one
	// (PTAH_TEST_DATABASE_URL); the throwaway server trusts local logins.
	password := fmt.Sprintf("pw%d", time.Now().UnixNano())
	if err := exec("CREATE ROLE " + role + " LOGIN NOCREATEDB NOSUPERUSER PASSWORD '" + password + "'"); err != nil {
		ts.Fatalf("dbrole: %v", err)
	}
	// Roles are server-wide: drop it, or a shared server collects them.
	ts.Defer(func() {
		if err := exec("DROP ROLE IF EXISTS " + role); err != nil {
			ts.Logf("dropping role %s: %v", role, err)
		}
	})
	u, err := url.Parse(base)
	if err != nil {
		ts.Fatalf("dbrole: %v", err)
	}
	u.User = url.UserPassword(role, password)
	ts.Setenv(args[0], u.String())
}

func cmdSetJSON(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 2 {
		ts.Fatalf("usage: setjson VAR PATH")
	}
	var v any
	if err := json.Unmarshal([]byte(ts.ReadFile("stdout")), &v); err != nil {
		ts.Fatalf("setjson: stdout is not JSON: %v", err)
	}
	for _, key := range strings.Split(args[1], ".") {
		switch node := v.(type) {
		case map[string]any:
			var ok bool
			if v, ok = node[key]; !ok {
				ts.Fatalf("setjson: no key %q on the way to %s", key, args[1])
			}
		case []any:
			i, err := strconv.Atoi(key)
			if err != nil || i < 0 || i >= len(node) {
				ts.Fatalf("setjson: no index %q on the way to %s", key, args[1])
			}
			v = node[i]
		default:
			ts.Fatalf("setjson: %s: %q is below a scalar", args[1], key)
		}
	}
	s, ok := v.(string)
	if !ok {
		b, _ := json.Marshal(v)
		s = string(b)
	}
	ts.Setenv(args[0], s)
}

var dbCounter atomic.Int64

func cmdDBCreate(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 1 {
		ts.Fatalf("usage: dbcreate VAR")
	}
	base := ts.Getenv("DATABASE_URL")
	name := fmt.Sprintf("%s_%d", ts.Getenv("DATABASE_NAME"), dbCounter.Add(1))
	exec := func(sql string) error { return execOn(base, sql) }
	if err := exec("CREATE DATABASE " + pgx.Identifier{name}.Sanitize() + " TEMPLATE template0"); err != nil {
		ts.Fatalf("dbcreate: %v", err)
	}
	ts.Defer(func() {
		if err := exec("DROP DATABASE IF EXISTS " + pgx.Identifier{name}.Sanitize() + " WITH (FORCE)"); err != nil {
			ts.Logf("dropping database %s: %v", name, err)
		}
	})
	u, err := url.Parse(base)
	if err != nil {
		ts.Fatalf("dbcreate: %v", err)
	}
	u.Path = "/" + name
	ts.Setenv(args[0], u.String())
}

// cmdDBServer starts a server of the script's own (roles and settings are
// server-wide: a script that must see them unchanged by the scripts
// running beside it needs one) and sets VAR to the URL of a database on
// it; the server is stopped when the script ends.
func cmdDBServer(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 1 {
		ts.Fatalf("usage: dbserver VAR")
	}
	srv, err := pgserver.Start()
	if err != nil {
		ts.Fatalf("dbserver: %v", err)
	}
	ts.Defer(func() {
		if err := srv.Stop(); err != nil {
			ts.Logf("stopping the script's server: %v", err)
		}
	})
	if err := execOn(srv.URL("postgres"), "CREATE DATABASE app TEMPLATE template0"); err != nil {
		ts.Fatalf("dbserver: %v", err)
	}
	ts.Setenv(args[0], srv.URL("app"))
}

// execOn runs sql on url in a session of its own.
func execOn(url, sql string) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := pgx.Connect(ctx, url)
	if err != nil {
		return err
	}
	defer c.Close(ctx)
	_, err = c.Exec(ctx, sql)
	return err
}
