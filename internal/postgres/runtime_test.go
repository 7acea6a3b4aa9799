package postgres

import (
	"context"
	"errors"
	"regexp"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/ptah-run/ptah/internal/pgtest"
)

// testCtx is a context bounded well below the test binary's timeout.
func testCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// dial opens a plain session to url, closed when the test ends.
func dial(t *testing.T, url string) *pgx.Conn {
	t.Helper()
	conn, err := Connect(testCtx(t), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

// TestRuntimeSchemaConcurrentFirstUse: several sessions creating the
// runtime tables in a fresh database at once, alongside a creator of
// another ptah table that takes no lock (as another package might), all
// succeed.
func TestRuntimeSchemaConcurrentFirstUse(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDB(t)
	ctx := testCtx(t)
	const n = 8
	conns := make([]*pgx.Conn, n)
	for i := range conns {
		conns[i] = dial(t, url)
	}
	var wg sync.WaitGroup
	errs := make([]error, n)
	start := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			<-start
			if i%4 == 3 {
				// A lock-less foreign creator: it may lose its own race
				// (that is its problem); ours must not.
				_, _ = conns[i].Exec(ctx, "CREATE SCHEMA IF NOT EXISTS ptah; CREATE TABLE IF NOT EXISTS ptah.other (id int)")
				return
			}
			errs[i] = ensureRuntimeSchema(ctx, conns[i])
		})
	}
	close(start)
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("session %d: %v", i, err)
		}
	}
	// And once present, it is a no-op.
	if err := ensureRuntimeSchema(ctx, conns[0]); err != nil {
		t.Fatal(err)
	}
}

// TestAdvisoryLockKeyMatchesSQL holds the documented SQL form of the key
// to the Go one, so a person can find the lock in pg_locks by hand.
func TestAdvisoryLockKeyMatchesSQL(t *testing.T) {
	t.Parallel()
	conn := dial(t, pgtest.BaseURL(t))
	for _, digest := range []string{"sha256:0123abcd", "x", "ünïcode"} {
		var want int64
		err := conn.QueryRow(testCtx(t),
			`SELECT ('x' || left(encode(sha256(convert_to($1, 'UTF8')), 'hex'), 16))::bit(64)::bigint`, digest).Scan(&want)
		if err != nil {
			t.Fatal(err)
		}
		if got := AdvisoryLockKey(digest); got != want {
			t.Errorf("AdvisoryLockKey(%q) = %d, SQL says %d", digest, got, want)
		}
	}
}

func TestSessionAlive(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDB(t)
	ctx := testCtx(t)
	observer := dial(t, url)
	other := dial(t, url)
	s, err := currentSession(ctx, other)
	if err != nil {
		t.Fatal(err)
	}
	alive, err := SessionAlive(ctx, observer, s.PID, s.BackendStart)
	if err != nil || !alive {
		t.Fatalf("SessionAlive(live session) = %v, %v; want true", alive, err)
	}
	// Same pid, another start time: a recycled pid is not the session.
	alive, err = SessionAlive(ctx, observer, s.PID, s.BackendStart.Add(-time.Second))
	if err != nil || alive {
		t.Fatalf("SessionAlive(pid with another start) = %v, %v; want false", alive, err)
	}
	terminate(t, observer, s.PID)
	alive, err = SessionAlive(ctx, observer, s.PID, s.BackendStart)
	if err != nil || alive {
		t.Fatalf("SessionAlive(terminated session) = %v, %v; want false", alive, err)
	}
}

// terminate ends session pid from conn and waits until it is gone.
func terminate(t *testing.T, conn *pgx.Conn, pid int32) {
	t.Helper()
	ctx := testCtx(t)
	if _, err := conn.Exec(ctx, "SELECT pg_terminate_backend($1, 30000)", pid); err != nil {
		t.Fatalf("terminating session %d: %v", pid, err)
	}
}

func TestArmDeadlineRefusesAPassedDeadline(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	late := dial(t, pgtest.BaseURL(t))
	err := armDeadline(ctx, late, time.Now().Add(-time.Second), false)
	if !errors.Is(err, ErrDeadlinePassed) {
		t.Fatalf("armDeadline(past) = %v, want ErrDeadlinePassed", err)
	}
	// Past its deadline an idle session is ended by the server at once.
	time.Sleep(100 * time.Millisecond)
	if _, err := late.Exec(ctx, "SELECT 1"); !IsConnectionLost(err) {
		t.Errorf("a session idle past its deadline answered: %v", err)
	}

	conn := dial(t, pgtest.BaseURL(t))
	if err := armDeadline(ctx, conn, time.Now().Add(90*24*time.Hour), false); err != nil {
		t.Fatalf("armDeadline(90 days ahead) = %v; the timeout must be clamped, not refused", err)
	}
	var got string
	if err := conn.QueryRow(ctx, "SELECT current_setting('idle_session_timeout')").Scan(&got); err != nil {
		t.Fatal(err)
	}
	if got != "2147483647ms" {
		t.Errorf("idle_session_timeout = %s, want the clamped maximum", got)
	}
}

