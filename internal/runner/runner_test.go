package runner

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/ptah-run/ptah/internal/engine"
	"github.com/ptah-run/ptah/internal/pgtest"
	"github.com/ptah-run/ptah/internal/postgres"
	"github.com/ptah-run/ptah/internal/postgres/catalog"
	"github.com/ptah-run/ptah/internal/store"
	"github.com/ptah-run/ptah/internal/store/pgstore"
	api "github.com/ptah-run/ptah/pkg/api/v1alpha1"
)

func TestMain(m *testing.M) {
	if raw := os.Getenv(helperEnv); raw != "" {
		runCrashChild(raw)
	}
	pgtest.Main(m)
}

// fixture is a target database with ptah's store in it, and a runner.
type fixture struct {
	t   *testing.T
	url string
	r   *Runner
}

func newFixture(t *testing.T, old string) *fixture {
	t.Helper()
	url := pgtest.NewDB(t)
	if old != "" {
		pgtest.Exec(t, url, old)
	}
	r, err := newRunner(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Target.Close(context.Background()) })
	return &fixture{t: t, url: url, r: r}
}

// newRunner is the runner every test uses, in the test process and in a
// crash test's child alike: the two must agree on everything a plan binds
// (the execution binding's version above all), or a claim recorded by one
// would look stale to the other.
func newRunner(ctx context.Context, url string) (*Runner, error) {
	conn, err := postgres.Connect(ctx, url)
	if err != nil {
		return nil, err
	}
	st, err := pgstore.New(ctx, conn)
	if err != nil {
		conn.Close(context.Background())
		return nil, err
	}
	return &Runner{
		Store: st, Target: conn, Version: "test", RunTimeout: time.Hour,
		NewID: randomID,
	}, nil
}

func randomID() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func (f *fixture) resource(policy api.ApplyPolicy, declared string) Resource {
	s := &api.PtahSchema{Spec: api.PtahSchemaSpec{Schemas: []string{"public"},
		Policy: api.Policy{Apply: policy, LockTimeout: "5s"}}}
	s.Name = "app"
	return Resource{Schema: s, TargetURL: f.url, Files: []catalog.SourceFile{{Name: "schema.sql", SQL: declared}}}
}

func (f *fixture) run(res Resource, mode Mode) Result {
	f.t.Helper()
	out, err := f.r.Run(context.Background(), res, mode)
	if err != nil {
		f.t.Fatalf("run: %v", err)
	}
	return out
}

func (f *fixture) tableExists(name string) bool {
	f.t.Helper()
	var ok bool
	if err := f.r.Target.QueryRow(context.Background(), "SELECT to_regclass($1) IS NOT NULL", "public."+name).Scan(&ok); err != nil {
		f.t.Fatal(err)
	}
	return ok
}

const (
	v1 = "CREATE TABLE users (id int PRIMARY KEY);"
	v2 = "CREATE TABLE users (id int PRIMARY KEY); CREATE TABLE posts (id int PRIMARY KEY);"
)

func TestPlanApproveApplyReachesInSync(t *testing.T) {
	t.Parallel()
	f := newFixture(t, v1)
	res := f.resource(api.ApplyOnApproval, v2)

	planned := f.run(res, PlanOnly)
	if planned.Status.Phase != api.PhaseAwaitingApproval || planned.Plan == nil {
		t.Fatalf("after plan: phase %s plan %v; want AwaitingApproval with a plan", planned.Status.Phase, planned.Plan)
	}
	if got := f.run(res, Apply); got.Status.Phase != api.PhaseAwaitingApproval || f.tableExists("posts") {
		t.Fatalf("apply without approval: phase %s; nothing may run", got.Status.Phase)
	}
	if _, err := f.r.Approve(context.Background(), ApproveRequest{PlanUID: planned.Plan.UID, Fingerprint: "sha256:wrong", Approver: "ana"}); !errors.Is(err, ErrFingerprintMismatch) {
		t.Fatalf("approve with a wrong fingerprint: %v", err)
	}
	if _, err := f.r.Approve(context.Background(), ApproveRequest{PlanUID: planned.Plan.UID, Fingerprint: planned.Plan.Spec.Fingerprint, Approver: "ana"}); err != nil {
		t.Fatal(err)
	}
	applied := f.run(res, Apply)
	if applied.Status.Phase != api.PhaseInSync || !f.tableExists("posts") {
		t.Fatalf("after approve and apply: phase %s (%s), posts exists %v", applied.Status.Phase, applied.Status.Message, f.tableExists("posts"))
	}
	if a := applied.Status.Applied; a == nil || a.Outcome != api.OutcomeSucceeded || a.Plan.UID != planned.Plan.UID {
		t.Fatalf("applied record: %+v", applied.Status.Applied)
	}
	if applied.Status.OwedRelease != nil || applied.Status.ActiveOperation != nil {
		t.Fatalf("after a clean run nothing is owed or claimed: %+v", applied.Status)
	}
	lease, err := postgres.LeaseHolder(context.Background(), f.r.Target, planned.Plan.Spec.CoordinationDigest)
	if err != nil || lease != nil {
		t.Fatalf("lease after the run: %v, %v", lease, err)
	}
	run, err := postgres.ReadRun(context.Background(), f.r.Target, applied.Status.Applied.OperationID)
	if err != nil || !run.Committed() {
		t.Fatalf("journal of the run: %+v, %v", run, err)
	}
	if again := f.run(res, Apply); again.Status.Phase != api.PhaseInSync || again.Status.Applied.OperationID != applied.Status.Applied.OperationID {
		t.Fatalf("a second apply must find nothing to do: %+v", again.Status)
	}
}

