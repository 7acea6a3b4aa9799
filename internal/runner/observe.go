package runner

import (
	"context"
	"time"

	"github.com/ptah-run/ptah/internal/engine"
	"github.com/ptah-run/ptah/internal/fingerprint"
	"github.com/ptah-run/ptah/internal/migrate"
	"github.com/ptah-run/ptah/internal/postgres"
	"github.com/ptah-run/ptah/internal/postgres/catalog"
	api "github.com/ptah-run/ptah/pkg/api/v1alpha1"
)

// Resource is a PtahSchema or a PtahMigration (exactly one of Schema and
// Migration is set) with the inputs the file resolved for it.
type Resource struct {
	Schema    *api.PtahSchema
	Migration *api.PtahMigration
	TargetURL string
	// Files are a PtahSchema's declared files, in load order.
	Files []catalog.SourceFile
	// Source is a PtahMigration's directory, read and checked
	// (migrate.ReadDir); nil when it could not be read, and SourceErr
	// says why: the observation is then Blocked (SourceInvalid), and no
	// plan can be executed.
	Source    *migrate.Source `json:"-"`
	SourceErr error           `json:"-"`
	// Baseline, for a PtahMigration, asks for a baseline plan up to this
	// version (ptah plan --baseline): the versions up to it recorded as
	// already present, once the target is checked to match them.
	Baseline string
}

// ReadSource reads a PtahMigration's source directory into Source (or
// SourceErr): what a process given the resource without its source (a
// crash test's child) does first. The path is read as the spec holds it:
// a caller that reads ptah.yaml resolves it against the file's directory
// first (config.Resource.SourceDir), as the CLI does.
func (r *Resource) ReadSource() {
	if r.Migration == nil {
		return
	}
	r.Source, r.SourceErr = migrate.ReadDir(r.Migration.Spec.Source.Path, migrate.Layout(r.Migration.Spec.Source.Layout))
}

// Kind is the resource's kind.
func (r Resource) Kind() string {
	if r.Migration != nil {
		return api.KindPtahMigration
	}
	return api.KindPtahSchema
}

// Name is the resource's name.
func (r Resource) Name() string {
	if r.Migration != nil {
		return r.Migration.Name
	}
	return r.Schema.Name
}

// namespace is where the resource is addressed in the store.
func (r Resource) namespace() string {
	ns := ""
	if r.Migration != nil {
		ns = r.Migration.Namespace
	} else {
		ns = r.Schema.Namespace
	}
	if ns != "" {
		return ns
	}
	return "default"
}

// target is the database the resource addresses.
func (r Resource) target() api.Target {
	if r.Migration != nil {
		return r.Migration.Spec.Target
	}
	return r.Schema.Spec.Target
}

// coordination is the resource's coordination digest on the database of
// identity: one digest for both families (CoordinationDigest).
func (r Resource) coordination(identity string) string {
	return CoordinationDigest(api.PtahSchemaSpec{Target: r.target()}, identity)
}

// spec is what the store records as the resource's spec.
func (r Resource) spec() any {
	if r.Migration != nil {
		return r.Migration.Spec
	}
	return r.Schema.Spec
}

// ArtifactDigest fingerprints the declared files: names and contents, in
// load order.
func ArtifactDigest(files []catalog.SourceFile) string {
	b := fingerprint.New("ptah.run/artifact/v1").Int("files", int64(len(files)))
	for _, f := range files {
		b.String("name", f.Name).String("sql", f.SQL)
	}
	return b.Sum()
}

// TargetIdentityDigest fingerprints the server and database.
func TargetIdentityDigest(id postgres.Identity) string {
	return fingerprint.New("ptah.run/target/v1").
		String("systemIdentifier", id.SystemIdentifier).
		String("database", id.Database).
		Sum()
}

// CoordinationDigest names the database for coordination: the engine and
// the declared coordination key, else the target's identity.
func CoordinationDigest(spec api.PtahSchemaSpec, targetDigest string) string {
	key := spec.Target.CoordinationKey
	if key == "" {
		key = "target:" + targetDigest
	}
	return fingerprint.New("ptah.run/coordination/v1").String("engine", api.EnginePostgres).String("key", key).Sum()
}

// PolicyFingerprint covers what governs applying: policy and scope.
func PolicyFingerprint(spec api.PtahSchemaSpec) string {
	b := fingerprint.New("ptah.run/policy/v1").
		String("apply", string(spec.Policy.Apply)).
		Bool("allowDestructive", spec.Policy.AllowDestructive).
		String("lockTimeout", spec.Policy.LockTimeout).
		Strings("schemas", spec.Schemas).
		Bool("online", spec.Policy.IsOnline())
	b = withStatementLimits(b, spec.Policy.LockAttemptTimeout, spec.Policy.StatementTimeout)
	// Managed privileges widen the scope, so a plan made without them is
	// not one made with them; Ignored (or unset) hashes as before the
	// field existed.
	if spec.ManagesPrivileges() {
		b.String("privileges", string(api.PrivilegesManaged))
	}
	return b.Sum()
}

// SchemaPlanRequest is what planning res asks of the catalog: its target,
// files, scope and policy, the dev server, and how long the catalog
// reading may wait.
func SchemaPlanRequest(res Resource, devURL string, observeTimeout time.Duration) catalog.PlanRequest {
	return catalog.PlanRequest{
		TargetURL:      res.TargetURL,
		DevURL:         devURL,
		Files:          res.Files,
		Schemas:        append([]string(nil), res.Schema.Spec.Schemas...),
		LockTimeout:    res.Schema.Spec.Policy.LockTimeoutDuration(),
		Online:         res.Schema.Spec.Policy.IsOnline(),
		Privileges:     res.Schema.Spec.ManagesPrivileges(),
		ObserveTimeout: observeTimeout,
	}
}

