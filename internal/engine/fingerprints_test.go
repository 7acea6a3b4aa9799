package engine

import (
	"errors"
	"testing"

	"github.com/ptah-run/ptah/internal/fingerprint"
	api "github.com/ptah-run/ptah/pkg/api/v1alpha1"
)

func phasedSpec() api.PtahSchemaPlanSpec {
	spec := published(observation(false), "plan-uid").Spec
	spec.Statements = append(spec.Statements, api.PlanStatement{SQL: "CREATE TABLE public.u (id integer)", Hazards: []string{}})
	spec.Phases = []api.PlanPhase{{Statements: 1, Locks: 20, Reason: "lock-budget"}, {Statements: 1, Locks: 19, Reason: "lock-budget"}}
	spec.LockCapacity = &api.LockCapacity{MaxLocksPerTransaction: 64, MaxConnections: 100}
	spec.Fingerprint = PlanFingerprint(spec)
	return spec
}

// TestPlanFingerprintCoversThePhases: how a plan is cut into transactions
// is part of what is approved; a stored plan whose phases or lock capacity
// changed is tampered with.
func TestPlanFingerprintCoversThePhases(t *testing.T) {
	t.Parallel()
	for name, tamper := range map[string]func(*api.PtahSchemaPlanSpec){
		"phases merged":          func(s *api.PtahSchemaPlanSpec) { s.Phases = []api.PlanPhase{{Statements: 2, Locks: 39}} },
		"phases dropped":         func(s *api.PtahSchemaPlanSpec) { s.Phases = nil },
		"a boundary moved":       func(s *api.PtahSchemaPlanSpec) { s.Phases[0].Statements, s.Phases[1].Statements = 2, 0 },
		"a reason changed":       func(s *api.PtahSchemaPlanSpec) { s.Phases[1].Reason = "" },
		"lock capacity changed":  func(s *api.PtahSchemaPlanSpec) { s.LockCapacity.MaxConnections = 300 },
		"lock capacity dropped":  func(s *api.PtahSchemaPlanSpec) { s.LockCapacity = nil },
		"a statement's hazards":  func(s *api.PtahSchemaPlanSpec) { s.Statements[1].Hazards = []string{"deletes-data"} },
		"the lock estimate only": func(s *api.PtahSchemaPlanSpec) { s.Phases[0].Locks = 21 },
	} {
		spec := phasedSpec()
		spec.Phases = append([]api.PlanPhase(nil), spec.Phases...)
		c := *spec.LockCapacity
		spec.LockCapacity = &c
		tamper(&spec)
		if err := VerifyPlan(Plan{Name: "app-1", UID: "plan-uid", Spec: spec}); !errors.Is(err, ErrPlanTampered) {
			t.Errorf("%s: VerifyPlan = %v, want ErrPlanTampered", name, err)
		}
	}
	if err := VerifyPlan(Plan{Name: "app-1", UID: "plan-uid", Spec: phasedSpec()}); err != nil {
		t.Errorf("the untouched plan: %v", err)
	}
}

// TestPlanFingerprintOfAPlanWithoutPhases: a plan of contract version 1,
// which has no phases, hashes as it did under that contract.
func TestPlanFingerprintOfAPlanWithoutPhases(t *testing.T) {
	t.Parallel()
	s := published(observation(true), "plan-uid").Spec
	b := fingerprint.New("ptah.run/schema-plan/v1").
		String("schema.name", s.Schema.Name).String("schema.uid", s.Schema.UID).
		Int("statements", int64(len(s.Statements)))
	for _, st := range s.Statements {
		b.String("sql", st.SQL).Strings("hazards", st.Hazards)
	}
	want := b.Bool("destructive", s.Destructive).String("lockTimeout", s.LockTimeout).JSON("bindings", s.Bindings).Sum()
	if got := PlanFingerprint(s); got != want {
		t.Errorf("PlanFingerprint = %s, want the contract 1 encoding %s", got, want)
	}
}

