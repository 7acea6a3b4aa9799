package postgres

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/ptah-run/ptah/internal/pgtest"
)

const testResource = "PtahMigration/default/app"

func mustHistory(t *testing.T, conn *pgx.Conn, resource string) []HistoryRow {
	t.Helper()
	h, err := ReadHistory(testCtx(t), conn, resource)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func versions(h []HistoryRow) string {
	var vs []string
	for _, r := range h {
		vs = append(vs, r.Version+":"+r.How)
	}
	return strings.Join(vs, ",")
}

// migration is a plan of files, each a phase recording its history row:
// a file is its statements, prefixed "-- no-transaction" for one run
// without a transaction.
func migration(expect func([]HistoryRow) error, files ...[]string) *Plan {
	p := &Plan{LockTimeout: 5e9, History: &PlanHistory{Resource: testResource, Expect: expect}}
	for i, f := range files {
		ph := Phase{History: &HistoryRow{Version: fmt.Sprint(i + 1), Name: fmt.Sprintf("file%d", i+1), Checksum: fmt.Sprintf("sum%d", i+1)}}
		for _, sql := range f {
			if sql == "-- no-transaction" {
				ph.NoTransaction = true
				continue
			}
			p.Statements = append(p.Statements, Statement{SQL: sql})
			ph.Statements++
		}
		p.Phases = append(p.Phases, ph)
	}
	return p
}

// TestReadHistoryCreatesNothing: reading the history of a database ptah
// never wrote to (no schema ptah; then a schema ptah without the table)
// returns an empty history, creates nothing, and does not abort the
// caller's transaction.
func TestReadHistoryCreatesNothing(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDB(t)
	ctx := testCtx(t)
	conn := dial(t, url)
	schemaExists := func() bool {
		var ok bool
		if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT FROM pg_namespace WHERE nspname = 'ptah')").Scan(&ok); err != nil {
			t.Fatal(err)
		}
		return ok
	}
	h, err := ReadHistory(ctx, conn, testResource)
	if err != nil || h == nil || len(h) != 0 {
		t.Fatalf("ReadHistory on a fresh database = %v, %v; want an empty history", h, err)
	}
	if schemaExists() {
		t.Fatal("ReadHistory created schema ptah")
	}
	execSQL(t, conn, "CREATE SCHEMA ptah")
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if h, err := ReadHistory(ctx, tx, testResource); err != nil || len(h) != 0 {
		t.Fatalf("ReadHistory without the table = %v, %v", h, err)
	}
	var one int
	if err := tx.QueryRow(ctx, "SELECT 1").Scan(&one); err != nil {
		t.Fatalf("the caller's transaction after ReadHistory: %v", err)
	}
	var tables int
	if err := tx.QueryRow(ctx, "SELECT count(*) FROM pg_class WHERE relnamespace = 'ptah'::regnamespace").Scan(&tables); err != nil {
		t.Fatal(err)
	}
	if tables != 0 {
		t.Errorf("ReadHistory created %d relations in schema ptah", tables)
	}
}

// TestRecordHistoryCommitsWithTheCallersTransaction: marked rows are
// recorded in the caller's transaction: gone if it rolls back, there with
// who and which operation once it commits; a version already recorded is
// refused, and a writer's "run" cannot be recorded by hand.
func TestRecordHistoryCommitsWithTheCallersTransaction(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDB(t)
	ctx := testCtx(t)
	conn := dial(t, url)
	rows := []HistoryRow{{Version: "1", Name: "one", Checksum: "sum1", OperationID: "op-1", AppliedBy: "alice"},
		{Version: "2", Name: "two", Checksum: "sum2", OperationID: "op-1", AppliedBy: "alice"}}

	// A fresh database: the tables are created in the transaction.
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := RecordHistory(ctx, tx, testResource, rows, HowMarked); err != nil {
		t.Fatal(err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if h := mustHistory(t, conn, testResource); len(h) != 0 {
		t.Fatalf("history after a rollback: %+v", h)
	}

	err = pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error { return RecordHistory(ctx, tx, testResource, rows, HowMarked) })
	if err != nil {
		t.Fatal(err)
	}
	h := mustHistory(t, conn, testResource)
	if versions(h) != "1:marked,2:marked" || h[0].AppliedBy != "alice" || h[0].OperationID != "op-1" || h[1].Checksum != "sum2" ||
		h[0].AppliedAt.IsZero() || h[0].Duration != 0 {
		t.Errorf("history = %+v", h)
	}
	if other := mustHistory(t, conn, "PtahMigration/default/other"); len(other) != 0 {
		t.Errorf("another resource's history = %+v", other)
	}

	err = pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		return RecordHistory(ctx, tx, testResource, []HistoryRow{{Version: "3", Checksum: "sum3"}, rows[1]}, HowMarked)
	})
	if !errors.Is(err, ErrHistoryExists) {
		t.Errorf("recording version 2 again = %v, want ErrHistoryExists", err)
	}
	err = pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		return RecordHistory(ctx, tx, testResource, []HistoryRow{{Version: "4", Checksum: "sum4"}}, HowRun)
	})
	if err == nil {
		t.Error("RecordHistory recorded a version as run")
	}
	if got := versions(mustHistory(t, conn, testResource)); got != "1:marked,2:marked" {
		t.Errorf("history after the refusals = %s", got)
	}
}

