package postgres

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/ptah-run/ptah/internal/pgserver"
	"github.com/ptah-run/ptah/internal/pgtest"
)

// holderApp is the application_name of the session holding the lock the
// plan waits for in these tests.
const holderApp = "lockq-holder"

// lockTableT creates table public.t with a row, and opens a session,
// named holderApp, whose open transaction holds ROW EXCLUSIVE on it, as
// an application's transaction that wrote to it does: it blocks ALTER
// TABLE, and not readers. It returns the transaction and its pid; the
// transaction ends with the test, if not before.
func lockTableT(t *testing.T, url string) (pgx.Tx, int32) {
	t.Helper()
	ctx := testCtx(t)
	execSQL(t, dial(t, url), "CREATE TABLE public.t (id integer); INSERT INTO public.t VALUES (1)")
	holder := dial(t, url)
	execSQL(t, holder, "SET application_name = '"+holderApp+"'")
	tx, err := holder.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
	if _, err := tx.Exec(ctx, "LOCK TABLE public.t IN ROW EXCLUSIVE MODE"); err != nil {
		t.Fatal(err)
	}
	return tx, int32(holder.PgConn().PID())
}

// waitUntilWaiting returns once session pid waits for a lock.
func waitUntilWaiting(t *testing.T, observer *pgx.Conn, pid int32) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		a, err := PIDActivity(testCtx(t), observer, uint32(pid))
		if err != nil {
			t.Fatal(err)
		}
		if a.Waiting() != "" {
			return
		}
	}
	t.Fatalf("session %d never waited for a lock", pid)
}

// executeAsync runs plan on w in a goroutine, and returns where its error
// arrives. However the test ends, the holder's transaction ends and
// Execute returns before the writer is released.
func executeAsync(t *testing.T, w *Writer, plan *Plan, progress ProgressFunc, holder pgx.Tx) <-chan error {
	ctx := testCtx(t)
	done, finished := make(chan error, 1), make(chan struct{})
	go func() {
		defer close(finished)
		done <- w.Execute(ctx, "plan-1", plan, progress)
	}()
	t.Cleanup(func() {
		_ = holder.Rollback(context.Background())
		<-finished
	})
	return done
}

// waits collects the Waiting reports progress hears, from the goroutine
// Execute runs in.
type waits struct {
	mu      sync.Mutex
	reports []string
	first   chan struct{} // closed at the first report
}

func newWaits() *waits { return &waits{first: make(chan struct{})} }

func (w *waits) progress(st Step) {
	if st.Waiting == "" {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.reports) == 0 {
		close(w.first)
	}
	w.reports = append(w.reports, fmt.Sprintf("%d: %s", st.N, st.Waiting))
}

func (w *waits) all() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), w.reports...)
}

// TestLockAttemptsLetReadersThrough: an ALTER TABLE that waits for its
// lock behind an application's open transaction does not queue the
// application's readers behind it for long. Made in attempts of 100ms
// (the default), not one of its readers' SELECTs, allowed 400ms, times
// out; made in one attempt of the whole lock timeout, as psql would,
// they do. Either way the plan completes once the transaction ends.
func TestLockAttemptsLetReadersThrough(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name          string
		attempt       time.Duration
		readersQueued bool
	}{
		{name: "in attempts", attempt: 0, readersQueued: false},
		{name: "in one attempt", attempt: -1, readersQueued: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			url := pgtest.NewDB(t)
			ctx := testCtx(t)
			observer := dial(t, url)
			holder, _ := lockTableT(t, url)
			w := openWriter(t, url, testDigest, "op-1")
			plan := planOf("ALTER TABLE public.t ADD COLUMN c integer")
			plan.LockTimeout, plan.LockAttempt = 3*time.Second, tc.attempt
			heard := newWaits()
			done := executeAsync(t, w, plan, heard.progress, holder)
			waitUntilWaiting(t, observer, w.Session().PID)

			reader := dial(t, url)
			execSQL(t, reader, "SET statement_timeout = '400ms'")
			reads, queued := 0, 0
			for end := time.Now().Add(1200 * time.Millisecond); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
				var n int
				err := reader.QueryRow(ctx, "SELECT count(*) FROM public.t").Scan(&n)
				switch {
				case IsQueryCanceled(err):
					queued++
				case err != nil:
					t.Fatal(err)
				}
				reads++
			}
			if err := holder.Commit(ctx); err != nil {
				t.Fatal(err)
			}
			if err := <-done; err != nil {
				t.Fatalf("Execute = %v, want the plan done once the transaction ended", err)
			}

			if tc.readersQueued && queued == 0 {
				t.Errorf("in one attempt, none of %d reads queued behind the ALTER; the test proves nothing", reads)
			}
			if !tc.readersQueued && queued > 0 {
				t.Errorf("%d of %d reads timed out queued behind the ALTER", queued, reads)
			}
			if got := heard.all(); tc.readersQueued == (len(got) > 0) {
				t.Errorf("waiting reports %q", got)
			}
			requireColumnC(ctx, t, observer)
		})
	}
}

