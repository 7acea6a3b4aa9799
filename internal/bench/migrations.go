package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// Tools is the folder holding the peers the migrations section runs
// beside ptah: goose and golang-migrate's migrate (make bench-tools
// installs them there).
var Tools = "bin/benchtools"

// migrationFiles is how many files the migrations section applies.
const migrationFiles = 1000

// migrationResource is the name of the PtahMigration the section
// declares, and the key of its rows in ptah's history and journal.
const (
	migrationName     = "bench"
	migrationResource = "PtahMigration/default/" + migrationName
)

// Migrations applies migrationFiles small files (a table and three rows
// each) to an empty database by ptah, goose, golang-migrate and a floor,
// alternately, each run on a fresh database of the same server:
//
//   - ptah: the shortest flow a CI runs for a PtahMigration, one
//     `ptah apply` under policy.apply Always (it plans, claims and applies
//     in one process); and the governed flow, plan + approve + apply under
//     OnApproval, timed whole and its apply alone.
//   - goose up and migrate up, each over the same files in its own layout.
//   - the floor: one connection, one transaction per file holding the
//     file's statements and an INSERT of its history row, nothing else.
//
// After every ptah run its history and journal must hold every version,
// or the section fails. For each tool it also reports the WAL flushes
// (pg_stat_wal.wal_sync, reset before each run) and the commits
// (pg_stat_database.xact_commit of the target) per file, from its last
// run.
func Migrations(ctx context.Context, env *Env) ([]Row, error) {
	goose, migrate := filepath.Join(Tools, "goose"), filepath.Join(Tools, "migrate")
	for _, bin := range []string{goose, migrate} {
		if _, err := os.Stat(bin); err != nil {
			return nil, fmt.Errorf("%w (make bench-tools installs it)", err)
		}
	}
	dir := filepath.Join(env.Work, "migrations")
	if err := writeMigrationLayouts(dir, migrationFiles); err != nil {
		return nil, err
	}
	// ptah.sum, as a repository would commit it: a CI's apply verifies it.
	hash := exec.CommandContext(ctx, env.Ptah, "migrate", "hash", "-f", filepath.Join(dir, "ptah", "always.yaml"))
	hash.Env = Environ("BENCH_DATABASE_URL=" + env.Server.URL("postgres"))
	if _, err := Run(ctx, hash); err != nil {
		return nil, err
	}
	admin, err := pgx.Connect(ctx, env.Server.URL("postgres"))
	if err != nil {
		return nil, err
	}
	defer admin.Close(context.Background())
	var major int
	if err := admin.QueryRow(ctx, "SELECT current_setting('server_version_num')::int / 10000").Scan(&major); err != nil {
		return nil, err
	}
	if major < 14 {
		return nil, fmt.Errorf("the migrations section counts WAL flushes in pg_stat_wal, which PostgreSQL %d lacks", major)
	}

	m := &migBench{env: env, admin: admin, dir: dir, counts: map[string]walCounts{}}
	var applyAlone []Sample
	seq := 0
	tool := func(name string, run func(url string) (Sample, error)) func() (Sample, error) {
		return func() (Sample, error) {
			seq++
			return m.measure(ctx, name, fmt.Sprintf("bench_mig_%d", seq), run)
		}
	}
	always := tool("ptah", func(url string) (Sample, error) {
		cmd := exec.CommandContext(ctx, env.Ptah, "apply", "-f", filepath.Join(dir, "ptah", "always.yaml"))
		cmd.Env = Environ("BENCH_DATABASE_URL=" + url)
		s, err := Run(ctx, cmd)
		if err != nil {
			return s, err
		}
		return s, checkPtahRecords(ctx, url)
	})
	approved := tool("ptah-approval", func(url string) (Sample, error) {
		flow, apply, err := m.approvalFlow(ctx, url)
		if err == nil {
			applyAlone = append(applyAlone, apply)
			err = checkPtahRecords(ctx, url)
		}
		return flow, err
	})
	gooseUp := tool("goose", func(url string) (Sample, error) {
		return Run(ctx, exec.CommandContext(ctx, goose, "-dir", filepath.Join(dir, "goose"), "postgres", url, "up"))
	})
	migrateUp := tool("migrate", func(url string) (Sample, error) {
		return Run(ctx, exec.CommandContext(ctx, migrate, "-path", filepath.Join(dir, "migrate"), "-database", url, "up"))
	})
	floor := tool("floor", func(url string) (Sample, error) { return migrationFloor(ctx, url, dir) })

	env.Logf("migrations: %d files, by ptah (apply, policy Always), ptah (plan + approve + apply), goose, migrate and the floor, %d runs each",
		migrationFiles, env.Runs)
	got, err := Alternate(env.Runs, always, approved, gooseUp, migrateUp, floor)
	if err != nil {
		return nil, err
	}
	ptahS, flowS, gooseS, migrateS, floorS := got[0], got[1], got[2], got[3], got[4]

	n := Count(migrationFiles)
	ok := Ratio(ptahS, gooseS) <= 1.0
	rows := []Row{
		{Section: "migrations", What: n + " files: ptah apply (policy Always: plan, claim, apply)", Value: Seconds(Median(ptahS)),
			Ratio: Ratio(ptahS, gooseS), Versus: "goose", Target: "<= 1.00x goose", Met: Met(ok)},
		{Section: "migrations", What: n + " files: ptah plan + approve + apply", Value: Seconds(Median(flowS)),
			Ratio: Ratio(flowS, gooseS), Versus: "goose"},
		{Section: "migrations", What: n + " files: ptah apply alone, after plan + approve", Value: Seconds(Median(applyAlone)),
			Ratio: Ratio(applyAlone, gooseS), Versus: "goose"},
		{Section: "migrations", What: n + " files: goose v3.30.0 up", Value: Seconds(Median(gooseS))},
		{Section: "migrations", What: n + " files: golang-migrate v4.20.1 up", Value: Seconds(Median(migrateS)),
			Ratio: Ratio(migrateS, gooseS), Versus: "goose"},
		{Section: "migrations", What: n + " files: floor (a transaction per file with its history row)", Value: Seconds(Median(floorS)),
			Ratio: Ratio(floorS, gooseS), Versus: "goose"},
	}
	for _, name := range []string{"ptah", "ptah-approval", "goose", "migrate", "floor"} {
		c := m.counts[name]
		rows = append(rows, Row{Section: "migrations", What: name + ": WAL flushes, commits per file",
			Value: fmt.Sprintf("%.2f wal_sync, %.2f xact_commit", float64(c.walSync)/migrationFiles, float64(c.commits)/migrationFiles)})
	}
	return rows, nil
}

