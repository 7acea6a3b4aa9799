package runner

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/ptah-run/ptah/internal/engine"
	"github.com/ptah-run/ptah/internal/failpoint"
	"github.com/ptah-run/ptah/internal/postgres"
	"github.com/ptah-run/ptah/internal/store"
	api "github.com/ptah-run/ptah/pkg/api/v1alpha1"
)

// pass is one resource's run of passes, for either family (its shell f
// holds what is the family's); it keeps what was observed during it,
// since an observation is valid for the rest of the pass.
type pass struct {
	*Runner
	res      Resource
	f        shell
	mode     Mode
	identity string

	rederived  string
	dispatched []string

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
		base, obj, err := p.gather(ctx)
		if err != nil {
			// What this pass dispatched is reported all the same (an
			// interrupt after a run ends here).
			return p.result(ctx, err)
		}
		base.PlanOnly = p.mode == PlanOnly
		d := p.f.decide(base)
		done, err := p.act(ctx, obj, base, d)
		if err != nil || done {
			return p.result(ctx, err)
		}
	}
	return Result{}, fmt.Errorf("%s: the pass did not settle after %d steps; this is a bug", p.res.Name(), maxStepsWithoutChange)
}

// gather reads everything the pass decides from: the shared input here,
// the family's own through its shell.
func (p *pass) gather(ctx context.Context) (engine.PassInput, store.Object, error) {
	now, err := postgres.ServerNow(ctx, p.Target)
	if err != nil {
		return engine.PassInput{}, store.Object{}, err
	}
	// The fence and the census need only what the store records about each
	// object; plans, which accumulate, are not read but for the current one.
	all, stored, err := p.storedState(ctx)
	if err != nil {
		return engine.PassInput{}, store.Object{}, err
	}
	in := engine.PassInput{
		Now: now, Name: p.res.Name(), Binding: p.binding(), Stored: stored, Rederived: p.rederived,
		NewOperationID: p.NewID(), RunTimeout: p.RunTimeout, TargetIdentityDigest: p.identity,
	}
	kind := p.f.kinds().resource
	in.Realm, in.Self = census(all, kind, p.res.namespace(), p.res.Name())
	self, err := p.Store.Get(ctx, kind, p.res.namespace(), p.res.Name())
	if errors.Is(err, store.ErrNotFound) {
		return in, self, fmt.Errorf("%s is not registered in the store", p.res.Name())
	}
	if err != nil {
		return in, self, err
	}
	if err := p.f.read(ctx, p, self); err != nil {
		return in, self, err
	}
	in.UID, in.Generation = self.UID, self.Generation
	rs := p.f.readState()
	op := rs.ActiveOperation
	in.Locked = op != nil && p.writer != nil && p.writerOp == op.ID
	in.LiveWriters, err = p.liveWriters(ctx, rs)
	return in, self, err
}

// census is every registered resource of either family as a claimant of
// its database, and the one named kind/namespace/name among them: one
// census spans both families.
func census(all []store.Object, kind, namespace, name string) (realm []engine.Claimant, self engine.Claimant) {
	for _, o := range all {
		if o.Kind != api.KindPtahSchema && o.Kind != api.KindPtahMigration {
			continue
		}
		c := engine.Claimant{Kind: o.Kind, Namespace: o.Namespace, Name: o.Name,
			CoordinationDigest: o.Labels[LabelCoordination], TargetIdentityDigest: o.Labels[LabelTarget],
			SharedRealm: o.Labels[LabelSharedRealm] == "true"}
		realm = append(realm, c)
		if o.Kind == kind && o.Namespace == namespace && o.Name == name {
			self = c
		}
	}
	return realm, self
}

// liveOperations are the dispatched operations the status names (a
// dispatched claim, the family's record of an uncertain run, an owed
// release), each with its coordination digest.
func (p *pass) liveOperations(rs *api.RunState) map[string]string {
	ops := map[string]string{} // operation ID -> coordination digest
	if op := rs.ActiveOperation; op != nil && op.DispatchedAt != nil {
		ops[op.ID] = op.CoordinationDigest
	}
	if id, digest, ok := p.f.uncertain(); ok {
		ops[id] = digest
	}
	if owed := rs.OwedRelease; owed != nil {
		ops[owed.OperationID] = owed.CoordinationDigest
	}
	return ops
}

