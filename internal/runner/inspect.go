package runner

import (
	"context"
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
	Name, Kind string
	Registered bool // false: no pass has run for it in this database yet
	Generation int64
	// Status is a PtahSchema's status; of a PtahMigration's, its run state
	// (the rest is in Migration).
	Status api.PtahSchemaStatus
	// Lease is the database's lease, nil when free; LeaseWriterAlive says
	// whether its writer session is still connected.
	Lease            *postgres.Lease
	LeaseWriterAlive bool
	// Writer is what the lease's writer session is doing (nil when it is
	// gone), and Run its journal (nil before it journaled the run).
	Writer *postgres.Activity
	Run    *postgres.Run
	// Approval is the live approval of a PtahSchema's current plan, if one
	// was recorded.
	Approval *engine.Approval
	// Migration is a PtahMigration's status and the live approval of its
	// current plan; nil for a PtahSchema.
	Migration *MigrationReport
}

// MigrationReport is what is recorded about a PtahMigration.
type MigrationReport struct {
	Status   api.PtahMigrationStatus
	Approval *engine.MigrationApproval
}

// Inspect reads res's recorded status and its database's lease. It writes
// nothing, and refuses, like every verb, state a newer ptah wrote.
func (r *Runner) Inspect(ctx context.Context, res Resource) (Report, error) {
	rep := Report{Name: res.Name(), Kind: res.Kind()}
	if res.Migration != nil {
		rep.Migration = &MigrationReport{}
	}
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
	if rep, err = InspectStored(ctx, r.Store, res); err != nil {
		return rep, err
	}
	rep.Lease, err = postgres.LeaseHolder(ctx, r.Target, res.coordination(identity))
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

// InspectStored reads what st records of res: its status and the live
// approval of its current plan; in a cluster, all there is to read. The
// caller fences st first.
func InspectStored(ctx context.Context, st store.Store, res Resource) (Report, error) {
	rep := Report{Name: res.Name(), Kind: res.Kind()}
	if res.Migration != nil {
		rep.Migration = &MigrationReport{}
	}
	obj, err := st.Get(ctx, res.Kind(), res.namespace(), res.Name())
	switch {
	case errors.Is(err, store.ErrNotFound):
	case err != nil:
		return rep, err
	case res.Migration != nil:
		rep.Registered, rep.Generation = true, obj.Generation
		if err := decodeStatus(obj, &rep.Migration.Status); err != nil {
			return rep, err
		}
		rep.Status.RunState = rep.Migration.Status.RunState
		if rep.Migration.Approval, err = currentMigrationApproval(ctx, st, res, rep.Migration.Status.Plan); err != nil {
			return rep, err
		}
	default:
		rep.Registered, rep.Generation = true, obj.Generation
		if err := decodeStatus(obj, &rep.Status); err != nil {
			return rep, err
		}
		if rep.Approval, err = currentApproval(ctx, st, res.namespace(), res.Schema.Name, rep.Status); err != nil {
			return rep, err
		}
	}
	return rep, nil
}

// currentApproval returns the live approval of the plan st names, if any.
func currentApproval(ctx context.Context, objects store.Store, namespace, name string, st api.PtahSchemaStatus) (*engine.Approval, error) {
	if st.Plan == nil {
		return nil, nil
	}
	objs, err := objects.List(ctx, store.ListOptions{Kind: api.KindPtahSchemaApproval, Namespace: namespace,
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

// currentMigrationApproval returns the unspent approval of the plan plan
// names, if any.
func currentMigrationApproval(ctx context.Context, objects store.Store, res Resource, plan *api.PlanReference) (*engine.MigrationApproval, error) {
	if plan == nil {
		return nil, nil
	}
	objs, err := objects.List(ctx, store.ListOptions{Kind: api.KindPtahMigrationApproval, Namespace: res.namespace(),
		Labels: map[string]string{LabelMigration: res.Name()}})
	if err != nil {
		return nil, fmt.Errorf("reading the approvals of %s: %w", res.Name(), err)
	}
	for _, o := range objs {
		a := engine.MigrationApproval{Name: o.Name, UID: o.UID}
		if err := decodeInto(o, &a.Spec, &a.Status); err != nil {
			return nil, err
		}
		if !a.Status.Spent() && a.Spec.Plan.UID == plan.UID && a.Spec.PlanFingerprint == plan.Fingerprint {
			return &a, nil
		}
	}
	return nil, nil
}

// Registered lists the resources of both families registered in this
// runner's database, as "Kind namespace/name", sorted: every one of them
// counts in the census.
func (r *Runner) Registered(ctx context.Context) ([]string, error) {
	var out []string
	for _, kind := range []string{api.KindPtahMigration, api.KindPtahSchema} {
		objs, err := r.Store.List(ctx, store.ListOptions{Kind: kind, MetadataOnly: true})
		if err != nil {
			return nil, fmt.Errorf("listing registered resources: %w", err)
		}
		for _, o := range objs {
			out = append(out, o.Kind+" "+o.Namespace+"/"+o.Name)
		}
	}
	return out, nil
}

// Registration is how Registered names res.
func (res Resource) Registration() string {
	return res.Kind() + " " + res.namespace() + "/" + res.Name()
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
func (r *Runner) Forget(ctx context.Context, kind, namespace, name string) (Forgotten, error) {
	out := Forgotten{Resource: kind + " " + namespace + "/" + name}
	k := schemaKinds
	if kind == api.KindPtahMigration {
		k = migrationKinds
	}
	if err := r.Fence(ctx); err != nil {
		return out, err
	}
	unlock, err := postgres.TryPassLock(ctx, r.Target, kind+"/"+namespace+"/"+name)
	if err != nil {
		return out, err
	}
	defer func() { _ = unlock(context.WithoutCancel(ctx)) }()
	obj, err := r.Store.Get(ctx, kind, namespace, name)
	if errors.Is(err, store.ErrNotFound) {
		return out, fmt.Errorf("forgetting %s: %w", out.Resource, ErrNotRegistered)
	}
	if err != nil {
		return out, err
	}
	var why string
	if kind == api.KindPtahMigration {
		var st api.PtahMigrationStatus
		err, why = decodeStatus(obj, &st), engine.Forgettable(st)
	} else {
		var st api.PtahSchemaStatus
		err, why = decodeStatus(obj, &st), engine.Forgettable(st)
	}
	if err != nil {
		return out, err
	}
	if why != "" {
		return out, fmt.Errorf("forgetting %s: %w: %s", out.Resource, ErrNotForgettable, why)
	}
	owned := store.ListOptions{Namespace: namespace, Labels: map[string]string{k.label: name}, MetadataOnly: true}
	owned.Kind = k.plan
	plans, err := r.Store.List(ctx, owned)
	if err != nil {
		return out, err
	}
	owned.Kind = k.approval
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
	Approvals []engine.Approval // a PtahSchema's
	// MigrationApprovals are a PtahMigration's approvals.
	MigrationApprovals []engine.MigrationApproval
	Runs               []postgres.Run // Steps holds only their count
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
	k := shellFor(res).kinds()
	sel := store.ListOptions{Namespace: res.namespace(), Labels: map[string]string{k.label: res.Name()}}
	sel.Kind, sel.MetadataOnly = k.plan, true
	plans, err := r.Store.List(ctx, sel)
	if err != nil {
		return h, err
	}
	for _, o := range plans {
		h.Plans = append(h.Plans, HistoryPlan{Name: o.Name, UID: o.UID, PublishedAt: o.CreatedAt})
	}
	sel.Kind, sel.MetadataOnly = k.approval, false
	approvals, err := r.Store.List(ctx, sel)
	if err != nil {
		return h, err
	}
	for _, o := range approvals {
		if res.Migration != nil {
			a := engine.MigrationApproval{Name: o.Name, UID: o.UID}
			if err := decodeInto(o, &a.Spec, &a.Status); err != nil {
				return h, err
			}
			h.MigrationApprovals = append(h.MigrationApprovals, a)
			continue
		}
		a, err := decodeApproval(o)
		if err != nil {
			return h, err
		}
		h.Approvals = append(h.Approvals, a)
	}
	slices.SortFunc(h.Plans, func(a, b HistoryPlan) int { return a.PublishedAt.Compare(b.PublishedAt) })
	slices.SortFunc(h.Approvals, func(a, b engine.Approval) int { return a.Spec.ApprovedAt.Compare(b.Spec.ApprovedAt.Time) })
	slices.SortFunc(h.MigrationApprovals, func(a, b engine.MigrationApproval) int { return a.Spec.ApprovedAt.Compare(b.Spec.ApprovedAt.Time) })
	h.Runs, err = postgres.ListRuns(ctx, r.Target, res.storeResource())
	return h, err
}
