// A dispatched operation's Job and Pod, in a cluster: creating them once,
// reading how they ended, whether they may still write, and removing them;
// the apply's dispatch and accounting.

package controller

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ptah-run/ptah/internal/engine"
	"github.com/ptah-run/ptah/internal/failpoint"
	api "github.com/ptah-run/ptah/pkg/api/v1alpha1"
)

// applyRunning: the dispatched apply's Pod may still write and its
// deadline has not passed: nothing is decided until it ends.
func (p *pass) applyRunning(ctx context.Context, rs runState) (bool, error) {
	op := rs.ActiveOperation
	if op == nil || op.DispatchedAt == nil || p.r.Now().After(op.Deadline.Add(deadlineGrace)) {
		return false, nil
	}
	return p.mayStillWrite(ctx, op.ID)
}

// liveWriters is the cluster's Pod-level answer for each dispatched run
// the status names: its Pod may still write while it exists and has not
// ended (restartPolicy Never: an ended Pod never runs again) and the
// run's deadline has not passed. A missing Job proves nothing: a Job
// deleted without propagation leaves its Pod running. A run that reported
// its database session may still be writing (an unresolved run owed no
// release) may, whatever its Pod, until its deadline.
func (p *pass) liveWriters(ctx context.Context, rs runState, now time.Time) (map[string]bool, error) {
	deadlines := map[string]time.Time{}
	if op := rs.ActiveOperation; op != nil && op.DispatchedAt != nil {
		deadlines[op.ID] = op.Deadline.Time
	}
	if rs.uncertainID != "" {
		deadlines[rs.uncertainID] = time.Time{}
	}
	if owed := rs.OwedRelease; owed != nil {
		deadlines[owed.OperationID] = time.Time{}
	}
	live := map[string]bool{}
	if u := rs.unresolved; engine.ReportedRunMayStillWrite(u, rs.OwedRelease, now, deadlineGrace) {
		live[u.OperationID] = true
		delete(deadlines, u.OperationID)
	}
	for id, deadline := range deadlines {
		if !deadline.IsZero() && now.After(deadline.Add(deadlineGrace)) {
			continue
		}
		may, err := p.mayStillWrite(ctx, id)
		if err != nil {
			return nil, err
		}
		live[id] = may
	}
	return live, nil
}

// mayStillWrite: a Pod of the operation has not ended, or its Job has
// not finished (its Pod may not exist yet). Once the Job is gone or
// finished, only a Pod that has not ended can write.
func (p *pass) mayStillWrite(ctx context.Context, id string) (bool, error) {
	pods, err := p.pods(ctx, id)
	if err != nil {
		return false, err
	}
	for _, pod := range pods {
		if pod.Status.Phase != corev1.PodSucceeded && pod.Status.Phase != corev1.PodFailed {
			return true, nil
		}
	}
	var job batchv1.Job
	err = p.r.Client.Get(ctx, client.ObjectKey{Namespace: p.obj.Namespace, Name: JobName(p.obj.UID, id)}, &job)
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return !jobFinished(&job), nil
}

// jobFinished: the Job controller will create no more Pods for it.
func jobFinished(job *batchv1.Job) bool {
	for _, c := range job.Status.Conditions {
		if (c.Type == batchv1.JobComplete || c.Type == batchv1.JobFailed) && c.Status == corev1.ConditionTrue {
			return true
		}
	}
	return false
}

// pods are the Pods of one operation's Job, found by the label the Job's
// template gives them, which outlives the Job.
func (p *pass) pods(ctx context.Context, operationID string) ([]corev1.Pod, error) {
	var pods corev1.PodList
	if err := p.r.Client.List(ctx, &pods, client.InNamespace(p.obj.Namespace), client.MatchingLabels{LabelOperation: operationID}); err != nil {
		return nil, fmt.Errorf("listing the Pods of operation %s: %w", operationID, err)
	}
	return pods.Items, nil
}

func describe(res *Result) string {
	switch {
	case res == nil:
		return "its Pod ended without a result"
	case res.Message != "":
		return res.Outcome + ": " + res.Message
	}
	return res.Outcome
}

func splitPayload(p Payload) (PlanParts, error) {
	raw, err := json.Marshal(p)
	if err != nil {
		return PlanParts{}, err
	}
	return SplitPlan(raw)
}

func (p *pass) request(id, task string, now, deadline time.Time, parts PlanParts) ExecRequest {
	ref := p.spec.Target.URLFrom.SecretKeyRef
	req := ExecRequest{Namespace: p.obj.Namespace, ResourceKind: p.r.Kind, ResourceName: p.obj.Name, ResourceUID: p.obj.UID,
		OperationID: id, Image: p.r.Image, URLSecret: ref.Name, URLKey: ref.Key, Deadline: deadline, Now: now, Plan: parts, Task: task}
	if task == TaskApply && !p.fam.readsSourceToApply() {
		return req // it runs the claimed plan, never the source
	}
	switch {
	case p.spec.ConfigMap != nil:
		req.Source = p.spec.ConfigMap.Name
	case p.spec.OCI != nil:
		req.RegistrySecret = p.spec.OCI.PullSecret
	}
	return req
}

