package postgres

import (
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/ptah-run/ptah/internal/failpoint"
	"github.com/ptah-run/ptah/internal/pgtest"
)

// phased is a plan of five tables cut into phases of 2, 1 and 2 statements.
func phased() *Plan {
	p := planOf(
		"CREATE TABLE public.a (id integer)",
		"CREATE TABLE public.b (id integer)",
		"CREATE TABLE public.c (id integer)",
		"CREATE TABLE public.d (id integer)",
		"CREATE TABLE public.e (id integer)",
	)
	p.Phases = []Phase{{Statements: 2, Reason: PhaseLockBudget}, {Statements: 1, Reason: PhaseLockBudget}, {Statements: 2, Reason: PhaseLockBudget}}
	return p
}

// TestExecuteCommitsEachPhaseBeforeTheNext: each phase is a transaction
// of its own, committed, with its journal steps, before the next begins;
// the last commits with the run's success.
func TestExecuteCommitsEachPhaseBeforeTheNext(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDB(t)
	ctx := testCtx(t)
	observer := dial(t, url)
	w := openWriter(t, url, testDigest, "op-1")
	plan := phased()
	seen := map[int]string{}
	journaled := map[int]int{}
	if err := w.Execute(ctx, "plan-1", plan, afterEach(func(done, _ int, _ Statement) {
		seen[done] = strings.Join(relations(t, observer), ",")
		run := mustReadRun(t, observer, "op-1")
		journaled[done] = len(run.Steps)
	})); err != nil {
		t.Fatal(err)
	}
	// What another session sees after each statement ran, in its phase's
	// open transaction: the phases before it, whole, and nothing of its own.
	for done, want := range map[int]string{1: "", 2: "", 3: "a,b", 4: "a,b,c", 5: "a,b,c"} {
		if seen[done] != want {
			t.Errorf("after statement %d, another session saw tables %q, want %q", done, seen[done], want)
		}
	}
	for done, want := range map[int]int{1: 0, 2: 0, 3: 2, 4: 3, 5: 3} {
		if journaled[done] != want {
			t.Errorf("after statement %d, the journal showed %d steps, want %d", done, journaled[done], want)
		}
	}
	run := mustReadRun(t, observer, "op-1")
	if !run.Committed() || run.Phases != 3 || len(run.Steps) != 5 {
		t.Fatalf("run = %+v, want succeeded in 3 phases with 5 steps", run)
	}
	for i, want := range []int{1, 1, 2, 3, 3} {
		if s := run.Steps[i]; s.Phase != want || s.CommittedAt == nil {
			t.Errorf("step %d = %+v, want phase %d, committed", i+1, s, want)
		}
	}
	// Phases commit in order: phase 1 before phase 2's first statement.
	if !run.Steps[1].CommittedAt.Before(run.Steps[2].StartedAt) || !run.Steps[2].CommittedAt.Before(run.Steps[3].StartedAt) {
		t.Errorf("the phases did not commit one after the other: %+v", run.Steps)
	}
}

// TestExecuteLaterPhaseFailureIsPartiallyApplied: a failure in the third
// phase rolls back that phase only; the first two stay committed, and the
// error and the journal say so.
func TestExecuteLaterPhaseFailureIsPartiallyApplied(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDB(t)
	ctx := testCtx(t)
	observer := dial(t, url)
	w := openWriter(t, url, testDigest, "op-1")
	plan := phased()
	plan.Statements[4].SQL = "ALTER TABLE public.missing ADD COLUMN x integer"
	err := w.Execute(ctx, "plan-1", plan, nil)
	var stmtErr *StatementError
	if !errors.Is(err, ErrPartiallyApplied) || errors.Is(err, ErrPlanFailed) || !errors.As(err, &stmtErr) {
		t.Fatalf("Execute = %v, want ErrPartiallyApplied with a *StatementError", err)
	}
	if stmtErr.Step != 5 || stmtErr.Phase != 3 || stmtErr.Phases != 3 || stmtErr.Committed != 3 ||
		!strings.Contains(err.Error(), "statement 5/5 failed in transaction 3/3, after transactions 1-2 (statements 1-3) committed") {
		t.Errorf("StatementError = %+v: %v", stmtErr, err)
	}
	if got := strings.Join(relations(t, observer), ","); got != "a,b,c" {
		t.Errorf("tables = %s, want the first two phases' alone", got)
	}
	run := mustReadRun(t, observer, "op-1")
	if run.Outcome != RunPartiallyApplied || run.Unfinished() || !run.AnyCommitted() || len(run.Steps) != 3 ||
		!strings.Contains(run.Error, "after transactions 1-2 (statements 1-3) committed") {
		t.Errorf("run = %+v, want partially applied with steps 1-3", run)
	}
}

