package runner

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/ptah-run/ptah/internal/engine"
	"github.com/ptah-run/ptah/internal/fingerprint"
	"github.com/ptah-run/ptah/internal/postgres"
	"github.com/ptah-run/ptah/internal/store"
	api "github.com/ptah-run/ptah/pkg/api/v1alpha1"
)

// shell is what one family adds to local mode's pass (pass.go): how its
// records are read from the store, which engine pass decides, how a fresh
// reading is taken, and how a claimed plan is executed and accounted for.
// Everything else (the fence, the census, the lease, the journal, the
// pass lock, the dispatch boundary) is the pass's, once for both.
type shell interface {
	kinds() familyKinds
	// read decodes, from the store, the resource's status (self's), its
	// current plan and the decisions that bear on it.
	read(ctx context.Context, p *pass, self store.Object) error
	// readState is the run state of the status read.
	readState() *api.RunState
	// uncertain names the family's record of a run whose outcome is
	// unknown, if there is one (operation ID and coordination digest).
	uncertain() (string, string, bool)
	// decide asks the family's engine pass.
	decide(base engine.PassInput) decision
	// status is the complete status decided, and its run state.
	status() (any, *api.RunState)
	// observe takes the fresh reading of the pass; forget drops it.
	observe(ctx context.Context, p *pass) error
	forget()
	// rederive takes a fresh reading and returns op's input fingerprint
	// derived from it.
	rederive(ctx context.Context, p *pass, op api.Operation) (string, error)
	// execPlan is what the writer executes for op, and the approval it
	// spends at the dispatch boundary (nil: none is spent).
	execPlan(ctx context.Context, p *pass, op api.Operation) (*postgres.Plan, *api.ObjectReference, error)
	// account records how the run of op ended in the status; failed
	// reports a run that certainly did not complete.
	account(ctx context.Context, p *pass, base engine.PassInput, op api.Operation, plan *postgres.Plan, runErr error, now time.Time) (failed bool)
	// record makes the claim of op the record of run, in the status
	// decided from the status read: the write after a run.
	record(op api.Operation, run engine.MigrationRun, targetIdentity string, now time.Time)
	// plansToPrune are those of uids the status decided needs no more
	// (engine.PlansToPrune).
	plansToPrune(uids []string) []string
	// result is the resource as the pass left it.
	result(ctx context.Context, p *pass, self store.Object) Result
}

// familyKinds are the kinds of a family's records and the label that
// ties its plans and decisions to their resource.
type familyKinds struct {
	resource, plan, approval string
	label                    string
}

var (
	schemaKinds    = familyKinds{api.KindPtahSchema, api.KindPtahSchemaPlan, api.KindPtahSchemaApproval, LabelSchema}
	migrationKinds = familyKinds{api.KindPtahMigration, api.KindPtahMigrationPlan, api.KindPtahMigrationApproval, LabelMigration}
)

// decision is a family's engine decision, as the pass carries it out.
type decision struct {
	step      engine.Step
	stable    bool
	err       error
	operation *api.Operation
	// plan is the spec StepPublish stores, and its fingerprint.
	plan            any
	planFingerprint string
	// stale are the decisions StepMarkStale marks stale (approvals, and
	// a migration's acknowledgments).
	stale []staleDecision
	// resolve is the acknowledgment StepResolve consumes, for the run
	// resolveOperation.
	resolve          *api.ObjectReference
	resolveOperation string
}

type staleDecision struct {
	name, uid, reason string
}

func shellFor(res Resource) shell {
	if res.Migration != nil {
		return &migrationShell{res: res}
	}
	return &schemaShell{res: res}
}

// decodeStatus decodes self's status into st (left zero when none).
func decodeStatus(self store.Object, st any) error {
	if len(self.Status) == 0 {
		return nil
	}
	if err := json.Unmarshal(self.Status, st); err != nil {
		return fmt.Errorf("decoding the status of %s: %w", self.Name, err)
	}
	return nil
}