// TestLockBudgetSpentNamesTheBlockers: a statement whose lock is never
// free fails once its LockTimeout is spent, in attempts, as a lock
// timeout fails (ErrPlanFailed, a *StatementError, IsLockTimeout), with a
// message naming the session it waited for (pid, application_name, since
// when its transaction is open) and not what that session ran; the
// journal records the failure as it does any; progress heard whom it
// waited for while it did.
func TestLockBudgetSpentNamesTheBlockers(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDB(t)
	ctx := testCtx(t)
	observer := dial(t, url)
	_, holderPID := lockTableT(t, url)
	w := openWriter(t, url, testDigest, "op-1")
	plan := planOf("ALTER TABLE public.t ADD COLUMN c integer")
	// Five seconds: the watcher, opened after the first failed attempt,
	// must catch the statement waiting in a later one, which a loaded
	// machine may not manage within one second.
	plan.LockTimeout = 5 * time.Second
	heard := newWaits()
	began := time.Now()
	err := w.Execute(ctx, "plan-1", plan, heard.progress)
	if took := time.Since(began); took > 30*time.Second {
		t.Errorf("Execute took %s with a lock timeout of 5s", took)
	}

	var stmtErr *StatementError
	var waitErr *LockWaitError
	if !errors.Is(err, ErrPlanFailed) || !errors.As(err, &stmtErr) || !IsLockTimeout(err) || !errors.As(err, &waitErr) {
		t.Fatalf("Execute = %v, want a lock timeout, spent in attempts", err)
	}
	holder := fmt.Sprintf("pid %d (%s, idle in transaction since ", holderPID, holderApp)
	if stmtErr.Step != 1 || waitErr.Attempts < 2 || waitErr.WaitsFor != "AccessExclusiveLock on public.t" ||
		!strings.Contains(err.Error(), holder) || strings.Contains(err.Error(), "ROW EXCLUSIVE MODE") {
		t.Errorf("Execute = %v (%d attempts); want it to name %s... and not its query", err, waitErr.Attempts, holder)
	}
	if got := heard.all(); len(got) == 0 || !strings.Contains(strings.Join(got, "\n"), holder) {
		t.Errorf("waiting reports %q, want one naming %s...", got, holder)
	}
	run := mustReadRun(t, observer, "op-1")
	if run.Outcome != RunFailed || len(run.Steps) != 0 || !strings.Contains(run.Error, "statement 1/1 failed") ||
		!strings.Contains(run.Error, "55P03") || !strings.Contains(run.Error, holder) {
		t.Errorf("run = %+v, want failed with the lock timeout, naming the holder", run)
	}
}

// TestLockRetryKeepsTheStatementsBeforeIt: a retry rolls back only the
// attempt that failed, to a savepoint taken just before it: the statement
// before it in the same transaction, and the journal steps of both, stay;
// once the lock is free, both take effect, each journaled once.
func TestLockRetryKeepsTheStatementsBeforeIt(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDB(t)
	ctx := testCtx(t)
	observer := dial(t, url)
	holder, _ := lockTableT(t, url)
	w := openWriter(t, url, testDigest, "op-1")
	plan := planOf("CREATE TABLE public.u (id integer)", "ALTER TABLE public.t ADD COLUMN c integer")
	plan.LockTimeout = 20 * time.Second
	heard := newWaits()
	done := executeAsync(t, w, plan, heard.progress, holder)
	select {
	case <-heard.first:
	case err := <-done:
		t.Fatalf("Execute = %v before any attempt failed", err)
	case <-time.After(15 * time.Second):
		t.Fatal("no attempt of the ALTER failed and was retried")
	}
	if err := holder.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("Execute = %v", err)
	}
	if got := strings.Join(relations(t, observer), ","); got != "t,u" {
		t.Errorf("relations %s, want t,u", got)
	}
	requireColumnC(ctx, t, observer)
	run := mustReadRun(t, observer, "op-1")
	if !run.Committed() || len(run.Steps) != 2 {
		t.Fatalf("run = %+v, want succeeded with 2 steps", run)
	}
	for i, s := range run.Steps {
		if s.Step != i+1 || s.Statement != plan.Statements[i].SQL || s.CommittedAt == nil {
			t.Errorf("step %d = %+v", i+1, s)
		}
	}
}