// TestExecuteRefusesPhasesThatDoNotCoverThePlan: a plan whose phases do
// not add up to its statements does not start.
func TestExecuteRefusesPhasesThatDoNotCoverThePlan(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDB(t)
	ctx := testCtx(t)
	observer := dial(t, url)
	w := openWriter(t, url, testDigest, "op-1")
	for _, phases := range [][]Phase{{{Statements: 2}, {Statements: 2}}, {{Statements: 5}, {Statements: 0}}, {{Statements: 6}}} {
		plan := phased()
		plan.Phases = phases
		if err := w.Execute(ctx, "plan-1", plan, nil); !errors.Is(err, ErrNotStarted) {
			t.Errorf("Execute with phases %+v = %v, want ErrNotStarted", phases, err)
		}
	}
	if _, err := ReadRun(ctx, observer, "op-1"); !errors.Is(err, ErrRunNotFound) {
		t.Errorf("a refused plan was journaled: %v", err)
	}
}

// TestExecuteBetweenPhasesFailpoint kills the process after the first
// phase committed and before the second began. The journal says exactly
// what committed (the first phase's steps, the run unfinished), the
// database holds that and nothing more, and the next writer may take the
// database. The runner settles such a run by observing the database again
// (TestCrashBetweenPhasesIsObservedNotRerun).
func TestExecuteBetweenPhasesFailpoint(t *testing.T) {
	if url := os.Getenv(crashChildEnv); url != "" {
		ctx := testCtx(t)
		w, err := OpenWriter(ctx, url, testDigest, "op-crash", "PtahSchema/default/app", time.Now().Add(time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		err = w.Execute(ctx, "plan-crash", phased(), nil)
		t.Fatalf("Execute returned (%v); the failpoint should have stopped the process", err)
	}
	t.Parallel()
	url := pgtest.NewDB(t)
	ctx := testCtx(t)
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestExecuteBetweenPhasesFailpoint$", "-test.count=1")
	cmd.Env = append(os.Environ(), crashChildEnv+"="+url, failpoint.EnvVar+"="+failpoint.BetweenPhases)
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != failpoint.ExitCode || !strings.Contains(string(out), "failpoint "+failpoint.BetweenPhases) {
		t.Fatalf("child: %v, want exit status %d at the failpoint\n%s", err, failpoint.ExitCode, out)
	}
	observer := dial(t, url)
	run := mustReadRun(t, observer, "op-crash")
	waitSessionGone(t, observer, run.Writer)
	run = mustReadRun(t, observer, "op-crash")
	if !run.Unfinished() || run.Committed() || !run.AnyCommitted() || run.Phases != 3 || len(run.Steps) != 2 ||
		run.Steps[0].CommittedAt == nil || run.Steps[1].CommittedAt == nil || run.Steps[1].Phase != 1 {
		t.Errorf("run after the crash = %+v, want unfinished with phase 1 (steps 1-2) committed", run)
	}
	if got := strings.Join(relations(t, observer), ","); got != "a,b" {
		t.Errorf("after the crash, tables %q are visible, want the first phase's", got)
	}
	openWriter(t, url, testDigest, "op-next")
}
