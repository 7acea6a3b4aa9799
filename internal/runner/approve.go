package runner

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

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

// Approve records an approval bound to one plan instance and its bindings.
// It refuses an unknown UID, a tampered plan, a plan that is not its
// schema's current one, and a fingerprint other than the plan's.
func (r *Runner) Approve(ctx context.Context, req ApproveRequest) (engine.Approval, error) {
	if err := r.Fence(ctx); err != nil {
		return engine.Approval{}, err
	}
	o, err := r.Store.GetByUID(ctx, req.PlanUID)
	if errors.Is(err, store.ErrNotFound) || (err == nil && o.Kind != api.KindPtahSchemaPlan) {
		return engine.Approval{}, fmt.Errorf("approving %s: %w", req.PlanUID, ErrUnknownPlan)
	}
	if err != nil {
		return engine.Approval{}, fmt.Errorf("reading plan %s: %w", req.PlanUID, err)
	}
	plan, err := decodePlan(o)
	if err != nil {
		return engine.Approval{}, err
	}
	if err := engine.VerifyPlan(plan); err != nil {
		return engine.Approval{}, err
	}
	if req.Fingerprint != "" && req.Fingerprint != plan.Spec.Fingerprint {
		// Never the plan's own fingerprint: copying it from here would
		// approve what nobody reviewed.
		return engine.Approval{}, fmt.Errorf("approving plan %s: %w %s: it is not the plan that was reviewed "+
			"(the database, the declared files or the policy moved since, or the fingerprint was mistyped)",
			plan.Name, ErrFingerprintMismatch, req.Fingerprint)
	}
	schemaSpec, err := r.requireCurrent(ctx, o.Namespace, plan)
	if err != nil {
		return engine.Approval{}, err
	}
	if why := engine.Runnable(schemaSpec.Policy, plan); why != "" {
		return engine.Approval{}, fmt.Errorf("approving plan %s of %s: %w: %s", plan.Name, plan.Spec.Schema.Name, ErrNotRunnable, why)
	}
	now, err := postgres.ServerNow(ctx, r.Target)
	if err != nil {
		return engine.Approval{}, err
	}
	spec := api.PtahSchemaApprovalSpec{
		Plan: api.ObjectReference{Name: plan.Name, UID: plan.UID}, Schema: plan.Spec.Schema.Name,
		PlanFingerprint: plan.Spec.Fingerprint, Bindings: plan.Spec.Bindings,
		Approver: req.Approver, ApprovedAt: now, Reason: req.Reason,
	}
	raw, err := json.Marshal(spec)
	if err != nil {
		return engine.Approval{}, fmt.Errorf("encoding approval: %w", err)
	}
	created, err := r.Store.Create(ctx, store.Object{
		Kind: api.KindPtahSchemaApproval, Namespace: o.Namespace, Name: plan.Name + "-" + r.NewID()[:8],
		ContractVersion: api.ContractVersion, Immutable: true,
		Labels: map[string]string{LabelSchema: plan.Spec.Schema.Name}, Spec: raw,
	})
	if err != nil {
		return engine.Approval{}, fmt.Errorf("recording the approval of %s: %w", plan.Name, err)
	}
	approval := engine.Approval{Name: created.Name, UID: created.UID, Spec: spec}
	r.showApproved(ctx, o.Namespace, plan.Spec.Schema.Name, approval)
	return approval, nil
}

// showApproved records in the resource's status that its current plan is
// approved, so that ptah status shows it before the next pass. Only the
// holder of the pass lock writes a status: when a pass is running, it is
// left to that pass, which reads the approvals itself. Failing to show it
// is not failing to approve: the approval is recorded.
func (r *Runner) showApproved(ctx context.Context, namespace, name string, a engine.Approval) {
	unlock, err := postgres.TryPassLock(ctx, r.Target, api.KindPtahSchema+"/"+namespace+"/"+name)
	if err != nil {
		return
	}
	defer func() { _ = unlock(context.WithoutCancel(ctx)) }()
	obj, err := r.Store.Get(ctx, api.KindPtahSchema, namespace, name)
	if err != nil || len(obj.Status) == 0 || fenceObject(obj) != nil {
		return
	}
	var st api.PtahSchemaStatus
	if json.Unmarshal(obj.Status, &st) != nil {
		return
	}
	approved := engine.Approved(st, a, obj.Generation, a.Spec.ApprovedAt)
	if approved.Phase == st.Phase {
		return
	}
	raw, err := json.Marshal(approved)
	if err != nil {
		return
	}
	obj.Status, obj.ContractVersion = raw, api.ContractVersion
	_, _ = r.Store.UpdateStatus(ctx, obj)
}

// requireCurrent checks that plan is its resource's current plan, and
// returns the resource's registered spec.
func (r *Runner) requireCurrent(ctx context.Context, namespace string, plan engine.Plan) (api.PtahSchemaSpec, error) {
	var spec api.PtahSchemaSpec
	s, err := r.Store.Get(ctx, api.KindPtahSchema, namespace, plan.Spec.Schema.Name)
	if err != nil {
		return spec, fmt.Errorf("reading schema %s: %w", plan.Spec.Schema.Name, err)
	}
	var st api.PtahSchemaStatus
	if len(s.Status) > 0 {
		if err := json.Unmarshal(s.Status, &st); err != nil {
			return spec, fmt.Errorf("decoding the status of %s: %w", s.Name, err)
		}
	}
	if st.Plan == nil || st.Plan.UID != plan.UID || s.UID != plan.Spec.Schema.UID {
		return spec, fmt.Errorf("approving plan %s: %w; run ptah plan and approve the plan it shows", plan.Name, ErrPlanNotCurrent)
	}
	if err := json.Unmarshal(s.Spec, &spec); err != nil {
		return spec, fmt.Errorf("decoding the spec of %s: %w", s.Name, err)
	}
	return spec, nil
}

// PlanNamed returns the UID of the plan named name, for a person who passed
// a plan's name where its UID belongs; "" when there is none.
func (r *Runner) PlanNamed(ctx context.Context, name string) (string, error) {
	plans, err := r.Store.List(ctx, store.ListOptions{Kind: api.KindPtahSchemaPlan, MetadataOnly: true})
	if err != nil {
		return "", fmt.Errorf("looking for plan %s: %w", name, err)
	}
	for _, p := range plans {
		if p.Name == name {
			return p.UID, nil
		}
	}
	return "", nil
}
