package runner

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/ptah-run/ptah/internal/engine"
	"github.com/ptah-run/ptah/internal/postgres"
	"github.com/ptah-run/ptah/internal/store"
	api "github.com/ptah-run/ptah/pkg/api/v1alpha1"
)

// Refusals of Approve; the CLI gives each its exit code.
var (
	ErrUnknownPlan         = errors.New("no plan has that UID")
	ErrPlanNotCurrent      = errors.New("the plan is no longer current")
	ErrFingerprintMismatch = errors.New("the plan's fingerprint differs from the one given")
	// ErrNotRunnable: policy would not run the plan even approved.
	ErrNotRunnable = errors.New("policy would not run the plan")
)

// ApproveRequest is a person's decision.
type ApproveRequest struct {
	PlanUID     string
	Fingerprint string // what the reviewer saw; empty: not checked
	Approver    string
	Reason      string
}

// Approved is a recorded approval, of either family.
type Approved struct {
	Kind, Namespace, Name, UID string
	// ResourceKind and Resource name what the plan converges.
	ResourceKind, Resource string
	Plan                   api.ObjectReference
	Approver               string
	At                     time.Time
	// Spec is the approval's spec as stored (a PtahSchemaApprovalSpec or
	// a PtahMigrationApprovalSpec).
	Spec any
}

// approvable is what Approve needs of a plan of either family.
type approvable struct {
	plan         api.ObjectReference
	fingerprint  string
	bindings     api.Bindings
	resource     api.ObjectReference
	kinds        familyKinds
	policy       api.Policy // read from the resource (requireCurrent)
	destructive  bool
	verify       func() error
	approvalSpec func(approver string, at time.Time, reason string) any
}

func readApprovable(o store.Object) (approvable, error) {
	switch o.Kind {
	case api.KindPtahSchemaPlan:
		plan, err := decodePlan(o)
		if err != nil {
			return approvable{}, err
		}
		s := plan.Spec
		return approvable{plan: api.ObjectReference{Name: plan.Name, UID: plan.UID}, fingerprint: s.Fingerprint, bindings: s.Bindings,
			resource: s.Schema, kinds: schemaKinds, destructive: s.Destructive, verify: func() error { return engine.VerifyPlan(plan) },
			approvalSpec: func(approver string, at time.Time, reason string) any {
				return api.PtahSchemaApprovalSpec{Plan: api.ObjectReference{Name: plan.Name, UID: plan.UID}, Schema: s.Schema.Name,
					PlanFingerprint: s.Fingerprint, Bindings: s.Bindings, Approver: approver, ApprovedAt: api.NewTime(at), Reason: reason}
			}}, nil
	case api.KindPtahMigrationPlan:
		plan, err := decodeMigrationPlan(o)
		if err != nil {
			return approvable{}, err
		}
		s := plan.Spec
		return approvable{plan: api.ObjectReference{Name: plan.Name, UID: plan.UID}, fingerprint: s.Fingerprint, bindings: s.Bindings,
			resource: s.Migration, kinds: migrationKinds, verify: func() error { return engine.VerifyMigrationPlan(plan) },
			approvalSpec: func(approver string, at time.Time, reason string) any {
				return api.PtahMigrationApprovalSpec{Plan: api.ObjectReference{Name: plan.Name, UID: plan.UID}, Migration: s.Migration.Name,
					PlanFingerprint: s.Fingerprint, Bindings: s.Bindings, Approver: approver, ApprovedAt: api.NewTime(at), Reason: reason}
			}}, nil
	}
	return approvable{}, ErrUnknownPlan
}

