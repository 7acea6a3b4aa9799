package controller

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlcontroller "sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/recorder"

	"github.com/ptah-run/ptah/internal/engine"
	"github.com/ptah-run/ptah/internal/failpoint"
	"github.com/ptah-run/ptah/internal/runner"
	"github.com/ptah-run/ptah/internal/store"
	api "github.com/ptah-run/ptah/pkg/api/v1alpha1"
)

// Reconciler converges the resources of one family (Kind: PtahSchema or
// PtahMigration): the engine's pass, run once per reconcile until it
// waits, with the database work in Jobs (readings and applies, see ptah
// exec), and the database's lease a coordination.k8s.io Lease. The
// manager itself never connects to a database and never reads a Secret.
type Reconciler struct {
	// Kind is the family's resource kind.
	Kind   string
	Client client.Client
	Store  store.Store
	// Image runs ptah exec in the Jobs.
	Image   string
	Version string
	// Now is the manager's clock; NewID returns fresh operation IDs.
	Now   func() time.Time
	NewID func() string
	// RunTimeout bounds an apply (its absolute deadline), ReadTimeout a
	// reading.
	RunTimeout, ReadTimeout time.Duration
	// Events records a Kubernetes Event on each change of phase or reason.
	Events recorder.EventRecorder
	// Namespace is the manager's own: the Leases of coordination keys a
	// PtahRealm joins across namespaces live there.
	Namespace string
	// Fence is the stored state a pass's fence reads (nil: the Store's,
	// listed at every pass).
	Fence StoredState
}

// Failpoints the reconciler stops at in crash tests (see failpoint).
const (
	// FailAfterDispatchMarker: the dispatch marker is durable, the apply
	// Job is not created.
	FailAfterDispatchMarker = "cluster-after-dispatch-marker"
	// FailBeforeRelease: the run is accounted for and its release owed,
	// durably; the Lease is not released.
	FailBeforeRelease = "cluster-before-lease-release"
)

// Requeue delays.
const (
	// writerPoll is how often a run that may still write is looked at.
	writerPoll = 5 * time.Second
	// deadlineGrace is added to a run's deadline before the manager
	// counts on it: ptah exec enforces the deadline on the database
	// server's clock, which may run behind the manager's.
	deadlineGrace = 30 * time.Second
	maxSteps      = 32
	// censusCadence is how often a resource blocked by another one looks
	// again.
	censusCadence = 30 * time.Second
)

// SetupWithManager registers the reconciler: it watches its family's
// resources, the Jobs it owns, and their decisions (approvals, and a
// PtahMigration's acknowledgments).
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	label := runner.LabelSchema
	var resource client.Object = &api.PtahSchema{}
	decisions := []client.Object{&api.PtahSchemaApproval{}}
	if r.Kind == api.KindPtahMigration {
		label, resource = runner.LabelMigration, &api.PtahMigration{}
		decisions = []client.Object{&api.PtahMigrationApproval{}, &api.PtahMigrationRunAcknowledgment{}}
	}
	byLabel := handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, o client.Object) []reconcile.Request {
		name := o.GetLabels()[label]
		if name == "" {
			return nil
		}
		return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: o.GetNamespace(), Name: name}}}
	})
	b := ctrl.NewControllerManagedBy(mgr).
		Named(strings.ToLower(r.Kind)).
		// Its own status writes do not wake it: only a new generation (a
		// spec change), its Jobs, its decisions and its schedule do.
		For(resource, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Owns(&batchv1.Job{}, builder.WithPredicates(jobFinishes))
	for _, d := range decisions {
		b = b.Watches(d, byLabel, builder.WithPredicates(comesOrGoes))
	}
	// Several managers in one process (tests) each register it.
	return b.WithOptions(ctrlcontroller.Options{SkipNameValidation: &skipNameValidation}).Complete(r)
}

var skipNameValidation = true