// Guarantee 1, "Only work a decision authorized executes": "An approval
// names a UID, not just a name. A plan republished under the same
// deterministic name is a different object, and an approval for the
// previous one authorizes nothing." And "a plan is executed only while the
// decision that authorized it still names the exact plan, and only once".
//
// Both replacements below publish the very same content under the same
// name: the same fingerprint, the same bindings. Only the UID tells the
// plans apart, so only the UID comparison can refuse the old approval.
func TestRecordedApprovalStaleIgnoresSameNameReplacementUID(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newFixture(t, v1)
	res := f.resource(api.ApplyOnApproval, v2)
	first := f.run(res, PlanOnly)
	approval := f.approve(first.Plan)

	// The plan object is removed (as after a tampered plan) and the next
	// pass publishes it again.
	if err := f.r.Store.Delete(ctx, api.KindPtahSchemaPlan, "default", first.Plan.Name, first.Plan.UID); err != nil {
		t.Fatal(err)
	}
	back := f.run(res, PlanOnly)
	sameButUID(t, first.Plan, back.Plan)
	if got := f.run(res, Apply); got.Status.Phase != api.PhaseAwaitingApproval || f.tableExists("posts") || len(got.Dispatched) != 0 {
		t.Fatalf("apply after the replacement: phase %s (%s), posts exists %v; the approval of %s must authorize nothing",
			got.Status.Phase, got.Status.Message, f.tableExists("posts"), first.Plan.UID)
	}
	if !f.approvalStale(approval.UID) {
		t.Fatal("the approval of the replaced plan must be marked stale")
	}
	if _, err := f.r.Approve(ctx, ApproveRequest{PlanUID: first.Plan.UID, Approver: "ana"}); !errors.Is(err, ErrUnknownPlan) {
		t.Fatalf("approving the replaced plan's UID: %v; want ErrUnknownPlan", err)
	}

	// An approval authorizes one execution: the plan runs, the database is
	// put back by hand, and the same plan is derived again under the same
	// name. Its approval was spent.
	spent := f.approve(back.Plan)
	if got := f.run(res, Apply); got.Status.Phase != api.PhaseInSync || len(got.Dispatched) != 1 {
		t.Fatalf("the approved plan runs: phase %s (%s), dispatched %v", got.Status.Phase, got.Status.Message, got.Dispatched)
	}
	pgtest.Exec(t, f.url, "DROP TABLE posts")
	again := f.run(res, PlanOnly)
	sameButUID(t, back.Plan, again.Plan)
	if got := f.run(res, Apply); got.Status.Phase != api.PhaseAwaitingApproval || f.tableExists("posts") || len(got.Dispatched) != 0 {
		t.Fatalf("apply of the same plan again: phase %s (%s), posts exists %v; approval %s was spent",
			got.Status.Phase, got.Status.Message, f.tableExists("posts"), spent.UID)
	}
	if !f.approvalStale(spent.UID) {
		t.Fatal("the spent approval must be marked stale")
	}
}

