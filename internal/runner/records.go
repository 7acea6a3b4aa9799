package runner

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/ptah-run/ptah/internal/engine"
	"github.com/ptah-run/ptah/internal/postgres"
	"github.com/ptah-run/ptah/internal/store"
	api "github.com/ptah-run/ptah/pkg/api/v1alpha1"
)

// Records carries out, over a store alone, the steps of a resource's pass
// that touch only stored records, for either family: reading the status,
// the current plan and the decisions; asking the family's engine pass;
// publishing and pruning plans; marking decisions stale or spent; writing
// the status. ptah serve's reconciler uses it, so that both modes keep
// their records through the same code (the family shells of local mode);
// the steps that reach the database (observe, lock, dispatch) are each
// mode's own.
type Records struct {
	p *pass
	f shell
}

// NewRecords returns the records of res (its Schema or its Migration) in
// st. res names no database: what local mode reads there, the caller
// supplies (Facts).
func NewRecords(st store.Store, res Resource) *Records {
	f := shellFor(res)
	return &Records{p: &pass{Runner: &Runner{Store: st}, res: res, f: f}, f: f}
}

// Facts are what a PtahMigration's pass reads in the database in local
// mode, which a cluster's manager learns otherwise: the operations whose
// lease is still held, and what the journal says of dispatched runs.
type Facts struct {
	LeaseHeld map[string]bool
	Journal   map[string]engine.JournalReading
}

// Read decodes self's status, its current plan and its decisions, and
// drops any observation set before.
func (r *Records) Read(ctx context.Context, self store.Object, facts Facts) error {
	r.f.forget()
	if err := r.f.read(ctx, r.p, self); err != nil {
		return err
	}
	if m, ok := r.f.(*migrationShell); ok {
		m.in.LeaseHeld, m.in.Journal = facts.LeaseHeld, facts.Journal
	}
	return nil
}

// State is the run state of the status read.
func (r *Records) State() api.RunState { return *r.f.readState() }

// Amend returns a copy of the status read, with fn applied to its run
// state: a status the shell decides itself (a suspended resource's, an
// invalid spec's), to write with WriteStatus.
func (r *Records) Amend(fn func(*api.RunState)) any {
	switch s := r.f.(type) {
	case *schemaShell:
		st := s.in.Status
		fn(&st.RunState)
		return &st
	case *migrationShell:
		st := s.in.Status
		fn(&st.RunState)
		return &st
	}
	panic("runner: unknown family")
}

// SetObservedTarget records, in the status read (and so in every status
// decided from it), the database the latest reading found: the census of
// every other resource reads it there.
func (r *Records) SetObservedTarget(t *api.ObservedTarget) { r.f.readState().Target = t }

// RestoreUnresolvedRun returns the status read with kept, a PtahMigration's
// unresolved run kept outside its status, put back if the status lost it
// (engine.RestoreUnresolvedRun); ok is false when nothing is to restore.
func (r *Records) RestoreUnresolvedRun(kept *api.UnresolvedRun) (st any, ok bool) {
	m, isMigration := r.f.(*migrationShell)
	if !isMigration {
		return nil, false
	}
	restored, ok := engine.RestoreUnresolvedRun(m.in.Status, kept, m.res.Name())
	return &restored, ok
}

// Uncertain names the family's record of a run whose outcome is not
// known (a PtahSchema's pending observation, a PtahMigration's unresolved
// run): its operation ID and coordination digest.
func (r *Records) Uncertain() (id, coordinationDigest string, ok bool) { return r.f.uncertain() }

// SetObservation hands the pass a reading taken for it: an
// *engine.Observation for a PtahSchema, an *engine.MigrationObservation
// for a PtahMigration.
func (r *Records) SetObservation(obs any) error {
	switch s := r.f.(type) {
	case *schemaShell:
		o, ok := obs.(*engine.Observation)
		if !ok {
			return fmt.Errorf("a PtahSchema's reading is an *engine.Observation, not %T", obs)
		}
		s.in.Observation = o
	case *migrationShell:
		o, ok := obs.(*engine.MigrationObservation)
		if !ok {
			return fmt.Errorf("a PtahMigration's reading is an *engine.MigrationObservation, not %T", obs)
		}
		s.in.Observation = o
	}
	return nil
}

// Decision is the family's engine decision.
type Decision struct{ d decision }

func (d Decision) Step() engine.Step              { return d.d.step }
func (d Decision) Stable() bool                   { return d.d.stable }
func (d Decision) Err() error                     { return d.d.err }
func (d Decision) Operation() *api.Operation      { return d.d.operation }
func (d Decision) Resolves() *api.ObjectReference { return d.d.resolve }