// jobFinishes passes the moment a Job finishes: the reconciler's own
// creations and deletions of Jobs wake nothing.
var jobFinishes = predicate.Funcs{
	CreateFunc:  func(event.CreateEvent) bool { return false },
	DeleteFunc:  func(event.DeleteEvent) bool { return false },
	GenericFunc: func(event.GenericEvent) bool { return false },
	UpdateFunc: func(e event.UpdateEvent) bool {
		old, oldOK := e.ObjectOld.(*batchv1.Job)
		cur, curOK := e.ObjectNew.(*batchv1.Job)
		return oldOK && curOK && !jobFinished(old) && jobFinished(cur)
	},
}

// comesOrGoes passes a decision's creation and deletion: its spec never
// changes, and its status is the manager's own writing.
var comesOrGoes = predicate.Funcs{
	UpdateFunc:  func(event.UpdateEvent) bool { return false },
	GenericFunc: func(event.GenericEvent) bool { return false },
}

// pass is one reconcile's state: what was read for it.
type pass struct {
	r       *Reconciler
	fam     family
	obj     store.Object
	res     runner.Resource
	spec    specView
	records *runner.Records

	// observation is the reading taken for this reconcile's pass
	// (*engine.Observation or *engine.MigrationObservation), and its
	// bindings; rederived the claim's input fingerprint from a reading
	// under its Lease.
	observation any
	observed    *api.Bindings
	rederived   string

	// kept is the unresolved run kept in the resource's annotation
	// (AnnotationUnresolvedRun), as last read or written; keptRead says
	// it was read.
	kept     *api.UnresolvedRun
	keptRead bool

	// scope is what the resource's coordination key is scoped to (its
	// namespace, or the PtahRealm admitting it), leaseNS where its
	// database's Lease lives.
	scope, leaseNS string

	// snapshot is what the pass reads of the rest of the cluster once, at
	// its first step, and its later steps reuse: the stored state the
	// fence scans, the PtahRealms and the other resources the census
	// counts. Each is a list of every object of its kinds, so reading
	// them at every step made a pass's cost grow with the cluster times
	// its steps. What the pass itself writes meanwhile is its own (at its
	// own contract version); what others write meanwhile, the next pass
	// reads, as it would had they written a moment after this one.
	snapshot *snapshot
	// tidied are the operations the status named when tidy last looked.
	tidied map[string]bool
}

type snapshot struct {
	stored   []engine.StoredObject
	realms   []api.PtahRealm
	claimers []store.Object // every PtahSchema and PtahMigration
}

// runState is what a status read names of runs: its run state, and the
// family's record of a run whose outcome is not known (a PtahSchema's
// pending observation, a PtahMigration's unresolved run).
type runState struct {
	api.RunState
	uncertainID, uncertainDigest string
	// unresolved is a PtahMigration's unresolved run; migration its run
	// records, which a reading reads the journal against.
	unresolved *api.UnresolvedRun
	migration  *api.PtahMigrationStatus
}

func (p *pass) runState() runState {
	rs := runState{RunState: p.records.State(), migration: p.records.MigrationRuns()}
	rs.uncertainID, rs.uncertainDigest, _ = p.records.Uncertain()
	if rs.migration != nil {
		rs.unresolved = rs.migration.UnresolvedRun
	}
	return rs
}

// Reconcile runs the pass for one resource until it reaches a stable
// phase or waits for a Job.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	obj, err := r.Store.Get(ctx, r.Kind, req.Namespace, req.Name)
	if errors.Is(err, store.ErrNotFound) {
		return ctrl.Result{}, nil
	}
	if err != nil {
		return ctrl.Result{}, err
	}
	p := &pass{r: r, fam: familyOf(r.Kind), obj: obj}
	live := p.liveObject()
	if err := r.Client.Get(ctx, req.NamespacedName, live); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if live.GetDeletionTimestamp() != nil {
		return p.finishDeletion(ctx, live)
	}
	return p.run(ctx)
}

