package runner

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ptah-run/ptah/internal/engine"
	"github.com/ptah-run/ptah/internal/pgtest"
	"github.com/ptah-run/ptah/internal/postgres"
	"github.com/ptah-run/ptah/internal/postgres/catalog"
	api "github.com/ptah-run/ptah/pkg/api/v1alpha1"
)

// The seed's guarantee tests that need a crash, the realm census and a
// tampered plan, end to end: a real database, the pgstore, a runner with
// real time, and (for crashes) a child process that dies at a failpoint.

// Guarantee 2, "Inputs that moved do not execute": "Every claim records the
// fingerprint of the inputs it was decided from, and that fingerprint is
// compared again before dispatch"; for PtahSchema it is "the claim's input
// fingerprint, re-derived each pass", and the failure behavior is "the plan
// is discarded and the database observed again".
//
// The claim is left durable by a crash right after it; the database then
// moves in a way that does not stop the claimed plan from running (an index
// appears), so an implementation that skipped the comparison would create
// posts under the claimed operation.
func TestStalePlanEvidenceForcesFreshObservation(t *testing.T) {
	t.Parallel()
	f := newFixture(t, v1)
	res := f.resource(api.ApplyOnApproval, v2)
	planned := f.run(res, PlanOnly)
	approval := f.approve(planned.Plan)

	f.crashAt(FailAfterClaim, res, Apply)
	op := f.stored(res).ActiveOperation
	if op == nil || op.DispatchedAt != nil || op.Plan.UID != planned.Plan.UID || op.Approval == nil || op.Approval.UID != approval.UID {
		t.Fatalf("after the crash the claim must be durable, undispatched, and name the approved plan: %+v", op)
	}

	pgtest.Exec(t, f.url, "CREATE INDEX users_id_again ON users (id)")
	got := f.run(res, Apply)

	if got.Status.ActiveOperation != nil || f.tableExists("posts") || f.runs()[op.ID] != nil || len(f.runs()) != 0 {
		t.Fatalf("the stale claim %s must not execute: claim %+v, posts exists %v, journal %v",
			op.ID, got.Status.ActiveOperation, f.tableExists("posts"), f.runs())
	}
	// The fresh observation produced a fresh plan, which sees the index;
	// the approval of the discarded plan authorizes nothing.
	if got.Plan == nil || got.Plan.UID == planned.Plan.UID || !hasStatement(got.Plan, "users_id_again") {
		t.Fatalf("want a fresh plan (not %s) that drops the new index: %+v", planned.Plan.UID, got.Plan)
	}
	if got.Status.Phase != api.PhaseAwaitingApproval || !f.approvalStale(approval.UID) {
		t.Fatalf("the fresh plan must await its own approval, the old one stale: phase %s (%s), old approval stale %v",
			got.Status.Phase, got.Status.Message, f.approvalStale(approval.UID))
	}

	// And the fresh plan, once approved, is what runs.
	f.approve(got.Plan)
	done := f.run(res, Apply)
	runs := f.runs()
	if done.Status.Phase != api.PhaseInSync || len(runs) != 1 || runs[done.Status.Applied.OperationID] == nil ||
		runs[done.Status.Applied.OperationID].PlanUID != got.Plan.UID || done.Status.Applied.OperationID == op.ID {
		t.Fatalf("after approving the fresh plan: phase %s (%s), applied %+v, journal %v",
			done.Status.Phase, done.Status.Message, done.Status.Applied, runs)
	}
	if !f.tableExists("posts") || f.indexExists("users_id_again") {
		t.Fatal("the fresh plan creates posts and drops the index")
	}
}

