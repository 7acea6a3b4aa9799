package runner

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/ptah-run/ptah/internal/engine"
	"github.com/ptah-run/ptah/internal/failpoint"
	"github.com/ptah-run/ptah/internal/fingerprint"
	"github.com/ptah-run/ptah/internal/postgres"
	"github.com/ptah-run/ptah/internal/store"
	api "github.com/ptah-run/ptah/pkg/api/v1alpha1"
)

// pass is one resource's run of passes; it keeps what was observed during
// it, since an observation is valid for the rest of the pass.
type pass struct {
	*Runner
	res      Resource
	mode     Mode
	identity string

	observation *engine.Observation
	rederived   string
	dispatched  []string

	// writer holds the database's lease for the claim writerOp names,
	// from StepLock to the end of its dispatch (or until the claim is
	// dropped, when nothing of it ran).
	writer   *postgres.Writer
	writerOp string
}

func (p *pass) loop(ctx context.Context) (Result, error) {
	// A lease taken for a claim that never dispatched is given back: nothing
	// ran under it. (A dispatched one is released by dispatch, in order.)
	defer p.releaseUndispatched(ctx)
	for steps := 0; steps < maxStepsWithoutChange; steps++ {
		in, obj, err := p.gather(ctx)
		if err != nil {
			// What this pass dispatched is reported all the same (an
			// interrupt after a run ends here).
			return p.result(ctx, err)
		}
		in.PlanOnly = p.mode == PlanOnly
		d := engine.SchemaPass(in)
		done, err := p.act(ctx, obj, in, d)
		if err != nil || done {
			return p.result(ctx, err)
		}
	}
	return Result{}, fmt.Errorf("%s: the pass did not settle after %d steps; this is a bug", p.res.Schema.Name, maxStepsWithoutChange)
}

// gather reads everything the pass decides from.
func (p *pass) gather(ctx context.Context) (engine.SchemaPassInput, store.Object, error) {
	now, err := postgres.ServerNow(ctx, p.Target)
	if err != nil {
		return engine.SchemaPassInput{}, store.Object{}, err
	}
	// The fence and the census need only what the store records about each
	// object; plans, which accumulate, are not read but for the current one.
	all, stored, err := p.storedState(ctx)
	if err != nil {
		return engine.SchemaPassInput{}, store.Object{}, err
	}
	in := engine.SchemaPassInput{
		PassInput: engine.PassInput{
			Now: now, Name: p.res.Schema.Name, Binding: p.binding(), Stored: stored, Rederived: p.rederived,
			NewOperationID: p.NewID(), RunTimeout: p.RunTimeout,
		},
		Spec: p.res.Schema.Spec, Observation: p.observation,
	}
	for _, o := range all {
		if o.Kind != api.KindPtahSchema {
			continue
		}
		c := engine.Claimant{Kind: o.Kind, Namespace: o.Namespace, Name: o.Name,
			CoordinationDigest: o.Labels[LabelCoordination], TargetIdentityDigest: o.Labels[LabelTarget],
			SharedRealm: o.Labels[LabelSharedRealm] == "true"}
		in.Realm = append(in.Realm, c)
		if o.Namespace == p.res.namespace() && o.Name == p.res.Schema.Name {
			in.Self = c
		}
	}
	self, err := p.Store.Get(ctx, api.KindPtahSchema, p.res.namespace(), p.res.Schema.Name)
	if errors.Is(err, store.ErrNotFound) {
		return in, self, fmt.Errorf("%s is not registered in the store", p.res.Schema.Name)
	}
	if err != nil {
		return in, self, err
	}
	approvals, err := p.Store.List(ctx, store.ListOptions{Kind: api.KindPtahSchemaApproval, Namespace: p.res.namespace(),
		Labels: map[string]string{LabelSchema: p.res.Schema.Name}})
	if err != nil {
		return in, self, fmt.Errorf("reading the approvals of %s: %w", p.res.Schema.Name, err)
	}
	for _, o := range approvals {
		a, err := decodeApproval(o)
		if err != nil {
			return in, self, err
		}
		in.Approvals = append(in.Approvals, a)
	}
	in.UID, in.Generation = self.UID, self.Generation
	if len(self.Status) > 0 {
		if err := json.Unmarshal(self.Status, &in.Status); err != nil {
			return in, self, fmt.Errorf("decoding the status of %s: %w", self.Name, err)
		}
	}
	if ref := in.Status.Plan; ref != nil {
		if o, err := p.Store.GetByUID(ctx, ref.UID); err == nil {
			plan, err := decodePlan(o)
			if err != nil {
				return in, self, err
			}
			in.CurrentPlan = &plan
		} else if !errors.Is(err, store.ErrNotFound) {
			return in, self, err
		}
	}
	op := in.Status.ActiveOperation
	in.Locked = op != nil && p.writer != nil && p.writerOp == op.ID
	in.LiveWriters, err = p.liveWriters(ctx, in.Status)
	return in, self, err
}