// TestNoTransactionPhaseMakesOneAttempt: a statement of a no-transaction
// phase is never retried (a CREATE INDEX CONCURRENTLY cut short leaves an
// invalid index): blocked, it fails with the lock timeout of its one
// attempt, not a *LockWaitError, and progress hears of no wait.
func TestNoTransactionPhaseMakesOneAttempt(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDB(t)
	ctx := testCtx(t)
	lockTableT(t, url)
	w := openWriter(t, url, testDigest, "op-1")
	plan := withPhases(planOf("ALTER TABLE public.t ADD COLUMN c integer"), -1)
	plan.LockTimeout = time.Second
	heard := newWaits()
	err := w.Execute(ctx, "plan-1", plan, heard.progress)
	var stmtErr *StatementError
	var waitErr *LockWaitError
	if !errors.As(err, &stmtErr) || !stmtErr.NoTransaction || !IsLockTimeout(err) || errors.As(err, &waitErr) {
		t.Fatalf("Execute = %v, want the lock timeout of one attempt", err)
	}
	if got := heard.all(); len(got) > 0 {
		t.Errorf("waiting reports %q, want none", got)
	}
}

// TestStatementTimeoutIsTheSmallerOfItAndTheDeadline: a statement runs
// under the plan's StatementTimeout when it ends before the deadline, in
// a transaction and outside one, and a statement it cuts short says so,
// and not that the deadline passed; under the deadline's when that is
// the sooner.
func TestStatementTimeoutIsTheSmallerOfItAndTheDeadline(t *testing.T) {
	t.Parallel()
	for _, noTx := range []bool{false, true} {
		t.Run(map[bool]string{false: "in a transaction", true: "without one"}[noTx], func(t *testing.T) {
			t.Parallel()
			url := pgtest.NewDB(t)
			ctx := testCtx(t)
			observer := dial(t, url)
			w, err := OpenWriter(ctx, url, testDigest, "op-1", "", time.Now().Add(time.Minute))
			if err != nil {
				t.Fatal(err)
			}
			defer w.Release(ctx)
			plan := planOf(
				"CREATE TABLE public.a AS SELECT current_setting('statement_timeout') AS st",
				"SELECT pg_sleep(10)",
			)
			plan.StatementTimeout = 700 * time.Millisecond
			if noTx {
				withPhases(plan, -2)
			}
			err = w.Execute(ctx, "plan-1", plan, nil)
			var stmtErr *StatementError
			if !errors.As(err, &stmtErr) || stmtErr.Step != 2 || !IsQueryCanceled(err) || errors.Is(err, ErrDeadlinePassed) ||
				!strings.Contains(err.Error(), "statement timeout (700ms)") {
				t.Fatalf("Execute = %v, want statement 2 cut short by the statement timeout", err)
			}
			if noTx {
				var st string
				if err := observer.QueryRow(ctx, "SELECT st FROM public.a").Scan(&st); err != nil || st != "700ms" {
					t.Errorf("statement 1 ran with statement_timeout %q (%v), want 700ms", st, err)
				}
			}

			// The deadline, a minute away, is the sooner of it and an hour.
			w2, err := OpenWriter(ctx, url, testDigest+"2", "op-2", "", time.Now().Add(time.Minute))
			if err != nil {
				t.Fatal(err)
			}
			defer w2.Release(ctx)
			plan = planOf("CREATE TABLE public.b AS SELECT current_setting('statement_timeout')::interval AS st")
			plan.StatementTimeout = time.Hour
			if noTx {
				withPhases(plan, -1)
			}
			if err := w2.Execute(ctx, "plan-2", plan, nil); err != nil {
				t.Fatal(err)
			}
			var ms int64
			if err := observer.QueryRow(ctx, "SELECT (extract(epoch FROM st) * 1000)::bigint FROM public.b").Scan(&ms); err != nil {
				t.Fatal(err)
			}
			if st := time.Duration(ms) * time.Millisecond; st <= 0 || st > time.Minute {
				t.Errorf("with a deadline a minute away and a statement timeout of an hour, the statement ran with statement_timeout %s", st)
			}
		})
	}
}