// Guarantee 3, "A dispatched Apply is never re-run": "Once an Apply Job may
// exist, the operator does not create another one under a fresh name. What
// that Job did becomes a question for the database." For PtahSchema the
// durable evidence is "status.pendingObservation, which owes a fresh
// reading", cleared by "the observation it owes, completing", and "the
// resource re-observes before it plans again".
//
// The crash comes after the dispatch marker is durable: before the writer
// ran anything, half way through the plan's transaction, and after the plan
// committed. In every case the dispatched operation never runs again, no
// other operation runs the plan it dispatched, and the outcome is the
// observed database's.
func TestMissingDispatchedApplyJobForcesObservationWithoutRecreation(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		point     string
		committed bool // the child's plan committed before it died
		journaled bool // the child's run row exists
	}{
		{point: FailAfterDispatch, journaled: true},
		{point: "mid-plan", journaled: true},
		{point: FailAfterExecution, journaled: true, committed: true},
	} {
		t.Run(tc.point, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, v1)
			res := f.resource(api.ApplyOnApproval, v2)
			planned := f.run(res, PlanOnly)
			f.approve(planned.Plan)

			f.crashAt(tc.point, res, Apply)
			op := f.stored(res).ActiveOperation
			if op == nil || op.DispatchedAt == nil || op.Plan.UID != planned.Plan.UID {
				t.Fatalf("after the crash the claim must carry the dispatch marker: %+v", op)
			}
			if child := f.runs()[op.ID]; (child != nil) != tc.journaled || f.tableExists("posts") != tc.committed {
				t.Fatalf("the child left journal %+v and posts exists %v; the test expects journaled %v, committed %v",
					child, f.tableExists("posts"), tc.journaled, tc.committed)
			}
			before := f.runs()

			// A pass that cannot observe (the declared SQL does not load)
			// turns the claim into the durable debt of an observation, and
			// plans nothing.
			broken := f.resource(api.ApplyOnApproval, "CREATE TABLE posts (")
			if _, err := f.r.Run(context.Background(), broken, Apply); err == nil {
				t.Fatal("a pass whose declared SQL does not load must fail")
			}
			if st := f.stored(res); st.PendingObservation == nil || st.PendingObservation.OperationID != op.ID ||
				st.PendingObservation.Plan.UID != planned.Plan.UID || st.ActiveOperation != nil || st.Applied != nil {
				t.Fatalf("the status must owe an observation for operation %s, and nothing else: %+v", op.ID, st)
			}
			f.requireNoRerun(before, op.ID, planned.Plan.UID)

			got := f.run(res, Apply)
			st := got.Status
			if a := st.Applied; a == nil || a.OperationID != op.ID || a.Plan.UID != planned.Plan.UID || a.Outcome != api.OutcomeObserved {
				t.Fatalf("the dispatched operation %s must be settled by observation: applied %+v", op.ID, st.Applied)
			}
			if st.PendingObservation != nil || st.ActiveOperation != nil || st.OwedRelease != nil {
				t.Fatalf("after the observation nothing is owed or claimed: %+v", st)
			}
			if l := f.lease(op.CoordinationDigest); l != nil {
				t.Fatalf("the dispatched operation's lease must be released once its writer is gone: %+v", l)
			}
			f.requireNoRerun(before, op.ID, planned.Plan.UID)
			if tc.committed {
				if st.Phase != api.PhaseInSync || st.Plan != nil {
					t.Fatalf("the plan committed, so the fresh observation is in sync: phase %s (%s)", st.Phase, st.Message)
				}
				return
			}
			// Nothing of the dispatched plan is in the database: the fresh
			// observation plans it again, as a new plan that needs its own
			// approval.
			if st.Phase != api.PhaseAwaitingApproval || got.Plan == nil || got.Plan.UID == planned.Plan.UID || f.tableExists("posts") {
				t.Fatalf("want a fresh plan awaiting approval, posts absent: phase %s (%s), plan %+v, posts exists %v",
					st.Phase, st.Message, got.Plan, f.tableExists("posts"))
			}
			f.approve(got.Plan)
			done := f.run(res, Apply)
			if done.Status.Phase != api.PhaseInSync || !f.tableExists("posts") || done.Status.Applied.Plan.UID != got.Plan.UID {
				t.Fatalf("the fresh plan, approved, converges: phase %s (%s), applied %+v",
					done.Status.Phase, done.Status.Message, done.Status.Applied)
			}
			f.requireNoRerun(before, op.ID, planned.Plan.UID)
		})
	}
}