// TestSchemaPassPublishesThePhases: the plan the pass publishes carries
// the observation's phases and lock capacity.
func TestSchemaPassPublishesThePhases(t *testing.T) {
	t.Parallel()
	in := input(api.ApplyOnApproval)
	obs := observation(false)
	obs.Phases = []api.PlanPhase{{Statements: 1, Locks: 17}}
	obs.LockCapacity = &api.LockCapacity{MaxLocksPerTransaction: 64, MaxConnections: 100}
	in.Observation = obs
	d := SchemaPass(in)
	if d.Step != StepPublish || d.Plan == nil || len(d.Plan.Phases) != 1 || d.Plan.LockCapacity == nil ||
		d.Plan.Fingerprint != PlanFingerprint(*d.Plan) {
		t.Fatalf("decision %s, plan %+v; want the phases published", d.Step, d.Plan)
	}
}

// A plan's lock attempt and statement timeouts are part of what is
// approved: setting either changes its fingerprint; a plan without them
// hashes as before they existed.
func TestPlanFingerprintsCoverStatementLimits(t *testing.T) {
	t.Parallel()
	schema := api.PtahSchemaPlanSpec{Schema: api.ObjectReference{Name: "app", UID: "u"}, LockTimeout: "5s"}
	migration := api.PtahMigrationPlanSpec{Migration: api.ObjectReference{Name: "app", UID: "u"}, LockTimeout: "5s"}
	base, mbase := PlanFingerprint(schema), MigrationPlanFingerprint(migration)
	seen := map[string]bool{base: true, mbase: true}
	for _, limits := range [][2]string{{"50ms", ""}, {"", "10m"}, {"50ms", "10m"}} {
		s, m := schema, migration
		s.LockAttemptTimeout, s.StatementTimeout = limits[0], limits[1]
		m.LockAttemptTimeout, m.StatementTimeout = limits[0], limits[1]
		for _, fp := range []string{PlanFingerprint(s), MigrationPlanFingerprint(m)} {
			if seen[fp] {
				t.Errorf("limits %v: fingerprint %s seen before", limits, fp)
			}
			seen[fp] = true
		}
	}
	if PlanFingerprint(schema) != base || MigrationPlanFingerprint(migration) != mbase {
		t.Error("a plan's fingerprint is not stable")
	}
}

// TestPlanFingerprintCoversTheStatementsLocks: the writer decides from a
// statement's locks whether to take them in attempts, after checking for
// holders, or run it as it is; a stored plan whose locks were changed (to
// skip that care) is tampered with.
func TestPlanFingerprintCoversTheStatementsLocks(t *testing.T) {
	t.Parallel()
	locked := func() api.PtahSchemaPlanSpec {
		spec := phasedSpec()
		spec.StatementLocks = true
		spec.Statements = append([]api.PlanStatement(nil), spec.Statements...)
		spec.Statements[0].Locks = []api.PlanLock{{Relation: "public.t", Mode: "ACCESS EXCLUSIVE"}}
		spec.Fingerprint = PlanFingerprint(spec)
		return spec
	}
	for name, tamper := range map[string]func(*api.PtahSchemaPlanSpec){
		"a lock removed":     func(s *api.PtahSchemaPlanSpec) { s.Statements[0].Locks = nil },
		"a mode weakened":    func(s *api.PtahSchemaPlanSpec) { s.Statements[0].Locks[0].Mode = "SHARE UPDATE EXCLUSIVE" },
		"a relation renamed": func(s *api.PtahSchemaPlanSpec) { s.Statements[0].Locks[0].Relation = "public.u" },
		"a lock added": func(s *api.PtahSchemaPlanSpec) {
			s.Statements[1].Locks = []api.PlanLock{{Relation: "public.u", Mode: "SHARE"}}
		},
		"the locks disowned": func(s *api.PtahSchemaPlanSpec) { s.StatementLocks = false },
		"the locks moved earlier": func(s *api.PtahSchemaPlanSpec) {
			s.Statements[0].Locks, s.Statements[1].Locks = nil, s.Statements[0].Locks
		},
	} {
		spec := locked()
		tamper(&spec)
		if err := VerifyPlan(Plan{Name: "app-1", UID: "plan-uid", Spec: spec}); !errors.Is(err, ErrPlanTampered) {
			t.Errorf("%s: VerifyPlan = %v, want ErrPlanTampered", name, err)
		}
	}
	if err := VerifyPlan(Plan{Name: "app-1", UID: "plan-uid", Spec: locked()}); err != nil {
		t.Errorf("the untouched plan: %v", err)
	}
	// A plan from before statements carried their locks hashes as it did.
	if old := phasedSpec(); PlanFingerprint(old) != old.Fingerprint {
		t.Error("a plan without statement locks no longer hashes as it did")
	}
}