func TestMayQueueForLock(t *testing.T) {
	t.Parallel()
	for sql, want := range map[string]bool{
		"ALTER TABLE public.t ADD COLUMN c int":                                        true,
		"  -- why\nalter table t drop column c":                                        true,
		"/* a */ DROP INDEX public.i":                                                  true,
		"CREATE INDEX i ON public.t (a)":                                               true,
		"CREATE UNIQUE INDEX i ON public.t (a)":                                        true,
		"CREATE TRIGGER tr BEFORE INSERT ON t FOR EACH ROW EXECUTE FUNCTION f()":       true,
		"CREATE OR REPLACE VIEW public.v AS SELECT 1":                                  true,
		"CREATE TABLE public.c (id int REFERENCES public.p)":                           true,
		"CREATE TABLE public.p1 PARTITION OF public.p FOR VALUES IN (1)":               true,
		"LOCK TABLE t IN ACCESS EXCLUSIVE MODE":                                        true,
		"TRUNCATE t":                                                                   true,
		"REFRESH MATERIALIZED VIEW public.m":                                           true,
		"CREATE TABLE public.t (id int PRIMARY KEY, v text)":                           false,
		"CREATE OR REPLACE FUNCTION public.f() RETURNS int AS 'select 1' LANGUAGE sql": false,
		"CREATE SCHEMA app":                                                            false,
		"CREATE TYPE public.e AS ENUM ('a')":                                           false,
		"INSERT INTO t VALUES (1)":                                                     false,
		"UPDATE t SET a = 1":                                                           false,
		"COMMENT ON TABLE public.t IS 'x'":                                             false,
		"SELECT 1":                                                                     false,
		"-- only a comment":                                                            false,
	} {
		if got := mayQueueForLock(sql); got != want {
			t.Errorf("mayQueueForLock(%q) = %v, want %v", sql, got, want)
		}
	}
}

// TestLockModeConflictsFollowPostgreSQLsTable: ConflictsWith is the
// documentation's "Conflicting Lock Modes" table, pair by pair, and
// symmetric.
func TestLockModeConflictsFollowPostgreSQLsTable(t *testing.T) {
	t.Parallel()
	// Rows are the mode asked for, columns the mode held, both from ACCESS
	// SHARE to ACCESS EXCLUSIVE; X: they conflict.
	matrix := []string{
		"       X", // ACCESS SHARE
		"      XX", // ROW SHARE
		"    XXXX", // ROW EXCLUSIVE
		"   XXXXX", // SHARE UPDATE EXCLUSIVE
		"  XX XXX", // SHARE
		"  XXXXXX", // SHARE ROW EXCLUSIVE
		" XXXXXXX", // EXCLUSIVE
		"XXXXXXXX", // ACCESS EXCLUSIVE
	}
	pairs := 0
	for m := AccessShare; m <= AccessExclusive; m++ {
		for o := AccessShare; o <= AccessExclusive; o++ {
			pairs++
			want := matrix[m-AccessShare][o-AccessShare] == 'X'
			if got := m.ConflictsWith(o); got != want {
				t.Errorf("%v.ConflictsWith(%v) = %v, want %v", m, o, got, want)
			}
			if m.ConflictsWith(o) != o.ConflictsWith(m) {
				t.Errorf("%v.ConflictsWith(%v) = %v, and %v.ConflictsWith(%v) = %v", m, o, m.ConflictsWith(o), o, m, o.ConflictsWith(m))
			}
		}
	}
	if pairs != 64 {
		t.Errorf("checked %d pairs, want 64", pairs)
	}
	for _, bad := range []LockMode{0, AccessExclusive + 1} {
		if bad.ConflictsWith(AccessExclusive) || AccessExclusive.ConflictsWith(bad) {
			t.Errorf("%v conflicts with ACCESS EXCLUSIVE", bad)
		}
	}
}