// requireNoRerun checks the journal against before, what it held right
// after the crash: the dispatched operation's row is unchanged (or still
// absent), and no run of its plan exists under any other operation ID.
func (f *fixture) requireNoRerun(before map[string]*journalRow, opID, planUID string) {
	f.t.Helper()
	now := f.runs()
	if fmt.Sprint(now[opID]) != fmt.Sprint(before[opID]) {
		f.t.Fatalf("the dispatched operation %s ran again: journal before %v, now %v", opID, before[opID], now[opID])
	}
	for id, r := range now {
		if id != opID && r.PlanUID == planUID {
			f.t.Fatalf("plan %s, dispatched as operation %s, ran again as operation %s", planUID, opID, id)
		}
	}
}

// Guarantee 4, "The database is held while a run may still write": for
// PtahSchema, "acquireApplyLock, with the release owed durably once it is
// owed at all"; "the persisted release completes on a later pass". DESIGN.md
// section 4: "finish a lease release recorded as owed, before anything
// else".
//
// The crash comes after the run was accounted (the write that owes the
// release) and before the release.
func TestPersistedTargetLockReleaseRecoversAfterManagerCrash(t *testing.T) {
	t.Parallel()
	crashed := func(t *testing.T) (*fixture, Resource, *api.LeaseRelease) {
		f := newFixture(t, v1)
		res := f.resource(api.ApplyAlways, v2)
		f.crashAt(FailBeforeRelease, res, Apply)
		st := f.stored(res)
		owed := st.OwedRelease
		if owed == nil || st.Applied == nil || owed.OperationID != st.Applied.OperationID || st.Applied.Outcome != api.OutcomeSucceeded {
			t.Fatalf("after the crash the status must owe the release of the accounted run: %+v", st)
		}
		if l := f.lease(owed.CoordinationDigest); l == nil || l.Holder != owed.OperationID {
			t.Fatalf("after the crash the lease row must still name operation %s: %+v", owed.OperationID, l)
		}
		return f, res, owed
	}
	released := func(f *fixture, st api.PtahSchemaStatus, owed *api.LeaseRelease) {
		f.t.Helper()
		if st.OwedRelease != nil {
			f.t.Fatalf("the owed release is still recorded: %+v", st.OwedRelease)
		}
		if l := f.lease(owed.CoordinationDigest); l != nil {
			f.t.Fatalf("the owed release must have deleted the lease row: %+v", l)
		}
	}

	t.Run("then proceeds", func(t *testing.T) {
		t.Parallel()
		f, res, owed := crashed(t)
		got := f.run(res, Apply)
		released(f, got.Status, owed)
		runs := f.runs()
		if got.Status.Phase != api.PhaseInSync || got.Status.Applied.OperationID != owed.OperationID || len(runs) != 1 {
			t.Fatalf("after the release the pass verifies and is in sync, with no new run: phase %s (%s), applied %+v, journal %v",
				got.Status.Phase, got.Status.Message, got.Status.Applied, runs)
		}
	})
	// Before anything else: a pass that the census then blocks has still
	// completed the release.
	t.Run("before the census", func(t *testing.T) {
		t.Parallel()
		f, res, owed := crashed(t)
		rival := f.resource(api.ApplyAlways, v2)
		rival.Schema.Name = "rival"
		f.register(rival)
		got := f.run(res, Apply)
		if got.Status.Phase != api.PhaseBlocked || got.Status.Reason != api.ReasonRealmConflict {
			t.Fatalf("want Blocked/RealmConflict: %s/%s", got.Status.Phase, got.Status.Reason)
		}
		released(f, got.Status, owed)
	})
}