// liveWriters asks, for each dispatched operation the status names, local
// mode's "Pod-level answer": may its writer still write?
func (p *pass) liveWriters(ctx context.Context, st api.PtahSchemaStatus) (map[string]bool, error) {
	ops := map[string]string{} // operation ID -> coordination digest
	if op := st.ActiveOperation; op != nil && op.DispatchedAt != nil {
		ops[op.ID] = op.CoordinationDigest
	}
	if po := st.PendingObservation; po != nil {
		ops[po.OperationID] = po.CoordinationDigest
	}
	if owed := st.OwedRelease; owed != nil {
		ops[owed.OperationID] = owed.CoordinationDigest
	}
	live := map[string]bool{}
	for id, digest := range ops {
		may, err := postgres.WriterMayStillWrite(ctx, p.Target, id, digest)
		if err != nil {
			return nil, err
		}
		if may {
			live[id] = true
		}
	}
	return live, nil
}

// act carries out one decision; done reports a stable end.
func (p *pass) act(ctx context.Context, obj store.Object, in engine.SchemaPassInput, d engine.Decision) (bool, error) {
	switch d.Step {
	case engine.StepRefuse:
		return true, d.Err
	case engine.StepReleaseOwed:
		owed := in.Status.OwedRelease
		if err := postgres.ReleaseLease(ctx, p.Target, owed.CoordinationDigest, owed.OperationID); err != nil {
			return true, fmt.Errorf("completing the owed lease release of operation %s: %w", owed.OperationID, err)
		}
		return false, p.writeStatus(ctx, &obj, d.Status)
	case engine.StepWriteStatus:
		claimed := d.Status.ActiveOperation != nil && in.Status.ActiveOperation == nil
		if in.Status.ActiveOperation != nil && d.Status.ActiveOperation == nil {
			// The claim was dropped (its inputs moved) or settled: what was
			// read for it is stale.
			p.observation, p.rederived = nil, ""
		}
		if err := p.writeStatus(ctx, &obj, d.Status); err != nil {
			return true, err
		}
		if d.Status.ActiveOperation == nil {
			p.releaseUndispatched(ctx) // dropped before dispatch: nothing ran under it
		}
		if d.Stable && d.Status.Reason == api.ReasonRunMayStillWrite {
			// A writer this process dispatched and lost touch with (its
			// connection broke) usually ends within moments: wait for
			// that, rather than leave the outcome to the next ptah apply.
			if id := p.ownLiveWriter(in); id != "" && p.mode == Apply {
				return !p.waitForWriter(ctx, id, in.Status), nil
			}
		}
		if claimed {
			failpoint.Hit(FailAfterClaim)
		}
		return d.Stable, nil
	case engine.StepObserve:
		obs, err := p.observe(ctx, p.res, p.identity)
		p.observation = obs
		return err != nil, err
	case engine.StepMarkStale:
		return false, p.markStale(ctx, d.Stale)
	case engine.StepPublish:
		return false, p.publish(ctx, obj, d)
	case engine.StepLock:
		return p.lock(ctx, obj, in, *d.Operation)
	case engine.StepRederive:
		fresh, err := p.observe(ctx, p.res, p.identity)
		if err != nil {
			return true, err
		}
		p.rederived = engine.InputFingerprint(d.Operation.Plan.Fingerprint, fresh.Bindings)
		return false, nil
	case engine.StepDispatch:
		return p.dispatch(ctx, obj, in, *d.Operation)
	}
	return true, fmt.Errorf("unknown step %q", d.Step)
}