// liveObject is an empty typed object of the family's kind.
func (p *pass) liveObject() client.Object {
	if p.r.Kind == api.KindPtahMigration {
		return &api.PtahMigration{}
	}
	return &api.PtahSchema{}
}

// FinalizerRuns holds a resource's deletion while a run of it may still
// write: without it, deleting the resource would let the garbage collector
// take its apply Job and Pod mid-run, and leave its Lease held for ever.
// The manager sets it before it dispatches and removes it once nothing of
// the resource is under way.
const FinalizerRuns = "ptah.run/runs"

// holdDeletion sets FinalizerRuns on the resource.
func (p *pass) holdDeletion(ctx context.Context) error {
	live := p.liveObject()
	if err := p.r.Client.Get(ctx, client.ObjectKey{Namespace: p.obj.Namespace, Name: p.obj.Name}, live); err != nil {
		return err
	}
	if controllerutil.ContainsFinalizer(live, FinalizerRuns) {
		return nil
	}
	base := live.DeepCopyObject().(client.Object)
	controllerutil.AddFinalizer(live, FinalizerRuns)
	if err := p.r.Client.Patch(ctx, live, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{})); err != nil {
		return fmt.Errorf("holding the deletion of %s/%s while it runs: %w", p.obj.Namespace, p.obj.Name, err)
	}
	return nil
}

// releaseDeletion removes FinalizerRuns from live.
func (p *pass) releaseDeletion(ctx context.Context, live client.Object) error {
	if !controllerutil.ContainsFinalizer(live, FinalizerRuns) {
		return nil
	}
	base := live.DeepCopyObject().(client.Object)
	controllerutil.RemoveFinalizer(live, FinalizerRuns)
	return client.IgnoreNotFound(p.r.Client.Patch(ctx, live, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{})))
}

// finishDeletion lets a deleted resource go once no run of it may still
// write: then its Leases are released, its Jobs removed, and the
// finalizer taken off. Nothing new starts meanwhile.
func (p *pass) finishDeletion(ctx context.Context, live client.Object) (ctrl.Result, error) {
	if !controllerutil.ContainsFinalizer(live, FinalizerRuns) {
		return ctrl.Result{}, nil
	}
	if err := p.decode(); err != nil {
		return ctrl.Result{}, err
	}
	if err := p.resolveScope(ctx); err != nil {
		return ctrl.Result{}, err
	}
	if err := p.records.Read(ctx, p.obj, runner.Facts{}); err != nil {
		return ctrl.Result{}, err
	}
	rs := p.runState()
	writers, err := p.liveWriters(ctx, rs, p.r.Now())
	if err != nil {
		return ctrl.Result{}, err
	}
	for id, may := range writers {
		if may {
			log.FromContext(ctx).Info("deletion waits for a run that may still write", "operation", id)
			return ctrl.Result{RequeueAfter: writerPoll}, nil
		}
	}
	if err := p.releaseStrayLeases(ctx, runState{}); err != nil { // none is named any more: all go
		return ctrl.Result{}, err
	}
	for id := range rs.namedOperations() {
		p.removeJob(ctx, id, "", partsUnknown)
	}
	return ctrl.Result{}, p.releaseDeletion(ctx, live)
}

// namedIn are the operations a stored status of either family names.
func namedIn(raw []byte) map[string]bool {
	var st struct {
		api.RunState
		PendingObservation *api.PendingObservation `json:"pendingObservation"`
		UnresolvedRun      *api.UnresolvedRun      `json:"unresolvedRun"`
	}
	if len(raw) == 0 || json.Unmarshal(raw, &st) != nil {
		return map[string]bool{}
	}
	rs := runState{RunState: st.RunState}
	if po := st.PendingObservation; po != nil {
		rs.uncertainID = po.OperationID
	}
	if u := st.UnresolvedRun; u != nil {
		rs.uncertainID = u.OperationID
	}
	return rs.namedOperations()
}