// Guarantee 4 again, with a live writer: "A missing Job and an expired
// Lease are each insufficient proof that the old process stopped." ptah is
// killed while its writer session waits on a lock; the session outlives
// the process and would run the plan's statement the moment the lock is
// granted. Until that session is gone the resource is Blocked, the lease
// stays with the dead process's operation, and no other writer gets in;
// once it is gone, the run is settled by observation and never re-run.
func TestUncertainApplyKeepsTheDatabaseWhileItsWriterMayRun(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newFixture(t, v1)
	res := f.resource(api.ApplyAlways, "CREATE TABLE users (id int PRIMARY KEY, name text);")
	res.Schema.Spec.Policy.LockTimeout = "5m"        // the orphaned writer keeps waiting,
	res.Schema.Spec.Policy.LockAttemptTimeout = "5m" // in one attempt

	locker, writerPID := f.killWhileWriterWaits(res)
	op := f.stored(res).ActiveOperation
	if op == nil || op.DispatchedAt == nil {
		t.Fatalf("the killed child's claim must be dispatched: %+v", op)
	}
	for range 2 { // and again: nothing moves while the writer may run
		got := f.run(res, Apply)
		st := got.Status
		if st.Phase != api.PhaseBlocked || st.Reason != api.ReasonRunMayStillWrite || len(got.Dispatched) != 0 ||
			st.ActiveOperation == nil || st.ActiveOperation.ID != op.ID {
			t.Fatalf("while the writer (pid %d) may run: %s/%s (%s), dispatched %v; want Blocked RunMayStillWrite holding %s",
				writerPID, st.Phase, st.Reason, st.Message, got.Dispatched, op.ID)
		}
		if l := f.lease(op.CoordinationDigest); l == nil || l.Holder != op.ID {
			t.Fatalf("the lease must still name operation %s: %+v", op.ID, l)
		}
	}
	_, err := postgres.OpenWriter(ctx, f.url, op.CoordinationDigest, "op-intruder", "intruder", time.Now().Add(time.Hour))
	if !errors.Is(err, postgres.ErrLeaseHeld) {
		t.Fatalf("a second writer while the first may run: %v; want ErrLeaseHeld", err)
	}

	// The lock is granted: the orphan runs its statement, cannot answer its
	// dead client, and its transaction rolls back with its session.
	if err := locker.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	f.waitForSessionEnd(writerPID)
	before := f.runs()
	got := f.run(res, Apply)
	st := got.Status
	if st.Phase != api.PhaseInSync || len(got.Dispatched) != 1 || got.Dispatched[0] == op.ID {
		t.Fatalf("once the writer is gone: %s/%s (%s), dispatched %v; want a new operation to converge", st.Phase, st.Reason, st.Message, got.Dispatched)
	}
	if r := f.runs()[op.ID]; r == nil || fmt.Sprint(r) != fmt.Sprint(before[op.ID]) || r.Outcome == postgres.RunSucceeded {
		t.Fatalf("the killed run's journal must be left as it was, unfinished: %+v (before %+v)", r, before[op.ID])
	}
}

// Guarantee 5, "One database has one writer": "More than one resource
// addressing the same database is refused unless every claimant declares
// the sharing." Enforced in the census, "before any Job is dispatched",
// bound to "the coordination digest of the engine and coordination key",
// failing "Blocked with reason RealmConflict". Two resources addressing one
// database under different coordination keys are rivals as well: "more
// than one resource addressing the same database is refused".
//
// Each resource manages its own schema, so that when the sharing is
// declared both may really converge; policy Always, so that anything but
// the census would let them run.
func TestSchemaBlocksOnAContestedRealmWithoutDispatchingAJob(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name         string
		keyA, keyB   string
		shareA       bool
		shareB       bool
		crashedClaim bool // a's claim was recorded before b was registered
		contested    bool
	}{
		{name: "same database", contested: true},
		{name: "same coordination key", keyA: "orders", keyB: "orders", contested: true},
		{name: "only one shares", shareA: true, contested: true},
		{name: "a claim recorded before the rival came", crashedClaim: true, contested: true},
		{name: "every claimant shares", shareA: true, shareB: true},
		// A coordination key names a realm; it does not make one database
		// two: resources addressing the same database under different keys
		// are rivals too, unless every one of them declares the sharing.
		{name: "different coordination keys, one database", keyA: "orders", keyB: "billing", contested: true},
		{name: "different coordination keys, every claimant shares", keyA: "orders", keyB: "billing", shareA: true, shareB: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, "")
			a := f.schemaResource("a", tc.keyA, tc.shareA)
			b := f.schemaResource("b", tc.keyB, tc.shareB)
			if tc.crashedClaim {
				f.crashAt(FailAfterClaim, a, Apply)
				if op := f.stored(a).ActiveOperation; op == nil || op.DispatchedAt != nil {
					t.Fatalf("a's claim must be durable and undispatched: %+v", op)
				}
			}
			f.register(a)
			f.register(b)
			got := map[string]Result{"a": f.run(a, Apply), "b": f.run(b, Apply)}

			if !tc.contested {
				for name, r := range got {
					if r.Status.Phase != api.PhaseInSync || !f.relationExists(name+".t") {
						t.Fatalf("the realm is not contested, so %s converges: phase %s (%s)", name, r.Status.Phase, r.Status.Message)
					}
				}
				if runs := f.runs(); len(runs) != 2 {
					t.Fatalf("want one run per resource: %v", runs)
				}
				return
			}
			for name, r := range got {
				rival := map[string]string{"a": "b", "b": "a"}[name]
				st := r.Status
				if st.Phase != api.PhaseBlocked || st.Reason != api.ReasonRealmConflict || !strings.Contains(st.Message, "default/"+rival) {
					t.Fatalf("%s: want Blocked/RealmConflict naming %s: %s/%s (%s)", name, rival, st.Phase, st.Reason, st.Message)
				}
				if st.ActiveOperation != nil || f.relationExists(name+".t") || f.schemaExists(name) {
					t.Fatalf("%s: nothing may be claimed or executed: claim %+v", name, st.ActiveOperation)
				}
				if l := f.lease(CoordinationDigest(map[string]Resource{"a": a, "b": b}[name].Schema.Spec, f.identity())); l != nil {
					t.Fatalf("%s: no lease may be taken: %+v", name, l)
				}
			}
			if runs := f.runs(); len(runs) != 0 {
				t.Fatalf("nothing may be dispatched: journal %v", runs)
			}
		})
	}
}

