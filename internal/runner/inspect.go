package runner

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/ptah-run/ptah/internal/engine"
	"github.com/ptah-run/ptah/internal/postgres"
	"github.com/ptah-run/ptah/internal/store"
	api "github.com/ptah-run/ptah/pkg/api/v1alpha1"
)

// Report is what is recorded about a resource, read without running a pass.
type Report struct {
	Name       string
	Registered bool // false: no pass has run for it in this database yet
	Generation int64
	Status     api.PtahSchemaStatus
	// Lease is the database's lease, nil when free; LeaseWriterAlive says
	// whether its writer session is still connected.
	Lease            *postgres.Lease
	LeaseWriterAlive bool
	// Writer is what the lease's writer session is doing (nil when it is
	// gone), and Run its journal (nil before it journaled the run).
	Writer *postgres.Activity
	Run    *postgres.Run
	// Approval is the live approval of the current plan, if one was
	// recorded.
	Approval *engine.Approval
}

// Inspect reads res's recorded status and its database's lease. It writes
// nothing, and refuses, like every verb, state a newer ptah wrote.
func (r *Runner) Inspect(ctx context.Context, res Resource) (Report, error) {
	rep := Report{Name: res.Schema.Name}
	if err := r.Fence(ctx); err != nil {
		return rep, err
	}
	id, err := postgres.ReadTargetIdentity(ctx, r.Target)
	if errors.Is(err, postgres.ErrNoIdentity) {
		err = nil // no writer ever ran here: no lease to show
	}
	if err != nil {
		return rep, err
	}
	identity := TargetIdentityDigest(id)
	obj, err := r.Store.Get(ctx, api.KindPtahSchema, res.namespace(), res.Schema.Name)
	switch {
	case errors.Is(err, store.ErrNotFound):
	case err != nil:
		return rep, err
	default:
		rep.Registered, rep.Generation = true, obj.Generation
		if len(obj.Status) > 0 {
			if err := json.Unmarshal(obj.Status, &rep.Status); err != nil {
				return rep, fmt.Errorf("decoding the status of %s: %w", obj.Name, err)
			}
		}
		if rep.Approval, err = r.currentApproval(ctx, res.namespace(), res.Schema.Name, rep.Status); err != nil {
			return rep, err
		}
	}
	rep.Lease, err = postgres.LeaseHolder(ctx, r.Target, CoordinationDigest(res.Schema.Spec, identity))
	if err != nil || rep.Lease == nil {
		return rep, err
	}
	if rep.Writer, err = postgres.SessionActivity(ctx, r.Target, rep.Lease.Writer); err != nil {
		return rep, err
	}
	rep.LeaseWriterAlive = rep.Writer != nil
	rep.Run, err = postgres.ReadRun(ctx, r.Target, rep.Lease.Holder)
	if errors.Is(err, postgres.ErrRunNotFound) {
		rep.Run, err = nil, nil
	}
	return rep, err
}

// currentApproval returns the live approval of the plan st names, if any.
func (r *Runner) currentApproval(ctx context.Context, namespace, name string, st api.PtahSchemaStatus) (*engine.Approval, error) {
	if st.Plan == nil {
		return nil, nil
	}
	objs, err := r.Store.List(ctx, store.ListOptions{Kind: api.KindPtahSchemaApproval, Namespace: namespace,
		Labels: map[string]string{LabelSchema: name}})
	if err != nil {
		return nil, fmt.Errorf("reading the approvals of %s: %w", name, err)
	}
	var live []engine.Approval
	for _, o := range objs {
		a, err := decodeApproval(o)
		if err != nil {
			return nil, err
		}
		live = append(live, a)
	}
	for i, a := range live {
		if !a.Status.Stale && a.Spec.Plan.UID == st.Plan.UID && a.Spec.PlanFingerprint == st.Plan.Fingerprint {
			return &live[i], nil
		}
	}
	return nil, nil
}

// Registered lists the resources registered in this runner's database, as
// "Kind namespace/name", sorted: every one of them counts in the census.
func (r *Runner) Registered(ctx context.Context) ([]string, error) {
	objs, err := r.Store.List(ctx, store.ListOptions{Kind: api.KindPtahSchema, MetadataOnly: true})
	if err != nil {
		return nil, fmt.Errorf("listing registered resources: %w", err)
	}
	out := make([]string, len(objs))
	for i, o := range objs {
		out[i] = o.Kind + " " + o.Namespace + "/" + o.Name
	}
	return out, nil
}

// Registration is how Registered names res.
func (res Resource) Registration() string {
	return api.KindPtahSchema + " " + res.namespace() + "/" + res.Schema.Name
}

// Forgotten is what Forget removed, and what it kept.
type Forgotten struct {
	Resource string   // "Kind namespace/name"
	Plans    []string // the plan objects removed
	// KeptApprovals are the resource's approvals, kept as the record of who
	// decided what; they never authorize a plan of another object.
	KeptApprovals int
}

