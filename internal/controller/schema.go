package controller

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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

// SchemaReconciler converges PtahSchema resources: the engine's pass, run
// once per reconcile until it waits, with the database work in Jobs
// (readings and applies, see ptah exec), and the database's lease a
// coordination.k8s.io Lease. The manager itself never connects to a
// database and never reads a Secret.
type SchemaReconciler struct {
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

// SetupWithManager registers the reconciler: it watches PtahSchemas, the
// Jobs it owns, and the approvals of each.
func (r *SchemaReconciler) SetupWithManager(mgr ctrl.Manager) error {
	byLabel := handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, o client.Object) []reconcile.Request {
		name := o.GetLabels()[runner.LabelSchema]
		if name == "" {
			return nil
		}
		return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: o.GetNamespace(), Name: name}}}
	})
	return ctrl.NewControllerManagedBy(mgr).
		Named("ptahschema").
		// Its own status writes do not wake it: only a new generation (a
		// spec change), its Jobs, its approvals and its schedule do.
		For(&api.PtahSchema{}, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Owns(&batchv1.Job{}, builder.WithPredicates(jobFinishes)).
		Watches(&api.PtahSchemaApproval{}, byLabel, builder.WithPredicates(comesOrGoes)).
		// Several managers in one process (tests) each register it.
		WithOptions(ctrlcontroller.Options{SkipNameValidation: &skipNameValidation}).
		Complete(r)
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

// schemaPass is one reconcile's state: what was read for it.
type schemaPass struct {
	r       *SchemaReconciler
	obj     store.Object
	s       api.PtahSchema
	records *runner.SchemaRecords

	observation *engine.Observation
	rederived   string

	// scope is what the resource's coordination key is scoped to (its
	// namespace, or the PtahRealm admitting it), leaseNS where its
	// database's Lease lives.
	scope, leaseNS string
}

// Reconcile runs the pass for one PtahSchema until it reaches a stable
// phase or waits for a Job.
func (r *SchemaReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	obj, err := r.Store.Get(ctx, api.KindPtahSchema, req.Namespace, req.Name)
	if errors.Is(err, store.ErrNotFound) {
		return ctrl.Result{}, nil
	}
	if err != nil {
		return ctrl.Result{}, err
	}
	p := &schemaPass{r: r, obj: obj}
	var live api.PtahSchema
	if err := r.Client.Get(ctx, req.NamespacedName, &live); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if live.DeletionTimestamp != nil {
		return p.finishDeletion(ctx, &live)
	}
	return p.run(ctx)
}

// FinalizerRuns holds a PtahSchema's deletion while a run of it may still
// write: without it, deleting the resource would let the garbage collector
// take its apply Job and Pod mid-run, and leave its Lease held for ever.
// The manager sets it before it dispatches and removes it once nothing of
// the resource is under way.
const FinalizerRuns = "ptah.run/runs"

// holdDeletion sets FinalizerRuns on the resource.
func (p *schemaPass) holdDeletion(ctx context.Context) error {
	var live api.PtahSchema
	if err := p.r.Client.Get(ctx, client.ObjectKey{Namespace: p.obj.Namespace, Name: p.obj.Name}, &live); err != nil {
		return err
	}
	if controllerutil.ContainsFinalizer(&live, FinalizerRuns) {
		return nil
	}
	base := live.DeepCopy()
	controllerutil.AddFinalizer(&live, FinalizerRuns)
	if err := p.r.Client.Patch(ctx, &live, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{})); err != nil {
		return fmt.Errorf("holding the deletion of %s/%s while it runs: %w", p.obj.Namespace, p.obj.Name, err)
	}
	return nil
}

// releaseDeletion removes FinalizerRuns from live.
func (p *schemaPass) releaseDeletion(ctx context.Context, live *api.PtahSchema) error {
	if !controllerutil.ContainsFinalizer(live, FinalizerRuns) {
		return nil
	}
	base := live.DeepCopy()
	controllerutil.RemoveFinalizer(live, FinalizerRuns)
	return client.IgnoreNotFound(p.r.Client.Patch(ctx, live, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{})))
}