// startJob creates the request's plan parts and its Job. Both are named
// from the resource and the operation: a manager that restarts midway
// finds what it created instead of creating it again.
func (p *pass) startJob(ctx context.Context, req ExecRequest) error {
	for _, cm := range PlanConfigMaps(req) {
		if err := p.r.Client.Create(ctx, cm); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating the plan parts of operation %s: %w", req.OperationID, err)
		}
	}
	if err := p.r.Client.Create(ctx, BuildJob(req)); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating the Job of operation %s: %w", req.OperationID, err)
	}
	return nil
}

// jobResult reads how operation id's Pod ended: ended is false while no
// Pod of it has ended; res is nil when an ended Pod left no result bound
// to id and digest (a result naming another operation or plan is not
// believed).
func (p *pass) jobResult(ctx context.Context, id, digest string) (res *Result, ended bool, err error) {
	pods, err := p.pods(ctx, id)
	if err != nil {
		return nil, false, err
	}
	for _, pod := range pods {
		if pod.Status.Phase != corev1.PodSucceeded && pod.Status.Phase != corev1.PodFailed {
			continue
		}
		ended = true
		for _, cs := range pod.Status.ContainerStatuses {
			if t := cs.State.Terminated; t != nil && t.Message != "" {
				var r Result
				if json.Unmarshal([]byte(t.Message), &r) == nil && r.OperationID == id && r.PlanDigest == digest {
					return &r, true, nil
				}
			}
		}
	}
	if !ended {
		// A Job that failed without a Pod (its deadline, a refused Pod)
		// has ended too.
		var job batchv1.Job
		err := p.r.Client.Get(ctx, client.ObjectKey{Namespace: p.obj.Namespace, Name: JobName(p.obj.UID, id)}, &job)
		if err == nil && jobFinished(&job) && job.Status.Active == 0 {
			return nil, true, nil
		}
	}
	return nil, ended, nil
}

// removeJob deletes an operation's Job once its result is recorded, its
// plan's ConfigMaps when it had any (parts: false for a plan its Job
// carried, PlanParts.Inline), and a reading's transport object. task is
// the operation's task when the caller knows it ("": it does not): only an
// observation hands its statements back in a transport object. The Job's
// Pod is the garbage collector's to delete, as the Job goes in the
// background; the Pod's label names it until then (see pods).
func (p *pass) removeJob(ctx context.Context, id, task string, parts bool) {
	// A manager told to stop finishes the removal it started: a reading
	// whose answer was taken and whose Job stayed would be taken for the
	// next reading under way (see readingUnderWay).
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	ns := p.obj.Namespace
	bg := client.PropagationPolicy(metav1.DeletePropagationBackground)
	_ = p.r.Client.Delete(ctx, &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: JobName(p.obj.UID, id)}}, bg)
	if parts {
		// However many there were, in one request.
		_ = p.r.Client.DeleteAllOf(ctx, &corev1.ConfigMap{}, client.InNamespace(ns), client.MatchingLabels{LabelOperation: id})
	}
	if task != "" && task != TaskObserve {
		return
	}
	// By name, whatever the result said: a reading whose result was not
	// believed may have created it all the same.
	_ = p.r.Store.Delete(ctx, p.fam.planKind(), ns, TransportName(p.obj.Name, id), "")
}

// partsUnknown: the caller of removeJob does not know how the plan
// travelled, so its ConfigMaps are looked for.
const partsUnknown = true

// hasParts: the Job mounts ConfigMaps of its plan's parts.
func hasParts(job *batchv1.Job) bool {
	for _, v := range job.Spec.Template.Spec.Volumes {
		if v.Name != "plan" || v.Projected == nil {
			continue
		}
		for _, s := range v.Projected.Sources {
			if s.ConfigMap != nil {
				return true
			}
		}
	}
	return false
}