// TestRuntimeSchemaUpgradesTheRunOutcomes: a journal created before runs
// could be partially applied (its outcome check knew two values, under
// PostgreSQL's default name) is brought up to date, keeping its rows.
func TestRuntimeSchemaUpgradesTheRunOutcomes(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDB(t)
	ctx := testCtx(t)
	conn := dial(t, url)
	if err := ensureRuntimeSchema(ctx, conn); err != nil {
		t.Fatal(err)
	}
	execSQL(t, conn, `ALTER TABLE ptah.runs DROP CONSTRAINT runs_outcome_check;
		ALTER TABLE ptah.runs ADD CHECK (outcome IN ('succeeded', 'failed'));
		INSERT INTO ptah.runs (operation_id, outcome) VALUES ('old', 'succeeded')`)
	if _, err := conn.Exec(ctx, "UPDATE ptah.runs SET outcome = 'partially-applied'"); SQLState(err) != "23514" {
		t.Fatalf("the old check admitted partially-applied: %v", err)
	}
	if err := ensureRuntimeSchema(ctx, conn); err != nil {
		t.Fatal(err)
	}
	execSQL(t, conn, "INSERT INTO ptah.runs (operation_id, outcome) VALUES ('new', 'partially-applied')")
	if _, err := conn.Exec(ctx, "INSERT INTO ptah.runs (operation_id, outcome) VALUES ('bad', 'maybe')"); SQLState(err) != "23514" {
		t.Errorf("the upgraded check admitted an unknown outcome: %v", err)
	}
	var checks int
	if err := conn.QueryRow(ctx, "SELECT count(*) FROM pg_constraint WHERE conrelid = 'ptah.runs'::regclass AND contype = 'c'").Scan(&checks); err != nil {
		t.Fatal(err)
	}
	if checks != 1 {
		t.Errorf("ptah.runs has %d check constraints, want 1", checks)
	}
	var outcome string
	if err := conn.QueryRow(ctx, "SELECT outcome FROM ptah.runs WHERE operation_id = 'old'").Scan(&outcome); err != nil || outcome != RunSucceeded {
		t.Errorf("the old row's outcome: %q, %v", outcome, err)
	}
}

// TestRuntimeSchemaAddsThePhaseColumns: a journal created before runs
// recorded their phases gets the columns, and its old rows read as phase 0.
func TestRuntimeSchemaAddsThePhaseColumns(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDB(t)
	ctx := testCtx(t)
	conn := dial(t, url)
	if err := ensureRuntimeSchema(ctx, conn); err != nil {
		t.Fatal(err)
	}
	execSQL(t, conn, `ALTER TABLE ptah.runs DROP COLUMN phases; ALTER TABLE ptah.run_steps DROP COLUMN phase;
		INSERT INTO ptah.runs (operation_id, writer_pid, writer_backend_start, deadline, started_at, finished_at, outcome)
			VALUES ('old', 1, now(), now(), now(), now(), 'succeeded');
		INSERT INTO ptah.run_steps (operation_id, step, statement, started_at) VALUES ('old', 1, 'SELECT 1', now())`)
	if err := ensureRuntimeSchema(ctx, conn); err != nil {
		t.Fatal(err)
	}
	run, err := ReadRun(ctx, conn, "old")
	if err != nil {
		t.Fatal(err)
	}
	if run.Phases != 0 || len(run.Steps) != 1 || run.Steps[0].Phase != 0 {
		t.Errorf("old run = %+v", run)
	}
}

// RuntimeTables lists exactly the tables the runtime DDL creates: whoever
// drops them (the acceptance harness) drops them all.
func TestRuntimeTablesAreTheRuntimeDDLs(t *testing.T) {
	created := regexp.MustCompile(`CREATE TABLE IF NOT EXISTS (ptah\.\w+)`).FindAllStringSubmatch(runtimeDDL, -1)
	var names []string
	for _, m := range created {
		names = append(names, m[1])
	}
	got := slices.Sorted(slices.Values(RuntimeTables))
	slices.Sort(names)
	if !slices.Equal(got, names) {
		t.Fatalf("RuntimeTables = %v, runtimeDDL creates %v", got, names)
	}
}