// writeStatus writes st conditionally on obj's resourceVersion, and moves
// obj to the new version for the next write.
func (p *pass) writeStatus(ctx context.Context, obj *store.Object, st api.PtahSchemaStatus) error {
	raw, err := json.Marshal(st)
	if err != nil {
		return fmt.Errorf("encoding status: %w", err)
	}
	for attempt := 0; ; attempt++ {
		obj.Status, obj.ContractVersion = raw, api.ContractVersion
		updated, err := p.Store.UpdateStatus(ctx, *obj)
		if err == nil {
			*obj = updated
			return nil
		}
		if errors.Is(err, store.ErrNewerContract) {
			return p.refusedAsNewer(ctx, obj.Kind, obj.Namespace, obj.Name, err)
		}
		if !errors.Is(err, store.ErrConflict) || attempt == 4 {
			return fmt.Errorf("writing the status of %s: %w", obj.Name, err)
		}
		// Only the holder of the pass lock writes this status; a conflict
		// is another process registering the resource (its spec or
		// labels), which leaves the status as this pass last wrote it.
		// Write it again over the new version of the same object.
		fresh, gerr := p.Store.Get(ctx, obj.Kind, obj.Namespace, obj.Name)
		if gerr != nil {
			return fmt.Errorf("writing the status of %s: %w (re-reading it: %w)", obj.Name, err, gerr)
		}
		if ferr := fenceObject(fresh); ferr != nil {
			return ferr // a newer ptah wrote it meanwhile: never write over it
		}
		if fresh.UID != obj.UID {
			return fmt.Errorf("writing the status of %s: the object was deleted and created again (uid %s, now %s)", obj.Name, obj.UID, fresh.UID)
		}
		*obj = fresh
	}
}

func (p *pass) markStale(ctx context.Context, stale []engine.Approval) error {
	for _, a := range stale {
		o, err := p.Store.GetByUID(ctx, a.UID)
		if err != nil {
			return fmt.Errorf("reading approval %s: %w", a.Name, err)
		}
		raw, _ := json.Marshal(api.PtahSchemaApprovalStatus{Stale: true, StaleReason: "the plan it names is no longer current"})
		o.Status, o.ContractVersion = raw, api.ContractVersion
		_, err = p.Store.UpdateStatus(ctx, o)
		if errors.Is(err, store.ErrNewerContract) {
			return p.refusedAsNewer(ctx, o.Kind, o.Namespace, o.Name, err)
		}
		if err != nil {
			return fmt.Errorf("marking approval %s stale: %w", a.Name, err)
		}
	}
	return nil
}

// publish stores a new immutable plan object. Its name is derived from the
// content, so the same content published again replaces the old object:
// same name, new UID, and approvals of the old one authorize nothing.
func (p *pass) publish(ctx context.Context, obj store.Object, d engine.Decision) error {
	name := p.res.Schema.Name + "-" + fingerprint.Short(d.Plan.Fingerprint)
	spec, err := json.Marshal(d.Plan)
	if err != nil {
		return fmt.Errorf("encoding plan: %w", err)
	}
	if old, err := p.Store.Get(ctx, api.KindPtahSchemaPlan, obj.Namespace, name); err == nil {
		if err := p.Store.Delete(ctx, old.Kind, old.Namespace, old.Name, old.UID); err != nil {
			return fmt.Errorf("replacing plan %s: %w", name, err)
		}
	}
	created, err := p.Store.Create(ctx, store.Object{Kind: api.KindPtahSchemaPlan, Namespace: obj.Namespace, Name: name,
		ContractVersion: api.ContractVersion, Immutable: true, Labels: map[string]string{LabelSchema: p.res.Schema.Name}, Spec: spec})
	if err != nil {
		return fmt.Errorf("publishing plan %s: %w", name, err)
	}
	st := d.Status
	st.Plan = &api.PlanReference{ObjectReference: api.ObjectReference{Name: created.Name, UID: created.UID}, Fingerprint: d.Plan.Fingerprint}
	if err := p.writeStatus(ctx, &obj, st); err != nil {
		return err
	}
	return p.prunePlans(ctx, st)
}