// finishDeletion lets a deleted resource go once no run of it may still
// write: then its Leases are released, its Jobs removed, and the
// finalizer taken off. Nothing new starts meanwhile.
func (p *schemaPass) finishDeletion(ctx context.Context, live *api.PtahSchema) (ctrl.Result, error) {
	if !controllerutil.ContainsFinalizer(live, FinalizerRuns) {
		return ctrl.Result{}, nil
	}
	if err := p.decode(); err != nil {
		return ctrl.Result{}, err
	}
	if err := p.resolveScope(ctx); err != nil {
		return ctrl.Result{}, err
	}
	var st api.PtahSchemaStatus
	if len(p.obj.Status) > 0 {
		if err := json.Unmarshal(p.obj.Status, &st); err != nil {
			return ctrl.Result{}, err
		}
	}
	live2, err := p.liveWriters(ctx, st, p.r.Now())
	if err != nil {
		return ctrl.Result{}, err
	}
	for id, may := range live2 {
		if may {
			log.FromContext(ctx).Info("deletion waits for a run that may still write", "operation", id)
			return ctrl.Result{RequeueAfter: writerPoll}, nil
		}
	}
	if err := p.releaseStrayLeases(ctx, api.PtahSchemaStatus{}); err != nil { // none is named any more: all go
		return ctrl.Result{}, err
	}
	for _, id := range namedOperations(st) {
		p.removeJob(ctx, id)
	}
	return ctrl.Result{}, p.releaseDeletion(ctx, live)
}

// namedOperations are the operations the status names.
func namedOperations(st api.PtahSchemaStatus) []string {
	var ids []string
	if op := st.ActiveOperation; op != nil {
		ids = append(ids, op.ID)
	}
	if po := st.PendingObservation; po != nil {
		ids = append(ids, po.OperationID)
	}
	if owed := st.OwedRelease; owed != nil {
		ids = append(ids, owed.OperationID)
	}
	return ids
}

func (p *schemaPass) decode() error {
	p.s = api.PtahSchema{}
	if err := json.Unmarshal(p.obj.Spec, &p.s.Spec); err != nil {
		return fmt.Errorf("decoding %s: %w", p.obj.Name, err)
	}
	p.s.Default()
	p.s.APIVersion, p.s.Kind = api.APIVersion, api.KindPtahSchema
	p.s.Name, p.s.Namespace, p.s.UID, p.s.Generation = p.obj.Name, p.obj.Namespace, types.UID(p.obj.UID), p.obj.Generation
	p.records = runner.NewSchemaRecords(p.r.Store, &p.s)
	return nil
}

func (p *schemaPass) run(ctx context.Context) (ctrl.Result, error) {
	for range maxSteps {
		// Every step reads the resource again: the last step wrote it.
		obj, err := p.r.Store.Get(ctx, api.KindPtahSchema, p.obj.Namespace, p.obj.Name)
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
		if err := p.decode(); err != nil {
			return ctrl.Result{}, err
		}
		if err := p.resolveScope(ctx); err != nil {
			return ctrl.Result{}, err
		}
		in, err := p.records.Read(ctx, p.obj)
		if err != nil {
			return ctrl.Result{}, err
		}
		if o := p.observation; o != nil {
			// The census of every other resource reads it from here.
			in.Status.Target = &api.ObservedTarget{CoordinationDigest: o.Bindings.CoordinationDigest,
				TargetIdentityDigest: o.Bindings.TargetIdentityDigest}
		}
		if p.s.Spec.Suspend && idle(in.Status) {
			// Nothing of it is under way: nothing new starts, and the
			// status says so. A change of spec wakes it.
			st := in.Status
			st.Reason, st.Message = api.ReasonSuspended, "spec.suspend is true: ptah serve starts nothing for this resource"
			st.ObservedGeneration = p.obj.Generation
			return ctrl.Result{}, p.write(ctx, st)
		}
		if why := servable(p.s); why != "" && idle(in.Status) {
			st := in.Status
			st.Phase, st.Reason, st.Message = api.PhaseBlocked, api.ReasonInvalidSpec, why
			return ctrl.Result{}, p.write(ctx, st)
		}
		accounted, err := p.account(ctx, in)
		if err != nil || accounted {
			if err != nil {
				return ctrl.Result{}, err
			}
			continue
		}
		if running, err := p.applyRunning(ctx, in.Status); err != nil || running {
			// Its Job's end wakes the reconcile; until then the status says
			// what dispatch wrote, and the deadline is watched.
			return ctrl.Result{RequeueAfter: writerPoll}, err
		}
		if err := p.releaseStrayLeases(ctx, in.Status); err != nil {
			return ctrl.Result{}, err
		}
		base, err := p.gather(ctx, in.Status)
		if err == nil {
			base.Realm, base.Self, err = p.census(ctx, in.Status)
		}
		if err != nil {
			return ctrl.Result{}, err
		}
		in.PassInput, in.Observation = base, p.observation
		d := engine.SchemaPass(in)
		log.FromContext(ctx).V(1).Info("pass", "step", d.Step, "phase", d.Status.Phase, "reason", d.Status.Reason)
		res, done, err := p.act(ctx, in, d)
		if err != nil || done {
			return res, err
		}
	}
	return ctrl.Result{}, fmt.Errorf("%s/%s: the pass did not settle after %d steps; this is a bug", p.obj.Namespace, p.obj.Name, maxSteps)
}

