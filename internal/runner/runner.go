// Package runner is local mode's shell around the engine: it reads the
// store and the database, asks engine.SchemaPass what to do, does it, and
// loops until the pass reaches a stable phase.
package runner

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/ptah-run/ptah/internal/engine"
	"github.com/ptah-run/ptah/internal/failpoint"
	"github.com/ptah-run/ptah/internal/fingerprint"
	"github.com/ptah-run/ptah/internal/postgres"
	"github.com/ptah-run/ptah/internal/postgres/catalog"
	"github.com/ptah-run/ptah/internal/store"
	api "github.com/ptah-run/ptah/pkg/api/v1alpha1"
)

// Labels the runner puts on stored objects.
const (
	LabelSchema       = "ptah.run/schema"
	LabelMigration    = "ptah.run/migration"
	LabelCoordination = "ptah.run/coordination"
	LabelSharedRealm  = "ptah.run/shared-realm"
	// LabelTarget names the database a resource addresses (its target
	// identity digest, short), whatever its coordination key: the census
	// counts every resource of one database.
	LabelTarget = "ptah.run/target"
)

// Failpoints the runner stops at in crash tests.
const (
	FailAfterClaim        = "after-claim"
	FailAfterDispatch     = failpoint.AfterDispatch
	FailAfterExecution    = "after-execution"
	FailBeforeRelease     = "before-lease-release"
	maxStepsWithoutChange = 64
)

// Runner runs passes for resources of one target database.
type Runner struct {
	Store  store.Store
	Target *pgx.Conn // a session on the target: identity, leases, liveness
	DevURL string

	Version string
	// NewID returns a fresh operation ID. Times come from the target
	// server's clock, which enforces every deadline (see postgres.ServerNow).
	NewID      func() string
	RunTimeout time.Duration
	// ObserveTimeout bounds how long reading the target's catalog waits
	// for a lock (catalog.PlanRequest.ObserveTimeout).
	ObserveTimeout time.Duration
	// OnWait, when set, gives the function that hears what reading a
	// resource's catalog waits for (catalog.PlanRequest.OnWait).
	OnWait func(resource string) func(waiting string)
	// Cache, when set, keeps the desired state the declared files load to
	// (catalog.PlanRequest.Cache); OnCacheError hears why it could not be
	// used, when it could not.
	Cache        catalog.DesiredCache
	OnCacheError func(error)
	// Progress, when set, hears of each statement of a plan as it starts
	// and once it has run.
	Progress postgres.ProgressFunc
}

// TxStore is a store whose writes can join a transaction on the target
// database: local mode's store, kept in the target's ptah schema. The
// dispatch boundary writes through it, so that the dispatch marker and a
// spent approval commit with the run's journal row.
type TxStore interface {
	InTx(tx pgx.Tx) store.Store
}

func (r *Runner) storeIn(tx pgx.Tx) store.Store {
	if s, ok := r.Store.(TxStore); ok {
		return s.InTx(tx)
	}
	return nil
}

// Mode says how far a pass may go.
type Mode int

const (
	// PlanOnly publishes the plan and stops before any claim.
	PlanOnly Mode = iota
	// Apply goes all the way: claim, dispatch, account, verify.
	Apply
)

// Result is where a resource ended.
type Result struct {
	Name string
	Kind string
	// Status is a PtahSchema's status; of a PtahMigration's, only its run
	// state (the rest is in Migration).
	Status api.PtahSchemaStatus
	Plan   *engine.Plan // a PtahSchema's current plan, if any
	// Migration is a PtahMigration's status and current plan; nil for a
	// PtahSchema.
	Migration *MigrationResult
	// Dispatched are the operations this run dispatched (in order): each
	// may have executed SQL. Empty when nothing was sent to the database.
	Dispatched []string
}

// MigrationResult is where a PtahMigration ended.
type MigrationResult struct {
	Status api.PtahMigrationStatus
	Plan   *engine.MigrationPlan // the current plan, if any
}

// State is the run state of either family's status.
func (r Result) State() api.RunState {
	if r.Migration != nil {
		return r.Migration.Status.RunState
	}
	return r.Status.RunState
}