// namedOperations are the operations the status names, as a set.
func (rs runState) namedOperations() map[string]bool {
	named := map[string]bool{}
	if op := rs.ActiveOperation; op != nil {
		named[op.ID] = true
	}
	if rs.uncertainID != "" {
		named[rs.uncertainID] = true
	}
	if owed := rs.OwedRelease; owed != nil {
		named[owed.OperationID] = true
	}
	return named
}

func (p *pass) decode() error {
	res, v, err := p.fam.decode(p.obj)
	if err != nil {
		return err
	}
	p.res, p.spec = res, v
	p.records = runner.NewRecords(p.r.Store, res)
	return nil
}

func (p *pass) run(ctx context.Context) (ctrl.Result, error) {
	for step := range maxSteps {
		// Every step but the first, which has what Reconcile read, reads
		// the resource again: the last step wrote it.
		if step > 0 {
			obj, err := p.r.Store.Get(ctx, p.r.Kind, p.obj.Namespace, p.obj.Name)
			if errors.Is(err, store.ErrNotFound) {
				return ctrl.Result{}, nil
			}
			if err != nil {
				return ctrl.Result{}, err
			}
			if obj.UID != p.obj.UID {
				return ctrl.Result{RequeueAfter: time.Second}, nil // deleted and created again: start over
			}
			p.obj = obj
		}
		if err := p.decode(); err != nil {
			return ctrl.Result{}, err
		}
		if err := p.resolveScope(ctx); err != nil {
			return ctrl.Result{}, err
		}
		facts, err := p.facts(ctx)
		if err != nil {
			return ctrl.Result{}, err
		}
		if err := p.records.Read(ctx, p.obj, facts); err != nil {
			return ctrl.Result{}, err
		}
		if restored, err := p.restoreKept(ctx); err != nil || restored {
			if err != nil {
				return ctrl.Result{}, err
			}
			continue
		}
		rs := p.runState()
		// Suspended, or a spec it cannot serve: nothing new starts, and the
		// status says so. A change of spec wakes it.
		if st, held := p.held(engine.Hold{Suspended: p.spec.Schedule.Suspend, Unservable: p.servable()}, rs); held {
			return ctrl.Result{}, p.write(ctx, st)
		}
		accounted, err := p.account(ctx, rs)
		if err != nil || accounted {
			if err != nil {
				return ctrl.Result{}, err
			}
			continue
		}
		if running, err := p.applyRunning(ctx, rs); err != nil || running {
			// Its Job's end wakes the reconcile; until then the status says
			// what dispatch wrote, and the deadline is watched.
			return ctrl.Result{RequeueAfter: writerPoll}, err
		}
		if err := p.tidy(ctx, rs); err != nil {
			return ctrl.Result{}, err
		}
		base, err := p.gather(ctx, rs)
		if err == nil {
			base.Realm, base.Self, err = p.census(ctx, rs)
		}
		if err != nil {
			return ctrl.Result{}, err
		}
		if p.observation != nil {
			if err := p.records.SetObservation(p.observation); err != nil {
				return ctrl.Result{}, err
			}
		}
		if o := p.observed; o != nil {
			// The census of every other resource reads it from here.
			p.records.SetObservedTarget(&api.ObservedTarget{CoordinationDigest: o.CoordinationDigest,
				TargetIdentityDigest: o.TargetIdentityDigest})
		}
		d := p.records.Decide(base)
		_, decided := p.records.Decided()
		log.FromContext(ctx).V(1).Info("pass", "step", d.Step(), "phase", decided.Phase, "reason", decided.Reason)
		res, done, err := p.act(ctx, rs, base, d)
		if err != nil || done {
			return res, err
		}
	}
	return ctrl.Result{}, fmt.Errorf("%s/%s: the pass did not settle after %d steps; this is a bug", p.obj.Namespace, p.obj.Name, maxSteps)
}

