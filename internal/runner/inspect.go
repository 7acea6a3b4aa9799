package runner

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

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
}

// Inspect reads res's recorded status and its database's lease. It writes
// nothing, and refuses, like every verb, state a newer ptah wrote.
func (r *Runner) Inspect(ctx context.Context, res Resource) (Report, error) {
	rep := Report{Name: res.Schema.Name}
	if err := r.Fence(ctx); err != nil {
		return rep, err
	}
	identity, err := r.Identity(ctx)
	if err != nil {
		return rep, err
	}
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
	}
	rep.Lease, err = postgres.LeaseHolder(ctx, r.Target, CoordinationDigest(res.Schema.Spec, identity))
	if err != nil || rep.Lease == nil {
		return rep, err
	}
	rep.LeaseWriterAlive, err = postgres.SessionAlive(ctx, r.Target, rep.Lease.Writer.PID, rep.Lease.Writer.BackendStart)
	return rep, err
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