// sameButUID requires b to be a as published again: same name, content and
// fingerprint, another object.
func sameButUID(t *testing.T, a, b *engine.Plan) {
	t.Helper()
	if b == nil || b.Name != a.Name || b.Spec.Fingerprint != a.Spec.Fingerprint || b.UID == a.UID {
		t.Fatalf("want plan %s published again under a new UID with fingerprint %s; got %+v", a.Name, a.Spec.Fingerprint, b)
	}
}

// Guarantee 6, "Stored state is never interpreted by a manager that
// predates it", "over the same scan of all six kinds" (and the run
// acknowledgment, a seventh): an object of any kind written under a newer
// contract refuses the pass of either family, naming the object, before
// anything runs.
func TestRuntimeVerifierRejectsStoredFutureControllerState(t *testing.T) {
	t.Parallel()
	kinds := []string{api.KindPtahSchema, api.KindPtahSchemaPlan, api.KindPtahSchemaApproval,
		api.KindPtahMigration, api.KindPtahMigrationPlan, api.KindPtahMigrationApproval, api.KindPtahMigrationRunAcknowledgment}
	for _, kind := range kinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			f := newFixture(t, v1)
			schema := f.resource(api.ApplyOnApproval, v2)
			schema.Schema.Spec.Target.SharedRealm = true
			mig := f.migration("jobs", map[string]string{"0001_jobs.sql": "CREATE TABLE public.jobs (id int);\n"}, api.ApplyOnApproval)
			mig.Migration.Spec.Target.SharedRealm = true
			f.register(schema)
			f.register(mig)
			f.approve(f.run(schema, PlanOnly).Plan)
			f.approveMigration(f.runMigration(mig, PlanOnly).Migration.Plan)
			f.createDecision(api.KindPtahMigrationRunAcknowledgment, "jobs-ack", api.PtahMigrationRunAcknowledgmentSpec{
				Migration: api.ObjectReference{Name: "jobs"}, OperationID: "op-1", By: "ana", Reason: "checked"})
			objs, err := f.r.Store.List(ctx, storeList(kind))
			if err != nil || len(objs) == 0 {
				t.Fatalf("listing %s: %v (%d)", kind, err, len(objs))
			}
			future := objs[0]
			future.ContractVersion = api.ContractVersion + 1
			if _, err := f.r.Store.UpdateStatus(ctx, future); err != nil {
				t.Fatal(err)
			}
			for _, res := range []Resource{schema, mig} {
				_, err = f.r.Run(ctx, res, Apply)
				if err == nil || !contains(err.Error(), future.Name) || !contains(err.Error(), "newer ptah") {
					t.Fatalf("apply of %s over a future %s: %v; want the fence's refusal naming %s", res.Name(), kind, err, future.Name)
				}
			}
			if f.tableExists("posts") || f.tableExists("jobs") || len(f.runs()) != 0 {
				t.Fatalf("nothing may run over a future %s: posts %v, jobs %v, journal %v", kind, f.tableExists("posts"), f.tableExists("jobs"), f.runs())
			}
		})
	}
}