// prunePlans removes the resource's plans that nothing needs any more
// (engine.PlansToPrune), so that they do not pile up with every change.
func (p *pass) prunePlans(ctx context.Context, st api.PtahSchemaStatus) error {
	plans, err := p.Store.List(ctx, store.ListOptions{Kind: api.KindPtahSchemaPlan, Namespace: p.res.namespace(),
		Labels: map[string]string{LabelSchema: p.res.Schema.Name}, MetadataOnly: true})
	if err != nil {
		return fmt.Errorf("listing the plans of %s: %w", p.res.Schema.Name, err)
	}
	byUID := map[string]store.Object{}
	uids := make([]string, len(plans))
	for i, o := range plans {
		uids[i], byUID[o.UID] = o.UID, o
	}
	for _, uid := range engine.PlansToPrune(st, uids) {
		o := byUID[uid]
		if err := p.Store.Delete(ctx, o.Kind, o.Namespace, o.Name, o.UID); err != nil && !errors.Is(err, store.ErrNotFound) {
			return fmt.Errorf("removing plan %s, which nothing needs any more: %w", o.Name, err)
		}
	}
	return nil
}

// lock takes the database's lease for op: a dedicated writer session that
// holds the advisory lock and the lease row naming it. The inputs are then
// derived again under it, and the plan dispatched on it.
func (p *pass) lock(ctx context.Context, obj store.Object, in engine.SchemaPassInput, op api.Operation) (bool, error) {
	p.releaseUndispatched(ctx)
	w, err := postgres.OpenWriter(ctx, p.res.TargetURL, op.CoordinationDigest, op.ID, p.res.Schema.Name, op.Deadline)
	var held *postgres.LeaseHeldError
	switch {
	case errors.As(err, &held):
		return true, p.writeStatus(ctx, &obj, engine.LeaseHeld(in.Status, held.Error()))
	case errors.Is(err, postgres.ErrDeadlinePassed):
		return false, nil // the next pass drops the claim: nothing ran under it
	case err != nil:
		return true, err
	}
	p.writer, p.writerOp = w, op.ID
	p.rederived = "" // only a reading taken under the lease counts
	return false, nil
}

// releaseUndispatched gives back a lease taken for a claim that was never
// dispatched. Nothing ran under it, so nothing is owed: a release that
// fails leaves a row naming a session that ends here, which the next
// writer may take over.
func (p *pass) releaseUndispatched(ctx context.Context) {
	if p.writer == nil {
		return
	}
	_ = p.writer.Release(context.WithoutCancel(ctx))
	p.writer, p.writerOp = nil, ""
}

// dispatch makes the dispatch marker durable, runs the plan once on the
// locked writer, and accounts for it in one write; only then is the
// database released.
func (p *pass) dispatch(ctx context.Context, obj store.Object, in engine.SchemaPassInput, op api.Operation) (bool, error) {
	w := p.writer
	if w == nil || p.writerOp != op.ID {
		return true, fmt.Errorf("operation %s reached dispatch without holding the database's lease; this is a bug", op.ID)
	}
	// From here on the lease is this dispatch's to give back, and only in
	// the order the guarantees demand.
	p.writer, p.writerOp = nil, ""
	marked := op
	marked.DispatchedAt = &in.Now
	st := in.Status
	st.ActiveOperation = &marked
	if err := p.writeStatus(ctx, &obj, st); err != nil {
		// Nothing ran: the lease goes back with the claim undispatched.
		_ = w.Release(context.WithoutCancel(ctx))
		return true, err
	}
	p.dispatched = append(p.dispatched, op.ID)
	failpoint.Hit(FailAfterDispatch)

	runErr := w.Execute(ctx, in.CurrentPlan.UID, ToPlan(in.CurrentPlan.Spec), p.Progress)
	failpoint.Hit(FailAfterExecution)
	// Accounting and the release happen even when the caller gave up
	// (Ctrl-C): they record what was done, and are bounded on their own.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), accountTimeout)
	defer cancel()
	result, message := classify(runErr)
	st = engine.Account(st, marked, result, message, p.serverNow(ctx, in.Now))
	if err := p.writeStatus(ctx, &obj, st); err != nil {
		// The claim still reads as dispatched, and no release is owed on
		// record: the database must not be handed back. Ending the writer's
		// session (never deleting its lease row) stops it from writing;
		// the next pass finds it gone and settles the run by observation.
		w.Abandon()
		return true, fmt.Errorf("recording the outcome of operation %s: %w", op.ID, err)
	}
	failpoint.Hit(FailBeforeRelease)
	p.observation, p.rederived = nil, ""
	if err := w.Release(ctx); err != nil {
		// The writer's session is gone (a lost connection) or unusable:
		// the release stays owed in the status, and a later step completes
		// it from the runner's own session once the writer can no longer
		// write (a failed run stops here; the next ptah apply completes it).
		return result == engine.RunFailed, nil
	}
	st.OwedRelease = nil
	if err := p.writeStatus(ctx, &obj, st); err != nil {
		return true, err
	}
	if result == engine.RunFailed {
		return true, nil
	}
	return false, nil
}