// TestMayQueueTrustsThePlannersLocksWhenKnown: a schema plan's statement
// is made in attempts when, and only when, its locks make the
// application's writes wait; a migration's, when its leading keywords say
// it may (mayQueueForLock).
func TestMayQueueTrustsThePlannersLocksWhenKnown(t *testing.T) {
	t.Parallel()
	on := func(sql string, modes ...LockMode) Statement {
		s := Statement{SQL: sql}
		for _, m := range modes {
			s.Locks = append(s.Locks, Lock{Relation: "public.t", Mode: m})
		}
		return s
	}
	for _, c := range []struct {
		s                Statement
		known, migration bool // mayQueue with LocksKnown, and without
	}{
		{on("ALTER TABLE public.t ADD COLUMN c int", AccessExclusive), true, true},
		{on("CREATE INDEX i ON public.t (a)", Share), true, true},
		{on("ALTER TABLE public.c ADD FOREIGN KEY (p) REFERENCES public.t", ShareRowExclusive, ShareRowExclusive), true, true},
		{on("ALTER TABLE public.t VALIDATE CONSTRAINT k", ShareUpdateExclusive), false, true},
		// Statements on objects the plan created lock nothing that exists.
		{on("CREATE INDEX i ON public.new (a)"), false, true},
		{on("CREATE TABLE public.c (id int REFERENCES public.new)"), false, true},
		{on("CREATE TABLE public.new (id int)"), false, false},
		{on("DO $$ BEGIN PERFORM 1; END $$", AccessExclusive), true, false},
	} {
		known, migration := &Plan{LocksKnown: true}, &Plan{}
		if got := known.mayQueue(c.s); got != c.known {
			t.Errorf("with its locks known (%v), mayQueue(%q) = %v, want %v", c.s.Locks, c.s.SQL, got, c.known)
		}
		if got := migration.mayQueue(c.s); got != c.migration || got != mayQueueForLock(c.s.SQL) {
			t.Errorf("with its locks not known, mayQueue(%q) = %v, want %v, as mayQueueForLock says", c.s.SQL, got, c.migration)
		}
	}
}

// lockedPlan is a schema plan (LocksKnown) of statements, each locking
// what locks[i] says (none past the end of locks).
func lockedPlan(sqls []string, locks ...[]Lock) *Plan {
	p := planOf(sqls...)
	p.LocksKnown = true
	for i := range locks {
		p.Statements[i].Locks = locks[i]
	}
	return p
}

// readTableT creates table public.t with a row, and opens a session,
// named holderApp, whose open transaction read it, as an application's
// transaction that read it and went on to other work does: it holds
// ACCESS SHARE on it, which blocks ALTER TABLE and nothing the
// application does. It returns the transaction and its pid; the
// transaction ends with the test, if not before.
func readTableT(t *testing.T, url string) (pgx.Tx, int32) {
	t.Helper()
	ctx := testCtx(t)
	execSQL(t, dial(t, url), "CREATE TABLE public.t (id integer); INSERT INTO public.t VALUES (1)")
	holder := dial(t, url)
	execSQL(t, holder, "SET application_name = '"+holderApp+"'")
	tx, err := holder.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
	if _, err := tx.Exec(ctx, "SELECT count(*) FROM public.t"); err != nil {
		t.Fatal(err)
	}
	return tx, int32(holder.PgConn().PID())
}

// TestSchemaPlanWaitsForHoldersOutsideTheLockQueue: a schema plan's ALTER
// TABLE, which needs ACCESS EXCLUSIVE on a table an application's open
// transaction read, does not ask for its lock while that transaction
// holds ACCESS SHARE: it never stands in the lock queue, so the
// application's reads and writes of the table go on; progress hears whom
// it waits for. Once the transaction ends, the statement goes through.
func TestSchemaPlanWaitsForHoldersOutsideTheLockQueue(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDB(t)
	ctx := testCtx(t)
	observer := dial(t, url)
	holder, holderPID := readTableT(t, url)
	w := openWriter(t, url, testDigest, "op-1")
	plan := lockedPlan([]string{"ALTER TABLE public.t ADD COLUMN c integer"}, []Lock{{Relation: "public.t", Mode: AccessExclusive}})
	// The test, not the budget, ends the wait.
	plan.LockTimeout = time.Minute
	heard := newWaits()
	done := executeAsync(t, w, plan, heard.progress, holder)
	select {
	case <-heard.first:
	case err := <-done:
		t.Fatalf("Execute = %v while the reader's transaction was open", err)
	case <-time.After(30 * time.Second):
		t.Fatal("progress never heard that the statement waits")
	}
	want := fmt.Sprintf("1: AccessExclusiveLock on public.t, held by pid %d (%s, idle in transaction since ", holderPID, holderApp)
	if got := heard.all(); !strings.HasPrefix(got[0], want) {
		t.Errorf("waiting reports %q, want the first to start %q", got, want)
	}

	// However long it waits, the writer asks for no lock it is not granted.
	for range 10 {
		var asked []string
		rows, err := observer.Query(ctx, "SELECT mode || ' on ' || locktype FROM pg_locks WHERE pid = $1 AND NOT granted", w.Session().PID)
		if err != nil {
			t.Fatal(err)
		}
		if asked, err = pgx.CollectRows(rows, pgx.RowTo[string]); err != nil {
			t.Fatal(err)
		}
		if len(asked) > 0 {
			t.Fatalf("the writer waits in the lock queue for %q", asked)
		}
		time.Sleep(50 * time.Millisecond)
	}
	// So the application's reads and writes are not queued behind it: its
	// statement_timeout is there only to end the test, should they be.
	app := dial(t, url)
	execSQL(t, app, "SET statement_timeout = '20s'")
	for _, sql := range []string{"SELECT count(*) FROM public.t", "INSERT INTO public.t VALUES (2)"} {
		if _, err := app.Exec(ctx, sql); err != nil {
			t.Fatalf("%s, while the writer waits: %v", sql, err)
		}
	}
	select {
	case err := <-done:
		t.Fatalf("Execute = %v while the reader's transaction was open", err)
	default:
	}

	if err := holder.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("Execute = %v, want the plan done once the reader's transaction ended", err)
	}
	requireColumnC(ctx, t, observer)
}