// tidy releases the Leases and removes the finished apply Jobs of
// operations the status no longer names (left by a manager that stopped
// between recording a run and releasing or removing what it held). What
// it finds depends on the operations named, so a step of the pass that
// names the same ones as the last step that tidied has nothing to find:
// the Leases and Jobs this pass creates are of operations it names.
func (p *pass) tidy(ctx context.Context, rs runState) error {
	named := rs.namedOperations()
	if p.tidied != nil && maps.Equal(named, p.tidied) {
		return nil
	}
	if err := p.releaseStrayLeases(ctx, rs); err != nil {
		return err
	}
	if err := p.removeSettledApplies(ctx, rs); err != nil {
		return err
	}
	p.tidied = named
	return nil
}

// facts are what a PtahMigration's pass reads in the database in local
// mode: here, whether its unresolved run's Lease is still held. (What the
// journal says of a run comes from the run's own Pod, accounted before
// the pass: a run whose Pod left no result is for a person to settle.)
func (p *pass) facts(ctx context.Context) (runner.Facts, error) {
	var st struct {
		UnresolvedRun *api.UnresolvedRun `json:"unresolvedRun"`
	}
	if len(p.obj.Status) == 0 || json.Unmarshal(p.obj.Status, &st) != nil || st.UnresolvedRun == nil {
		return runner.Facts{}, nil
	}
	holder, err := p.leaseHolder(ctx, st.UnresolvedRun.CoordinationDigest)
	if err != nil || holder == "" {
		return runner.Facts{}, err
	}
	return runner.Facts{LeaseHeld: map[string]bool{holder: true}}, nil
}

// idle: the status names no run under way, no uncertain outcome and no
// owed release.
func (rs runState) idle() bool {
	return rs.ActiveOperation == nil && rs.uncertainID == "" && rs.OwedRelease == nil
}

// servable says why ptah serve cannot act on the resource, "" when it
// can: its spec must be valid as local mode holds it (what the CRD's
// schema cannot say: a duration's minimum, mutually exclusive fields), and
// its target and source in the cluster come from a Secret and a ConfigMap
// or an OCI artifact.
func (p *pass) servable() string {
	switch v := p.spec; {
	case v.Invalid != nil:
		return "the spec is invalid: " + v.Invalid.Error()
	case v.Target.URLFrom == nil || v.Target.URLFrom.SecretKeyRef == nil:
		return "ptah serve reads the database URL from a Secret: set spec.target.urlFrom.secretKeyRef {name, key}"
	case v.ConfigMap == nil && v.OCI == nil:
		return "ptah serve reads the files from a ConfigMap or an OCI artifact: set spec.source.configMap.name or spec.source.oci.ref"
	}
	return ""
}

// gather is the pass's input beyond the records: the clock, the fence,
// the lease, and the Pod-level answer for each run the status names.
func (p *pass) gather(ctx context.Context, rs runState) (engine.PassInput, error) {
	snap, err := p.read(ctx)
	if err != nil {
		return engine.PassInput{}, err
	}
	in := engine.PassInput{
		Now: p.r.Now(), Name: p.obj.Name, UID: p.obj.UID, Generation: p.obj.Generation, Binding: p.binding(), Stored: snap.stored,
		Rederived: p.rederived, NewOperationID: p.r.NewID(), RunTimeout: p.r.RunTimeout,
	}
	if p.observed != nil {
		in.TargetIdentityDigest = p.observed.TargetIdentityDigest
	} else if t := rs.Target; t != nil {
		in.TargetIdentityDigest = t.TargetIdentityDigest // the latest reading's
	}
	if op := rs.ActiveOperation; op != nil {
		holder, err := p.leaseHolder(ctx, op.CoordinationDigest)
		if err != nil {
			return in, err
		}
		in.Locked = holder == op.ID
	}
	in.LiveWriters, err = p.liveWriters(ctx, rs, in.Now)
	return in, err
}