// walCounts are what a run cost the server: WAL flushes (all of the
// cluster's, during the run) and commits in the target database.
type walCounts struct{ walSync, commits int64 }

type migBench struct {
	env    *Env
	admin  *pgx.Conn
	dir    string
	counts map[string]walCounts // the last run's, by tool
}

// measure creates the empty database db, resets the cluster's WAL
// statistics, runs run against db, waits for its sessions to end (their
// statistics are flushed as they exit), records the counts and drops db.
func (m *migBench) measure(ctx context.Context, name, db string, run func(url string) (Sample, error)) (Sample, error) {
	if _, err := m.admin.Exec(ctx, "CREATE DATABASE "+db); err != nil {
		return Sample{}, err
	}
	defer func() { _, _ = m.admin.Exec(context.Background(), "DROP DATABASE IF EXISTS "+db+" WITH (FORCE)") }()
	if _, err := m.admin.Exec(ctx, "SELECT pg_stat_reset_shared('wal')"); err != nil {
		return Sample{}, err
	}
	s, err := run(m.env.Server.URL(db))
	if err != nil {
		return s, fmt.Errorf("%s: %w", name, err)
	}
	c, err := m.read(ctx, db)
	if err != nil {
		return s, err
	}
	m.counts[name] = c
	return s, nil
}