// Decide asks the family's engine pass.
func (r *Records) Decide(base engine.PassInput) Decision { return Decision{r.f.decide(base)} }

// Decided is the complete status the last decision (or Account) made, and
// its run state, to change before writing.
func (r *Records) Decided() (any, *api.RunState) { return r.f.status() }

// Publish stores d's plan as a new immutable object, points the status
// d decided at it, writes that status over obj and prunes the plans
// nothing needs any more.
func (r *Records) Publish(ctx context.Context, obj store.Object, d Decision) error {
	if d.d.plan == nil {
		return fmt.Errorf("%s: a publish step without a plan; this is a bug", obj.Name)
	}
	return r.p.publish(ctx, obj, d.d)
}

// MarkStale marks the decisions d names stale.
func (r *Records) MarkStale(ctx context.Context, d Decision) error {
	for _, s := range d.d.stale {
		if err := r.p.spend(ctx, s.uid, api.DecisionStatus{Stale: true, StaleReason: s.reason}); err != nil {
			return err
		}
	}
	return nil
}

// Spend records that operation opID consumed the decision ref (an
// approval at dispatch, an acknowledgment that settled its run).
func (r *Records) Spend(ctx context.Context, ref api.ObjectReference, opID string, now time.Time) error {
	return r.p.spend(ctx, ref.UID, api.DecisionStatus{Consumed: &api.Consumption{OperationID: opID, At: api.NewTime(now)}})
}

// SpentAtDispatch is the approval op's dispatch consumes, nil when the
// family spends none (a PtahSchema's approval authorizes its plan until
// the plan is no longer current; a PtahMigration's, one run).
func (r *Records) SpentAtDispatch(op api.Operation) *api.ObjectReference {
	if _, ok := r.f.(*migrationShell); ok {
		return op.Approval
	}
	return nil
}

// WriteStatus writes st over obj conditionally on its resourceVersion
// (retrying over a newer version of the same object only for a change
// that left the status alone), and moves obj to the written version.
func (r *Records) WriteStatus(ctx context.Context, obj *store.Object, st any) error {
	return r.p.writeStatus(ctx, obj, st)
}

// Account is the one write after a dispatched run of op that reported how
// it ended: the claim becomes the record (engine.Account for a PtahSchema,
// which reads only run's Result and Message; engine.AccountMigration for
// a PtahMigration). It returns the status to write.
func (r *Records) Account(op api.Operation, run engine.MigrationRun, targetIdentity string, now time.Time) (any, *api.RunState) {
	r.f.record(op, run, targetIdentity, now)
	return r.f.status()
}

// CurrentPlan is the plan the status read names: its reference, and its
// spec (*api.PtahSchemaPlanSpec or *api.PtahMigrationPlanSpec); ok is
// false when there is none.
func (r *Records) CurrentPlan() (ref api.ObjectReference, spec any, ok bool) {
	switch s := r.f.(type) {
	case *schemaShell:
		if p := s.in.CurrentPlan; p != nil {
			return api.ObjectReference{Name: p.Name, UID: p.UID}, &p.Spec, true
		}
	case *migrationShell:
		if p := s.in.CurrentPlan; p != nil {
			return api.ObjectReference{Name: p.Name, UID: p.UID}, &p.Spec, true
		}
	}
	return api.ObjectReference{}, nil, false
}

// Approver is who approved op's claim ("" when it was claimed by policy).
func (r *Records) Approver(op api.Operation) string {
	if m, ok := r.f.(*migrationShell); ok && op.Approval != nil {
		for _, a := range m.in.Approvals {
			if a.UID == op.Approval.UID {
				return a.Spec.Approver
			}
		}
	}
	return ""
}

// MigrationRuns are the records of a PtahMigration's status read that
// stand for runs (its unresolved, active, last and resolved runs), which
// a reading of its history reads the journal against; nil for a
// PtahSchema.
func (r *Records) MigrationRuns() *api.PtahMigrationStatus {
	m, ok := r.f.(*migrationShell)
	if !ok {
		return nil
	}
	st := api.PtahMigrationStatus{UnresolvedRun: m.in.Status.UnresolvedRun, LastRun: m.in.Status.LastRun, ResolvedRun: m.in.Status.ResolvedRun}
	st.ActiveOperation = m.in.Status.ActiveOperation
	return &st
}

// PlanKind is the kind of the family's plans.
func (r *Records) PlanKind() string { return r.f.kinds().plan }