// liveWriters asks, for each dispatched operation the status names, local
// mode's "Pod-level answer": may its writer still write?
func (p *pass) liveWriters(ctx context.Context, rs *api.RunState) (map[string]bool, error) {
	live := map[string]bool{}
	for id, digest := range p.liveOperations(rs) {
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
func (p *pass) act(ctx context.Context, obj store.Object, in engine.PassInput, d decision) (bool, error) {
	st, rs := p.f.status()
	before := p.f.readState()
	switch d.step {
	case engine.StepRefuse:
		return true, d.err
	case engine.StepReleaseOwed:
		owed := before.OwedRelease
		if err := postgres.ReleaseLease(ctx, p.Target, owed.CoordinationDigest, owed.OperationID); err != nil {
			return true, fmt.Errorf("completing the owed lease release of operation %s: %w", owed.OperationID, err)
		}
		return false, p.writeStatus(ctx, &obj, st)
	case engine.StepWriteStatus, engine.StepResolve:
		claimed := rs.ActiveOperation != nil && before.ActiveOperation == nil
		if before.ActiveOperation != nil && rs.ActiveOperation == nil {
			// The claim was dropped (its inputs moved) or settled: what was
			// read for it is stale.
			p.f.forget()
			p.rederived = ""
		}
		if err := p.writeStatus(ctx, &obj, st); err != nil {
			return true, err
		}
		if d.resolve != nil {
			// After the status: a crash between the two leaves an
			// acknowledgment naming a run no longer unresolved, which the
			// next pass marks stale.
			p.f.forget()
			if err := p.spend(ctx, d.resolve.UID, api.DecisionStatus{Consumed: &api.Consumption{OperationID: d.resolveOperation, At: api.NewTime(in.Now)}}); err != nil {
				return true, err
			}
		}
		if rs.ActiveOperation == nil {
			p.releaseUndispatched(ctx) // dropped before dispatch: nothing ran under it
		}
		if d.stable && rs.Reason == api.ReasonRunMayStillWrite {
			// A writer this process dispatched and lost touch with (its
			// connection broke) usually ends within moments: wait for
			// that, rather than leave the outcome to the next ptah apply.
			if id := p.ownLiveWriter(in); id != "" && p.mode == Apply {
				return !p.waitForWriter(ctx, id, before), nil
			}
		}
		if claimed {
			failpoint.Hit(FailAfterClaim)
		}
		return d.stable, nil
	case engine.StepObserve:
		err := p.f.observe(ctx, p)
		return err != nil, err
	case engine.StepMarkStale:
		for _, s := range d.stale {
			if err := p.spend(ctx, s.uid, api.DecisionStatus{Stale: true, StaleReason: s.reason}); err != nil {
				return true, err
			}
		}
		return false, nil
	case engine.StepPublish:
		return false, p.publish(ctx, obj, d)
	case engine.StepLock:
		return p.lock(ctx, obj, *d.operation)
	case engine.StepRederive:
		fp, err := p.f.rederive(ctx, p, *d.operation)
		if err != nil {
			return true, err
		}
		p.rederived = fp
		return false, nil
	case engine.StepDispatch:
		return p.dispatch(ctx, obj, in, *d.operation)
	}
	return true, fmt.Errorf("unknown step %q", d.step)
}

// writeStatus writes st conditionally on obj's resourceVersion, and moves
// obj to the new version for the next write.
func (p *pass) writeStatus(ctx context.Context, obj *store.Object, st any) error {
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

// spend writes a decision's status (an approval or acknowledgment gone
// stale, or consumed), by UID.
func (p *pass) spend(ctx context.Context, uid string, ds api.DecisionStatus) error {
	o, err := p.Store.GetByUID(ctx, uid)
	if err != nil {
		return fmt.Errorf("reading decision %s: %w", uid, err)
	}
	raw, err := json.Marshal(ds)
	if err != nil {
		return err
	}
	o.Status, o.ContractVersion = raw, api.ContractVersion
	_, err = p.Store.UpdateStatus(ctx, o)
	if errors.Is(err, store.ErrNewerContract) {
		return p.refusedAsNewer(ctx, o.Kind, o.Namespace, o.Name, err)
	}
	if err != nil {
		return fmt.Errorf("recording that %s %s is spent: %w", o.Kind, o.Name, err)
	}
	return nil
}

// publish stores a new immutable plan object. Its name is derived from the
// content, so the same content published again replaces the old object:
// same name, new UID, and approvals of the old one authorize nothing.
func (p *pass) publish(ctx context.Context, obj store.Object, d decision) error {
	k := p.f.kinds()
	name := planName(p.res.Name(), d.planFingerprint)
	spec, err := json.Marshal(d.plan)
	if err != nil {
		return fmt.Errorf("encoding plan: %w", err)
	}
	if old, err := p.Store.Get(ctx, k.plan, obj.Namespace, name); err == nil {
		if err := p.Store.Delete(ctx, old.Kind, old.Namespace, old.Name, old.UID); err != nil {
			return fmt.Errorf("replacing plan %s: %w", name, err)
		}
	}
	created, err := p.Store.Create(ctx, store.Object{Kind: k.plan, Namespace: obj.Namespace, Name: name,
		ContractVersion: api.ContractVersion, Immutable: true, Labels: map[string]string{k.label: p.res.Name()}, Spec: spec})
	if err != nil {
		return fmt.Errorf("publishing plan %s: %w", name, err)
	}
	st, rs := p.f.status()
	rs.Plan = &api.PlanReference{ObjectReference: api.ObjectReference{Name: created.Name, UID: created.UID}, Fingerprint: d.planFingerprint}
	if err := p.writeStatus(ctx, &obj, st); err != nil {
		return err
	}
	return p.prunePlans(ctx)
}

// prunePlans removes the resource's plans that nothing needs any more
// (engine.PlansToPrune), so that they do not pile up with every change.
func (p *pass) prunePlans(ctx context.Context) error {
	k := p.f.kinds()
	plans, err := p.Store.List(ctx, store.ListOptions{Kind: k.plan, Namespace: p.res.namespace(),
		Labels: map[string]string{k.label: p.res.Name()}, MetadataOnly: true})
	if err != nil {
		return fmt.Errorf("listing the plans of %s: %w", p.res.Name(), err)
	}
	byUID := map[string]store.Object{}
	uids := make([]string, len(plans))
	for i, o := range plans {
		uids[i], byUID[o.UID] = o.UID, o
	}
	for _, uid := range p.f.plansToPrune(uids) {
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
func (p *pass) lock(ctx context.Context, obj store.Object, op api.Operation) (bool, error) {
	p.releaseUndispatched(ctx)
	w, err := postgres.OpenWriter(ctx, p.res.TargetURL, op.CoordinationDigest, op.ID, p.res.storeResource(), op.Deadline.Time)
	var held *postgres.LeaseHeldError
	switch {
	case errors.As(err, &held):
		// Nothing of the claim was dispatched: it is dropped, and the
		// next pass plans anew.
		st, rs := p.f.status()
		engine.LeaseHeld(rs, held.Error())
		return true, p.writeStatus(ctx, &obj, st)
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

// dispatch runs the claimed plan once on the locked writer: the dispatch
// marker (and, for a family that spends its approval there, the approval
// consumed) commits with the run's journal row, before any statement;
// then the family accounts for the run in one write; only then is the
// database released.
func (p *pass) dispatch(ctx context.Context, obj store.Object, in engine.PassInput, op api.Operation) (bool, error) {
	w := p.writer
	if w == nil || p.writerOp != op.ID {
		return true, fmt.Errorf("operation %s reached dispatch without holding the database's lease; this is a bug", op.ID)
	}
	// From here on the lease is this dispatch's to give back, and only in
	// the order the guarantees demand.
	p.writer, p.writerOp = nil, ""
	plan, spent, err := p.f.execPlan(ctx, p, op)
	if err != nil {
		_ = w.Release(context.WithoutCancel(ctx)) // nothing ran
		return true, err
	}
	marked := op
	marked.DispatchedAt = &api.Time{Time: in.Now}
	st, rs := p.f.status()
	rs.ActiveOperation = &marked
	var updated store.Object
	mark := func(ctx context.Context, tx pgx.Tx) error {
		s := p.storeIn(tx)
		if s == nil {
			return errors.New("the store cannot join the writer's transaction")
		}
		raw, err := json.Marshal(st)
		if err != nil {
			return err
		}
		o := obj
		o.Status, o.ContractVersion = raw, api.ContractVersion
		if updated, err = s.UpdateStatus(ctx, o); err != nil {
			return fmt.Errorf("writing the dispatch marker of %s: %w", obj.Name, err)
		}
		if spent == nil {
			return nil
		}
		a, err := s.GetByUID(ctx, spent.UID)
		if err != nil {
			return fmt.Errorf("reading approval %s: %w", spent.Name, err)
		}
		raw, _ = json.Marshal(api.DecisionStatus{Consumed: &api.Consumption{OperationID: op.ID, At: api.NewTime(in.Now)}})
		a.Status, a.ContractVersion = raw, api.ContractVersion
		if _, err := s.UpdateStatus(ctx, a); err != nil {
			return fmt.Errorf("spending approval %s: %w", spent.Name, err)
		}
		return nil
	}
	runErr := w.ExecuteMarked(ctx, op.Plan.UID, plan, p.Progress, mark)
	for attempt := 0; errors.Is(runErr, store.ErrConflict) && attempt < 4; attempt++ {
		// Another process registered the resource meanwhile (its spec
		// or labels): nothing was marked, and nothing ran. Mark over the
		// new version of the same object.
		fresh, err := p.Store.Get(ctx, obj.Kind, obj.Namespace, obj.Name)
		if err != nil || fenceObject(fresh) != nil || fresh.UID != obj.UID {
			break
		}
		obj = fresh
		runErr = w.ExecuteMarked(ctx, op.Plan.UID, plan, p.Progress, mark)
	}
	if errors.Is(runErr, postgres.ErrNotMarked) || errors.Is(runErr, postgres.ErrWriterClosed) {
		// Nothing ran, and no marker stands: the lease goes back with the
		// claim undispatched.
		_ = w.Release(context.WithoutCancel(ctx))
		rs.ActiveOperation = &op
		return true, runErr
	}
	if updated.UID != "" {
		obj = updated
	} else if fresh, err := p.Store.Get(context.WithoutCancel(ctx), obj.Kind, obj.Namespace, obj.Name); err == nil {
		obj = fresh // the marker's commit went unanswered: write over what is stored
	}
	p.dispatched = append(p.dispatched, op.ID)
	failpoint.Hit(FailAfterExecution)
	// Accounting and the release happen even when the caller gave up
	// (Ctrl-C): they record what was done, and are bounded on their own.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), accountTimeout)
	defer cancel()
	failed := p.f.account(ctx, p, in, marked, plan, runErr, p.serverNow(ctx, in.Now))
	st, rs = p.f.status()
	if err := p.writeStatus(ctx, &obj, st); err != nil {
		// The claim still reads as dispatched, and no release is owed on
		// record: the database must not be handed back. Ending the writer's
		// session (never deleting its lease row) stops it from writing;
		// the next pass finds it gone and settles the run.
		w.Abandon()
		return true, fmt.Errorf("recording the outcome of operation %s: %w", op.ID, err)
	}
	failpoint.Hit(FailBeforeRelease)
	p.f.forget()
	p.rederived = ""
	if rs.OwedRelease == nil {
		// The writer may still be writing (it was cut off from this
		// process, not ended): the database stays held until it cannot.
		w.Abandon()
		return false, nil
	}
	if err := w.Release(ctx); err != nil {
		// The writer's session is gone (a lost connection) or unusable:
		// the release stays owed in the status, and a later step completes
		// it from the runner's own session once the writer can no longer
		// write (a failed run stops here; the next ptah apply completes it).
		return failed, nil
	}
	rs.OwedRelease = nil
	if err := p.writeStatus(ctx, &obj, st); err != nil {
		return true, err
	}
	return failed, nil
}

// ownLiveWriter returns the operation this process dispatched whose writer
// may still write, if any.
func (p *pass) ownLiveWriter(in engine.PassInput) string {
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
func (p *pass) waitForWriter(ctx context.Context, id string, rs *api.RunState) bool {
	digest := p.liveOperations(rs)[id]
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
		return engine.RunFailed, statusMessage(err)
	}
	return engine.RunUncertain, statusMessage(err)
}

// statusMessage is what a resource's status keeps of a run's error: its
// text without the SQL of the statement concerned (a status never carries
// SQL, which may hold anything, a password included; the journal, in the
// database, keeps the statement). The writer's errors put a statement's
// SQL on the lines after their own text (a refused statement's, one in
// flight when the session was lost): only the first line is kept.
func statusMessage(err error) string {
	line, _, _ := strings.Cut(err.Error(), "\n")
	return line
}

// result reads where the pass left the resource, even after the caller gave
// up (an interrupt): what it did is what the caller must be told.
func (p *pass) result(ctx context.Context, runErr error) (Result, error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), accountTimeout)
	defer cancel()
	o, err := p.Store.Get(ctx, p.f.kinds().resource, p.res.namespace(), p.res.Name())
	if err != nil {
		if runErr == nil {
			runErr = err
		}
		return Result{Name: p.res.Name(), Kind: p.res.Kind(), Dispatched: p.dispatched}, runErr
	}
	res := p.f.result(ctx, p, o)
	res.Dispatched = p.dispatched
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