// Approve records an approval bound to one plan instance and its bindings
// (for a PtahMigration's plan, the history fingerprint among them). It
// refuses an unknown UID, a tampered plan, a plan that is not its
// resource's current one, and a fingerprint other than the plan's.
func (r *Runner) Approve(ctx context.Context, req ApproveRequest) (Approved, error) {
	if err := r.Fence(ctx); err != nil {
		return Approved{}, err
	}
	clock := func(ctx context.Context) (time.Time, error) { return postgres.ServerNow(ctx, r.Target) }
	ap, plan, err := recordApproval(ctx, r.Store, clock, r.NewID, req)
	if err != nil {
		return Approved{}, err
	}
	r.showApproved(ctx, ap.Namespace, plan, req.Approver, ap.At, req.Reason)
	return ap, nil
}

// RecordApproval is what approving is in every mode: find the plan by UID
// in st, refuse what Approve refuses, and record the approval, stamped
// with clock's time (local mode: the target server's; in a cluster, the
// caller's, beside the API server's creation time). It writes no status:
// in a cluster that is the manager's.
func RecordApproval(ctx context.Context, st store.Store, clock func(context.Context) (time.Time, error), newID func() string,
	req ApproveRequest) (Approved, error) {
	ap, _, err := recordApproval(ctx, st, clock, newID, req)
	return ap, err
}

func recordApproval(ctx context.Context, st store.Store, clock func(context.Context) (time.Time, error), newID func() string,
	req ApproveRequest) (Approved, approvable, error) {
	o, err := st.GetByUID(ctx, req.PlanUID)
	if errors.Is(err, store.ErrNotFound) {
		return Approved{}, approvable{}, fmt.Errorf("approving %s: %w", req.PlanUID, ErrUnknownPlan)
	}
	if err != nil {
		return Approved{}, approvable{}, fmt.Errorf("reading plan %s: %w", req.PlanUID, err)
	}
	plan, err := readApprovable(o)
	if errors.Is(err, ErrUnknownPlan) {
		return Approved{}, approvable{}, fmt.Errorf("approving %s: %w", req.PlanUID, ErrUnknownPlan)
	}
	if err != nil {
		return Approved{}, approvable{}, err
	}
	if err := plan.verify(); err != nil {
		return Approved{}, approvable{}, err
	}
	if req.Fingerprint != "" && req.Fingerprint != plan.fingerprint {
		// Never the plan's own fingerprint: copying it from here would
		// approve what nobody reviewed.
		return Approved{}, approvable{}, fmt.Errorf("approving plan %s: %w %s: it is not the plan that was reviewed "+
			"(the database, the declared files or the policy moved since, or the fingerprint was mistyped)",
			plan.plan.Name, ErrFingerprintMismatch, req.Fingerprint)
	}
	if err := requireCurrent(ctx, st, o.Namespace, &plan); err != nil {
		return Approved{}, approvable{}, err
	}
	if why := engine.Runnable(plan.policy, plan.destructive); why != "" {
		return Approved{}, approvable{}, fmt.Errorf("approving plan %s of %s: %w: %s", plan.plan.Name, plan.resource.Name, ErrNotRunnable, why)
	}
	now, err := clock(ctx)
	if err != nil {
		return Approved{}, approvable{}, err
	}
	spec := plan.approvalSpec(req.Approver, now, req.Reason)
	raw, err := json.Marshal(spec)
	if err != nil {
		return Approved{}, approvable{}, fmt.Errorf("encoding approval: %w", err)
	}
	created, err := st.Create(ctx, store.Object{
		Kind: plan.kinds.approval, Namespace: o.Namespace, Name: plan.plan.Name + "-" + newID()[:8],
		ContractVersion: api.ContractVersion, Immutable: true,
		Labels: map[string]string{plan.kinds.label: plan.resource.Name}, Spec: raw,
	})
	if err != nil {
		return Approved{}, approvable{}, fmt.Errorf("recording the approval of %s: %w", plan.plan.Name, err)
	}
	return Approved{Kind: created.Kind, Namespace: created.Namespace, Name: created.Name, UID: created.UID, ResourceKind: plan.kinds.resource,
		Resource: plan.resource.Name, Plan: plan.plan, Approver: req.Approver, At: now, Spec: spec}, plan, nil
}