// write writes st as the resource's status, and tells of a change of
// phase or reason: an Event on the resource, and the blocked gauge.
func (p *pass) write(ctx context.Context, st any) error {
	var before, after api.RunState
	if len(p.obj.Status) > 0 {
		_ = json.Unmarshal(p.obj.Status, &before)
	}
	if err := p.keep(ctx, st); err != nil {
		return err
	}
	if err := p.records.WriteStatus(ctx, &p.obj, st); err != nil {
		return err
	}
	if err := p.dropKept(ctx); err != nil {
		return err
	}
	_ = json.Unmarshal(p.obj.Status, &after)
	reason := ""
	if after.Phase == api.PhaseBlocked {
		reason = after.Reason
	}
	blockedNow.set(p.r.Kind, p.obj.Namespace+"/"+p.obj.Name, reason)
	if (after.Phase != before.Phase || after.Reason != before.Reason) && after.Reason != "" {
		kind := corev1.EventTypeNormal
		if after.Phase == api.PhaseBlocked || after.Phase == api.PhaseFailed {
			kind = corev1.EventTypeWarning
		}
		p.event(kind, after.Reason, after.Message)
	}
	return nil
}

// ReasonNewerStoredState is the Event of a pass the stored-state fence
// refused: what a newer ptah wrote is named, and nothing is written.
const ReasonNewerStoredState = "NewerStoredState"

// event records a Kubernetes Event on the resource.
func (p *pass) event(kind, reason, note string) {
	if p.r.Events == nil {
		return
	}
	ref := p.liveObject()
	ref.GetObjectKind().SetGroupVersionKind(api.GroupVersion.WithKind(p.r.Kind))
	ref.SetName(p.obj.Name)
	ref.SetNamespace(p.obj.Namespace)
	ref.SetUID(types.UID(p.obj.UID))
	if len(note) > 1000 {
		note = note[:1000]
	}
	p.r.Events.Eventf(ref, nil, kind, reason, "Reconcile", "%s", note)
}

func (p *pass) binding() api.ExecutionBinding {
	return api.ExecutionBinding{PtahVersion: p.r.Version, ContractVersion: api.ContractVersion, Engine: api.EnginePostgres}
}

// forget drops what was read for a claim.
func (p *pass) forget() { p.observation, p.observed, p.rederived = nil, nil, "" }