// idle: the status names no run under way, no uncertain outcome and no
// owed release.
func idle(st api.PtahSchemaStatus) bool {
	return st.ActiveOperation == nil && st.PendingObservation == nil && st.OwedRelease == nil
}

// servable says why ptah serve cannot act on a resource, "" when it can:
// its spec must be valid as local mode holds it (what the CRD's schema
// cannot say: a duration's minimum, mutually exclusive fields), and its
// target and source in the cluster come from a Secret and a ConfigMap or
// an OCI artifact.
func servable(s api.PtahSchema) string {
	if err := s.Validate(); err != nil {
		return "the spec is invalid: " + err.Error()
	}
	switch spec := s.Spec; {
	case spec.Target.URLFrom == nil || spec.Target.URLFrom.SecretKeyRef == nil:
		return "ptah serve reads the database URL from a Secret: set spec.target.urlFrom.secretKeyRef {name, key}"
	case spec.Source.ConfigMap == nil && spec.Source.OCI == nil:
		return "ptah serve reads the declared files from a ConfigMap or an OCI artifact: set spec.source.configMap.name or spec.source.oci.ref"
	}
	return ""
}

// gather is the pass's input beyond the records: the clock, the fence,
// the lease, and the Pod-level answer for each run the status names.
func (p *schemaPass) gather(ctx context.Context, st api.PtahSchemaStatus) (engine.PassInput, error) {
	_, stored, err := runner.StoredState(ctx, p.r.Store)
	if err != nil {
		return engine.PassInput{}, err
	}
	in := engine.PassInput{
		Now: p.r.Now(), Name: p.obj.Name, UID: p.obj.UID, Generation: p.obj.Generation, Binding: p.binding(), Stored: stored,
		Rederived: p.rederived, NewOperationID: p.r.NewID(), RunTimeout: p.r.RunTimeout,
	}
	if p.observation != nil {
		in.TargetIdentityDigest = p.observation.Bindings.TargetIdentityDigest
	}
	if op := st.ActiveOperation; op != nil {
		holder, err := p.leaseHolder(ctx, op.CoordinationDigest)
		if err != nil {
			return in, err
		}
		in.Locked = holder == op.ID
	}
	in.LiveWriters, err = p.liveWriters(ctx, st, in.Now)
	return in, err
}