// dispatch writes the dispatch marker, then creates the apply's Job: a
// run is dispatched once, since a marked claim is never dispatched again
// (a manager that stops between the two leaves a claim whose Pod never
// existed, which the next pass settles: by observing, or by a person). A
// family whose approval authorizes one run (PtahMigration) spends it on
// the operation first: a manager that stops between the two leaves the
// claim undispatched with its approval spent on it, which authorizes that
// one claim still and no other, never a second run.
func (p *pass) dispatch(ctx context.Context, in engine.PassInput, op api.Operation) (ctrl.Result, bool, error) {
	payload, err := p.applyPayload(op)
	if err != nil {
		return ctrl.Result{}, true, err // nothing was marked: the claim stays, undispatched
	}
	parts, err := splitPayload(payload)
	if err != nil {
		return ctrl.Result{}, true, err
	}
	// Deleting the resource waits for the run from here on.
	if err := p.holdDeletion(ctx); err != nil {
		return ctrl.Result{}, true, err
	}
	if a := p.records.SpentAtDispatch(op); a != nil {
		if err := p.records.Spend(ctx, *a, op.ID, in.Now); err != nil {
			return ctrl.Result{}, true, err
		}
	}
	now := p.r.Now()
	marked := op
	marked.DispatchedAt = &api.Time{Time: now}
	st, rs := p.records.Decided()
	rs.ActiveOperation = &marked
	rs.Message = fmt.Sprintf("operation %s runs plan %s in Job %s (deadline %s)", op.ID, op.Plan.Name, JobName(p.obj.UID, op.ID),
		op.Deadline.UTC().Format(time.RFC3339))
	if err := p.write(ctx, st); err != nil {
		return ctrl.Result{}, true, err
	}
	failpoint.Hit(FailAfterDispatchMarker)
	if err := p.startJob(ctx, p.request(op.ID, TaskApply, now, op.Deadline.Time, parts)); err != nil {
		return ctrl.Result{}, true, err
	}
	// The Job's end wakes the reconcile; a Job deleted, or a Pod that
	// ends without its Job (orphaned), wakes nothing: look again.
	return ctrl.Result{RequeueAfter: writerPoll}, true, nil
}

// applyPayload is what the apply of op is sent: the claimed plan, as the
// status read names it.
func (p *pass) applyPayload(op api.Operation) (Payload, error) {
	ref, spec, ok := p.records.CurrentPlan()
	if !ok || ref.UID != op.Plan.UID {
		return Payload{}, fmt.Errorf("operation %s claims plan %s, which is not the current plan", op.ID, op.Plan.Name)
	}
	payload := Payload{OperationID: op.ID, Task: TaskApply, Resource: p.obj.Name, Namespace: p.obj.Namespace, ResourceUID: p.obj.UID,
		CoordinationDigest: op.CoordinationDigest}
	return payload, p.fam.apply(&payload, p.res, ref, spec, p.records.Approver(op))
}

// account records how a dispatched run ended once its Pod reported a
// result bound to the operation and its plan's digest: the claim becomes
// the record, and the lease's release is owed, in one status write.
// Without such a result the pass decides (the Pod-level answer, then an
// observation, or a person).
func (p *pass) account(ctx context.Context, rs runState) (bool, error) {
	op := rs.ActiveOperation
	if op == nil || op.DispatchedAt == nil {
		return false, nil
	}
	payload, err := p.applyPayload(*op)
	if err != nil {
		return false, nil // the plan is gone: the pass settles the run
	}
	parts, err := splitPayload(payload)
	if err != nil {
		return false, err
	}
	res, ended, err := p.jobResult(ctx, op.ID, parts.Digest)
	if err != nil || !ended || res == nil {
		return false, err
	}
	var planned []api.MigrationVersion
	if payload.Migration != nil {
		planned = payload.Migration.Versions
	}
	run := runOf(res, planned)
	outcome := res.Outcome
	if run.Result == engine.RunUncertain {
		outcome = OutcomeUnknown
	}
	appliesTotal.WithLabelValues(p.r.Kind, outcome).Inc()
	identity := ""
	if t := rs.Target; t != nil {
		identity = t.TargetIdentityDigest
	}
	now := p.r.Now()
	st, state := p.records.Account(*op, run, identity, now)
	state.Conditions = engine.SetReady(state.Conditions, *state, p.obj.Generation, now)
	if err := p.write(ctx, st); err != nil {
		return false, err
	}
	p.forget()
	p.removeJob(ctx, op.ID, TaskApply, !parts.Inline())
	return true, nil
}

// removeSettledApplies removes the apply Jobs of this resource whose run
// the status no longer names (its outcome recorded and settled) once they
// have finished: a manager that stopped between recording a run and
// removing its Job leaves it otherwise, and nothing creates it again.
func (p *pass) removeSettledApplies(ctx context.Context, rs runState) error {
	var jobs batchv1.JobList
	if err := p.r.Client.List(ctx, &jobs, client.InNamespace(p.obj.Namespace),
		client.MatchingLabels{LabelResourceUID: p.obj.UID, "app.kubernetes.io/component": TaskApply}); err != nil {
		return err
	}
	named := rs.namedOperations()
	for i := range jobs.Items {
		j := &jobs.Items[i]
		if id := j.Labels[LabelOperation]; !named[id] && jobFinished(j) && j.DeletionTimestamp == nil {
			p.removeJob(ctx, id, TaskApply, hasParts(j))
		}
	}
	return nil
}

// NewOperationID returns a random operation ID.
func NewOperationID() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