// observe reads the database and the declared files once.
func (r *Runner) observe(ctx context.Context, res Resource, identity string) (*engine.Observation, error) {
	req := SchemaPlanRequest(res, r.DevURL, r.ObserveTimeout)
	if r.OnWait != nil {
		req.OnWait = r.OnWait(res.Schema.Name)
	}
	req.Cache, req.OnCacheError = r.Cache, r.OnCacheError
	obs, err := catalog.Observe(ctx, req)
	if err != nil {
		return nil, err
	}
	stmts := make([]api.PlanStatement, len(obs.Plan.Statements))
	for i, s := range obs.Plan.Statements {
		hz := make([]string, len(s.Hazards))
		for j, h := range s.Hazards {
			hz[j] = string(h)
		}
		stmts[i] = api.PlanStatement{SQL: s.SQL, Hazards: hz, Locks: APILocks(s.Locks)}
	}
	var phases []api.PlanPhase
	for _, ph := range obs.Plan.Phases {
		phases = append(phases, api.PlanPhase{Statements: ph.Statements, Locks: ph.Locks, Reason: ph.Reason, NoTransaction: ph.NoTransaction})
	}
	var capacity *api.LockCapacity
	if len(stmts) > 0 {
		c := api.LockCapacity(obs.Plan.LockCapacity)
		capacity = &c
	}
	return &engine.Observation{
		Bindings: api.Bindings{
			ArtifactDigest:          ArtifactDigest(res.Files),
			CoordinationDigest:      CoordinationDigest(res.Schema.Spec, identity),
			TargetIdentityDigest:    identity,
			ActualStateFingerprint:  ActualStateFingerprint(obs),
			DesiredStateFingerprint: fingerprint.New("ptah.run/model/v1").JSON("model", obs.Desired).Sum(),
			PolicyFingerprint:       PolicyFingerprint(res.Schema.Spec),
			ExecutionBinding:        r.binding(),
		},
		Statements:   stmts,
		Phases:       phases,
		LockCapacity: capacity,
		Destructive:  obs.Plan.Destructive,
		LockTimeout:  res.Schema.Spec.Policy.LockTimeout,

		LockAttemptTimeout: res.Schema.Spec.Policy.LockAttemptTimeout,
		StatementTimeout:   res.Schema.Spec.Policy.StatementTimeout,
		StatementLocks:     obs.Plan.LocksKnown,
		Hints:              obs.Plan.Hints,
	}, nil
}

// APILocks and planLocks carry a statement's locks to and from a
// published plan (and the CLI's JSON).
func APILocks(locks []postgres.Lock) []api.PlanLock {
	var out []api.PlanLock
	for _, l := range locks {
		out = append(out, api.PlanLock{Relation: l.Relation, Mode: l.Mode.String()})
	}
	return out
}

func planLocks(locks []api.PlanLock) []postgres.Lock {
	var out []postgres.Lock
	for _, l := range locks {
		// An unknown mode (the API server enforces the enum; a plan
		// file may not) counts as the strongest.
		m, ok := postgres.ParseLockMode(l.Mode)
		if !ok {
			m = postgres.AccessExclusive
		}
		out = append(out, postgres.Lock{Relation: l.Relation, Mode: m})
	}
	return out
}

// ActualStateFingerprint covers what was observed of the target: its
// managed schemas, and the lock capacity the plan's phases are cut to fit,
// so that a server restarted with other lock settings moves the inputs of
// a claimed plan as a changed schema does.
func ActualStateFingerprint(obs *catalog.Observation) string {
	return fingerprint.New("ptah.run/target-state/v2").
		JSON("model", obs.Live).
		JSON("lockCapacity", obs.Plan.LockCapacity).
		Sum()
}

// statementLimits parses a plan's lock attempt and statement timeouts,
// validated with its policy; "" is 0, the executor's default (see
// postgres.Plan).
func statementLimits(lockAttempt, statement string) (attempt, limit time.Duration) {
	attempt, _ = time.ParseDuration(lockAttempt)
	limit, _ = time.ParseDuration(statement)
	return attempt, limit
}

func (r *Runner) binding() api.ExecutionBinding {
	return api.ExecutionBinding{PtahVersion: r.Version, ContractVersion: api.ContractVersion, Engine: api.EnginePostgres}
}

// ToPlan turns a stored plan back into what the executor runs: its
// statements, in the phases it was published (and approved) with.
func ToPlan(spec api.PtahSchemaPlanSpec) *postgres.Plan {
	lockTimeout, _ := time.ParseDuration(spec.LockTimeout)
	p := &postgres.Plan{Destructive: spec.Destructive, LockTimeout: lockTimeout, LocksKnown: spec.StatementLocks, Hints: spec.Hints}
	p.LockAttempt, p.StatementTimeout = statementLimits(spec.LockAttemptTimeout, spec.StatementTimeout)
	for _, s := range spec.Statements {
		hz := make([]postgres.Hazard, len(s.Hazards))
		for i, h := range s.Hazards {
			hz[i] = postgres.Hazard(h)
		}
		p.Statements = append(p.Statements, postgres.Statement{SQL: s.SQL, Hazards: hz, Locks: planLocks(s.Locks)})
	}
	for _, ph := range spec.Phases {
		p.Phases = append(p.Phases, postgres.Phase{Statements: ph.Statements, Locks: ph.Locks, Reason: ph.Reason, NoTransaction: ph.NoTransaction})
	}
	if c := spec.LockCapacity; c != nil {
		p.LockCapacity = postgres.LockCapacity(*c)
	}
	return p
}