// ErrNotForgettable: the record still owes something (see engine.Forgettable).
var ErrNotForgettable = errors.New("the resource's record cannot be removed yet")

// ErrNotRegistered: no resource of that name is registered in the database.
var ErrNotRegistered = errors.New("no resource of that name is registered in this database")

// Forget removes the record of a resource registered in this database (a
// renamed or mistyped one still counts in the realm census) and its plans,
// under its pass lock so that no pass runs it meanwhile. It refuses while
// the record owes an outcome or a release. Approvals stay, as the audit of
// decisions, and so does the run journal.
func (r *Runner) Forget(ctx context.Context, namespace, name string) (Forgotten, error) {
	out := Forgotten{Resource: api.KindPtahSchema + " " + namespace + "/" + name}
	if err := r.Fence(ctx); err != nil {
		return out, err
	}
	unlock, err := postgres.TryPassLock(ctx, r.Target, api.KindPtahSchema+"/"+namespace+"/"+name)
	if err != nil {
		return out, err
	}
	defer func() { _ = unlock(context.WithoutCancel(ctx)) }()
	obj, err := r.Store.Get(ctx, api.KindPtahSchema, namespace, name)
	if errors.Is(err, store.ErrNotFound) {
		return out, fmt.Errorf("forgetting %s: %w", out.Resource, ErrNotRegistered)
	}
	if err != nil {
		return out, err
	}
	var st api.PtahSchemaStatus
	if len(obj.Status) > 0 {
		if err := json.Unmarshal(obj.Status, &st); err != nil {
			return out, fmt.Errorf("decoding the status of %s: %w", obj.Name, err)
		}
	}
	if why := engine.Forgettable(st); why != "" {
		return out, fmt.Errorf("forgetting %s: %w: %s", out.Resource, ErrNotForgettable, why)
	}
	owned := store.ListOptions{Namespace: namespace, Labels: map[string]string{LabelSchema: name}, MetadataOnly: true}
	owned.Kind = api.KindPtahSchemaPlan
	plans, err := r.Store.List(ctx, owned)
	if err != nil {
		return out, err
	}
	owned.Kind = api.KindPtahSchemaApproval
	approvals, err := r.Store.List(ctx, owned)
	if err != nil {
		return out, err
	}
	// The resource first: once it is gone, nothing makes its plans current.
	if err := r.Store.Delete(ctx, obj.Kind, obj.Namespace, obj.Name, obj.UID); err != nil {
		return out, fmt.Errorf("forgetting %s: %w", out.Resource, err)
	}
	for _, p := range plans {
		if err := r.Store.Delete(ctx, p.Kind, p.Namespace, p.Name, p.UID); err != nil && !errors.Is(err, store.ErrNotFound) {
			return out, fmt.Errorf("removing plan %s of %s: %w", p.Name, out.Resource, err)
		}
		out.Plans = append(out.Plans, p.Name)
	}
	out.KeptApprovals = len(approvals)
	return out, nil
}

// History is what is recorded of a resource over time.
type History struct {
	Plans     []HistoryPlan
	Approvals []engine.Approval
	Runs      []postgres.Run // Steps holds only their count
}

// HistoryPlan is a stored plan, by its metadata.
type HistoryPlan struct {
	Name, UID   string
	PublishedAt time.Time
}

// History reads res's stored plans, its approvals and its runs in the
// journal. It writes nothing.
func (r *Runner) History(ctx context.Context, res Resource) (History, error) {
	var h History
	if err := r.Fence(ctx); err != nil {
		return h, err
	}
	sel := store.ListOptions{Namespace: res.namespace(), Labels: map[string]string{LabelSchema: res.Schema.Name}}
	sel.Kind, sel.MetadataOnly = api.KindPtahSchemaPlan, true
	plans, err := r.Store.List(ctx, sel)
	if err != nil {
		return h, err
	}
	for _, o := range plans {
		h.Plans = append(h.Plans, HistoryPlan{Name: o.Name, UID: o.UID, PublishedAt: o.CreatedAt})
	}
	sel.Kind, sel.MetadataOnly = api.KindPtahSchemaApproval, false
	approvals, err := r.Store.List(ctx, sel)
	if err != nil {
		return h, err
	}
	for _, o := range approvals {
		a, err := decodeApproval(o)
		if err != nil {
			return h, err
		}
		h.Approvals = append(h.Approvals, a)
	}
	slices.SortFunc(h.Plans, func(a, b HistoryPlan) int { return a.PublishedAt.Compare(b.PublishedAt) })
	slices.SortFunc(h.Approvals, func(a, b engine.Approval) int { return a.Spec.ApprovedAt.Compare(b.Spec.ApprovedAt) })
	h.Runs, err = postgres.ListRuns(ctx, r.Target, res.Schema.Name)
	return h, err
}