// read waits until no session is connected to db, then reads the counts.
func (m *migBench) read(ctx context.Context, db string) (walCounts, error) {
	for i := 0; ; i++ {
		var n int
		if err := m.admin.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE datname = $1", db).Scan(&n); err != nil {
			return walCounts{}, err
		}
		if n == 0 {
			break
		}
		if i == 100 {
			return walCounts{}, fmt.Errorf("%d sessions still connected to %s after the run", n, db)
		}
		time.Sleep(50 * time.Millisecond)
	}
	var c walCounts
	_, err := m.admin.Exec(ctx, "SELECT pg_stat_clear_snapshot()")
	if err == nil {
		err = m.admin.QueryRow(ctx, `SELECT (SELECT wal_sync FROM pg_stat_wal),
			(SELECT xact_commit FROM pg_stat_database WHERE datname = $1)`, db).Scan(&c.walSync, &c.commits)
	}
	return c, err
}

// approvalFlow runs the governed flow on url: ptah plan (publishing the
// plan), ptah approve (its UID and fingerprint, as a CI script would read
// them from the plan's JSON) and ptah apply. It returns the whole flow's
// sample and the apply's alone.
func (m *migBench) approvalFlow(ctx context.Context, url string) (flow, apply Sample, err error) {
	file := filepath.Join(m.dir, "ptah", "approval.yaml")
	cmd := func(args ...string) *exec.Cmd {
		c := exec.CommandContext(ctx, m.env.Ptah, append(args, "-f", file)...)
		c.Env = Environ("BENCH_DATABASE_URL=" + url)
		return c
	}
	plan := cmd("plan", "-o", "json")
	var out strings.Builder
	plan.Stdout = &out
	began := time.Now()
	if _, err := Run(ctx, plan); err != nil {
		return flow, apply, err
	}
	var doc struct {
		Items []struct {
			Plan struct {
				Metadata struct{ UID string }
				Spec     struct{ Fingerprint string }
			}
		}
	}
	if err := json.Unmarshal([]byte(out.String()), &doc); err != nil || len(doc.Items) != 1 || doc.Items[0].Plan.Metadata.UID == "" {
		return flow, apply, fmt.Errorf("reading the plan's UID from ptah plan -o json (%v):\n%s", err, out.String())
	}
	p := doc.Items[0].Plan
	if _, err := Run(ctx, cmd("approve", p.Metadata.UID, "--fingerprint", p.Spec.Fingerprint, "--as", "bench")); err != nil {
		return flow, apply, err
	}
	if apply, err = Run(ctx, cmd("apply")); err != nil {
		return flow, apply, err
	}
	flow = Sample{Wall: time.Since(began), MaxRSS: apply.MaxRSS}
	return flow, apply, nil
}

// checkPtahRecords checks that ptah's history and journal of url hold
// every version, once, from one run that succeeded.
func checkPtahRecords(ctx context.Context, url string) error {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	var history, historyRun, runs, succeeded, journaled, committed int
	err = conn.QueryRow(ctx, `SELECT
		(SELECT count(*) FROM ptah.migration_history WHERE resource = $1),
		(SELECT count(*) FROM ptah.migration_history WHERE resource = $1 AND how = 'run' AND operation_id IS NOT NULL),
		(SELECT count(*) FROM ptah.runs WHERE resource = $1),
		(SELECT count(*) FROM ptah.runs WHERE resource = $1 AND outcome = 'succeeded' AND finished_at IS NOT NULL),
		(SELECT count(DISTINCT s.version) FROM ptah.run_steps s JOIN ptah.runs r USING (operation_id) WHERE r.resource = $1),
		(SELECT count(DISTINCT s.version) FROM ptah.run_steps s JOIN ptah.runs r USING (operation_id)
			WHERE r.resource = $1 AND s.committed_at IS NOT NULL)`, migrationResource).
		Scan(&history, &historyRun, &runs, &succeeded, &journaled, &committed)
	if err != nil {
		return fmt.Errorf("reading ptah's history and journal: %w", err)
	}
	if history != migrationFiles || historyRun != migrationFiles || runs != 1 || succeeded != 1 ||
		journaled != migrationFiles || committed != migrationFiles {
		return fmt.Errorf("ptah's records after applying %d files: %d history rows (%d run by an operation), %d runs (%d succeeded), "+
			"%d versions journaled (%d committed)", migrationFiles, history, historyRun, runs, succeeded, journaled, committed)
	}
	return nil
}