// write writes st as the resource's status, and tells of a change of
// phase or reason: an Event on the resource, and the blocked gauge.
func (p *schemaPass) write(ctx context.Context, st api.PtahSchemaStatus) error {
	var before api.PtahSchemaStatus
	if len(p.obj.Status) > 0 {
		_ = json.Unmarshal(p.obj.Status, &before)
	}
	if err := p.records.WriteStatus(ctx, &p.obj, st); err != nil {
		return err
	}
	reason := ""
	if st.Phase == api.PhaseBlocked {
		reason = st.Reason
	}
	blockedNow.set(api.KindPtahSchema, p.obj.Namespace+"/"+p.obj.Name, reason)
	if p.r.Events != nil && (st.Phase != before.Phase || st.Reason != before.Reason) && st.Reason != "" {
		kind := corev1.EventTypeNormal
		if st.Phase == api.PhaseBlocked || st.Phase == api.PhaseFailed {
			kind = corev1.EventTypeWarning
		}
		ref := &api.PtahSchema{TypeMeta: metav1.TypeMeta{APIVersion: api.APIVersion, Kind: api.KindPtahSchema},
			ObjectMeta: metav1.ObjectMeta{Name: p.obj.Name, Namespace: p.obj.Namespace, UID: types.UID(p.obj.UID)}}
		note := st.Message
		if len(note) > 1000 {
			note = note[:1000]
		}
		p.r.Events.Eventf(ref, nil, kind, st.Reason, "Reconcile", "%s", note)
	}
	return nil
}

func (p *schemaPass) binding() api.ExecutionBinding {
	return api.ExecutionBinding{PtahVersion: p.r.Version, ContractVersion: api.ContractVersion, Engine: api.EnginePostgres}
}

// act carries out one decision; done reports that the reconcile ends.
func (p *schemaPass) act(ctx context.Context, in engine.SchemaPassInput, d engine.Decision) (ctrl.Result, bool, error) {
	before := in.Status
	switch d.Step {
	case engine.StepRefuse:
		return ctrl.Result{}, true, reconcile.TerminalError(d.Err)
	case engine.StepReleaseOwed:
		owed := before.OwedRelease
		failpoint.Hit(FailBeforeRelease)
		if err := p.releaseLease(ctx, owed.CoordinationDigest, owed.OperationID); err != nil {
			return ctrl.Result{}, true, err
		}
		return ctrl.Result{}, false, p.write(ctx, d.Status)
	case engine.StepWriteStatus:
		if op := before.ActiveOperation; op != nil && d.Status.ActiveOperation == nil {
			p.observation, p.rederived = nil, "" // what was read for the claim is stale
			if op.DispatchedAt == nil {
				defer func() { _ = p.releaseLease(ctx, op.CoordinationDigest, op.ID) }() // nothing ran under it
			}
		}
		if err := p.write(ctx, d.Status); err != nil {
			return ctrl.Result{}, true, err
		}
		if !d.Stable {
			return ctrl.Result{}, false, nil
		}
		if idle(d.Status) {
			var live api.PtahSchema
			if err := p.r.Client.Get(ctx, client.ObjectKey{Namespace: p.obj.Namespace, Name: p.obj.Name}, &live); err == nil {
				if err := p.releaseDeletion(ctx, &live); err != nil {
					return ctrl.Result{}, true, err
				}
			}
		}
		switch d.Status.Reason {
		case api.ReasonRunMayStillWrite:
			return ctrl.Result{RequeueAfter: writerPoll}, true, nil
		case api.ReasonRealmConflict, api.ReasonLeaseHeld:
			// Another resource's edit wakes nothing here: look again soon.
			return ctrl.Result{RequeueAfter: censusCadence}, true, nil
		}
		// A change of spec, approval or Job wakes it sooner.
		return ctrl.Result{RequeueAfter: p.s.Spec.IntervalDuration()}, true, nil
	case engine.StepObserve:
		return p.observe(ctx, TaskObserve, p.r.NewID())
	case engine.StepMarkStale:
		return ctrl.Result{}, false, p.records.MarkStale(ctx, d)
	case engine.StepPublish:
		if err := p.records.Publish(ctx, p.obj, d); err != nil {
			return ctrl.Result{}, true, err
		}
		plansPublished.WithLabelValues(api.KindPtahSchema).Inc()
		return ctrl.Result{}, false, nil
	case engine.StepLock:
		return p.lock(ctx, d)
	case engine.StepRederive:
		return p.observe(ctx, TaskRederive, d.Operation.ID+"-rederive")
	case engine.StepDispatch:
		return p.dispatch(ctx, in, d)
	}
	return ctrl.Result{}, true, fmt.Errorf("unknown step %q", d.Step)
}