// TestHistoryRowCommitsWithItsTransactionalFile: a transactional file's
// history row is inserted in the file's own transaction: invisible while
// it runs, committed with it, and gone with it when it rolls back; and a
// file whose row is refused (its version is already recorded) rolls back
// its statements too.
func TestHistoryRowCommitsWithItsTransactionalFile(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDB(t)
	ctx := testCtx(t)
	observer := dial(t, url)
	w := openWriter(t, url, testDigest, "op-1")
	plan := migration(nil,
		[]string{"CREATE TABLE public.a (id integer)"},
		[]string{"CREATE TABLE public.b (id integer)", "ALTER TABLE public.missing ADD COLUMN x integer"})
	seen := map[int]string{}
	err := w.Execute(ctx, "plan-1", plan, afterEach(func(done, _ int, _ Statement) {
		seen[done] = versions(mustHistory(t, observer, testResource))
	}))
	if !errors.Is(err, ErrPartiallyApplied) {
		t.Fatalf("Execute = %v, want ErrPartiallyApplied", err)
	}
	if seen[1] != "" || seen[2] != "1:run" {
		t.Errorf("history seen during file 1: %q, during file 2: %q; want none, then version 1", seen[1], seen[2])
	}
	h := mustHistory(t, observer, testResource)
	if versions(h) != "1:run" || h[0].Name != "file1" || h[0].Checksum != "sum1" || h[0].OperationID != "op-1" ||
		h[0].AppliedBy == "" || h[0].Duration <= 0 {
		t.Errorf("history = %+v, want version 1 run by op-1", h)
	}
	if got := strings.Join(relations(t, observer), ","); got != "a" {
		t.Errorf("tables = %s, want a", got)
	}
	run := mustReadRun(t, observer, "op-1")
	if len(run.Steps) != 1 || run.Steps[0].Version != "1" || run.Steps[0].NoTransaction {
		t.Errorf("steps = %+v, want step 1 of version 1", run.Steps)
	}
	if err := w.Release(ctx); err != nil {
		t.Fatal(err)
	}

	// Version 1 again: its row is refused, and its statement with it.
	w2 := openWriter(t, url, testDigest, "op-2")
	err = w2.Execute(ctx, "plan-2", migration(nil, []string{"CREATE TABLE public.c (id integer)"}), nil)
	if !errors.Is(err, ErrPlanFailed) || !errors.Is(err, ErrHistoryExists) {
		t.Fatalf("Execute of a recorded version = %v, want ErrPlanFailed with ErrHistoryExists", err)
	}
	if got := strings.Join(relations(t, observer), ","); got != "a" {
		t.Errorf("tables = %s: the file whose history row was refused committed", got)
	}
}