// A plan-only pass after a crash right after the claim does not run the
// claim: ptah plan never re-derives or dispatches a claim an interrupted
// apply left; it reports it (phase Applying) and leaves it, as it was, to
// ptah apply. Apply then continues it under its own operation ID, or, when
// the inputs moved in the meantime, discards it and observes again.
func TestPlanOnlyNeverRunsAClaimAnInterruptedApplyLeft(t *testing.T) {
	t.Parallel()
	for _, moved := range []bool{false, true} {
		t.Run(map[bool]string{false: "inputs unchanged", true: "inputs moved"}[moved], func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, v1)
			res := f.resource(api.ApplyAlways, v2)
			f.crashAt(FailAfterClaim, res, Apply)
			op := f.stored(res).ActiveOperation
			if op == nil || op.DispatchedAt != nil {
				t.Fatalf("after the crash the claim must be durable and undispatched: %+v", op)
			}
			if moved {
				pgtest.Exec(t, f.url, "CREATE INDEX users_id_again ON users (id)")
			}

			planned := f.run(res, PlanOnly)
			if st := planned.Status; st.Phase != api.PhaseApplying || !reflect.DeepEqual(st.ActiveOperation, op) || !strings.Contains(st.Message, op.ID) {
				t.Fatalf("plan-only must stop at the claim and leave it as it was: phase %s (%s), claim %+v, want %+v",
					st.Phase, st.Message, st.ActiveOperation, op)
			}
			if f.tableExists("posts") || len(f.runs()) != 0 || f.lease(op.CoordinationDigest) != nil {
				t.Fatalf("plan-only executed the claim: posts exists %v, journal %v", f.tableExists("posts"), f.runs())
			}

			applied := f.run(res, Apply)
			st, runs := applied.Status, f.runs()
			if st.Phase != api.PhaseInSync || st.Applied == nil || len(runs) != 1 || runs[st.Applied.OperationID] == nil {
				t.Fatalf("apply converges with one run: phase %s (%s), applied %+v, journal %v", st.Phase, st.Message, st.Applied, runs)
			}
			if continued := st.Applied.OperationID == op.ID; continued == moved {
				t.Fatalf("apply must continue the claim %s only if its inputs did not move (moved %v); it ran operation %s",
					op.ID, moved, st.Applied.OperationID)
			}
		})
	}
}

