package runner

import (
	"context"
	"strings"
	"testing"

	"github.com/ptah-run/ptah/internal/failpoint"
	"github.com/ptah-run/ptah/pkg/api/v1alpha1"
)

const (
	phasesLive     = "CREATE TYPE mood AS ENUM ('sad'); CREATE TABLE users (id int PRIMARY KEY, nick text); INSERT INTO users VALUES (1, NULL);"
	phasesDeclared = "CREATE TYPE mood AS ENUM ('sad', 'ok'); CREATE TABLE users (id int PRIMARY KEY, nick text, m mood DEFAULT 'ok'); CREATE TABLE posts (id int PRIMARY KEY);"
)

// A run of a plan of several transactions that stops after its first
// committed is settled like any run of unknown outcome: the database is
// observed again, and what is left is planned afresh, to be approved on
// its own. The old plan never runs again, in part or whole. The plan here
// adds an enum label (its first transaction) and uses it (its second).
func TestCrashBetweenPhasesIsObservedNotRerun(t *testing.T) {
	t.Parallel()
	f := newFixture(t, phasesLive)
	res := f.resource(v1alpha1.ApplyOnApproval, phasesDeclared)
	planned := f.run(res, PlanOnly)
	if p := planned.Plan; p == nil || len(p.Spec.Phases) != 2 || p.Spec.Phases[0].Reason != "enum-labels" || p.Spec.LockCapacity == nil {
		t.Fatalf("published plan = %+v, want two phases, the first for the enum label", planned.Plan)
	}
	f.approve(planned.Plan)

	f.crashAt(failpoint.BetweenPhases, res, Apply)
	op := f.stored(res).ActiveOperation
	if op == nil || op.DispatchedAt == nil {
		t.Fatalf("after the crash the claim must carry the dispatch marker: %+v", op)
	}
	if !f.labelExists("ok") || f.tableExists("posts") {
		t.Fatalf("the crash left label ok %v, posts %v; want the first transaction alone committed", f.labelExists("ok"), f.tableExists("posts"))
	}
	before := f.runs()
	if r := before[op.ID]; r == nil || r.Finished {
		t.Fatalf("journal of %s after the crash: %v, want unfinished", op.ID, r)
	}

	got := f.run(res, Apply)
	st := got.Status
	if a := st.Applied; a == nil || a.OperationID != op.ID || a.Outcome != v1alpha1.OutcomeObserved {
		t.Fatalf("the run must be settled by observation: applied %+v", st.Applied)
	}
	f.requireNoRerun(before, op.ID, planned.Plan.UID)
	// What is left: the column and the table, in one transaction, no label.
	if st.Phase != v1alpha1.PhaseAwaitingApproval || got.Plan == nil || got.Plan.UID == planned.Plan.UID || len(got.Plan.Spec.Phases) != 1 {
		t.Fatalf("want a fresh plan of what is left, awaiting approval: phase %s (%s), plan %+v", st.Phase, st.Message, got.Plan)
	}
	for _, s := range got.Plan.Spec.Statements {
		if strings.Contains(s.SQL, "ADD VALUE") {
			t.Errorf("the fresh plan adds the committed label again: %s", s.SQL)
		}
	}
	f.approve(got.Plan)
	if done := f.run(res, Apply); done.Status.Phase != v1alpha1.PhaseInSync || !f.tableExists("posts") {
		t.Fatalf("the fresh plan, approved, converges: phase %s (%s)", done.Status.Phase, done.Status.Message)
	}
	f.requireNoRerun(before, op.ID, planned.Plan.UID)
}

// A later transaction that fails leaves the earlier ones committed: the
// run is partially applied, which the pass settles by observation, not as
// a failure to plan again from (nor to retry).
func TestPartiallyAppliedRunIsObserved(t *testing.T) {
	t.Parallel()
	f := newFixture(t, phasesLive)
	// nick is NULL in the row: SET NOT NULL fails, in the second transaction.
	declared := strings.Replace(phasesDeclared, "nick text", "nick text NOT NULL", 1)
	res := f.resource(v1alpha1.ApplyOnApproval, declared)
	// Offline: the SET NOT NULL in the plan's main transaction (online, it
	// would be proved by a check validated in a phase of its own).
	offline := false
	res.Schema.Spec.Policy.Online = &offline
	planned := f.run(res, PlanOnly)
	f.approve(planned.Plan)
	got := f.run(res, Apply)
	st := got.Status
	if a := st.Applied; a == nil || a.Plan.UID != planned.Plan.UID || a.Outcome != v1alpha1.OutcomeObserved ||
		!strings.Contains(a.Message, "outcome was unknown") {
		t.Fatalf("the partially applied run must be settled by observation: applied %+v", st.Applied)
	}
	if !f.labelExists("ok") || f.tableExists("posts") {
		t.Fatalf("label ok %v, posts %v; want the first transaction alone committed", f.labelExists("ok"), f.tableExists("posts"))
	}
	if r := f.runs()[st.Applied.OperationID]; r == nil || r.Outcome != "partially-applied" {
		t.Fatalf("journal: %v, want partially applied", r)
	}
	if st.Phase != v1alpha1.PhaseAwaitingApproval || got.Plan == nil || len(got.Plan.Spec.Phases) != 1 {
		t.Fatalf("want a fresh plan of what is left: phase %s (%s), plan %+v", st.Phase, st.Message, got.Plan)
	}
}

func (f *fixture) labelExists(label string) bool {
	f.t.Helper()
	var ok bool
	if err := f.r.Target.QueryRow(context.Background(),
		"SELECT EXISTS (SELECT 1 FROM pg_enum WHERE enumtypid = 'public.mood'::regtype AND enumlabel = $1)", label).Scan(&ok); err != nil {
		f.t.Fatal(err)
	}
	return ok
}