// The fence covers every durable record, not only the store's row
// versions: a contract version recorded inside a status (by whoever wrote
// the row), a run or lease row of the journal, and a kind this ptah does
// not know.
func TestRuntimeVerifierRejectsEveryFutureRecord(t *testing.T) {
	t.Parallel()
	future := api.ContractVersion + 1
	for name, tc := range map[string]struct {
		plant func(f *fixture, res Resource)
		names string
	}{
		"status": {func(f *fixture, res Resource) {
			pgtest.Exec(t, f.url, fmt.Sprintf(`UPDATE ptah.objects SET status = jsonb_set(status, '{executionBinding,contractVersion}', '%d')
				WHERE kind = 'PtahSchema' AND name = 'app'`, future))
		}, "PtahSchema default/app"},
		"run": {func(f *fixture, res Resource) {
			pgtest.Exec(t, f.url, fmt.Sprintf(`INSERT INTO ptah.runs (operation_id, contract_version) VALUES ('op-from-the-future', %d)`, future))
		}, "Run /op-from-the-future"},
		"lease": {func(f *fixture, res Resource) {
			pgtest.Exec(t, f.url, fmt.Sprintf(`INSERT INTO ptah.leases (coordination_digest, holder, deadline, acquired_at, contract_version)
				VALUES ('sha256:elsewhere', 'op-x', now(), now(), %d)`, future))
		}, "Lease /sha256:elsewhere"},
		"history row": {func(f *fixture, res Resource) {
			pgtest.Exec(t, f.url, fmt.Sprintf(`INSERT INTO ptah.migration_history (resource, version, name, checksum, applied_at, how, contract_version)
				VALUES ('PtahMigration/default/m', '7', 'later', 'sha256:x', now(), 'run', %d)`, future))
		}, "History /PtahMigration/default/m 7"},
		"unknown kind": {func(f *fixture, res Resource) {
			if _, err := f.r.Store.Create(context.Background(), store.Object{Kind: "PtahSchemaRollout", Namespace: "default", Name: "r1",
				ContractVersion: api.ContractVersion, Spec: []byte(`{}`)}); err != nil {
				t.Fatal(err)
			}
		}, "PtahSchemaRollout default/r1 (a kind this ptah does not know"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, v1)
			res := f.resource(api.ApplyAlways, v2)
			f.run(res, PlanOnly)
			f.run(res, Apply) // a run and a lease row exist
			pgtest.Exec(t, f.url, "DROP TABLE posts")
			tc.plant(f, res)
			var fse *engine.FutureStateError
			for _, mode := range []Mode{PlanOnly, Apply} {
				out, err := f.r.Run(context.Background(), res, mode)
				if !errors.As(err, &fse) || !strings.Contains(err.Error(), tc.names) || len(out.Dispatched) != 0 || f.tableExists("posts") {
					t.Fatalf("mode %d over a future %s: %v (dispatched %v); want a refusal naming %q, nothing run", mode, name, err, out.Dispatched, tc.names)
				}
			}
		})
	}
}

// "Stored state never goes back": a status write that meets an object a
// newer ptah wrote meanwhile (here, mid-run) refuses, naming it, instead of
// writing it again under this binary's contract version.
func TestAStatusWriteNeverOverwritesANewerPtah(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newFixture(t, v1)
	res := f.resource(api.ApplyAlways, v2)
	newer := false
	f.r.Progress = func(st postgres.Step) {
		if newer || !st.Done {
			return
		}
		newer = true
		o, err := f.r.Store.Get(ctx, api.KindPtahSchema, "default", "app")
		if err != nil {
			t.Error(err)
			return
		}
		o.ContractVersion = api.ContractVersion + 1
		o.Status = []byte(`{"phase":"InSync","executionBinding":{"contractVersion":` + fmt.Sprint(api.ContractVersion+1) + `}}`)
		if _, err := f.r.Store.UpdateStatus(ctx, o); err != nil {
			t.Error(err)
		}
	}
	_, err := f.r.Run(ctx, res, Apply)
	var fse *engine.FutureStateError
	if !newer || !errors.As(err, &fse) || !strings.Contains(err.Error(), "PtahSchema default/app") {
		t.Fatalf("the run's status write after a newer ptah's: %v; want the fence's refusal naming the object", err)
	}
	o, err := f.r.Store.Get(ctx, api.KindPtahSchema, "default", "app")
	if err != nil || o.ContractVersion != api.ContractVersion+1 || !strings.Contains(string(o.Status), `"InSync"`) {
		t.Fatalf("the newer ptah's record was overwritten: contract version %d, status %s (%v)", o.ContractVersion, o.Status, err)
	}
	// The run's outcome could not be recorded, so no release was owed on
	// record: the lease was not handed back (its writer session ended).
	var holders int
	if err := f.r.Target.QueryRow(ctx, "SELECT count(*) FROM ptah.leases").Scan(&holders); err != nil || holders != 1 {
		t.Fatalf("leases after an unrecorded outcome: %d (%v); want the run's lease row kept", holders, err)
	}
}

