package postgres

import (
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/ptah-run/ptah/internal/failpoint"
	"github.com/ptah-run/ptah/internal/pgtest"
)

func planOf(sqls ...string) *Plan {
	p := &Plan{LockTimeout: 5 * time.Second}
	for _, s := range sqls {
		p.Statements = append(p.Statements, Statement{SQL: s})
	}
	return p
}

// relations lists the tables of schema public, to see what a plan left.
func relations(t *testing.T, conn *pgx.Conn) []string {
	t.Helper()
	rows, err := conn.Query(testCtx(t), `SELECT c.relname FROM pg_class c
		WHERE c.relnamespace = 'public'::regnamespace AND c.relkind IN ('r', 'i') ORDER BY 1`)
	if err != nil {
		t.Fatal(err)
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return names
}

func mustReadRun(t *testing.T, conn *pgx.Conn, operationID string) *Run {
	t.Helper()
	run, err := ReadRun(testCtx(t), conn, operationID)
	if err != nil {
		t.Fatal(err)
	}
	return run
}

// TestExecuteRecordsTheRunFirstAndCommitsPlanAndJournalTogether: while the
// plan runs, another session already sees the run row (committed before
// any plan SQL) and none of the plan or of its journal steps; after COMMIT
// it sees all of them.
func TestExecuteRecordsTheRunFirstAndCommitsPlanAndJournalTogether(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDB(t)
	ctx := testCtx(t)
	observer := dial(t, url)
	w := openWriter(t, url, testDigest, "op-1")
	plan := planOf(
		"CREATE TABLE public.a (id integer PRIMARY KEY)",
		"ALTER TABLE public.a ADD COLUMN name text",
		"CREATE INDEX a_name ON public.a (name)",
	)
	var calls []string
	var during *Run
	var duringRelations []string
	progress := func(done, total int, s Statement) {
		calls = append(calls, s.SQL)
		if done != len(calls) || total != 3 {
			t.Errorf("progress(%d, %d) at call %d", done, total, len(calls))
		}
		if done == 1 {
			during = mustReadRun(t, observer, "op-1")
			duringRelations = relations(t, observer)
		}
	}
	if err := w.Execute(ctx, "plan-uid-1", plan, progress); err != nil {
		t.Fatal(err)
	}

	if len(calls) != 3 || calls[2] != plan.Statements[2].SQL {
		t.Errorf("progress calls = %q", calls)
	}
	if during == nil || !during.Unfinished() || len(during.Steps) != 0 || !during.Writer.Same(w.Session()) {
		t.Errorf("mid-plan, the journal read %+v; want the run recorded, unfinished, without steps", during)
	}
	if len(duringRelations) != 0 {
		t.Errorf("mid-plan, another session saw %v", duringRelations)
	}

	if got := strings.Join(relations(t, observer), ","); got != "a,a_name,a_pkey" {
		t.Errorf("relations after the plan = %s", got)
	}
	run := mustReadRun(t, observer, "op-1")
	if !run.Committed() || run.Unfinished() || run.Outcome != RunSucceeded || run.PlanUID != "plan-uid-1" ||
		run.Resource != "PtahSchema/default/app" || !run.Writer.Same(w.Session()) ||
		!run.Deadline.Equal(w.Deadline().Truncate(time.Microsecond)) || run.Error != "" {
		t.Errorf("run = %+v", run)
	}
	if len(run.Steps) != 3 {
		t.Fatalf("steps = %+v, want 3", run.Steps)
	}
	for i, s := range run.Steps {
		if s.Step != i+1 || s.Statement != plan.Statements[i].SQL || s.CommittedAt == nil || s.CommittedAt.Before(s.StartedAt) {
			t.Errorf("step %d = %+v", i+1, s)
		}
	}

	// The preamble was scoped to the plan's transaction.
	var lockTimeout string
	if err := w.conn.QueryRow(ctx, "SHOW lock_timeout").Scan(&lockTimeout); err != nil {
		t.Fatal(err)
	}
	if lockTimeout != "0" {
		t.Errorf("lock_timeout after Execute = %s; the preamble leaked into the session", lockTimeout)
	}
}

// TestExecuteFailureLeavesNothingOfThePlan: a statement failing in the
// middle rolls back the statements before it and their journal steps; the
// run is recorded as failed with the reason.
func TestExecuteFailureLeavesNothingOfThePlan(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDB(t)
	ctx := testCtx(t)
	observer := dial(t, url)
	w := openWriter(t, url, testDigest, "op-1")
	plan := planOf(
		"CREATE TABLE public.a (id integer)",
		"ALTER TABLE public.missing ADD COLUMN x integer",
		"CREATE TABLE public.c (id integer)",
	)
	progressed := 0
	err := w.Execute(ctx, "plan-uid-1", plan, func(int, int, Statement) { progressed++ })
	var stmtErr *StatementError
	if !errors.Is(err, ErrPlanFailed) || !errors.As(err, &stmtErr) {
		t.Fatalf("Execute = %v, want a *StatementError", err)
	}
	if stmtErr.Step != 2 || stmtErr.Total != 3 || stmtErr.SQL != plan.Statements[1].SQL || SQLState(err) != "42P01" {
		t.Errorf("StatementError = %+v (SQLSTATE %s)", stmtErr, SQLState(err))
	}
	if progressed != 1 {
		t.Errorf("progress called %d times, want 1", progressed)
	}
	if rels := relations(t, observer); len(rels) != 0 {
		t.Errorf("after a failed plan, relations %v are visible", rels)
	}
	run := mustReadRun(t, observer, "op-1")
	if run.Committed() || run.Unfinished() || run.Outcome != RunFailed || len(run.Steps) != 0 ||
		!strings.Contains(run.Error, "statement 2/3 failed") || !strings.Contains(run.Error, "42P01") {
		t.Errorf("run = %+v, want failed with the statement's error and no steps", run)
	}
	// The writer still holds the database after a failure.
	if l := mustLease(t, observer, testDigest); l == nil || l.Holder != "op-1" {
		t.Errorf("lease after a failed run = %+v", l)
	}
}

// TestExecuteRunsAnOperationOnlyOnce: an operation ID is a once-only
// ticket, whichever writer presents it again.
func TestExecuteRunsAnOperationOnlyOnce(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDB(t)
	ctx := testCtx(t)
	plan := planOf("CREATE TABLE public.a (id integer)")
	w := openWriter(t, url, testDigest, "op-1")
	if err := w.Execute(ctx, "plan-1", plan, nil); err != nil {
		t.Fatal(err)
	}
	if err := w.Execute(ctx, "plan-1", plan, nil); !errors.Is(err, ErrAlreadyRun) {
		t.Fatalf("second Execute = %v, want ErrAlreadyRun", err)
	}
	if err := w.Release(ctx); err != nil {
		t.Fatal(err)
	}
	again := openWriter(t, url, testDigest, "op-1")
	if err := again.Execute(ctx, "plan-1", plan, nil); !errors.Is(err, ErrAlreadyRun) {
		t.Fatalf("Execute by a new writer under the same operation = %v, want ErrAlreadyRun", err)
	}
	// A failed run is spent too: a new attempt needs a new operation.
	if err := again.Release(ctx); err != nil {
		t.Fatal(err)
	}
	w3 := openWriter(t, url, testDigest, "op-3")
	if err := w3.Execute(ctx, "plan-3", planOf("SELECT 1/0"), nil); !errors.Is(err, ErrPlanFailed) {
		t.Fatalf("Execute = %v, want ErrPlanFailed", err)
	}
	if err := w3.Execute(ctx, "plan-3", planOf("SELECT 1"), nil); !errors.Is(err, ErrAlreadyRun) {
		t.Fatalf("Execute after a failed run = %v, want ErrAlreadyRun", err)
	}
}

// TestExecuteStopsAtTheDeadline: the server cancels a statement still
// running at the deadline, and the plan rolls back.
func TestExecuteStopsAtTheDeadline(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDB(t)
	ctx := testCtx(t)
	observer := dial(t, url)
	w, err := OpenWriter(ctx, url, testDigest, "op-1", "", time.Now().Add(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer w.Release(ctx)
	began := time.Now()
	err = w.Execute(ctx, "plan-1", planOf("CREATE TABLE public.a (id integer)", "SELECT pg_sleep(30)"), nil)
	if !errors.Is(err, ErrPlanFailed) || !errors.Is(err, ErrDeadlinePassed) || !IsQueryCanceled(err) {
		t.Fatalf("Execute = %v, want the statement cancelled at the deadline", err)
	}
	if took := time.Since(began); took > 15*time.Second {
		t.Errorf("the plan ran %v past a 2s deadline", took)
	}
	if rels := relations(t, observer); len(rels) != 0 {
		t.Errorf("relations %v visible after the deadline cancelled the plan", rels)
	}
	if run := mustReadRun(t, observer, "op-1"); run.Outcome != RunFailed {
		t.Errorf("run = %+v, want failed", run)
	}
}

// TestExecuteRefusesWhenTheLeaseIsNoLongerOurs: a lease released from
// elsewhere (an owed release completed too early) stops the plan before
// any of it runs.
func TestExecuteRefusesWhenTheLeaseIsNoLongerOurs(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDB(t)
	ctx := testCtx(t)
	observer := dial(t, url)
	w := openWriter(t, url, testDigest, "op-1")
	if err := ReleaseLease(ctx, observer, testDigest, "op-1"); err != nil {
		t.Fatal(err)
	}
	err := w.Execute(ctx, "plan-1", planOf("CREATE TABLE public.a (id integer)"), nil)
	if !errors.Is(err, ErrLeaseLost) || !errors.Is(err, ErrPlanFailed) {
		t.Fatalf("Execute = %v, want ErrLeaseLost", err)
	}
	if rels := relations(t, observer); len(rels) != 0 {
		t.Errorf("relations %v visible", rels)
	}
}

func TestReadRunNotFound(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDB(t)
	ctx := testCtx(t)
	conn := dial(t, url)
	if _, err := ReadRun(ctx, conn, "op-1"); !errors.Is(err, ErrRunNotFound) {
		t.Fatalf("ReadRun in a fresh database = %v, want ErrRunNotFound", err)
	}
	if err := ensureRuntimeSchema(ctx, conn); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadRun(ctx, conn, "op-1"); !errors.Is(err, ErrRunNotFound) {
		t.Fatalf("ReadRun of an unknown run = %v, want ErrRunNotFound", err)
	}
}

// crashChildEnv carries the database URL to the re-executed test binary.
const crashChildEnv = "PTAH_TEST_CRASH_CHILD_URL"

// TestExecuteMidPlanFailpoint kills a process between the first and the
// second statement of a plan (the test binary itself, re-executed with the
// failpoint set) and reads what the crash left: the run recorded and
// unfinished, the writer session gone, none of the plan visible, and the
// database free for the next writer.
func TestExecuteMidPlanFailpoint(t *testing.T) {
	if url := os.Getenv(crashChildEnv); url != "" {
		crashChild(t, url)
		return
	}
	t.Parallel()
	url := pgtest.NewDB(t)
	ctx := testCtx(t)
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestExecuteMidPlanFailpoint$", "-test.count=1")
	cmd.Env = append(os.Environ(), crashChildEnv+"="+url, failpoint.EnvVar+"="+failpoint.MidPlan)
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != failpoint.ExitCode {
		t.Fatalf("child: %v, want exit status %d\n%s", err, failpoint.ExitCode, out)
	}
	if !strings.Contains(string(out), "failpoint "+failpoint.MidPlan) {
		t.Fatalf("child output lacks the failpoint:\n%s", out)
	}

	observer := dial(t, url)
	run := mustReadRun(t, observer, "op-crash")
	if !run.Unfinished() || run.Outcome != "" || len(run.Steps) != 0 || run.PlanUID != "plan-crash" {
		t.Errorf("run after the crash = %+v, want recorded, unfinished, no steps", run)
	}
	// The server notices the vanished client on its own; give it a moment.
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		alive, err := SessionAlive(ctx, observer, run.Writer.PID, run.Writer.BackendStart)
		if err != nil {
			t.Fatal(err)
		}
		if !alive {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the crashed writer's session %v is still alive", run.Writer)
		}
	}
	if rels := relations(t, observer); len(rels) != 0 {
		t.Errorf("after the crash, relations %v are visible", rels)
	}
	if l := mustLease(t, observer, testDigest); l == nil || l.Holder != "op-crash" {
		t.Errorf("lease after the crash = %+v, want op-crash's row left behind", l)
	}
	// The session is gone: the next writer may take the database.
	openWriter(t, url, testDigest, "op-next")
}

// crashChild is the re-executed side of TestExecuteMidPlanFailpoint: it
// must not return from Execute.
func crashChild(t *testing.T, url string) {
	ctx := testCtx(t)
	w, err := OpenWriter(ctx, url, testDigest, "op-crash", "PtahSchema/default/app", time.Now().Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	err = w.Execute(ctx, "plan-crash", planOf(
		"CREATE TABLE public.first (id integer)",
		"CREATE TABLE public.second (id integer)",
	), nil)
	t.Fatalf("Execute returned (%v); the failpoint should have stopped the process", err)
}
