package runner

import (
	"context"
	"testing"

	"github.com/ptah-run/ptah/internal/engine"
	"github.com/ptah-run/ptah/internal/store"
	api "github.com/ptah-run/ptah/pkg/api/v1alpha1"
)

// migration passes end to end: the runner's one pass, driven for a
// PtahMigration, against a real database and the pgstore.

// migRun runs the migration's pass in mode on a runner of the fixture's
// database.
func (f *migFixture) runner() *Runner {
	f.t.Helper()
	r, err := newRunner(f.ctx, f.url)
	if err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(func() { r.Target.Close(context.Background()) })
	return r
}

func (f *migFixture) run(r *Runner, mode Mode) Result {
	f.t.Helper()
	out, err := r.Run(f.ctx, f.res, mode)
	if err != nil {
		f.t.Fatalf("run: %v", err)
	}
	if out.Migration == nil {
		f.t.Fatalf("a PtahMigration's result carries no migration status: %+v", out)
	}
	return out
}

func (f *migFixture) approve(r *Runner, plan *engine.MigrationPlan) Approved {
	f.t.Helper()
	if plan == nil {
		f.t.Fatal("no plan to approve")
	}
	a, err := r.Approve(f.ctx, ApproveRequest{PlanUID: plan.UID, Fingerprint: plan.Spec.Fingerprint, Approver: "ana"})
	if err != nil {
		f.t.Fatal(err)
	}
	return a
}

func (f *migFixture) decision(r *Runner, uid string) api.DecisionStatus {
	f.t.Helper()
	return readDecision(f.t, r, uid)
}

// readDecision is the status of the approval or acknowledgment uid.
func readDecision(t testing.TB, r *Runner, uid string) api.DecisionStatus {
	t.Helper()
	o, err := r.Store.GetByUID(context.Background(), uid)
	if err != nil {
		t.Fatal(err)
	}
	var ds api.DecisionStatus
	if err := decodeStatus(o, &ds); err != nil {
		t.Fatal(err)
	}
	return ds
}

func TestMigrationPlanApproveApplyEndToEnd(t *testing.T) {
	t.Parallel()
	f := newMigFixture(t, threeFiles)
	r := f.runner()
	planned := f.run(r, PlanOnly)
	st := planned.Migration.Status
	if st.Phase != api.PhaseAwaitingApproval || planned.Migration.Plan == nil || len(planned.Migration.Plan.Spec.Versions) != 3 {
		t.Fatalf("plan: phase %s (%s), plan %+v", st.Phase, st.Message, planned.Migration.Plan)
	}
	a := f.approve(r, planned.Migration.Plan)
	done := f.run(r, Apply)
	st = done.Migration.Status
	if st.Phase != api.PhaseInSync || st.LastRun == nil || st.LastRun.Outcome != api.OutcomeSucceeded || len(done.Dispatched) != 1 {
		t.Fatalf("apply: phase %s (%s), last run %+v, dispatched %v", st.Phase, st.Message, st.LastRun, done.Dispatched)
	}
	if got := historyVersions(f.history()); len(got) != 3 || !f.exists("public.users_email") {
		t.Fatalf("history %v", got)
	}
	ds := f.decision(r, a.UID)
	if ds.Consumed == nil || ds.Consumed.OperationID != st.LastRun.OperationID {
		t.Fatalf("the approval must be consumed by operation %s: %+v", st.LastRun.OperationID, ds)
	}
	again := f.run(r, Apply)
	if len(again.Dispatched) != 0 || again.Migration.Status.Phase != api.PhaseInSync {
		t.Fatalf("nothing is pending: %+v", again.Migration.Status)
	}
	plans, _ := r.Store.List(f.ctx, store.ListOptions{Kind: api.KindPtahMigrationPlan})
	if len(plans) > 1 {
		t.Fatalf("spent plans are pruned but the last run's: %d stored", len(plans))
	}
}
