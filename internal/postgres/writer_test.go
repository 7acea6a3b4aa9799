package postgres

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
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

// TestExecuteReportsEachStatementAsItStartsAndOnceItRan: progress hears of
// a statement before it runs, then once it ran, with the time it took; a
// statement that fails is reported started only.
func TestExecuteReportsEachStatementAsItStartsAndOnceItRan(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDB(t)
	ctx := testCtx(t)
	w := openWriter(t, url, testDigest, "op-1")
	plan := planOf("SELECT pg_sleep(0.2)", "CREATE TABLE public.a (id integer)", "SELECT 1/0")
	var got []string
	var slept time.Duration
	err := w.Execute(ctx, "plan-1", plan, func(st Step) {
		if st.Total != 3 || st.Phase != 1 || st.Phases != 1 || st.Statement.SQL != plan.Statements[st.N-1].SQL {
			t.Errorf("step %+v", st)
		}
		switch {
		case !st.Done && st.Elapsed != 0:
			t.Errorf("statement %d reported started with %s elapsed", st.N, st.Elapsed)
		case st.Done && st.N == 1:
			slept = st.Elapsed
		}
		got = append(got, fmt.Sprintf("%d:%v", st.N, st.Done))
	})
	if !errors.Is(err, ErrPlanFailed) {
		t.Fatalf("Execute = %v, want ErrPlanFailed", err)
	}
	if want := []string{"1:false", "1:true", "2:false", "2:true", "3:false"}; !slices.Equal(got, want) {
		t.Errorf("progress = %v, want %v", got, want)
	}
	if slept < 200*time.Millisecond {
		t.Errorf("pg_sleep(0.2) reported as taking %s", slept)
	}
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
	if err := w.Execute(ctx, "plan-uid-1", plan, afterEach(progress)); err != nil {
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
	err := w.Execute(ctx, "plan-uid-1", plan, afterEach(func(int, int, Statement) { progressed++ }))
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
	waitSessionGone(t, observer, run.Writer)
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

// TestPlanPhases: the leading enum labels are a phase of their own when
// more follows; the rest is cut into the fewest phases that stay within
// the lock budget, a table counted once however many statements lock it.
func TestPlanPhases(t *testing.T) {
	t.Parallel()
	add := Statement{SQL: "ALTER TYPE public.mood ADD VALUE IF NOT EXISTS 'ok' AFTER 'sad'"}
	use := Statement{SQL: "ALTER TABLE public.t ADD COLUMN m public.mood DEFAULT 'ok'", LockKeys: []string{"public.t"}}
	locks := func(names ...string) Statement { return Statement{SQL: "SELECT 1", LockKeys: names} }
	// 4 objects each; with the overhead, two of them fit a budget of 24.
	a, b, c := locks("a", "a.toast", "a.toast.index", "a_pkey"), locks("b", "b.toast", "b.toast.index", "b_pkey"), locks("c", "c.toast", "c.toast.index", "c_pkey")
	reindexA := locks("a", "a_pkey") // nothing new once a is locked
	huge := locks("h1", "h2", "h3", "h4", "h5", "h6", "h7", "h8", "h9", "h10")
	type ph struct {
		n, locks int
		reason   string
	}
	for _, tt := range []struct {
		name   string
		stmts  []Statement
		budget int
		want   []ph
	}{
		{"empty", nil, 24, nil},
		{"one statement", []Statement{use}, 0, []ph{{1, 17, ""}}},
		{"labels alone: one transaction", []Statement{add, add}, 0, []ph{{2, 16, ""}}},
		{"labels, then their use", []Statement{add, use}, 0, []ph{{1, 16, PhaseEnumLabels}, {1, 17, ""}}},
		{"a later label stays in place", []Statement{add, add, use, add}, 0, []ph{{2, 16, PhaseEnumLabels}, {2, 17, ""}}},
		{"no leading label", []Statement{use, add, use}, 0, []ph{{3, 17, ""}}},
		{"no budget: one transaction", []Statement{a, b, c}, 0, []ph{{3, 28, ""}}},
		{"within the budget", []Statement{a, b}, 24, []ph{{2, 24, ""}}},
		{"over the budget", []Statement{a, b, c}, 24, []ph{{2, 24, PhaseLockBudget}, {1, 20, PhaseLockBudget}}},
		{"an object counts once", []Statement{a, reindexA, b, reindexA, c}, 24, []ph{{4, 24, PhaseLockBudget}, {1, 20, PhaseLockBudget}}},
		{"a statement over the budget alone", []Statement{a, huge, b}, 24, []ph{{1, 20, PhaseLockBudget}, {1, 26, PhaseLockBudget}, {1, 20, PhaseLockBudget}}},
		{"labels, then the rest cut", []Statement{add, a, b, c}, 24, []ph{{1, 16, PhaseEnumLabels}, {2, 24, PhaseLockBudget}, {1, 20, PhaseLockBudget}}},
	} {
		var got []ph
		for _, p := range PlanPhases(tt.stmts, tt.budget) {
			got = append(got, ph{p.Statements, p.Locks, p.Reason})
		}
		if !slices.Equal(got, tt.want) {
			t.Errorf("%s: PlanPhases = %v, want %v", tt.name, got, tt.want)
		}
	}
}

func TestLockCapacityBudget(t *testing.T) {
	t.Parallel()
	stock := LockCapacity{MaxLocksPerTransaction: 64, MaxConnections: 100}
	if stock.Slots() != 6400 || stock.Budget() != 3200 {
		t.Errorf("stock: %d slots, budget %d; want 6400, 3200", stock.Slots(), stock.Budget())
	}
	prepared := LockCapacity{MaxLocksPerTransaction: 128, MaxConnections: 100, MaxPreparedTransactions: 100}
	if prepared.Budget() != 12800 {
		t.Errorf("budget with prepared transactions = %d, want 12800", prepared.Budget())
	}
	if (LockCapacity{}).Budget() != 0 {
		t.Error("an unknown capacity has a budget")
	}
}

func TestAddsEnumLabel(t *testing.T) {
	t.Parallel()
	for sql, want := range map[string]bool{
		"ALTER TYPE public.mood ADD VALUE 'ok'":                             true,
		"ALTER TYPE public.mood ADD VALUE IF NOT EXISTS 'ok' BEFORE 'x'":    true,
		"alter type mood add value 'ok'":                                    true,
		"  ALTER\n\tTYPE  \"My \"\"Schema\"\"\" . \"Mood\"  ADD  VALUE'ok'": true,
		"ALTER TYPE mood_é ADD VALUE 'ok'":                                  true,
		"ALTER TYPE public.mood RENAME VALUE 'a' TO 'b'":                    false,
		"ALTER TYPE public.mood ADD ATTRIBUTE a int":                        false,
		"ALTER TYPE public.mood RENAME TO \"x ADD VALUE y\"":                false,
		"ALTER TYPE \"x ADD VALUE y\" RENAME TO z":                          false,
		"ALTER TYPEmood ADD VALUE 'ok'":                                     false,
		"ALTER TYPE public. ADD VALUE 'ok'":                                 false,
		"ALTER TYPE \"\" ADD VALUE 'ok'":                                    false,
		"ALTER TYPE \"unterminated ADD VALUE 'ok'":                          false,
		"ALTER TABLE t ADD VALUE 'ok'":                                      false,
		"CREATE TYPE mood AS ENUM ('ok')":                                   false,
		"ALTER TYPE public.mood ADD VALUES 'ok'":                            false,
		"":                                                                  false,
	} {
		if got := addsEnumLabel(sql); got != want {
			t.Errorf("addsEnumLabel(%q) = %v, want %v", sql, got, want)
		}
	}
}

// enumLabels lists the labels of type public.mood, in order.
func enumLabels(t *testing.T, conn *pgx.Conn) []string {
	t.Helper()
	rows, err := conn.Query(testCtx(t), `SELECT enumlabel::text FROM pg_enum
		WHERE enumtypid = 'public.mood'::regtype ORDER BY enumsortorder`)
	if err != nil {
		t.Fatal(err)
	}
	labels, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return labels
}

func execSQL(t *testing.T, conn *pgx.Conn, sql string) {
	t.Helper()
	if _, err := conn.Exec(testCtx(t), sql); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

// TestExecuteCommitsEnumLabelsBeforeThePlanThatUsesThem: a plan that adds
// labels and uses them (a column default, a check, a new table's default)
// cannot be one transaction (55P04). Its labels commit first, journaled;
// then the rest commits with the run's success. Progress and the journal
// count every statement once, in plan order.
func TestExecuteCommitsEnumLabelsBeforeThePlanThatUsesThem(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDB(t)
	ctx := testCtx(t)
	observer := dial(t, url)
	execSQL(t, observer, "CREATE TYPE public.mood AS ENUM ('sad', 'happy'); CREATE TABLE public.t (id integer)")

	// The premise: one transaction cannot do it.
	tx, err := observer.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	_, err = tx.Exec(ctx, "ALTER TYPE public.mood ADD VALUE 'probe'; SELECT 'probe'::public.mood")
	if SQLState(err) != "55P04" {
		t.Fatalf("using a label in the transaction that added it: %v, want SQLSTATE 55P04", err)
	}
	_ = tx.Rollback(ctx)

	w := openWriter(t, url, testDigest, "op-1")
	plan := planOf(
		"ALTER TYPE public.mood ADD VALUE IF NOT EXISTS 'ok' AFTER 'sad'",
		"ALTER TYPE public.mood ADD VALUE IF NOT EXISTS 'meh' AFTER 'ok'", // after a label of the same transaction
		"ALTER TABLE public.t ADD COLUMN m public.mood DEFAULT 'ok'",
		"ALTER TABLE public.t ADD CONSTRAINT t_m_check CHECK (m <> 'meh')",
		"CREATE TABLE public.u (m public.mood NOT NULL DEFAULT 'meh')",
	)
	if got := plan.Transactions(); len(got) != 2 || got[0].Statements != 2 || got[0].Reason != PhaseEnumLabels {
		t.Fatalf("phases = %+v, want the first 2 statements in an enum phase", got)
	}
	var calls []int
	var inEnumPhase, inMainPhase []string
	var runInMainPhase *Run
	progress := func(done, total int, s Statement) {
		calls = append(calls, done)
		if total != 5 || s.SQL != plan.Statements[done-1].SQL {
			t.Errorf("progress(%d, %d, %q)", done, total, s.SQL)
		}
		switch done {
		case 2: // the enum phase's transaction is still open
			inEnumPhase = enumLabels(t, observer)
		case 3: // it committed; the main transaction is open
			inMainPhase = enumLabels(t, observer)
			runInMainPhase = mustReadRun(t, observer, "op-1")
		}
	}
	if err := w.Execute(ctx, "plan-1", plan, afterEach(progress)); err != nil {
		t.Fatal(err)
	}

	if !slices.Equal(calls, []int{1, 2, 3, 4, 5}) {
		t.Errorf("progress calls = %v, want 1..5 once each", calls)
	}
	if got := strings.Join(inEnumPhase, ","); got != "sad,happy" {
		t.Errorf("during the enum phase, another session saw labels %s", got)
	}
	if got := strings.Join(inMainPhase, ","); got != "sad,ok,meh,happy" {
		t.Errorf("during the main transaction, another session saw labels %s, want the enum phase committed", got)
	}
	if r := runInMainPhase; r == nil || !r.Unfinished() || r.Committed() || !r.AnyCommitted() || len(r.Steps) != 2 ||
		r.Steps[0].CommittedAt == nil || r.Steps[1].CommittedAt == nil {
		t.Errorf("during the main transaction, the journal read %+v; want unfinished, steps 1-2 committed", r)
	}

	// Everything committed, and works.
	execSQL(t, observer, "INSERT INTO public.t (id) VALUES (1); INSERT INTO public.u DEFAULT VALUES")
	var m, um string
	if err := observer.QueryRow(ctx, "SELECT (SELECT m::text FROM public.t), (SELECT m::text FROM public.u)").Scan(&m, &um); err != nil {
		t.Fatal(err)
	}
	if m != "ok" || um != "meh" {
		t.Errorf("defaults = %s, %s", m, um)
	}
	if _, err := observer.Exec(ctx, "INSERT INTO public.t VALUES (2, 'meh')"); SQLState(err) != "23514" {
		t.Errorf("inserting what the check forbids: %v, want a check violation", err)
	}

	run := mustReadRun(t, observer, "op-1")
	if !run.Committed() || run.Unfinished() || run.Outcome != RunSucceeded || run.Error != "" || len(run.Steps) != 5 {
		t.Fatalf("run = %+v", run)
	}
	for i, s := range run.Steps {
		if s.Step != i+1 || s.Statement != plan.Statements[i].SQL || s.CommittedAt == nil || s.CommittedAt.Before(s.StartedAt) {
			t.Errorf("step %d = %+v", i+1, s)
		}
	}
	// Steps 1-2 committed in their own transaction, before step 3 started;
	// steps 3-5 together, after step 5 started.
	if !run.Steps[1].CommittedAt.Before(run.Steps[2].StartedAt) || run.Steps[2].CommittedAt.Before(run.Steps[4].StartedAt) {
		t.Errorf("commit times: enum phase %v, step 3 started %v; main %v, step 5 started %v",
			run.Steps[1].CommittedAt, run.Steps[2].StartedAt, run.Steps[2].CommittedAt, run.Steps[4].StartedAt)
	}

	// The operation is spent, for this writer and any other.
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
	if n := len(mustReadRun(t, observer, "op-1").Steps); n != 5 {
		t.Errorf("after the refused attempts the journal has %d steps", n)
	}
}

// TestExecuteEnumPhaseThenMainFailureIsPartiallyApplied: the enum phase commits, then the main
// transaction fails. The error is ErrPartiallyApplied (not ErrPlanFailed),
// the labels stay, nothing else of the plan does, and the journal says
// partially applied with the enum phase's steps committed. The same
// statements, run again under a new operation, complete.
func TestExecuteEnumPhaseThenMainFailureIsPartiallyApplied(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDB(t)
	ctx := testCtx(t)
	observer := dial(t, url)
	execSQL(t, observer, "CREATE TYPE public.mood AS ENUM ('sad', 'happy'); CREATE TABLE public.t (id integer)")
	w := openWriter(t, url, testDigest, "op-1")
	plan := planOf(
		"ALTER TYPE public.mood ADD VALUE IF NOT EXISTS 'ok' AFTER 'sad'",
		"ALTER TABLE public.t ADD COLUMN m public.mood DEFAULT 'ok'",
		"ALTER TABLE public.missing ADD COLUMN x integer",
	)
	progressed := 0
	err := w.Execute(ctx, "plan-1", plan, afterEach(func(int, int, Statement) { progressed++ }))
	var stmtErr *StatementError
	if !errors.Is(err, ErrPartiallyApplied) || errors.Is(err, ErrPlanFailed) || errors.Is(err, ErrOutcomeUnknown) ||
		errors.Is(err, ErrNotStarted) || !errors.As(err, &stmtErr) {
		t.Fatalf("Execute = %v, want ErrPartiallyApplied alone, with a *StatementError", err)
	}
	if stmtErr.Step != 3 || stmtErr.Total != 3 || stmtErr.Committed != 1 || SQLState(err) != "42P01" {
		t.Errorf("StatementError = %+v (SQLSTATE %s)", stmtErr, SQLState(err))
	}
	if progressed != 2 {
		t.Errorf("progress called %d times, want 2", progressed)
	}
	if got := strings.Join(enumLabels(t, observer), ","); got != "sad,ok,happy" {
		t.Errorf("labels = %s, want the enum phase committed", got)
	}
	var columns int
	if err := observer.QueryRow(ctx, "SELECT count(*) FROM pg_attribute WHERE attrelid = 'public.t'::regclass AND attnum > 0").Scan(&columns); err != nil {
		t.Fatal(err)
	}
	if columns != 1 {
		t.Errorf("public.t has %d columns, want the main transaction rolled back", columns)
	}
	run := mustReadRun(t, observer, "op-1")
	if run.Outcome != RunPartiallyApplied || run.Unfinished() || run.Committed() || !run.AnyCommitted() ||
		len(run.Steps) != 1 || run.Steps[0].CommittedAt == nil || run.Steps[0].Statement != plan.Statements[0].SQL ||
		!strings.Contains(run.Error, "statement 3/3 failed in transaction 2/2, after transaction 1 (statement 1) committed") {
		t.Errorf("run = %+v, want partially applied, step 1 committed", run)
	}
	if err := w.Execute(ctx, "plan-1", plan, nil); !errors.Is(err, ErrAlreadyRun) {
		t.Fatalf("Execute after a partial run = %v, want ErrAlreadyRun", err)
	}
	// The writer still holds the database.
	if l := mustLease(t, observer, testDigest); l == nil || l.Holder != "op-1" {
		t.Errorf("lease after a partial run = %+v", l)
	}
	if err := w.Release(ctx); err != nil {
		t.Fatal(err)
	}
	// IF NOT EXISTS: the statements that were planned run again.
	w2 := openWriter(t, url, testDigest, "op-2")
	if err := w2.Execute(ctx, "plan-2", planOf(plan.Statements[0].SQL, plan.Statements[1].SQL), nil); err != nil {
		t.Fatalf("running the plan's first statements again: %v", err)
	}
}

// TestExecuteEnumPhaseFailureLeavesNothing: a failure in the enum phase is
// an ordinary failed plan: nothing committed, the main transaction never
// began.
func TestExecuteEnumPhaseFailureLeavesNothing(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDB(t)
	ctx := testCtx(t)
	observer := dial(t, url)
	execSQL(t, observer, "CREATE TYPE public.mood AS ENUM ('sad', 'happy')")
	w := openWriter(t, url, testDigest, "op-1")
	plan := planOf(
		"ALTER TYPE public.mood ADD VALUE IF NOT EXISTS 'ok' AFTER 'sad'",
		"ALTER TYPE public.missing ADD VALUE IF NOT EXISTS 'x'",
		"CREATE TABLE public.a (m public.mood DEFAULT 'ok')",
	)
	err := w.Execute(ctx, "plan-1", plan, nil)
	var stmtErr *StatementError
	if !errors.Is(err, ErrPlanFailed) || errors.Is(err, ErrPartiallyApplied) || !errors.As(err, &stmtErr) ||
		stmtErr.Step != 2 || stmtErr.Committed != 0 {
		t.Fatalf("Execute = %v, want ErrPlanFailed at statement 2", err)
	}
	if got := strings.Join(enumLabels(t, observer), ","); got != "sad,happy" {
		t.Errorf("labels = %s, want none added", got)
	}
	if rels := relations(t, observer); len(rels) != 0 {
		t.Errorf("relations %v visible", rels)
	}
	run := mustReadRun(t, observer, "op-1")
	if run.Outcome != RunFailed || run.AnyCommitted() || len(run.Steps) != 0 {
		t.Errorf("run = %+v, want failed with nothing committed", run)
	}
}

// TestExecuteSessionLostAfterTheEnumPhase: the writer's session ends while the
// main transaction runs, as when the process or the server dies there. The
// error is ErrPartiallyApplied, the run cannot be recorded as ended, and
// the journal still tells what committed: the enum phase's steps.
func TestExecuteSessionLostAfterTheEnumPhase(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDB(t)
	ctx := testCtx(t)
	observer := dial(t, url)
	execSQL(t, observer, "CREATE TYPE public.mood AS ENUM ('sad', 'happy')")
	w := openWriter(t, url, testDigest, "op-1")
	plan := planOf(
		"ALTER TYPE public.mood ADD VALUE IF NOT EXISTS 'ok' AFTER 'sad'",
		"CREATE TABLE public.a (m public.mood DEFAULT 'ok')",
		"CREATE TABLE public.b (id integer)",
	)
	err := w.Execute(ctx, "plan-1", plan, afterEach(func(done, _ int, _ Statement) {
		if done == 2 {
			execSQL(t, observer, fmt.Sprintf("SELECT pg_terminate_backend(%d)", w.Session().PID))
		}
	}))
	if !errors.Is(err, ErrPartiallyApplied) || errors.Is(err, ErrPlanFailed) || !IsConnectionLost(err) {
		t.Fatalf("Execute = %v, want ErrPartiallyApplied for a lost session", err)
	}
	if got := strings.Join(enumLabels(t, observer), ","); got != "sad,ok,happy" {
		t.Errorf("labels = %s", got)
	}
	if rels := relations(t, observer); len(rels) != 0 {
		t.Errorf("relations %v visible", rels)
	}
	run := mustReadRun(t, observer, "op-1")
	if !run.Unfinished() || !run.AnyCommitted() || run.Committed() || len(run.Steps) != 1 || run.Steps[0].CommittedAt == nil {
		t.Errorf("run = %+v, want unfinished with step 1 committed", run)
	}
}

// TestExecuteMidPlanFailpointInTheEnumPhase: with an enum phase, the
// mid-plan failpoint still stops the process after the plan's first
// statement ran, before its transaction (here the enum phase's) committed:
// nothing of the plan is left, the run is recorded and unfinished.
func TestExecuteMidPlanFailpointInTheEnumPhase(t *testing.T) {
	if url := os.Getenv(crashChildEnv); url != "" {
		ctx := testCtx(t)
		w, err := OpenWriter(ctx, url, testDigest, "op-crash", "PtahSchema/default/app", time.Now().Add(time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		err = w.Execute(ctx, "plan-crash", planOf(
			"ALTER TYPE public.mood ADD VALUE IF NOT EXISTS 'ok' AFTER 'sad'",
			"CREATE TABLE public.first (m public.mood DEFAULT 'ok')",
		), nil)
		t.Fatalf("Execute returned (%v); the failpoint should have stopped the process", err)
	}
	t.Parallel()
	url := pgtest.NewDB(t)
	ctx := testCtx(t)
	observer := dial(t, url)
	execSQL(t, observer, "CREATE TYPE public.mood AS ENUM ('sad', 'happy')")
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestExecuteMidPlanFailpointInTheEnumPhase$", "-test.count=1")
	cmd.Env = append(os.Environ(), crashChildEnv+"="+url, failpoint.EnvVar+"="+failpoint.MidPlan)
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != failpoint.ExitCode || !strings.Contains(string(out), "failpoint "+failpoint.MidPlan) {
		t.Fatalf("child: %v, want exit status %d at the failpoint\n%s", err, failpoint.ExitCode, out)
	}
	run := mustReadRun(t, observer, "op-crash")
	if !run.Unfinished() || run.AnyCommitted() || len(run.Steps) != 0 {
		t.Errorf("run after the crash = %+v, want recorded, unfinished, nothing committed", run)
	}
	// The server rolls the enum phase back once it notices the client gone.
	waitSessionGone(t, observer, run.Writer)
	if got := strings.Join(enumLabels(t, observer), ","); got != "sad,happy" {
		t.Errorf("labels after the crash = %s, want none added", got)
	}
	if rels := relations(t, observer); len(rels) != 0 {
		t.Errorf("after the crash, relations %v are visible", rels)
	}
}

// waitSessionGone waits until the server has noticed that a crashed
// client's session is gone (it rolls back the session's transaction then).
func waitSessionGone(t *testing.T, observer *pgx.Conn, s Session) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		alive, err := SessionAlive(testCtx(t), observer, s.PID, s.BackendStart)
		if err != nil {
			t.Fatal(err)
		}
		if !alive {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the crashed writer's session %v is still alive", s)
		}
	}
}

// afterEach is a ProgressFunc that hears of each statement once it has run.
func afterEach(f func(done, total int, s Statement)) ProgressFunc {
	return func(st Step) {
		if st.Done {
			f(st.N, st.Total, st.Statement)
		}
	}
}