// act carries out one decision; done reports that the reconcile ends.
func (p *pass) act(ctx context.Context, before runState, in engine.PassInput, d runner.Decision) (ctrl.Result, bool, error) {
	st, rs := p.records.Decided()
	switch d.Step() {
	case engine.StepRefuse:
		// The status is stored state too: the refusal is told in an Event
		// and the manager's log, and a change of spec tries again.
		p.event(corev1.EventTypeWarning, ReasonNewerStoredState, d.Err().Error())
		return ctrl.Result{}, true, reconcile.TerminalError(d.Err())
	case engine.StepReleaseOwed:
		owed := before.OwedRelease
		failpoint.Hit(FailBeforeRelease)
		if err := p.releaseLease(ctx, owed.CoordinationDigest, owed.OperationID); err != nil {
			return ctrl.Result{}, true, err
		}
		return ctrl.Result{}, false, p.write(ctx, st)
	case engine.StepWriteStatus, engine.StepResolve:
		if op := before.ActiveOperation; op != nil && rs.ActiveOperation == nil {
			p.forget() // what was read for the claim is stale
			if op.DispatchedAt == nil {
				defer func() { _ = p.releaseLease(ctx, op.CoordinationDigest, op.ID) }() // nothing ran under it
			}
		}
		named := namedIn(p.obj.Status)
		if err := p.write(ctx, st); err != nil {
			return ctrl.Result{}, true, err
		}
		// A run the status no longer names is settled: its Job, which
		// nothing creates again, goes.
		for id := range named {
			if !namedIn(p.obj.Status)[id] {
				p.removeJob(ctx, id, "", partsUnknown)
			}
		}
		if a := d.Resolves(); a != nil {
			// After the status: a crash between the two leaves an
			// acknowledgment naming a run no longer unresolved, which the
			// next pass marks stale.
			p.forget()
			if err := p.records.Spend(ctx, *a, before.uncertainID, in.Now); err != nil {
				return ctrl.Result{}, true, err
			}
		}
		if !d.Stable() {
			return ctrl.Result{}, false, nil
		}
		if p.runState().idle() {
			live := p.liveObject()
			if err := p.r.Client.Get(ctx, client.ObjectKey{Namespace: p.obj.Namespace, Name: p.obj.Name}, live); err == nil {
				if err := p.releaseDeletion(ctx, live); err != nil {
					return ctrl.Result{}, true, err
				}
			}
		}
		switch rs.Reason {
		case api.ReasonRunMayStillWrite:
			return ctrl.Result{RequeueAfter: writerPoll}, true, nil
		case api.ReasonRealmConflict, api.ReasonLeaseHeld:
			// Another resource's edit wakes nothing here: look again soon.
			return ctrl.Result{RequeueAfter: censusCadence}, true, nil
		}
		// A change of spec, decision or Job wakes it sooner.
		return ctrl.Result{RequeueAfter: p.spec.Schedule.IntervalDuration()}, true, nil
	case engine.StepObserve:
		return p.observe(ctx, before, TaskObserve, p.r.NewID())
	case engine.StepMarkStale:
		return ctrl.Result{}, false, p.records.MarkStale(ctx, d)
	case engine.StepPublish:
		if err := p.records.Publish(ctx, p.obj, d); err != nil {
			return ctrl.Result{}, true, err
		}
		plansPublished.WithLabelValues(p.r.Kind).Inc()
		return ctrl.Result{}, false, nil
	case engine.StepLock:
		return p.lock(ctx, *d.Operation())
	case engine.StepRederive:
		return p.observe(ctx, before, TaskRederive, d.Operation().ID+"-rederive")
	case engine.StepDispatch:
		return p.dispatch(ctx, in, *d.Operation())
	}
	return ctrl.Result{}, true, fmt.Errorf("unknown step %q", d.Step())
}

// observe takes a reading in a Job: it starts the Job, or waits for it, or
// takes its answer (and removes it) and goes on. An observation is started
// afresh for each pass that asks (id is new each time) unless one is
// already under way; a re-derivation has one per claim.
func (p *pass) observe(ctx context.Context, rs runState, task, id string) (ctrl.Result, bool, error) {
	cur, curDigest, err := p.readingUnderWay(ctx, task)
	if err != nil {
		return ctrl.Result{}, true, err
	}
	payload := Payload{OperationID: id, Task: task, Resource: p.obj.Name, Namespace: p.obj.Namespace, ResourceUID: p.obj.UID,
		CoordinationScope: p.scope}
	p.fam.reading(&payload, p.res, rs)
	if cur != "" {
		payload.OperationID = cur
	}
	parts, err := splitPayload(payload)
	if err != nil {
		return ctrl.Result{}, true, err
	}
	if cur != "" && curDigest != parts.Digest {
		// A reading of what the resource was (its spec, its records of
		// runs) before it changed: its answer is not this pass's. It goes,
		// and a reading of the resource as it is now starts.
		p.removeJob(ctx, cur, task, partsUnknown)
		payload.OperationID = id
		if parts, err = splitPayload(payload); err != nil {
			return ctrl.Result{}, true, err
		}
	}
	id = payload.OperationID
	res, ended, err := p.jobResult(ctx, id, parts.Digest)
	if err != nil {
		return ctrl.Result{}, true, err
	}
	if !ended {
		now := p.r.Now()
		req := p.request(id, task, now, now.Add(p.r.ReadTimeout), parts)
		if task == TaskObserve {
			req.ServiceAccount = PlannerServiceAccount
		}
		// Its Job's end wakes the reconcile; a Job deleted meanwhile wakes
		// nothing: look again.
		return ctrl.Result{RequeueAfter: censusCadence}, true, p.startJob(ctx, req)
	}
	defer p.removeJob(ctx, id, task, !parts.Inline())
	if res == nil || res.Outcome != OutcomeSucceeded || res.Observation == nil {
		return p.readingFailed(ctx, rs, id, describe(res))
	}
	if task == TaskRederive {
		fp := ""
		if op := rs.ActiveOperation; op != nil {
			fp = op.Plan.Fingerprint
		}
		p.rederived = engine.InputFingerprint(fp, res.Observation.Bindings)
		return ctrl.Result{}, false, nil
	}
	obs, err := p.fam.adopt(ctx, p.r.Store, p.obj.Namespace, p.obj.UID, id, *res.Observation)
	if err != nil {
		return ctrl.Result{}, true, err
	}
	bindings := res.Observation.Bindings
	p.observation, p.observed = obs, &bindings
	return ctrl.Result{}, false, nil
}