// Register stores the resource (creating it, or updating its spec, which
// bumps its generation) and returns the stored object.
func (r *Runner) Register(ctx context.Context, res Resource, identity string) (store.Object, error) {
	// Registering rewrites the object under this binary's contract version:
	// refuse first, or a newer ptah's record would be overwritten unread.
	if err := r.Fence(ctx); err != nil {
		return store.Object{}, err
	}
	spec, err := json.Marshal(res.spec())
	if err != nil {
		return store.Object{}, fmt.Errorf("encoding %s: %w", res.Name(), err)
	}
	labels := map[string]string{
		LabelCoordination: fingerprint.Short(res.coordination(identity)),
		LabelTarget:       fingerprint.Short(identity),
		LabelSharedRealm:  fmt.Sprint(res.target().SharedRealm),
	}
	kind, ns, name := res.Kind(), res.namespace(), res.Name()
	// Another process may register the same resource at the same moment:
	// on a lost race, read again and update what it created.
	for attempt := 0; ; attempt++ {
		obj, err := r.Store.Get(ctx, kind, ns, name)
		switch {
		case errors.Is(err, store.ErrNotFound):
			obj, err = r.Store.Create(ctx, store.Object{Kind: kind, Namespace: ns, Name: name,
				ContractVersion: api.ContractVersion, Labels: labels, Spec: spec})
		case err == nil && registered(obj, spec, labels):
			return obj, nil // nothing to write: concurrent runs of one file do not contend
		case err == nil:
			// Read again after a lost race: a newer ptah may have written it.
			if ferr := fenceObject(obj); ferr != nil {
				return store.Object{}, ferr
			}
			obj.Spec, obj.Labels, obj.ContractVersion = spec, labels, api.ContractVersion
			obj, err = r.Store.Update(ctx, obj)
			if errors.Is(err, store.ErrNewerContract) {
				return store.Object{}, r.refusedAsNewer(ctx, kind, ns, name, err)
			}
		}
		if (errors.Is(err, store.ErrAlreadyExists) || errors.Is(err, store.ErrConflict)) && attempt < 8 {
			continue
		}
		return obj, err
	}
}

// registered reports whether obj already records spec and labels under
// this binary's contract version.
func registered(obj store.Object, spec []byte, labels map[string]string) bool {
	if obj.ContractVersion != api.ContractVersion || !maps.Equal(obj.Labels, labels) {
		return false
	}
	var stored, wanted any
	if json.Unmarshal(obj.Spec, &stored) != nil || json.Unmarshal(spec, &wanted) != nil {
		return false
	}
	return reflect.DeepEqual(stored, wanted)
}

// Identity is the target identity digest of the runner's database.
func (r *Runner) Identity(ctx context.Context) (string, error) {
	id, err := postgres.TargetIdentity(ctx, r.Target)
	if err != nil {
		return "", fmt.Errorf("reading the target's identity: %w", err)
	}
	return TargetIdentityDigest(id), nil
}

// Run drives the pass for one resource until a stable phase. It registers
// the resource first; a caller running several resources registers them
// all before running any, so that each pass's census sees the others.
func (r *Runner) Run(ctx context.Context, res Resource, mode Mode) (Result, error) {
	identity, err := r.Identity(ctx)
	if err != nil {
		return Result{}, err
	}
	if err := r.Fence(ctx); err != nil {
		return Result{}, err
	}
	// One process at a time runs this resource's pass, as one controller
	// worker does per key; a process that dies lets go with its session.
	unlock, err := postgres.TryPassLock(ctx, r.Target, res.Kind()+"/"+res.namespace()+"/"+res.Name())
	if err != nil {
		return Result{Name: res.Name(), Kind: res.Kind()}, r.withLeaseHolder(ctx, res, identity, err)
	}
	defer func() { _ = unlock(context.WithoutCancel(ctx)) }()
	if _, err := r.Register(ctx, res, identity); err != nil {
		return Result{}, fmt.Errorf("registering %s: %w", res.Name(), err)
	}
	p := &pass{Runner: r, res: res, f: shellFor(res), mode: mode, identity: identity}
	return p.loop(ctx)
}