// observe takes a reading in a Job: it starts the Job, or waits for it, or
// takes its answer (and removes it) and goes on. An observation is started
// afresh for each pass that asks (id is new each time) unless one is
// already under way; a re-derivation has one per claim.
func (p *schemaPass) observe(ctx context.Context, task, id string) (ctrl.Result, bool, error) {
	if cur, err := p.readingUnderWay(ctx, task); err != nil || cur != "" {
		if err != nil {
			return ctrl.Result{}, true, err
		}
		id = cur
	}
	payload := Payload{OperationID: id, Task: task, Resource: p.obj.Name, Namespace: p.obj.Namespace, ResourceUID: p.obj.UID,
		SchemaSpec: &p.s.Spec, CoordinationScope: p.scope}
	parts, err := splitPayload(payload)
	if err != nil {
		return ctrl.Result{}, true, err
	}
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
		return ctrl.Result{}, true, p.startJob(ctx, req)
	}
	defer p.removeJob(ctx, id)
	if res == nil || res.Outcome != OutcomeSucceeded || res.Observation == nil {
		return p.readingFailed(ctx, id, describe(res))
	}
	if task == TaskRederive {
		p.rederived = engine.InputFingerprint(p.currentClaimFingerprint(), res.Observation.Bindings)
		return ctrl.Result{}, false, nil
	}
	obs, err := ReadTransport(ctx, p.r.Store, p.obj.Namespace, p.obj.UID, id, *res.Observation)
	if err != nil {
		return ctrl.Result{}, true, err
	}
	p.observation = &obs
	return ctrl.Result{}, false, nil
}

// readingFailed records why a reading failed (a database that cannot be
// reached, declared files that do not load) in the status of a resource
// with nothing under way, and looks again after a while: the error is the
// resource's, and its owner reads it there. Under a claim the status is
// left as it is (the claim's deadline bounds it) and the reading retried.
func (p *schemaPass) readingFailed(ctx context.Context, id, why string) (ctrl.Result, bool, error) {
	var st api.PtahSchemaStatus
	if len(p.obj.Status) > 0 {
		if err := json.Unmarshal(p.obj.Status, &st); err != nil {
			return ctrl.Result{}, true, err
		}
	}
	log.FromContext(ctx).Info("reading failed", "reading", id, "why", why)
	if !idle(st) {
		return ctrl.Result{RequeueAfter: censusCadence}, true, nil
	}
	st.Phase, st.Reason, st.Message = api.PhaseBlocked, api.ReasonReadingFailed, "reading the database and the declared files failed: "+why
	st.ObservedGeneration = p.obj.Generation
	st.Conditions = engine.SetReady(st.Conditions, st.RunState, p.obj.Generation, p.r.Now())
	return ctrl.Result{RequeueAfter: censusCadence}, true, p.write(ctx, st)
}

// currentClaimFingerprint is the plan fingerprint of the claim being
// re-derived.
func (p *schemaPass) currentClaimFingerprint() string {
	var st api.PtahSchemaStatus
	if json.Unmarshal(p.obj.Status, &st) == nil && st.ActiveOperation != nil {
		return st.ActiveOperation.Plan.Fingerprint
	}
	return ""
}

// readingUnderWay names the reading of task whose Job exists for this
// resource, if any: one observation at a time.
func (p *schemaPass) readingUnderWay(ctx context.Context, task string) (string, error) {
	if task != TaskObserve {
		return "", nil
	}
	var jobs batchv1.JobList
	if err := p.r.Client.List(ctx, &jobs, client.InNamespace(p.obj.Namespace),
		client.MatchingLabels{LabelResourceUID: p.obj.UID, "app.kubernetes.io/component": task}); err != nil {
		return "", err
	}
	for _, j := range jobs.Items {
		if j.DeletionTimestamp == nil {
			return j.Labels[LabelOperation], nil
		}
	}
	return "", nil
}