// A stored plan whose statements no longer hash to its fingerprint is never
// approved and never executed, whether it was tampered with before its
// approval, after it, or after an apply claimed it.
func TestTamperedPlanIsRefused(t *testing.T) {
	t.Parallel()
	const evil = "CREATE TABLE public.evil (id int)"
	refused := func(f *fixture, got Result, plan *engine.Plan) {
		f.t.Helper()
		if got.Status.Phase != api.PhaseBlocked || got.Status.Reason != api.ReasonPlanTampered || !strings.Contains(got.Status.Message, plan.UID) {
			f.t.Fatalf("want Blocked/PlanTampered naming %s: %s/%s (%s)", plan.UID, got.Status.Phase, got.Status.Reason, got.Status.Message)
		}
		if got.Status.ActiveOperation != nil || f.tableExists("evil") || f.tableExists("posts") || len(f.runs()) != 0 {
			f.t.Fatalf("nothing may run: claim %+v, evil exists %v, posts exists %v, journal %v",
				got.Status.ActiveOperation, f.tableExists("evil"), f.tableExists("posts"), f.runs())
		}
	}

	t.Run("approved, then tampered", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, v1)
		res := f.resource(api.ApplyOnApproval, v2)
		planned := f.run(res, PlanOnly)
		f.approve(planned.Plan)
		f.tamper(planned.Plan, evil)
		if _, err := f.r.Approve(context.Background(), ApproveRequest{PlanUID: planned.Plan.UID, Approver: "ana"}); !errors.Is(err, engine.ErrPlanTampered) {
			t.Fatalf("approving a tampered plan: %v; want ErrPlanTampered", err)
		}
		// ptah plan reports the tampering rather than an authorized plan.
		refused(f, f.run(res, PlanOnly), planned.Plan)
		refused(f, f.run(res, Apply), planned.Plan)
	})
	t.Run("claimed, then tampered", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, v1)
		res := f.resource(api.ApplyAlways, v2)
		f.crashAt(FailAfterClaim, res, Apply)
		op := f.stored(res).ActiveOperation
		if op == nil || op.DispatchedAt != nil {
			t.Fatalf("after the crash the claim must be durable and undispatched: %+v", op)
		}
		plan := f.planByUID(op.Plan.UID)
		f.tamper(plan, evil)
		refused(f, f.run(res, Apply), plan)
	})
}

// --- helpers ---

func (f *fixture) approve(plan *engine.Plan) Approved {
	f.t.Helper()
	if plan == nil {
		f.t.Fatal("no plan to approve")
	}
	a, err := f.r.Approve(context.Background(), ApproveRequest{PlanUID: plan.UID, Fingerprint: plan.Spec.Fingerprint, Approver: "ana"})
	if err != nil {
		f.t.Fatal(err)
	}
	return a
}

func (f *fixture) approvalStale(uid string) bool {
	f.t.Helper()
	o, err := f.r.Store.GetByUID(context.Background(), uid)
	if err != nil {
		f.t.Fatal(err)
	}
	a, err := decodeApproval(o)
	if err != nil {
		f.t.Fatal(err)
	}
	return a.Status.Stale
}

func (f *fixture) register(res Resource) {
	f.t.Helper()
	if _, err := f.r.Register(context.Background(), res, f.identity()); err != nil {
		f.t.Fatal(err)
	}
}

func (f *fixture) identity() string {
	f.t.Helper()
	id, err := f.r.Identity(context.Background())
	if err != nil {
		f.t.Fatal(err)
	}
	return id
}

// stored is the status of res as the store holds it.
func (f *fixture) stored(res Resource) api.PtahSchemaStatus {
	f.t.Helper()
	o, err := f.r.Store.Get(context.Background(), api.KindPtahSchema, res.namespace(), res.Schema.Name)
	if err != nil {
		f.t.Fatal(err)
	}
	var st api.PtahSchemaStatus
	if len(o.Status) > 0 {
		if err := json.Unmarshal(o.Status, &st); err != nil {
			f.t.Fatal(err)
		}
	}
	return st
}

func (f *fixture) planByUID(uid string) *engine.Plan {
	f.t.Helper()
	o, err := f.r.Store.GetByUID(context.Background(), uid)
	if err != nil {
		f.t.Fatal(err)
	}
	p, err := decodePlan(o)
	if err != nil {
		f.t.Fatal(err)
	}
	return &p
}