// StoredState is every stored object as the fence sees it, and the
// objects themselves (metadata only) for the census.
func StoredState(ctx context.Context, st store.Store) ([]store.Object, []engine.StoredObject, error) {
	objs, err := st.List(ctx, store.ListOptions{MetadataOnly: true})
	if err != nil {
		return nil, nil, fmt.Errorf("scanning stored state: %w", err)
	}
	out := make([]engine.StoredObject, len(objs))
	for i, o := range objs {
		out[i] = storedObject(o)
	}
	return objs, out, nil
}

// Census is every registered resource of either family among all as a
// claimant of its database, and the one named kind/namespace/name.
func Census(all []store.Object, kind, namespace, name string) ([]engine.Claimant, engine.Claimant) {
	return census(all, kind, namespace, name)
}

// ObserveSchema reads the target (r.Target, at res.TargetURL) and res's
// declared files once, as a pass's observation does: ptah exec's reading
// in a cluster Job.
func (r *Runner) ObserveSchema(ctx context.Context, res Resource) (*engine.Observation, error) {
	identity, err := r.Identity(ctx)
	if err != nil {
		return nil, err
	}
	return r.observe(ctx, res, identity)
}

// ObserveMigration reads res's history and run journal (r.Target) against
// its source once, as a pass's observation does, with the holds of st
// (its unresolved run): ptah exec's reading in a cluster Job.
func (r *Runner) ObserveMigration(ctx context.Context, res Resource, st api.PtahMigrationStatus) (*engine.MigrationObservation, error) {
	identity, err := r.Identity(ctx)
	if err != nil {
		return nil, err
	}
	return observeMigration(ctx, r.Target, res, identity, st, r.binding())
}

// MigrationRunRequest is one claimed run of a PtahMigration's plan, as a
// cluster Job's ptah exec carries it out.
type MigrationRunRequest struct {
	URL  string
	Res  Resource
	Plan engine.MigrationPlan
	// OperationID, CoordinationDigest and Deadline are the claim's; the
	// writer takes the database's lease under them.
	OperationID, CoordinationDigest string
	Deadline                        time.Time
	// Approver is recorded in the history rows ("": the database role).
	Approver string
}

// ExecuteMigration runs req's plan once, exactly as local mode's dispatch
// does (migrationExecPlan, under the role's own search_path), and tells
// how the run ended as the engine accounts for it (classifyMigration,
// with the journal): nothing runs when the plan does not match its
// fingerprint or the source. The writer's lease is released when the
// run's outcome is known and its writer can no longer write; otherwise it
// is left for the journal to tell.
func ExecuteMigration(ctx context.Context, req MigrationRunRequest) (engine.MigrationRun, error) {
	if err := engine.VerifyMigrationPlan(req.Plan); err != nil {
		return engine.MigrationRun{Result: engine.RunFailed, Message: err.Error()}, fmt.Errorf("%w: %w", postgres.ErrNotStarted, err)
	}
	plan, err := migrationExecPlan(req.Res, req.Plan.Spec, req.Approver)
	if err == nil {
		plan.SearchPath, err = postgres.DefaultSearchPath(ctx, req.URL)
	}
	if err != nil {
		return engine.MigrationRun{Result: engine.RunFailed, Message: statusMessage(err)}, fmt.Errorf("%w: %w", postgres.ErrNotStarted, err)
	}
	w, err := postgres.OpenWriter(ctx, req.URL, req.CoordinationDigest, req.OperationID, req.Res.storeResource(), req.Deadline)
	if err != nil {
		return engine.MigrationRun{Result: engine.RunFailed, Message: statusMessage(err)}, fmt.Errorf("%w: %w", postgres.ErrNotStarted, err)
	}
	runErr := w.Execute(ctx, req.Plan.UID, plan, nil)
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), accountTimeout)
	defer cancel()
	var journal *postgres.Run
	conn, cerr := postgres.Connect(ctx, req.URL)
	if cerr == nil {
		defer conn.Close(ctx)
		journal, _ = readRun(ctx, conn, req.OperationID)
	}
	run := classifyMigration(runErr, journal, plan)
	if run.Result == engine.RunUncertain {
		may := true
		if cerr == nil {
			m, err := postgres.WriterMayStillWrite(ctx, conn, req.OperationID, req.CoordinationDigest)
			may = m || err != nil
		}
		run.MayStillWrite = may
		if may {
			w.Abandon()
			return run, runErr
		}
	}
	if err := w.Release(ctx); err != nil {
		w.Abandon()
	}
	return run, runErr
}

// readRun is the journal of one run, nil when it never journaled.
func readRun(ctx context.Context, conn *pgx.Conn, id string) (*postgres.Run, error) {
	run, err := postgres.ReadRun(ctx, conn, id)
	if errors.Is(err, postgres.ErrRunNotFound) {
		return nil, nil
	}
	return run, err
}
