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
		return engine.Approval{}, fmt.Errorf("approving plan %s: %w (plan %s, given %s)", plan.Name, ErrFingerprintMismatch, plan.Spec.Fingerprint, req.Fingerprint)
	}
	if err := r.requireCurrent(ctx, o.Namespace, plan); err != nil {
		return engine.Approval{}, err
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
	return engine.Approval{Name: created.Name, UID: created.UID, Spec: spec}, nil
}

func (r *Runner) requireCurrent(ctx context.Context, namespace string, plan engine.Plan) error {
	s, err := r.Store.Get(ctx, api.KindPtahSchema, namespace, plan.Spec.Schema.Name)
	if err != nil {
		return fmt.Errorf("reading schema %s: %w", plan.Spec.Schema.Name, err)
	}
	var st api.PtahSchemaStatus
	if len(s.Status) > 0 {
		if err := json.Unmarshal(s.Status, &st); err != nil {
			return fmt.Errorf("decoding the status of %s: %w", s.Name, err)
		}
	}
	if st.Plan == nil || st.Plan.UID != plan.UID || s.UID != plan.Spec.Schema.UID {
		return fmt.Errorf("approving plan %s: %w; run ptah plan and approve the plan it shows", plan.Name, ErrPlanNotCurrent)
	}
	return nil
}