// readingFailed records why a reading failed (a database that cannot be
// reached, declared files that do not load) in the status of a resource
// with nothing under way (engine.Held), and looks again after a while:
// the error is the resource's, and its owner reads it there. Under a
// claim the status is left as it is (the claim's deadline bounds it) and
// the reading retried.
func (p *pass) readingFailed(ctx context.Context, rs runState, id, why string) (ctrl.Result, bool, error) {
	log.FromContext(ctx).Info("reading failed", "reading", id, "why", why)
	st, held := p.held(engine.Hold{ReadingFailed: why}, rs)
	if !held {
		return ctrl.Result{RequeueAfter: censusCadence}, true, nil
	}
	return ctrl.Result{RequeueAfter: censusCadence}, true, p.write(ctx, st)
}

// held is the status read under hold h (engine.Held), and whether h holds.
func (p *pass) held(h engine.Hold, rs runState) (any, bool) {
	h.Uncertain = rs.uncertainID != ""
	held := false
	st := p.records.Amend(func(s *api.RunState) { *s, held = engine.Held(*s, h, p.obj.Generation, p.r.Now()) })
	return st, held
}

// readingUnderWay names the reading of task whose Job exists for this
// resource, if any, and the digest of the payload it was started with:
// one observation at a time.
func (p *pass) readingUnderWay(ctx context.Context, task string) (id, digest string, err error) {
	if task != TaskObserve {
		return "", "", nil
	}
	var jobs batchv1.JobList
	if err := p.r.Client.List(ctx, &jobs, client.InNamespace(p.obj.Namespace),
		client.MatchingLabels{LabelResourceUID: p.obj.UID, "app.kubernetes.io/component": task}); err != nil {
		return "", "", err
	}
	// The oldest is the one under way. Another is a reading a manager
	// started just before it stopped, whose Job the next one's cache did
	// not show yet when it started its own: only one answer is read, and
	// the others would be left behind until the resource's next reading.
	// They only read, so they go.
	slices.SortFunc(jobs.Items, func(a, b batchv1.Job) int {
		return a.CreationTimestamp.Compare(b.CreationTimestamp.Time)
	})
	for _, j := range jobs.Items {
		if j.DeletionTimestamp != nil || len(j.Spec.Template.Spec.Containers) == 0 {
			continue
		}
		if id == "" {
			id, digest = j.Labels[LabelOperation], argAfter(j.Spec.Template.Spec.Containers[0].Args, "--plan-digest")
			continue
		}
		p.removeJob(ctx, j.Labels[LabelOperation], task, hasParts(&j))
	}
	return id, digest, nil
}

// argAfter is the argument after flag in args, "" when none.
func argAfter(args []string, flag string) string {
	for i, a := range args {
		if a == flag && i+1 < len(args) {
			return args[i+1]
		}
	}
	return ""
}