// withLeaseHolder adds to a busy pass lock who holds the database's lease,
// if anyone does: that is the run a person waits for.
func (r *Runner) withLeaseHolder(ctx context.Context, res Resource, identity string, err error) error {
	if !errors.Is(err, postgres.ErrPassBusy) {
		return err
	}
	lease, lerr := postgres.LeaseHolder(ctx, r.Target, res.coordination(identity))
	if lerr != nil || lease == nil {
		return err
	}
	return fmt.Errorf("%w; the database's lease is held by operation %s of %s (writer session %s, deadline %s)",
		err, lease.Holder, lease.Resource, lease.Writer, lease.Deadline.UTC().Format(time.RFC3339))
}

// Fence refuses stored state a newer ptah wrote. Every entry point calls it
// before anything else; a caller that reads the store itself calls it first.
func (r *Runner) Fence(ctx context.Context) error {
	_, stored, err := r.storedState(ctx)
	if err != nil {
		return err
	}
	return engine.VerifyStoredState(stored, api.ContractVersion)
}

// FenceStore refuses st when it holds state a newer ptah wrote: the
// stored-state fence over the objects alone, as in a cluster, where there
// are no runtime tables to read.
// Also are further records to fence with them (a cluster's CRDs).
func FenceStore(ctx context.Context, st store.Store, also ...engine.StoredObject) error {
	_, stored, err := StoredState(ctx, st)
	if err != nil {
		return err
	}
	return engine.VerifyStoredState(append(stored, also...), api.ContractVersion)
}

// storedState reads what the fence decides from: every object of the store
// (metadata only) and the newest record of each runtime table. It returns
// the objects too, for the census.
func (r *Runner) storedState(ctx context.Context) ([]store.Object, []engine.StoredObject, error) {
	objs, err := r.Store.List(ctx, store.ListOptions{MetadataOnly: true})
	if err != nil {
		return nil, nil, fmt.Errorf("scanning stored state: %w", err)
	}
	records, err := postgres.NewestRuntimeRecords(ctx, r.Target)
	if err != nil {
		return nil, nil, fmt.Errorf("scanning stored state: %w", err)
	}
	out := make([]engine.StoredObject, 0, len(objs)+len(records))
	for _, o := range objs {
		out = append(out, storedObject(o))
	}
	for _, rec := range records {
		kind := engine.RecordRun
		switch rec.Table {
		case "leases":
			kind = engine.RecordLease
		case "migration_history":
			kind = engine.RecordHistory
		}
		out = append(out, engine.StoredObject{Kind: kind, Name: rec.Key, ContractVersion: rec.ContractVersion})
	}
	return objs, out, nil
}

// storedObject is what the fence sees of o: the highest contract version
// recorded on it, by the store or inside its spec and status.
func storedObject(o store.Object) engine.StoredObject {
	return engine.StoredObject{Kind: o.Kind, Namespace: o.Namespace, Name: o.Name,
		ContractVersion: max(o.ContractVersion, o.EmbeddedContractVersion)}
}

// refusedAsNewer turns the store's refusal to write over an object a newer
// ptah wrote (store.ErrNewerContract) into the fence's refusal naming it.
func (r *Runner) refusedAsNewer(ctx context.Context, kind, namespace, name string, err error) error {
	if fresh, gerr := r.Store.Get(ctx, kind, namespace, name); gerr == nil {
		if ferr := fenceObject(fresh); ferr != nil {
			return ferr
		}
	}
	return fmt.Errorf("writing %s: %w", store.Ref(kind, namespace, name), err)
}

// fenceObject refuses to write over o, read back after a lost race, when a
// newer ptah wrote it meanwhile. The store refuses such a write too
// (store.ErrNewerContract); this names the object the way the fence does.
func fenceObject(o store.Object) error {
	return engine.VerifyStoredState([]engine.StoredObject{storedObject(o)}, api.ContractVersion)
}