// migrationFloor applies the files of the native layout to url the
// cheapest durable way: one transaction per file, holding its statements
// and the INSERT of its history row.
func migrationFloor(ctx context.Context, url, dir string) (Sample, error) {
	began := time.Now()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return Sample{}, err
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, `CREATE TABLE floor_history (version bigint PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())`); err != nil {
		return Sample{}, err
	}
	for i := 1; i <= migrationFiles; i++ {
		sql, err := os.ReadFile(filepath.Join(dir, "ptah", "migrations", migrationFileName(i)+".sql"))
		if err != nil {
			return Sample{}, err
		}
		tx, err := conn.Begin(ctx)
		if err != nil {
			return Sample{}, err
		}
		if _, err := tx.Exec(ctx, string(sql)); err != nil {
			return Sample{}, err
		}
		if _, err := tx.Exec(ctx, "INSERT INTO floor_history (version) VALUES ($1)", i); err != nil {
			return Sample{}, err
		}
		if err := tx.Commit(ctx); err != nil {
			return Sample{}, err
		}
	}
	if err := conn.Close(ctx); err != nil {
		return Sample{}, err
	}
	return Sample{Wall: time.Since(began)}, nil
}

func migrationFileName(i int) string { return fmt.Sprintf("%04d_t%04d", i, i) }

// migrationSQL is file i's body: a table and three rows.
func migrationSQL(i int) string {
	return fmt.Sprintf("CREATE TABLE t%04d (id integer PRIMARY KEY, name text NOT NULL);\n"+
		"INSERT INTO t%04d (id, name) VALUES (1, 'one'), (2, 'two'), (3, 'three');\n", i, i)
}

// writeMigrationLayouts writes n files under dir in each tool's layout:
// ptah/migrations (native: NNNN_name.sql, with ptah.yaml files beside it,
// one per policy), goose (NNNN_name.sql, -- +goose Up) and migrate
// (NNNN_name.up.sql).
func writeMigrationLayouts(dir string, n int) error {
	for _, d := range []string{"ptah/migrations", "goose", "migrate"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			return err
		}
	}
	for i := 1; i <= n; i++ {
		name, sql := migrationFileName(i), migrationSQL(i)
		files := map[string]string{
			filepath.Join(dir, "ptah", "migrations", name+".sql"): sql,
			filepath.Join(dir, "goose", name+".sql"):              "-- +goose Up\n" + sql,
			filepath.Join(dir, "migrate", name+".up.sql"):         sql,
		}
		for path, body := range files {
			if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
				return err
			}
		}
	}
	for file, policy := range map[string]string{"always.yaml": "Always", "approval.yaml": "OnApproval"} {
		doc := fmt.Sprintf(`apiVersion: ptah.run/v1alpha1
kind: PtahMigration
metadata:
  name: %s
spec:
  target:
    urlFrom: {env: BENCH_DATABASE_URL}
  source:
    path: migrations
    layout: native
  policy:
    apply: %s
`, migrationName, policy)
		if err := os.WriteFile(filepath.Join(dir, "ptah", file), []byte(doc), 0o644); err != nil {
			return err
		}
	}
	return nil
}