// decodeInto decodes o's spec into spec and its status (if any) into
// status.
func decodeInto(o store.Object, spec, status any) error {
	if err := json.Unmarshal(o.Spec, spec); err != nil {
		return fmt.Errorf("decoding %s %s: %w", o.Kind, o.Name, err)
	}
	if status != nil && len(o.Status) > 0 {
		if err := json.Unmarshal(o.Status, status); err != nil {
			return fmt.Errorf("decoding %s %s: %w", o.Kind, o.Name, err)
		}
	}
	return nil
}

// listDecisions lists the resource's decisions of kind (approvals, or
// acknowledgments).
func (p *pass) listDecisions(ctx context.Context, kind string) ([]store.Object, error) {
	k := p.f.kinds()
	objs, err := p.Store.List(ctx, store.ListOptions{Kind: kind, Namespace: p.res.namespace(), Labels: map[string]string{k.label: p.res.Name()}})
	if err != nil {
		return nil, fmt.Errorf("reading the %s objects of %s: %w", kind, p.res.Name(), err)
	}
	return objs, nil
}

// currentPlan returns the stored plan ref names, nil when it is gone.
func (p *pass) currentPlan(ctx context.Context, ref *api.PlanReference) (*store.Object, error) {
	if ref == nil {
		return nil, nil
	}
	var o store.Object
	var err error
	if ref.Name != "" {
		// By name, then by UID: one read, where a lookup by UID alone
		// scans every stored object (the API cannot select by UID).
		o, err = p.Store.Get(ctx, p.f.kinds().plan, p.res.namespace(), ref.Name)
		if err == nil && o.UID != ref.UID {
			return nil, nil // another plan of that name: the one named is gone
		}
	} else {
		o, err = p.Store.GetByUID(ctx, ref.UID)
	}
	if errors.Is(err, store.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return &o, nil
}

// schemaShell is the PtahSchema family in local mode.
type schemaShell struct {
	res Resource
	in  engine.SchemaPassInput
	out api.PtahSchemaStatus
}

func (s *schemaShell) kinds() familyKinds { return schemaKinds }

func (s *schemaShell) read(ctx context.Context, p *pass, self store.Object) error {
	obs := s.in.Observation
	s.in = engine.SchemaPassInput{Spec: s.res.Schema.Spec, Observation: obs}
	if err := decodeStatus(self, &s.in.Status); err != nil {
		return err
	}
	approvals, err := p.listDecisions(ctx, api.KindPtahSchemaApproval)
	if err != nil {
		return err
	}
	for _, o := range approvals {
		a, err := decodeApproval(o)
		if err != nil {
			return err
		}
		s.in.Approvals = append(s.in.Approvals, a)
	}
	o, err := p.currentPlan(ctx, s.in.Status.Plan)
	if err != nil || o == nil {
		return err
	}
	plan, err := decodePlan(*o)
	if err != nil {
		return err
	}
	s.in.CurrentPlan = &plan
	return nil
}

func (s *schemaShell) readState() *api.RunState { return &s.in.Status.RunState }

func (s *schemaShell) uncertain() (string, string, bool) {
	if po := s.in.Status.PendingObservation; po != nil {
		return po.OperationID, po.CoordinationDigest, true
	}
	return "", "", false
}

func (s *schemaShell) decide(base engine.PassInput) decision {
	s.in.PassInput = base
	d := engine.SchemaPass(s.in)
	s.out = d.Status
	out := decision{step: d.Step, stable: d.Stable, err: d.Err, operation: d.Operation}
	if d.Plan != nil {
		out.plan, out.planFingerprint = d.Plan, d.Plan.Fingerprint
	}
	for _, a := range d.Stale {
		out.stale = append(out.stale, staleDecision{name: a.Name, uid: a.UID, reason: "the plan it names is no longer current"})
	}
	return out
}

func (s *schemaShell) status() (any, *api.RunState) { return &s.out, &s.out.RunState }

func (s *schemaShell) observe(ctx context.Context, p *pass) error {
	obs, err := p.observe(ctx, s.res, p.identity)
	s.in.Observation = obs
	return err
}

func (s *schemaShell) forget() { s.in.Observation = nil }

func (s *schemaShell) rederive(ctx context.Context, p *pass, op api.Operation) (string, error) {
	fresh, err := p.observe(ctx, s.res, p.identity)
	if err != nil {
		return "", err
	}
	return engine.InputFingerprint(op.Plan.Fingerprint, fresh.Bindings), nil
}

func (s *schemaShell) execPlan(ctx context.Context, p *pass, op api.Operation) (*postgres.Plan, *api.ObjectReference, error) {
	return ToPlan(s.in.CurrentPlan.Spec), nil, nil
}

// account: the writer runs a schema plan in transactions the journal
// makes exact; what is not known is settled by observing the database.
func (s *schemaShell) account(ctx context.Context, p *pass, base engine.PassInput, op api.Operation, plan *postgres.Plan,
	runErr error, now time.Time) bool {
	result, message := classify(runErr)
	s.out = engine.Account(s.out, op, result, message, now)
	return result == engine.RunFailed
}

func (s *schemaShell) record(op api.Operation, run engine.MigrationRun, _ string, now time.Time) {
	s.out = engine.Account(s.in.Status, op, run.Result, run.Message, now)
}

func (s *schemaShell) plansToPrune(uids []string) []string { return engine.PlansToPrune(s.out, uids) }

func (s *schemaShell) result(ctx context.Context, p *pass, self store.Object) Result {
	res := Result{Name: self.Name, Kind: api.KindPtahSchema}
	_ = decodeStatus(self, &res.Status)
	if o, err := p.currentPlan(ctx, res.Status.Plan); err == nil && o != nil {
		if plan, err := decodePlan(*o); err == nil {
			res.Plan = &plan
		}
	}
	return res
}

// migrationShell is the PtahMigration family in local mode.
type migrationShell struct {
	res Resource
	in  engine.MigrationPassInput
	out api.PtahMigrationStatus
}

func (m *migrationShell) kinds() familyKinds { return migrationKinds }

func (m *migrationShell) read(ctx context.Context, p *pass, self store.Object) error {
	obs := m.in.Observation
	m.in = engine.MigrationPassInput{Spec: m.res.Migration.Spec, Observation: obs}
	if err := decodeStatus(self, &m.in.Status); err != nil {
		return err
	}
	approvals, err := p.listDecisions(ctx, api.KindPtahMigrationApproval)
	if err != nil {
		return err
	}
	for _, o := range approvals {
		a := engine.MigrationApproval{Name: o.Name, UID: o.UID}
		if err := decodeInto(o, &a.Spec, &a.Status); err != nil {
			return err
		}
		m.in.Approvals = append(m.in.Approvals, a)
	}
	acks, err := p.listDecisions(ctx, api.KindPtahMigrationRunAcknowledgment)
	if err != nil {
		return err
	}
	for _, o := range acks {
		a := engine.Acknowledgment{Name: o.Name, UID: o.UID}
		if err := decodeInto(o, &a.Spec, &a.Status); err != nil {
			return err
		}
		m.in.Acknowledgments = append(m.in.Acknowledgments, a)
	}
	// Without a database (ptah serve's manager), its reader supplies the
	// journal and the lease (Records.Read's facts).
	if p.Target != nil {
		if err := m.readDatabase(ctx, p); err != nil {
			return err
		}
	}
	o, err := p.currentPlan(ctx, m.in.Status.Plan)
	if err != nil || o == nil {
		return err
	}
	plan, err := decodeMigrationPlan(*o)
	if err != nil {
		return err
	}
	m.in.CurrentPlan = &plan
	return nil
}

// readDatabase reads what the journal says of the dispatched claim's run,
// and whether an unresolved run's lease is still held.
func (m *migrationShell) readDatabase(ctx context.Context, p *pass) error {
	if op := m.in.Status.ActiveOperation; op != nil && op.DispatchedAt != nil {
		if err := m.readJournal(ctx, p, op); err != nil {
			return err
		}
	}
	if u := m.in.Status.UnresolvedRun; u != nil {
		lease, err := postgres.LeaseHolder(ctx, p.Target, u.CoordinationDigest)
		if err != nil {
			return err
		}
		if lease != nil {
			m.in.LeaseHeld = map[string]bool{lease.Holder: true}
		}
	}
	return nil
}

// readJournal reads what the journal says of the dispatched run of op,
// for the pass to settle it if its writer is gone (engine.JournalReading).
// A run the journal lacks, or that cannot be read, says nothing.
func (m *migrationShell) readJournal(ctx context.Context, p *pass, op *api.Operation) error {
	run, err := postgres.ReadRun(ctx, p.Target, op.ID)
	if errors.Is(err, postgres.ErrRunNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("reading the journal of operation %s: %w", op.ID, err)
	}
	j := engine.JournalReading{Succeeded: run.Committed(), AnyCommitted: run.AnyCommitted(), Writer: writerSession(run)}
	if j.Succeeded {
		o, err := p.currentPlan(ctx, &op.Plan)
		if err != nil {
			return err
		}
		if o == nil {
			j.Succeeded = false // the plan it ran is gone: which versions it applied is for a person to say
		} else if plan, err := decodeMigrationPlan(*o); err == nil {
			for _, v := range plan.Spec.Versions {
				j.Versions = append(j.Versions, v.Version)
			}
		}
	}
	m.in.Journal = map[string]engine.JournalReading{op.ID: j}
	return nil
}

func decodeMigrationPlan(o store.Object) (engine.MigrationPlan, error) {
	plan := engine.MigrationPlan{Name: o.Name, UID: o.UID}
	return plan, decodeInto(o, &plan.Spec, nil)
}

func (m *migrationShell) readState() *api.RunState { return &m.in.Status.RunState }

func (m *migrationShell) uncertain() (string, string, bool) {
	if u := m.in.Status.UnresolvedRun; u != nil {
		return u.OperationID, u.CoordinationDigest, true
	}
	return "", "", false
}

func (m *migrationShell) decide(base engine.PassInput) decision {
	m.in.PassInput = base
	d := engine.MigrationPass(m.in)
	m.out = d.Status
	out := decision{step: d.Step, stable: d.Stable, err: d.Err, operation: d.Operation}
	if d.Plan != nil {
		out.plan, out.planFingerprint = d.Plan, d.Plan.Fingerprint
	}
	for _, a := range d.Stale {
		out.stale = append(out.stale, staleDecision{name: a.Name, uid: a.UID, reason: "the plan it names is no longer current"})
	}
	for _, a := range d.StaleAcks {
		out.stale = append(out.stale, staleDecision{name: a.Name, uid: a.UID,
			reason: fmt.Sprintf("operation %s is not the unresolved run of %s", a.Spec.OperationID, base.Name)})
	}
	if a := d.Acknowledgment; a != nil {
		out.resolve, out.resolveOperation = &api.ObjectReference{Name: a.Name, UID: a.UID}, a.Spec.OperationID
	}
	return out
}

func (m *migrationShell) status() (any, *api.RunState) { return &m.out, &m.out.RunState }

func (m *migrationShell) observe(ctx context.Context, p *pass) error {
	obs, err := m.reading(ctx, p)
	m.in.Observation = obs
	return err
}

// reading is a fresh reading of the history against the source, and, for
// a baseline, the check of the target against the files (observeBaseline).
func (m *migrationShell) reading(ctx context.Context, p *pass) (*engine.MigrationObservation, error) {
	obs, err := observeMigration(ctx, p.Target, m.res, p.identity, m.in.Status, p.binding())
	if err != nil {
		return nil, err
	}
	if v := m.baseline(p); v != "" && m.res.Source != nil {
		if err := p.observeBaseline(ctx, m.res, v, obs); err != nil {
			return nil, err
		}
	}
	return obs, nil
}

// baseline is the version a baseline is asked up to: the one ptah plan
// --baseline names, or, for ptah apply, the last version of the current
// plan when it is a baseline plan (its approval is for that plan: apply
// derives it again to run it). "" when none.
func (m *migrationShell) baseline(p *pass) string {
	if m.res.Baseline != "" {
		return m.res.Baseline
	}
	if cur := m.in.CurrentPlan; p.mode == Apply && cur != nil && cur.Spec.Baseline && len(cur.Spec.Versions) > 0 {
		return cur.Spec.Versions[len(cur.Spec.Versions)-1].Version
	}
	return ""
}

func (m *migrationShell) forget() { m.in.Observation = nil }

func (m *migrationShell) rederive(ctx context.Context, p *pass, op api.Operation) (string, error) {
	fresh, err := m.reading(ctx, p)
	if err != nil {
		return "", err
	}
	return engine.InputFingerprint(op.Plan.Fingerprint, fresh.Bindings), nil
}

// execPlan builds the writer's plan from the claimed plan and the source
// (migrationExecPlan), under the role's own search_path, as hand-written
// SQL expects; the approval is spent at the dispatch boundary.
func (m *migrationShell) execPlan(ctx context.Context, p *pass, op api.Operation) (*postgres.Plan, *api.ObjectReference, error) {
	approver := ""
	if op.Approval != nil {
		for _, a := range m.in.Approvals {
			if a.UID == op.Approval.UID {
				approver = a.Spec.Approver
			}
		}
	}
	plan, err := migrationExecPlan(m.res, m.in.CurrentPlan.Spec, approver)
	if err != nil {
		return nil, nil, err
	}
	if plan.SearchPath, err = postgres.DefaultSearchPath(ctx, m.res.TargetURL); err != nil {
		return nil, nil, err
	}
	return plan, op.Approval, nil
}

// account: hand-written files cannot be run again in part, so a run whose
// outcome the journal cannot settle is recorded for a person
// (engine.AccountMigration); its writer, if the database says it may
// still write, is owed no release yet.
func (m *migrationShell) account(ctx context.Context, p *pass, base engine.PassInput, op api.Operation, plan *postgres.Plan,
	runErr error, now time.Time) bool {
	run, err := postgres.ReadRun(ctx, p.Target, op.ID)
	if err != nil {
		run = nil // the evidence cannot be read: classifyMigration treats the run as uncertain
	}
	mr := classifyMigration(runErr, run, plan)
	if mr.Result == engine.RunUncertain {
		may, err := postgres.WriterMayStillWrite(ctx, p.Target, op.ID, op.CoordinationDigest)
		mr.MayStillWrite = may || err != nil
	}
	m.out = engine.AccountMigration(m.out, op, mr, base.TargetIdentityDigest, now)
	// The history moved with the run: the status shows it as it is now
	// (a failed run ends the pass, which reads it no more).
	if obs, err := observeMigration(ctx, p.Target, m.res, p.identity, m.out, p.binding()); err == nil {
		m.out.History = &obs.History
	}
	return mr.Result == engine.RunFailed
}

func (m *migrationShell) record(op api.Operation, run engine.MigrationRun, targetIdentity string, now time.Time) {
	m.out = engine.AccountMigration(m.in.Status, op, run, targetIdentity, now)
}

func (m *migrationShell) plansToPrune(uids []string) []string {
	return engine.PlansToPrune(m.out, uids)
}

func (m *migrationShell) result(ctx context.Context, p *pass, self store.Object) Result {
	res := Result{Name: self.Name, Kind: api.KindPtahMigration, Migration: &MigrationResult{}}
	_ = decodeStatus(self, &res.Migration.Status)
	res.Status.RunState = res.Migration.Status.RunState
	if o, err := p.currentPlan(ctx, res.Migration.Status.Plan); err == nil && o != nil {
		if plan, err := decodeMigrationPlan(*o); err == nil {
			res.Migration.Plan = &plan
		}
	}
	return res
}

// planName is the name of a published plan: the resource's name and the
// plan's short fingerprint.
func planName(resource, planFingerprint string) string {
	return resource + "-" + fingerprint.Short(planFingerprint)
}