// TestHistoryRowOfANoTransactionFile: a no-transaction file's row commits
// with its last statement's completion, not before; a baseline plan of no
// statements records its rows; the steps name their version.
func TestHistoryRowOfANoTransactionFile(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDB(t)
	ctx := testCtx(t)
	observer := dial(t, url)
	w := openWriter(t, url, testDigest, "op-1")
	plan := migration(nil,
		[]string{"CREATE TABLE public.a (id integer)"},
		[]string{"-- no-transaction", "CREATE TABLE public.b (id integer)", "CREATE INDEX CONCURRENTLY b_id ON public.b (id)"},
		[]string{"CREATE TABLE public.c (id integer)"})
	seen := map[string]string{}
	err := w.Execute(ctx, "plan-1", plan, func(st Step) {
		seen[fmt.Sprintf("%d:%v", st.N, st.Done)] = versions(mustHistory(t, observer, testResource))
	})
	if err != nil {
		t.Fatal(err)
	}
	for k, want := range map[string]string{"2:false": "1:run", "3:false": "1:run", "3:true": "1:run,2:run", "4:false": "1:run,2:run"} {
		if seen[k] != want {
			t.Errorf("history seen at %s: %q, want %q", k, seen[k], want)
		}
	}
	if got := versions(mustHistory(t, observer, testResource)); got != "1:run,2:run,3:run" {
		t.Errorf("history = %s", got)
	}
	run := mustReadRun(t, observer, "op-1")
	var got []string
	for _, s := range run.Steps {
		got = append(got, fmt.Sprintf("%s/%v", s.Version, s.NoTransaction))
	}
	if !slices.Equal(got, []string{"1/false", "2/true", "2/true", "3/false"}) || !run.Committed() {
		t.Errorf("steps: %v, run %+v", got, run)
	}
	if err := w.Release(ctx); err != nil {
		t.Fatal(err)
	}

	baseline := &Plan{History: &PlanHistory{Resource: "PtahMigration/default/other"}, Phases: []Phase{
		{History: &HistoryRow{Version: "1", Name: "one", Checksum: "sum1", How: HowBaseline}},
		{History: &HistoryRow{Version: "2", Name: "two", Checksum: "sum2", How: HowBaseline}},
	}}
	w2 := openWriter(t, url, testDigest, "op-2")
	if err := w2.Execute(ctx, "plan-2", baseline, nil); err != nil {
		t.Fatal(err)
	}
	if got := versions(mustHistory(t, observer, "PtahMigration/default/other")); got != "1:baseline,2:baseline" {
		t.Errorf("baseline history = %s", got)
	}
	if run := mustReadRun(t, observer, "op-2"); !run.Committed() || run.Phases != 2 {
		t.Errorf("baseline run = %+v", run)
	}
}

// TestHistoryPreconditionRefusalRunsNothing: the writer hands the history
// it reads, just before the plan's first statement, to the plan's check;
// when the check refuses, nothing of the plan runs, whether its first
// phase is transactional or not: ErrNotStarted and ErrHistoryMoved with
// the check's message, the run journaled failed without steps.
func TestHistoryPreconditionRefusalRunsNothing(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDB(t)
	ctx := testCtx(t)
	observer := dial(t, url)
	for i, first := range [][]string{
		{"CREATE TABLE public.a (id integer)"},
		{"-- no-transaction", "CREATE TABLE public.a (id integer)"},
	} {
		op := fmt.Sprintf("op-%d", i+1)
		w := openWriter(t, url, testDigest, op)
		var handed []HistoryRow
		expect := func(h []HistoryRow) error {
			handed = h
			return fmt.Errorf("version 1 was applied since the plan was made")
		}
		err := w.Execute(ctx, "plan-1", migration(expect, first, []string{"CREATE TABLE public.b (id integer)"}), nil)
		if !errors.Is(err, ErrNotStarted) || !errors.Is(err, ErrHistoryMoved) || errors.Is(err, ErrPlanFailed) ||
			!strings.Contains(err.Error(), "version 1 was applied since the plan was made") {
			t.Fatalf("first file %q: Execute = %v, want ErrNotStarted and ErrHistoryMoved", first, err)
		}
		if handed == nil {
			t.Errorf("first file %q: the check was not handed the history", first)
		}
		if rels := relations(t, observer); len(rels) != 0 {
			t.Errorf("first file %q: relations %v after a refusal", first, rels)
		}
		if h := mustHistory(t, observer, testResource); len(h) != 0 {
			t.Errorf("first file %q: history %+v after a refusal", first, h)
		}
		run := mustReadRun(t, observer, op)
		if run.Outcome != RunFailed || len(run.Steps) != 0 || !strings.Contains(run.Error, "version 1 was applied") {
			t.Errorf("first file %q: run = %+v, want failed without steps", first, run)
		}
		if err := w.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}

	// A check that accepts sees the history as it is under the lease.
	err := pgx.BeginFunc(ctx, observer, func(tx pgx.Tx) error {
		return RecordHistory(ctx, tx, testResource, []HistoryRow{{Version: "0", Name: "zero", Checksum: "sum0", AppliedBy: "bob"}}, HowMarked)
	})
	if err != nil {
		t.Fatal(err)
	}
	w := openWriter(t, url, testDigest, "op-ok")
	var handed string
	expect := func(h []HistoryRow) error { handed = versions(h); return nil }
	if err := w.Execute(ctx, "plan-ok", migration(expect, []string{"-- no-transaction", "CREATE TABLE public.a (id integer)"}), nil); err != nil {
		t.Fatal(err)
	}
	if handed != "0:marked" {
		t.Errorf("the check was handed %q, want version 0", handed)
	}
	if got := versions(mustHistory(t, observer, testResource)); got != "0:marked,1:run" {
		t.Errorf("history = %s", got)
	}
}