// ownLiveWriter returns the operation this process dispatched whose writer
// may still write, if any.
func (p *pass) ownLiveWriter(in engine.SchemaPassInput) string {
	for _, id := range p.dispatched {
		if in.LiveWriters[id] {
			return id
		}
	}
	return ""
}

// writerWait bounds how long a pass waits for a writer it lost touch with.
const writerWait = time.Minute

// waitForWriter waits, bounded by writerWait, until the writer of
// operation id can no longer write; it reports whether that happened.
func (p *pass) waitForWriter(ctx context.Context, id string, st api.PtahSchemaStatus) bool {
	digest := ""
	switch {
	case st.OwedRelease != nil && st.OwedRelease.OperationID == id:
		digest = st.OwedRelease.CoordinationDigest
	case st.PendingObservation != nil && st.PendingObservation.OperationID == id:
		digest = st.PendingObservation.CoordinationDigest
	case st.ActiveOperation != nil && st.ActiveOperation.ID == id:
		digest = st.ActiveOperation.CoordinationDigest
	}
	ctx, cancel := context.WithTimeout(ctx, writerWait)
	defer cancel()
	for {
		may, err := postgres.WriterMayStillWrite(ctx, p.Target, id, digest)
		if err != nil || !may {
			return err == nil
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// serverNow is the server's clock, or fallback when it cannot be read (the
// record then carries the time of the pass).
func (p *pass) serverNow(ctx context.Context, fallback time.Time) time.Time {
	if now, err := postgres.ServerNow(ctx, p.Target); err == nil {
		return now
	}
	return fallback
}

// accountTimeout bounds the writes that record a run after it ended.
const accountTimeout = 30 * time.Second

// classify turns the executor's error into a run result. The writer runs
// the plan in one transaction: only a plan that certainly never committed
// is a failure; anything else is uncertain and owes an observation.
func classify(err error) (engine.RunResult, string) {
	switch {
	case err == nil:
		return engine.RunSucceeded, ""
	case errors.Is(err, postgres.ErrPlanFailed), errors.Is(err, postgres.ErrNotStarted):
		return engine.RunFailed, err.Error()
	}
	return engine.RunUncertain, err.Error()
}

// result reads where the pass left the resource, even after the caller gave
// up (an interrupt): what it did is what the caller must be told.
func (p *pass) result(ctx context.Context, runErr error) (Result, error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), accountTimeout)
	defer cancel()
	o, err := p.Store.Get(ctx, api.KindPtahSchema, p.res.namespace(), p.res.Schema.Name)
	if err != nil {
		if runErr != nil {
			return Result{Name: p.res.Schema.Name, Dispatched: p.dispatched}, runErr
		}
		return Result{Name: p.res.Schema.Name, Dispatched: p.dispatched}, err
	}
	res := Result{Name: o.Name, Dispatched: p.dispatched}
	if len(o.Status) > 0 {
		_ = json.Unmarshal(o.Status, &res.Status)
	}
	if ref := res.Status.Plan; ref != nil {
		if po, err := p.Store.GetByUID(ctx, ref.UID); err == nil {
			if plan, err := decodePlan(po); err == nil {
				res.Plan = &plan
			}
		}
	}
	return res, runErr
}

func decodePlan(o store.Object) (engine.Plan, error) {
	plan := engine.Plan{Name: o.Name, UID: o.UID}
	if err := json.Unmarshal(o.Spec, &plan.Spec); err != nil {
		return plan, fmt.Errorf("decoding plan %s: %w", o.Name, err)
	}
	return plan, nil
}

func decodeApproval(o store.Object) (engine.Approval, error) {
	a := engine.Approval{Name: o.Name, UID: o.UID}
	if err := json.Unmarshal(o.Spec, &a.Spec); err != nil {
		return a, fmt.Errorf("decoding approval %s: %w", o.Name, err)
	}
	if len(o.Status) > 0 {
		if err := json.Unmarshal(o.Status, &a.Status); err != nil {
			return a, fmt.Errorf("decoding approval %s: %w", o.Name, err)
		}
	}
	return a, nil
}