// tamper rewrites the first statement of a stored plan behind the store's
// back, leaving its fingerprint as it was.
func (f *fixture) tamper(plan *engine.Plan, sql string) {
	f.t.Helper()
	tag, err := f.r.Target.Exec(context.Background(),
		`UPDATE ptah.objects SET spec = jsonb_set(spec, '{statements,0,sql}', to_jsonb($2::text)) WHERE uid = $1`, plan.UID, sql)
	if err != nil || tag.RowsAffected() != 1 {
		f.t.Fatalf("tampering with plan %s: %v (%d rows)", plan.UID, err, tag.RowsAffected())
	}
	if got := f.planByUID(plan.UID); got.Spec.Statements[0].SQL != sql || got.Spec.Fingerprint != plan.Spec.Fingerprint {
		f.t.Fatalf("the tampering did not take: %+v", got.Spec)
	}
}

func (f *fixture) lease(digest string) *postgres.Lease {
	f.t.Helper()
	l, err := postgres.LeaseHolder(context.Background(), f.r.Target, digest)
	if err != nil {
		f.t.Fatal(err)
	}
	return l
}

// journalRow is one row of ptah.runs, as far as these tests care.
type journalRow struct {
	PlanUID  string
	Finished bool
	Outcome  string
}

func (r *journalRow) String() string {
	if r == nil {
		return "<none>"
	}
	return fmt.Sprintf("{plan %s finished %v outcome %q}", r.PlanUID, r.Finished, r.Outcome)
}

// runs is the run journal by operation ID; empty when no writer ever
// created it.
func (f *fixture) runs() map[string]*journalRow {
	f.t.Helper()
	ctx := context.Background()
	out := map[string]*journalRow{}
	var exists bool
	if err := f.r.Target.QueryRow(ctx, "SELECT to_regclass('ptah.runs') IS NOT NULL").Scan(&exists); err != nil {
		f.t.Fatal(err)
	}
	if !exists {
		return out
	}
	rows, err := f.r.Target.Query(ctx, "SELECT operation_id, coalesce(plan_uid, ''), finished_at IS NOT NULL, coalesce(outcome, '') FROM ptah.runs")
	if err != nil {
		f.t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var id string
		var r journalRow
		if err := rows.Scan(&id, &r.PlanUID, &r.Finished, &r.Outcome); err != nil {
			f.t.Fatal(err)
		}
		out[id] = &r
	}
	if err := rows.Err(); err != nil {
		f.t.Fatal(err)
	}
	return out
}

func (f *fixture) indexExists(name string) bool {
	return f.relationExists("public." + name)
}

func (f *fixture) relationExists(qualified string) bool {
	f.t.Helper()
	var ok bool
	if err := f.r.Target.QueryRow(context.Background(), "SELECT to_regclass($1) IS NOT NULL", qualified).Scan(&ok); err != nil {
		f.t.Fatal(err)
	}
	return ok
}

func (f *fixture) schemaExists(name string) bool {
	f.t.Helper()
	var ok bool
	if err := f.r.Target.QueryRow(context.Background(), "SELECT to_regnamespace($1) IS NOT NULL", name).Scan(&ok); err != nil {
		f.t.Fatal(err)
	}
	return ok
}

// schemaResource is a PtahSchema named name managing the schema of the same
// name, which declares one table t; policy Always.
func (f *fixture) schemaResource(name, coordinationKey string, shared bool) Resource {
	s := &api.PtahSchema{Spec: api.PtahSchemaSpec{Schemas: []string{name},
		Target: api.Target{CoordinationKey: coordinationKey, SharedRealm: shared},
		Policy: api.Policy{Apply: api.ApplyAlways, LockTimeout: "5s"}}}
	s.Name = name
	sql := fmt.Sprintf("CREATE SCHEMA %[1]s; CREATE TABLE %[1]s.t (id int PRIMARY KEY);", name)
	return Resource{Schema: s, TargetURL: f.url, Files: []catalog.SourceFile{{Name: name + ".sql", SQL: sql}}}
}

func hasStatement(p *engine.Plan, fragment string) bool {
	return slices.ContainsFunc(p.Spec.Statements, func(s api.PlanStatement) bool { return strings.Contains(s.SQL, fragment) })
}