// TestExecuteRefusesHistoryRowsItCannotRecord: a plan whose phases record
// history rows without naming the history, or one version twice, or as
// marked, does not start.
func TestExecuteRefusesHistoryRowsItCannotRecord(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDB(t)
	ctx := testCtx(t)
	observer := dial(t, url)
	w := openWriter(t, url, testDigest, "op-1")
	noHistory := migration(nil, []string{"SELECT 1"})
	noHistory.History = nil
	twice := migration(nil, []string{"SELECT 1"}, []string{"SELECT 2"})
	twice.Phases[1].History.Version = "1"
	marked := migration(nil, []string{"SELECT 1"})
	marked.Phases[0].History.How = HowMarked
	empty := migration(nil, []string{"SELECT 1"})
	empty.Phases = append(empty.Phases, Phase{})
	for name, plan := range map[string]*Plan{"no history": noHistory, "twice": twice, "marked": marked, "empty phase": empty} {
		if err := w.Execute(ctx, "plan-1", plan, nil); !errors.Is(err, ErrNotStarted) {
			t.Errorf("%s: Execute = %v, want ErrNotStarted", name, err)
		}
	}
	if _, err := ReadRun(ctx, observer, "op-1"); !errors.Is(err, ErrRunNotFound) {
		t.Errorf("a refused plan was journaled: %v", err)
	}
}

// TestRuntimeSchemaAddsTheHistory: a runtime schema from before the
// migration history (no table, no no_transaction or version columns on
// the journal's steps) is brought up to date, its old steps reading as
// transactional steps of no version.
func TestRuntimeSchemaAddsTheHistory(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDB(t)
	ctx := testCtx(t)
	conn := dial(t, url)
	if err := ensureRuntimeSchema(ctx, conn); err != nil {
		t.Fatal(err)
	}
	execSQL(t, conn, `DROP TABLE ptah.migration_history;
		ALTER TABLE ptah.run_steps DROP COLUMN no_transaction, DROP COLUMN version;
		INSERT INTO ptah.runs (operation_id, writer_pid, writer_backend_start, deadline, started_at)
			VALUES ('old', 1, now(), now(), now());
		INSERT INTO ptah.run_steps (operation_id, step, phase, statement, started_at) VALUES ('old', 1, 1, 'SELECT 1', now())`)
	if present, err := runtimeSchemaPresent(ctx, conn); err != nil || present {
		t.Fatalf("runtimeSchemaPresent on the old schema = %v, %v", present, err)
	}
	if err := ensureRuntimeSchema(ctx, conn); err != nil {
		t.Fatal(err)
	}
	run, err := ReadRun(ctx, conn, "old")
	if err != nil {
		t.Fatal(err)
	}
	if len(run.Steps) != 1 || run.Steps[0].NoTransaction || run.Steps[0].Version != "" {
		t.Errorf("old run = %+v", run)
	}
	err = pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		return RecordHistory(ctx, tx, testResource, []HistoryRow{{Version: "1", Checksum: "sum1"}}, HowBaseline)
	})
	if err != nil {
		t.Fatal(err)
	}
	records, err := NewestRuntimeRecords(ctx, conn)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(records, func(r RuntimeRecord) bool {
		return r.Table == "migration_history" && r.Key == testResource+" 1" && r.ContractVersion > 0
	}) {
		t.Errorf("runtime records = %+v, want the history row's", records)
	}
}
