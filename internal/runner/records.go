package runner

import (
	"context"
	"fmt"

	"github.com/ptah-run/ptah/internal/engine"
	"github.com/ptah-run/ptah/internal/store"
	api "github.com/ptah-run/ptah/pkg/api/v1alpha1"
)

// SchemaRecords carries out, over a store alone, the steps of a PtahSchema
// pass that touch only stored records: reading the status, the current
// plan and the approvals; publishing and pruning plans; marking approvals
// stale; writing the status. ptah serve's reconciler uses it, so that both
// modes keep their records through the same code; the steps that reach
// the database (observe, lock, dispatch) are each mode's own.
type SchemaRecords struct {
	p  *pass
	sh *schemaShell
}

// NewSchemaRecords returns the records of the PtahSchema s in st.
func NewSchemaRecords(st store.Store, s *api.PtahSchema) *SchemaRecords {
	res := Resource{Schema: s}
	sh := &schemaShell{res: res}
	return &SchemaRecords{p: &pass{Runner: &Runner{Store: st}, res: res, f: sh}, sh: sh}
}

// Read decodes self's status, its current plan and its approvals into a
// pass input (its PassInput and Observation left for the caller).
func (r *SchemaRecords) Read(ctx context.Context, self store.Object) (engine.SchemaPassInput, error) {
	r.sh.in.Observation = nil
	if err := r.sh.read(ctx, r.p, self); err != nil {
		return engine.SchemaPassInput{}, err
	}
	return r.sh.in, nil
}

// Publish stores d's plan as a new immutable object, points the status
// d decided at it, writes that status over obj and prunes the plans
// nothing needs any more.
func (r *SchemaRecords) Publish(ctx context.Context, obj store.Object, d engine.Decision) error {
	if d.Plan == nil {
		return fmt.Errorf("%s: a publish step without a plan; this is a bug", obj.Name)
	}
	r.sh.out = d.Status
	return r.p.publish(ctx, obj, decision{step: d.Step, plan: d.Plan, planFingerprint: d.Plan.Fingerprint})
}

// MarkStale marks the approvals d names stale.
func (r *SchemaRecords) MarkStale(ctx context.Context, d engine.Decision) error {
	for _, a := range d.Stale {
		if err := r.p.spend(ctx, a.UID, api.DecisionStatus{Stale: true, StaleReason: "the plan it names is no longer current"}); err != nil {
			return err
		}
	}
	return nil
}

// WriteStatus writes st over obj conditionally on its resourceVersion
// (retrying over a newer version of the same object only for a change
// that left the status alone), and moves obj to the written version.
func (r *SchemaRecords) WriteStatus(ctx context.Context, obj *store.Object, st api.PtahSchemaStatus) error {
	return r.p.writeStatus(ctx, obj, &st)
}

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