// A claim left by a crash before dispatch whose deadline has passed ran
// nothing and may run nothing: ptah plan and ptah apply drop it, say so,
// and decide again; apply then runs the plan under a new operation.
func TestAnUndispatchedClaimPastItsDeadlineIsDropped(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newFixture(t, v1)
	res := f.resource(api.ApplyAlways, v2)
	f.crashAt(FailAfterClaim, res, Apply)
	o, err := f.r.Store.Get(ctx, api.KindPtahSchema, "default", "app")
	if err != nil {
		t.Fatal(err)
	}
	var st api.PtahSchemaStatus
	if err := json.Unmarshal(o.Status, &st); err != nil || st.ActiveOperation == nil || st.ActiveOperation.DispatchedAt != nil {
		t.Fatalf("the crash must leave an undispatched claim: %+v (%v)", st.ActiveOperation, err)
	}
	expired := st.ActiveOperation.ID
	st.ActiveOperation.Deadline = api.NewTime(st.ActiveOperation.ClaimedAt.Add(-time.Minute)) // as if its time ran out
	o.Status, _ = json.Marshal(st)
	if _, err := f.r.Store.UpdateStatus(ctx, o); err != nil {
		t.Fatal(err)
	}

	planned := f.run(res, PlanOnly)
	if planned.Status.ActiveOperation != nil || planned.Status.Phase != api.PhaseApproved || strings.Contains(planned.Status.Message, "continues") {
		t.Fatalf("ptah plan over the expired claim: %s (%s), claim %+v; want it dropped and the plan shown as authorized",
			planned.Status.Phase, planned.Status.Message, planned.Status.ActiveOperation)
	}
	got := f.run(res, Apply)
	if got.Status.Phase != api.PhaseInSync || len(got.Dispatched) != 1 || got.Dispatched[0] == expired || f.runs()[expired] != nil {
		t.Fatalf("apply after the expired claim: %s (%s), dispatched %v; want a new operation to converge and %s never run",
			got.Status.Phase, got.Status.Message, got.Dispatched, expired)
	}
}

func storeList(kind string) store.ListOptions { return store.ListOptions{Kind: kind} }

func contains(s, sub string) bool { return strings.Contains(s, sub) }

// Another process registering the resource while a run executes (a second
// ptah apply starting, or one with an edited ptah.yaml) must not cost the
// run its accounting: the pass lock keeps the status this pass's alone, and
// a registration changes only spec and labels.
func TestRegistrationDuringARunKeepsItsAccounting(t *testing.T) {
	t.Parallel()
	f := newFixture(t, v1)
	res := f.resource(api.ApplyAlways, v2)
	other, err := newRunner(context.Background(), f.url)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Target.Close(context.Background())
	identity := f.identity()

	edited := *res.Schema
	edited.Spec.Policy.LockTimeout = "6s" // a spec change: a new generation
	editedRes := res
	editedRes.Schema = &edited
	registeredMidRun := false
	f.r.Progress = func(st postgres.Step) {
		if st.Done && st.N == 1 && !registeredMidRun {
			registeredMidRun = true
			if _, err := other.Register(context.Background(), editedRes, identity); err != nil {
				t.Errorf("registering mid-run: %v", err)
			}
		}
	}
	out, err := f.r.Run(context.Background(), res, Apply)
	if err != nil {
		t.Fatalf("the run lost its accounting to a concurrent registration: %v", err)
	}
	if !registeredMidRun {
		t.Fatal("the plan ran no statement; the test registered nothing mid-run")
	}
	if a := out.Status.Applied; a == nil || a.Outcome != api.OutcomeSucceeded || len(out.Dispatched) != 1 || a.OperationID != out.Dispatched[0] {
		t.Fatalf("applied record: %+v, dispatched %v", out.Status.Applied, out.Dispatched)
	}
}

// Registering an unchanged resource writes nothing, so concurrent runs of
// one file do not contend on the object at all.
func TestRegisteringAnUnchangedResourceWritesNothing(t *testing.T) {
	t.Parallel()
	f := newFixture(t, v1)
	res := f.resource(api.ApplyOnApproval, v2)
	first, err := f.r.Register(context.Background(), res, f.identity())
	if err != nil {
		t.Fatal(err)
	}
	again, err := f.r.Register(context.Background(), res, f.identity())
	if err != nil {
		t.Fatal(err)
	}
	if again.ResourceVersion != first.ResourceVersion || again.Generation != first.Generation {
		t.Fatalf("unchanged registration wrote: resourceVersion %d -> %d", first.ResourceVersion, again.ResourceVersion)
	}
	res.Schema.Spec.Policy.AllowDestructive = true
	changed, err := f.r.Register(context.Background(), res, f.identity())
	if err != nil || changed.Generation != first.Generation+1 {
		t.Fatalf("a spec change must bump the generation: %+v, %v", changed, err)
	}
}