// TestSchemaPlanGivesUpWithoutJoiningTheQueue: a schema plan's statement
// whose conflicting holder never finishes fails once its LockTimeout is
// spent, without having asked for its lock once: a lock timeout
// (ErrPlanFailed, IsLockTimeout) whose *LockWaitError made no attempt and
// names the holder, not what it ran; the journal records it so.
func TestSchemaPlanGivesUpWithoutJoiningTheQueue(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDB(t)
	ctx := testCtx(t)
	observer := dial(t, url)
	_, holderPID := readTableT(t, url)
	w := openWriter(t, url, testDigest, "op-1")
	plan := lockedPlan([]string{"ALTER TABLE public.t ADD COLUMN c integer"}, []Lock{{Relation: "public.t", Mode: AccessExclusive}})
	plan.LockTimeout = time.Second
	heard := newWaits()
	err := w.Execute(ctx, "plan-1", plan, heard.progress)

	var stmtErr *StatementError
	var waitErr *LockWaitError
	if !errors.Is(err, ErrPlanFailed) || !errors.As(err, &stmtErr) || !IsLockTimeout(err) || !errors.As(err, &waitErr) {
		t.Fatalf("Execute = %v, want a lock timeout", err)
	}
	holder := fmt.Sprintf("pid %d (%s, idle in transaction since ", holderPID, holderApp)
	if waitErr.Attempts != 0 || waitErr.WaitsFor != "AccessExclusiveLock on public.t" ||
		len(waitErr.BlockedBy) != 1 || waitErr.BlockedBy[0].PID != holderPID || waitErr.BlockedBy[0].ApplicationName != holderApp {
		t.Errorf("LockWaitError = %+v, want no attempt, waiting for %s", waitErr, holder)
	}
	msg := err.Error()
	if !strings.Contains(msg, "without joining the lock queue: waiting for AccessExclusiveLock on public.t, held by "+holder) ||
		strings.Contains(msg, "SELECT count(*)") {
		t.Errorf("Execute = %v; want it to name %s... and not its query", err, holder)
	}
	// Tried is the client's measure of the budget spent: it may overrun
	// by the last check, never by another attempt or pause; the bound is
	// generous for a loaded machine.
	if waitErr.Tried > plan.LockTimeout+3*time.Second {
		t.Errorf("the statement tried for %s with a lock timeout of %s", waitErr.Tried, plan.LockTimeout)
	}
	if got := heard.all(); len(got) == 0 || !strings.Contains(got[0], holder) {
		t.Errorf("waiting reports %q, want one naming %s...", got, holder)
	}
	run := mustReadRun(t, observer, "op-1")
	if run.Outcome != RunFailed || !strings.Contains(run.Error, "55P03") || !strings.Contains(run.Error, holder) {
		t.Errorf("run = %+v, want failed with the lock timeout, naming the holder", run)
	}
}