// showApproved records in the resource's status that its current plan is
// approved, so that ptah status shows it before the next pass. Only the
// holder of the pass lock writes a status: when a pass is running, it is
// left to that pass, which reads the approvals itself. Failing to show it
// is not failing to approve: the approval is recorded.
func (r *Runner) showApproved(ctx context.Context, namespace string, plan approvable, approver string, at time.Time, reason string) {
	kind, name := plan.kinds.resource, plan.resource.Name
	unlock, err := postgres.TryPassLock(ctx, r.Target, kind+"/"+namespace+"/"+name)
	if err != nil {
		return
	}
	defer func() { _ = unlock(context.WithoutCancel(ctx)) }()
	obj, err := r.Store.Get(ctx, kind, namespace, name)
	if err != nil || len(obj.Status) == 0 || fenceObject(obj) != nil {
		return
	}
	var st struct {
		api.RunState `json:",inline"`
	}
	var whole map[string]json.RawMessage
	if json.Unmarshal(obj.Status, &st.RunState) != nil || json.Unmarshal(obj.Status, &whole) != nil {
		return
	}
	approved := engine.Approved(st.RunState, plan.plan.UID, plan.fingerprint, approver, at, reason, obj.Generation, at)
	if approved.Phase == st.Phase {
		return
	}
	// Only the run state changes; the family's own fields are kept as
	// they are stored.
	rs, err := json.Marshal(approved)
	if err != nil {
		return
	}
	var fields map[string]json.RawMessage
	if json.Unmarshal(rs, &fields) != nil {
		return
	}
	for k, v := range fields {
		whole[k] = v
	}
	raw, err := json.Marshal(whole)
	if err != nil {
		return
	}
	obj.Status, obj.ContractVersion = raw, api.ContractVersion
	_, _ = r.Store.UpdateStatus(ctx, obj)
}

// requireCurrent checks that plan is its resource's current plan, and
// reads the resource's registered apply policy into it.
func requireCurrent(ctx context.Context, objects store.Store, namespace string, plan *approvable) error {
	s, err := objects.Get(ctx, plan.kinds.resource, namespace, plan.resource.Name)
	if err != nil {
		return fmt.Errorf("reading %s %s: %w", plan.kinds.resource, plan.resource.Name, err)
	}
	var st api.RunState
	if len(s.Status) > 0 {
		if err := json.Unmarshal(s.Status, &st); err != nil {
			return fmt.Errorf("decoding the status of %s: %w", s.Name, err)
		}
	}
	if st.Plan == nil || st.Plan.UID != plan.plan.UID || s.UID != plan.resource.UID {
		return fmt.Errorf("approving plan %s: %w; run ptah plan and approve the plan it shows", plan.plan.Name, ErrPlanNotCurrent)
	}
	// Both families' policies decode as Policy (a migration's has no
	// allowDestructive, and its plans are never destructive).
	var spec struct {
		Policy api.Policy `json:"policy"`
	}
	if err := json.Unmarshal(s.Spec, &spec); err != nil {
		return fmt.Errorf("decoding the spec of %s: %w", s.Name, err)
	}
	plan.policy = spec.Policy
	return nil
}

// PlanNamed returns the UID of the plan named name, for a person who passed
// a plan's name where its UID belongs; "" when there is none.
func (r *Runner) PlanNamed(ctx context.Context, name string) (string, error) {
	for _, kind := range []string{api.KindPtahSchemaPlan, api.KindPtahMigrationPlan} {
		plans, err := r.Store.List(ctx, store.ListOptions{Kind: kind, MetadataOnly: true})
		if err != nil {
			return "", fmt.Errorf("looking for plan %s: %w", name, err)
		}
		for _, p := range plans {
			if p.Name == name {
				return p.UID, nil
			}
		}
	}
	return "", nil
}
