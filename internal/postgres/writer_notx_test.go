package postgres

import (
	"context"
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

// withPhases cuts p into phases; n of a phase is its statements, negative
// for a no-transaction phase of -n statements.
func withPhases(p *Plan, ns ...int) *Plan {
	for _, n := range ns {
		if n < 0 {
			p.Phases = append(p.Phases, Phase{Statements: -n, NoTransaction: true})
		} else {
			p.Phases = append(p.Phases, Phase{Statements: n})
		}
	}
	return p
}

// sessionSettings reads settings of the writer's own session.
func sessionSettings(t *testing.T, w *Writer) string {
	t.Helper()
	var got string
	err := w.conn.QueryRow(testCtx(t), `SELECT concat_ws(' ', current_setting('lock_timeout'),
		current_setting('statement_timeout'), current_setting('check_function_bodies'))`).Scan(&got)
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// TestExecuteNoTransactionJournalsEachStatementBeforeItIsSent: in a
// no-transaction phase, when progress hears a statement is starting,
// another session already sees its journal step, committed, started and
// not completed, and does not see the statement's effect; once it ran, it
// sees both the effect and the completion. Each statement commits on its
// own, under the plan's preamble and a statement timeout, neither of which
// outlives it.
func TestExecuteNoTransactionJournalsEachStatementBeforeItIsSent(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDB(t)
	ctx := testCtx(t)
	observer := dial(t, url)
	w := openWriter(t, url, testDigest, "op-1")
	plan := withPhases(planOf(
		"CREATE TABLE public.a (id integer)",
		"CREATE TABLE public.b AS SELECT current_setting('lock_timeout') AS lock_timeout, current_setting('statement_timeout') AS statement_timeout, current_setting('check_function_bodies') AS bodies",
		"CREATE TABLE public.c (id integer)",
	), -3)
	var problems []string
	err := w.Execute(ctx, "plan-1", plan, func(st Step) {
		if !st.NoTransaction || st.Phase != 1 || st.Phases != 1 {
			problems = append(problems, fmt.Sprintf("step %+v", st))
		}
		run := mustReadRun(t, observer, "op-1")
		tables := relations(t, observer)
		if len(run.Steps) != st.N {
			problems = append(problems, fmt.Sprintf("statement %d (done %v): the journal shows %d steps", st.N, st.Done, len(run.Steps)))
			return
		}
		own := run.Steps[st.N-1]
		if own.Statement != st.Statement.SQL || !own.NoTransaction {
			problems = append(problems, fmt.Sprintf("statement %d: journaled as %+v", st.N, own))
		}
		for _, s := range run.Steps[:st.N-1] {
			if s.CommittedAt == nil {
				problems = append(problems, fmt.Sprintf("statement %d starting: step %d not completed", st.N, s.Step))
			}
		}
		// The statement's table: a, b or c.
		table := string(rune('a' + st.N - 1))
		switch {
		case !st.Done && (own.CommittedAt != nil || slices.Contains(tables, table)):
			problems = append(problems, fmt.Sprintf("statement %d starting: its step %+v, tables %v; want started, not completed, not run", st.N, own, tables))
		case !st.Done && len(tables) != st.N-1:
			problems = append(problems, fmt.Sprintf("statement %d starting: tables %v; want those before it, committed", st.N, tables))
		case st.Done && (own.CommittedAt == nil || !slices.Contains(tables, table)):
			problems = append(problems, fmt.Sprintf("statement %d done: its step %+v, tables %v; want completed and visible", st.N, own, tables))
		}
		if !run.Unfinished() && st.N < 3 {
			problems = append(problems, fmt.Sprintf("statement %d: the run is finished", st.N))
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Error(p)
	}
	run := mustReadRun(t, observer, "op-1")
	if !run.Committed() || run.Unfinished() || len(run.Steps) != 3 || len(run.InFlight()) != 0 {
		t.Fatalf("run = %+v, want succeeded with 3 steps", run)
	}
	for i, s := range run.Steps {
		if !s.NoTransaction || s.Phase != 1 || s.CommittedAt == nil || s.CommittedAt.Before(s.StartedAt) {
			t.Errorf("step %d = %+v", i+1, s)
		}
		if i > 0 && !run.Steps[i-1].CommittedAt.Before(s.StartedAt) {
			t.Errorf("step %d started before step %d completed", i+1, i)
		}
	}
	// The statement ran under the preamble and a statement timeout ...
	var lockTimeout, statementTimeout, bodies string
	if err := observer.QueryRow(ctx, "SELECT * FROM public.b").Scan(&lockTimeout, &statementTimeout, &bodies); err != nil {
		t.Fatal(err)
	}
	if lockTimeout != "5s" || statementTimeout == "0" || bodies != "off" {
		t.Errorf("statement 2 ran with lock_timeout %s, statement_timeout %s, check_function_bodies %s", lockTimeout, statementTimeout, bodies)
	}
	// ... which did not outlive it.
	if got := sessionSettings(t, w); got != "0 0 on" {
		t.Errorf("after Execute the session has lock_timeout, statement_timeout, check_function_bodies = %s; the preamble leaked", got)
	}
}

// TestExecuteNoTransactionRunsCreateIndexConcurrently: CREATE INDEX
// CONCURRENTLY, which PostgreSQL refuses in a transaction block (the same
// plan with the phase transactional fails), builds a valid index in a
// no-transaction phase after a transactional one.
func TestExecuteNoTransactionRunsCreateIndexConcurrently(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDB(t)
	ctx := testCtx(t)
	observer := dial(t, url)
	execSQL(t, observer, "CREATE TABLE public.t (id integer); INSERT INTO public.t SELECT generate_series(1, 1000)")
	plan := func(noTx bool) *Plan {
		p := planOf("CREATE TABLE public.u (id integer)", "CREATE INDEX CONCURRENTLY t_id ON public.t (id)")
		if noTx {
			return withPhases(p, 1, -1)
		}
		return withPhases(p, 1, 1)
	}

	inTx := openWriter(t, url, testDigest, "op-tx")
	err := inTx.Execute(ctx, "plan-tx", plan(false), nil)
	if !errors.Is(err, ErrPartiallyApplied) || SQLState(err) != "25001" {
		t.Fatalf("CREATE INDEX CONCURRENTLY in a transactional phase: %v, want SQLSTATE 25001", err)
	}
	if err := inTx.Release(ctx); err != nil {
		t.Fatal(err)
	}
	execSQL(t, observer, "DROP TABLE public.u")

	w := openWriter(t, url, testDigest, "op-1")
	if err := w.Execute(ctx, "plan-1", plan(true), nil); err != nil {
		t.Fatal(err)
	}
	var valid bool
	if err := observer.QueryRow(ctx, "SELECT indisvalid FROM pg_index WHERE indexrelid = 'public.t_id'::regclass").Scan(&valid); err != nil {
		t.Fatal(err)
	}
	if !valid {
		t.Error("the index built concurrently is not valid")
	}
	run := mustReadRun(t, observer, "op-1")
	if !run.Committed() || len(run.Steps) != 2 || run.Steps[0].NoTransaction || !run.Steps[1].NoTransaction ||
		run.Steps[1].Phase != 2 || run.Steps[1].CommittedAt == nil {
		t.Errorf("run = %+v", run)
	}
}

// TestExecuteNoTransactionFailureKeepsWhatCommitted: a statement failing
// in the middle of a no-transaction phase leaves the statements before it
// (of a transactional phase and of its own) committed, and runs nothing
// after it. The error is ErrPartiallyApplied with a *StatementError naming
// the statement and saying it ran without a transaction; the journal is
// finished, partially applied, and shows which step failed: started, not
// completed.
func TestExecuteNoTransactionFailureKeepsWhatCommitted(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDB(t)
	ctx := testCtx(t)
	observer := dial(t, url)
	w := openWriter(t, url, testDigest, "op-1")
	plan := withPhases(planOf(
		"CREATE TABLE public.a (id integer)",
		"CREATE TABLE public.b (id integer)",
		"ALTER TABLE public.missing ADD COLUMN x integer",
		"CREATE TABLE public.d (id integer)",
	), 1, -3)
	err := w.Execute(ctx, "plan-1", plan, nil)
	var stmtErr *StatementError
	if !errors.Is(err, ErrPartiallyApplied) || errors.Is(err, ErrPlanFailed) || errors.Is(err, ErrOutcomeUnknown) || !errors.As(err, &stmtErr) {
		t.Fatalf("Execute = %v, want ErrPartiallyApplied alone, with a *StatementError", err)
	}
	if stmtErr.Step != 3 || stmtErr.Phase != 2 || stmtErr.Committed != 2 || !stmtErr.NoTransaction || SQLState(err) != "42P01" ||
		!strings.Contains(err.Error(), "statement 3/4 failed in phase 2/2, which runs without a transaction (each statement commits on its own), after statements 1-2 committed") {
		t.Errorf("StatementError = %+v: %v", stmtErr, err)
	}
	if got := strings.Join(relations(t, observer), ","); got != "a,b" {
		t.Errorf("tables = %s, want a and b", got)
	}
	run := mustReadRun(t, observer, "op-1")
	if run.Outcome != RunPartiallyApplied || run.Unfinished() || !run.AnyCommitted() || len(run.InFlight()) != 0 || len(run.Steps) != 3 ||
		!strings.Contains(run.Error, "statement 3/4 failed in phase 2/2") {
		t.Fatalf("run = %+v, want partially applied with 3 steps", run)
	}
	if s := run.Steps[2]; s.Statement != plan.Statements[2].SQL || !s.NoTransaction || s.CommittedAt != nil {
		t.Errorf("failed step = %+v, want started, not completed", s)
	}
	if run.Steps[0].CommittedAt == nil || run.Steps[1].CommittedAt == nil || run.Steps[0].NoTransaction || !run.Steps[1].NoTransaction {
		t.Errorf("steps = %+v", run.Steps)
	}
	if got := sessionSettings(t, w); got != "0 0 on" {
		t.Errorf("after the failure the session has %s; the preamble leaked", got)
	}
}

// TestExecuteNoTransactionFirstStatementFailureIsPlanFailed: when the
// plan's first statement runs without a transaction and fails, nothing of
// the plan committed: ErrPlanFailed, the run failed.
func TestExecuteNoTransactionFirstStatementFailureIsPlanFailed(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDB(t)
	ctx := testCtx(t)
	observer := dial(t, url)
	w := openWriter(t, url, testDigest, "op-1")
	err := w.Execute(ctx, "plan-1", withPhases(planOf("ALTER TABLE public.missing ADD COLUMN x integer", "CREATE TABLE public.b (id integer)"), -2), nil)
	var stmtErr *StatementError
	if !errors.Is(err, ErrPlanFailed) || errors.Is(err, ErrPartiallyApplied) || !errors.As(err, &stmtErr) || stmtErr.Committed != 0 || !stmtErr.NoTransaction {
		t.Fatalf("Execute = %v, want ErrPlanFailed", err)
	}
	if rels := relations(t, observer); len(rels) != 0 {
		t.Errorf("relations %v", rels)
	}
	run := mustReadRun(t, observer, "op-1")
	if run.Outcome != RunFailed || run.AnyCommitted() || len(run.Steps) != 1 || run.Steps[0].CommittedAt != nil {
		t.Errorf("run = %+v, want failed, step 1 started and not completed", run)
	}
}

// TestExecuteNoTransactionChecksTheLeaseBeforeEachStatement: a lease
// released from elsewhere after a statement of a no-transaction phase
// stops the next one from being sent.
func TestExecuteNoTransactionChecksTheLeaseBeforeEachStatement(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDB(t)
	ctx := testCtx(t)
	observer := dial(t, url)
	w := openWriter(t, url, testDigest, "op-1")
	plan := withPhases(planOf("CREATE TABLE public.a (id integer)", "CREATE TABLE public.b (id integer)"), -2)
	err := w.Execute(ctx, "plan-1", plan, afterEach(func(done, _ int, _ Statement) {
		if done == 1 {
			if err := ReleaseLease(ctx, observer, testDigest, "op-1"); err != nil {
				t.Error(err)
			}
		}
	}))
	if !errors.Is(err, ErrLeaseLost) || !errors.Is(err, ErrPartiallyApplied) {
		t.Fatalf("Execute = %v, want ErrLeaseLost after statement 1", err)
	}
	if got := strings.Join(relations(t, observer), ","); got != "a" {
		t.Errorf("tables = %s, want a alone", got)
	}
	if run := mustReadRun(t, observer, "op-1"); run.Outcome != RunPartiallyApplied || len(run.Steps) != 1 {
		t.Errorf("run = %+v, want partially applied, statement 2 never journaled", run)
	}
}

// TestExecuteNoTransactionStopsAtTheDeadline: the deadline cancels a
// statement run without a transaction, as it does one in a transaction,
// and what committed before it stays.
func TestExecuteNoTransactionStopsAtTheDeadline(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDB(t)
	ctx := testCtx(t)
	observer := dial(t, url)
	// Time enough for the first statement on a busy machine.
	w, err := OpenWriter(ctx, url, testDigest, "op-1", "", time.Now().Add(6*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer w.Release(ctx)
	err = w.Execute(ctx, "plan-1", withPhases(planOf("CREATE TABLE public.a (id integer)", "SELECT pg_sleep(60)"), -2), nil)
	if !errors.Is(err, ErrPartiallyApplied) || !errors.Is(err, ErrDeadlinePassed) || !IsQueryCanceled(err) {
		t.Fatalf("Execute = %v, want the statement cancelled at the deadline", err)
	}
	run := mustReadRun(t, observer, "op-1")
	if run.Outcome != RunPartiallyApplied || len(run.Steps) != 2 || run.Steps[1].CommittedAt != nil {
		t.Errorf("run = %+v, want partially applied, step 2 not completed", run)
	}
}

// TestExecuteNoTransactionSessionLostInFlight: the writer's session ends
// while a statement run without a transaction executes. Whether it took
// effect is unknown: the error is ErrOutcomeUnknown, neither failed nor
// partially applied, and the journal, unfinished, shows the statement in
// flight.
func TestExecuteNoTransactionSessionLostInFlight(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDB(t)
	ctx := testCtx(t)
	observer := dial(t, url)
	w := openWriter(t, url, testDigest, "op-1")
	plan := withPhases(planOf("CREATE TABLE public.a (id integer)", "SELECT pg_sleep(60)", "CREATE TABLE public.c (id integer)"), -3)
	killed := make(chan error, 1)
	err := w.Execute(ctx, "plan-1", plan, func(st Step) {
		if st.N != 2 || st.Done {
			return
		}
		go func() { killed <- killWhenRunning(ctx, observer, w.Session().PID, "pg_sleep") }()
	})
	if kerr := <-killed; kerr != nil {
		t.Fatal(kerr)
	}
	if !errors.Is(err, ErrOutcomeUnknown) || errors.Is(err, ErrPartiallyApplied) || errors.Is(err, ErrPlanFailed) ||
		!strings.Contains(err.Error(), "statement 2/3, run without a transaction, was in flight") {
		t.Fatalf("Execute = %v, want ErrOutcomeUnknown for statement 2", err)
	}
	waitSessionGone(t, observer, w.Session())
	run := mustReadRun(t, observer, "op-1")
	if !run.Unfinished() || len(run.Steps) != 2 || run.Steps[0].CommittedAt == nil {
		t.Fatalf("run = %+v, want unfinished, step 1 completed, step 2 started", run)
	}
	if inFlight := run.InFlight(); len(inFlight) != 1 || inFlight[0].Step != 2 || inFlight[0].Statement != plan.Statements[1].SQL {
		t.Errorf("in flight: %+v, want step 2", inFlight)
	}
}

// killWhenRunning terminates session pid once it runs a query containing
// what.
func killWhenRunning(ctx context.Context, conn *pgx.Conn, pid int32, what string) error {
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		a, err := PIDActivity(ctx, conn, uint32(pid))
		if err != nil {
			return err
		}
		if a != nil && a.State == "active" && strings.Contains(a.Query, what) {
			_, err := conn.Exec(ctx, "SELECT pg_terminate_backend($1)", pid)
			return err
		}
	}
	return fmt.Errorf("session %d never ran %q", pid, what)
}

// TestExecuteMidNoTxPhaseFailpoint kills the process inside a
// no-transaction phase, after its first statement committed and the start
// of its second was journaled. The journal shows exactly that: the first
// completed, the second in flight, the run unfinished.
func TestExecuteMidNoTxPhaseFailpoint(t *testing.T) {
	plan := func() *Plan {
		p := withPhases(planOf(
			"CREATE TABLE public.first (id integer)",
			"CREATE TABLE public.second (id integer)",
			"CREATE TABLE public.third (id integer)",
		), -3)
		p.History = &PlanHistory{Resource: "PtahMigration/default/app"}
		p.Phases[0].History = &HistoryRow{Version: "7", Name: "tables", Checksum: "sum7"}
		return p
	}
	if url := os.Getenv(crashChildEnv); url != "" {
		ctx := testCtx(t)
		w, err := OpenWriter(ctx, url, testDigest, "op-crash", "PtahMigration/default/app", time.Now().Add(time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		err = w.Execute(ctx, "plan-crash", plan(), nil)
		t.Fatalf("Execute returned (%v); the failpoint should have stopped the process", err)
	}
	t.Parallel()
	url := pgtest.NewDB(t)
	ctx := testCtx(t)
	runCrashChild(t, ctx, url, "TestExecuteMidNoTxPhaseFailpoint", failpoint.MidNoTxPhase)
	observer := dial(t, url)
	run := mustReadRun(t, observer, "op-crash")
	waitSessionGone(t, observer, run.Writer)
	run = mustReadRun(t, observer, "op-crash")
	if !run.Unfinished() || run.Committed() || !run.AnyCommitted() || len(run.Steps) != 2 ||
		run.Steps[0].CommittedAt == nil || run.Steps[0].Version != "7" {
		t.Fatalf("run after the crash = %+v, want unfinished, step 1 completed, step 2 started", run)
	}
	inFlight := run.InFlight()
	if len(inFlight) != 1 || inFlight[0].Step != 2 || inFlight[0].Statement != "CREATE TABLE public.second (id integer)" ||
		!inFlight[0].NoTransaction || inFlight[0].Version != "7" {
		t.Errorf("in flight after the crash: %+v, want step 2", inFlight)
	}
	if got := strings.Join(relations(t, observer), ","); got != "first" {
		t.Errorf("tables after the crash: %s, want first", got)
	}
	if h := mustHistory(t, observer, "PtahMigration/default/app"); len(h) != 0 {
		t.Errorf("history after the crash: %+v, want none: the file did not complete", h)
	}
}

// TestExecuteMidPlanFailpointAfterANoTxPhase: the mid-plan failpoint stops
// the process in the plan's first transactional phase, here after a
// no-transaction phase committed: the journal shows that phase completed,
// and nothing of the transaction.
func TestExecuteMidPlanFailpointAfterANoTxPhase(t *testing.T) {
	plan := func() *Plan {
		return withPhases(planOf(
			"CREATE TABLE public.first (id integer)",
			"CREATE TABLE public.second (id integer)",
			"CREATE TABLE public.third (id integer)",
		), -1, 2)
	}
	if url := os.Getenv(crashChildEnv); url != "" {
		ctx := testCtx(t)
		w, err := OpenWriter(ctx, url, testDigest, "op-crash", "PtahSchema/default/app", time.Now().Add(time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		err = w.Execute(ctx, "plan-crash", plan(), nil)
		t.Fatalf("Execute returned (%v); the failpoint should have stopped the process", err)
	}
	t.Parallel()
	url := pgtest.NewDB(t)
	ctx := testCtx(t)
	runCrashChild(t, ctx, url, "TestExecuteMidPlanFailpointAfterANoTxPhase", failpoint.MidPlan)
	observer := dial(t, url)
	run := mustReadRun(t, observer, "op-crash")
	waitSessionGone(t, observer, run.Writer)
	run = mustReadRun(t, observer, "op-crash")
	if !run.Unfinished() || len(run.Steps) != 1 || run.Steps[0].CommittedAt == nil || len(run.InFlight()) != 0 {
		t.Errorf("run after the crash = %+v, want unfinished, step 1 completed", run)
	}
	if got := strings.Join(relations(t, observer), ","); got != "first" {
		t.Errorf("tables after the crash: %s, want first", got)
	}
}

// runCrashChild runs the test binary again, as test name, with the
// failpoint set, and expects it to stop there.
func runCrashChild(t *testing.T, ctx context.Context, url, name, point string) {
	t.Helper()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^"+name+"$", "-test.count=1")
	cmd.Env = append(os.Environ(), crashChildEnv+"="+url, failpoint.EnvVar+"="+point)
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != failpoint.ExitCode || !strings.Contains(string(out), "failpoint "+point) {
		t.Fatalf("child: %v, want exit status %d at failpoint %s\n%s", err, failpoint.ExitCode, point, out)
	}
}

// TestExecuteNoTransactionPhaseSettingsLastThePhase: a SET a
// no-transaction phase runs itself (a migration file's) holds for its
// statements after it, as it would in psql, over the plan's preamble; and
// nothing of either outlives the phase.
func TestExecuteNoTransactionPhaseSettingsLastThePhase(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDB(t)
	ctx := testCtx(t)
	observer := dial(t, url)
	w := openWriter(t, url, testDigest, "op-1")
	plan := withPhases(planOf(
		"SET lock_timeout = '1234ms'",
		"CREATE TABLE public.a AS SELECT current_setting('lock_timeout') AS lock_timeout",
		"CREATE TABLE public.b AS SELECT current_setting('lock_timeout') AS lock_timeout",
	), -2, -1)
	if err := w.Execute(ctx, "plan-1", plan, nil); err != nil {
		t.Fatal(err)
	}
	var a, b string
	if err := observer.QueryRow(ctx, "SELECT (SELECT lock_timeout FROM public.a), (SELECT lock_timeout FROM public.b)").Scan(&a, &b); err != nil {
		t.Fatal(err)
	}
	if a != "1234ms" || b != "5s" {
		t.Errorf("lock_timeout: %s in the phase that set it, %s in the next; want 1234ms, then the preamble's 5s", a, b)
	}
	if got := sessionSettings(t, w); got != "0 0 on" {
		t.Errorf("after Execute the session has %s", got)
	}
}

// A migration's hand-written SQL runs with the role's own search_path
// (Plan.SearchPath), in a transaction and outside one; ptah's own session
// keeps pg_catalog only, where an unqualified CREATE TABLE is refused.
func TestPlanSearchPathIsTheRolesForHandWrittenSQL(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDB(t)
	ctx := testCtx(t)
	path, err := DefaultSearchPath(ctx, url)
	if err != nil || !strings.Contains(path, "public") {
		t.Fatalf("DefaultSearchPath = %q, %v; want the default, which names public", path, err)
	}
	w := openWriter(t, url, testDigest, "op-0")
	if err := w.Execute(ctx, "plan-0", planOf("CREATE TABLE users (id int)"), nil); err == nil {
		t.Fatal("an unqualified CREATE TABLE ran in ptah's pg_catalog-only session")
	}
	w.Release(ctx)
	w = openWriter(t, url, testDigest, "op-1")
	plan := &Plan{
		Statements: []Statement{{SQL: "CREATE TABLE users (id int)"}, {SQL: "CREATE INDEX CONCURRENTLY users_id ON users (id)"}},
		Phases:     []Phase{{Statements: 1}, {Statements: 1, NoTransaction: true}},
		SearchPath: path,
	}
	if err := w.Execute(ctx, "plan-1", plan, nil); err != nil {
		t.Fatalf("Execute with the role's search_path: %v", err)
	}
	observer := dial(t, url)
	if got := relations(t, observer); !slices.Contains(got, "users") || !slices.Contains(got, "users_id") {
		t.Fatalf("relations after the plan: %v; want public.users and its index", got)
	}
	var sp string
	if err := w.conn.QueryRow(ctx, "SHOW search_path").Scan(&sp); err != nil || sp != "pg_catalog" {
		t.Fatalf("the writer's session search_path after the plan: %q, %v; want pg_catalog again", sp, err)
	}
}