// TestSchemaPlanIgnoresHoldersThatDoNotConflict: a CREATE INDEX needs
// SHARE, which an open transaction's ACCESS SHARE does not conflict with:
// the check lets it through at once, while the transaction is open.
func TestSchemaPlanIgnoresHoldersThatDoNotConflict(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDB(t)
	ctx := testCtx(t)
	readTableT(t, url)
	w := openWriter(t, url, testDigest, "op-1")
	plan := lockedPlan([]string{"CREATE INDEX t_id ON public.t (id)"}, []Lock{{Relation: "public.t", Mode: Share}})
	heard := newWaits()
	if err := w.Execute(ctx, "plan-1", plan, heard.progress); err != nil {
		t.Fatalf("Execute = %v", err)
	}
	if got := heard.all(); len(got) > 0 {
		t.Errorf("waiting reports %q, want none", got)
	}
}

// TestSchemaPlanIgnoresSessionsQueuedBehindTheWriter: a session queued
// for a table the writer's transaction locked already waits for the
// writer, not the other way round: PostgreSQL grants the writer's next
// lock on the table ahead of it. The check does not wait for it, which
// would be waiting for itself.
func TestSchemaPlanIgnoresSessionsQueuedBehindTheWriter(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDB(t)
	ctx := testCtx(t)
	observer := dial(t, url)
	execSQL(t, observer, "CREATE TABLE public.t (id integer)")
	// The gate holds the plan between its two ALTERs, until a reader
	// queues behind the first.
	gate, err := dial(t, url).Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := gate.Exec(ctx, "SELECT pg_advisory_xact_lock(4242)"); err != nil {
		t.Fatal(err)
	}
	w := openWriter(t, url, testDigest, "op-1")
	onT := []Lock{{Relation: "public.t", Mode: AccessExclusive}}
	plan := lockedPlan([]string{"ALTER TABLE public.t ADD COLUMN a integer", "SELECT pg_advisory_xact_lock(4242)",
		"ALTER TABLE public.t ADD COLUMN b integer"}, onT, nil, onT)
	plan.LockTimeout = 10 * time.Second
	heard := newWaits()
	done := executeAsync(t, w, plan, heard.progress, gate)
	waitUntilWaiting(t, observer, w.Session().PID)

	reader := dial(t, url)
	readerPID := int32(reader.PgConn().PID())
	read := make(chan error, 1)
	go func() {
		_, err := reader.Exec(ctx, "SELECT count(*) FROM public.t")
		read <- err
	}()
	waitUntilWaiting(t, observer, readerPID)
	if err := gate.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("Execute = %v, want the second ALTER granted ahead of the reader queued behind the first", err)
	}
	if err := <-read; err != nil {
		t.Errorf("the reader's SELECT = %v", err)
	}
	if got := heard.all(); len(got) > 0 {
		t.Errorf("waiting reports %q, want none", got)
	}
}

// TestSchemaPlanStatementsWithoutLocksTakeNoSavepoint: the statements of
// a schema plan that lock nothing that existed (they create objects, or
// index the ones they created, which mayQueueForLock alone would make in
// attempts) run as they are, without the savepoint, a subtransaction,
// each attempt costs. Catalog rows written in a subtransaction carry its
// xid, not the transaction's: the rows of the statements with no locks
// carry the transaction's, those of the ALTER TABLE of a table that
// existed, made in attempts, the savepoint's.
func TestSchemaPlanStatementsWithoutLocksTakeNoSavepoint(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDB(t)
	ctx := testCtx(t)
	observer := dial(t, url)
	execSQL(t, observer, "CREATE TABLE public.t (id integer)")
	w := openWriter(t, url, testDigest, "op-1")
	plan := lockedPlan([]string{
		"CREATE TABLE public.a (id integer)",
		"CREATE INDEX a_id ON public.a (id)",
		"ALTER TABLE public.t ADD COLUMN c integer",
		"CREATE TABLE public.b (id integer)",
		"CREATE TABLE public.xact AS SELECT pg_current_xact_id()::text AS top",
	}, nil, nil, []Lock{{Relation: "public.t", Mode: AccessExclusive}})
	if !mayQueueForLock(plan.Statements[1].SQL) {
		t.Fatal("mayQueueForLock would not make the CREATE INDEX in attempts; the test proves nothing")
	}
	if err := w.Execute(ctx, "plan-1", plan, nil); err != nil {
		t.Fatalf("Execute = %v", err)
	}
	rows, err := observer.Query(ctx, `
SELECT r.name, r.xmin::text = (x.top::numeric % 4294967296)::text
FROM (SELECT relname, xmin FROM pg_class WHERE relnamespace = 'public'::regnamespace AND relname IN ('a', 'a_id', 'b', 'xact')
      UNION ALL
      SELECT 't.c', xmin FROM pg_attribute WHERE attrelid = 'public.t'::regclass AND attname = 'c') r(name, xmin),
     public.xact x
ORDER BY 1`)
	if err != nil {
		t.Fatal(err)
	}
	type row struct {
		Name string
		Top  bool
	}
	got, err := pgx.CollectRows(rows, pgx.RowToStructByPos[row])
	if err != nil {
		t.Fatal(err)
	}
	want := []row{{"a", true}, {"a_id", true}, {"b", true}, {"t.c", false}, {"xact", true}}
	if !slices.Equal(got, want) {
		t.Errorf("written by the transaction itself: %v, want %v", got, want)
	}
}

// requireColumnC checks that the plan's ALTER TABLE public.t ADD COLUMN c
// took effect.
func requireColumnC(ctx context.Context, t *testing.T, observer *pgx.Conn) {
	t.Helper()
	var column bool
	if err := observer.QueryRow(ctx, `SELECT EXISTS (SELECT FROM pg_attribute
		WHERE attrelid = 'public.t'::regclass AND attname = 'c' AND NOT attisdropped)`).Scan(&column); err != nil || !column {
		t.Errorf("column t.c exists: %v (%v)", column, err)
	}
}

// TestSchemaPlanCancelsAnAutovacuumInTheWay: an autovacuum worker holds
// SHARE UPDATE EXCLUSIVE on the table, and vacuums it so slowly (a cost
// limit it passes on every page, then 100 ms asleep) that it would hold
// it for minutes. PostgreSQL would cancel it for a session queued behind
// it; the writer does not queue, so it cancels the worker itself and
// runs the statement well within its budget, naming the worker while it
// waits. Without that, the statement waits out its budget and fails.
func TestSchemaPlanCancelsAnAutovacuumInTheWay(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDBOn(t, pgtest.NewServer(t, pgserver.Setting("autovacuum_naptime", "1")))
	ctx := testCtx(t)
	observer := dial(t, url)
	execSQL(t, observer, `CREATE TABLE public.t (id integer, pad text) WITH (autovacuum_vacuum_threshold = 0,
	autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_cost_delay = 100, autovacuum_vacuum_cost_limit = 1)`)
	execSQL(t, observer, "INSERT INTO public.t SELECT g, repeat('x', 100) FROM generate_series(1, 100000) g")
	execSQL(t, observer, "DELETE FROM public.t WHERE id % 2 = 0")
	var worker int32
	deadline := time.Now().Add(90 * time.Second)
	for worker == 0 {
		err := observer.QueryRow(ctx, `
SELECT a.pid FROM pg_catalog.pg_locks l JOIN pg_catalog.pg_stat_activity a ON a.pid = l.pid
WHERE l.relation = 'public.t'::regclass AND l.mode = 'ShareUpdateExclusiveLock' AND l.granted
  AND a.backend_type = 'autovacuum worker'`).Scan(&worker)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			t.Fatal(err)
		}
		if worker == 0 {
			if time.Now().After(deadline) {
				t.Fatal("no autovacuum worker took the table within 90 s")
			}
			time.Sleep(100 * time.Millisecond)
		}
	}

	w := openWriter(t, url, testDigest, "op-1")
	plan := lockedPlan([]string{"ALTER TABLE public.t ADD COLUMN c integer"}, []Lock{{Relation: "public.t", Mode: AccessExclusive}})
	plan.LockTimeout = 10 * time.Second
	heard := newWaits()
	if err := w.Execute(ctx, "plan-1", plan, heard.progress); err != nil {
		t.Fatalf("Execute = %v, want the autovacuum cancelled and the statement run", err)
	}
	named := fmt.Sprintf("pid %d (autovacuum worker", worker)
	if got := heard.all(); !slices.ContainsFunc(got, func(s string) bool { return strings.Contains(s, named) }) {
		t.Errorf("waiting reports %q, want one naming %s...)", got, named)
	}
	var c int
	if err := observer.QueryRow(ctx, "SELECT count(*) FROM pg_catalog.pg_attribute WHERE attrelid = 'public.t'::regclass AND attname = 'c'").Scan(&c); err != nil || c != 1 {
		t.Errorf("column c: %d, %v; want it added", c, err)
	}
}
