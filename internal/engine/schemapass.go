package engine

import (
	"errors"
	"fmt"
	"strings"
	"time"

	api "github.com/ptah-run/ptah/pkg/api/v1alpha1"
)

// Step is what the shell must do next for a PtahSchema.
type Step string

const (
	// StepRefuse: stop; Decision.Err says why (the fence).
	StepRefuse Step = "Refuse"
	// StepReleaseOwed: release the lease Status.OwedRelease names, then write
	// Decision.Status (which no longer owes it).
	StepReleaseOwed Step = "ReleaseOwed"
	// StepWriteStatus: write Decision.Status; stop if Decision.Stable, else
	// run the pass again.
	StepWriteStatus Step = "WriteStatus"
	// StepObserve: read the database and the declared files, and run the pass
	// again with the Observation.
	StepObserve Step = "Observe"
	// StepMarkStale: mark Decision.Stale approvals stale, then run again.
	StepMarkStale Step = "MarkStale"
	// StepPublish: create the plan object from Decision.Plan (replacing any
	// object of the same name, so it gets a new UID), point Status.Plan at
	// it, and run again.
	StepPublish Step = "Publish"
	// StepLock: take the database's lease (and the writer session that
	// holds it) for Decision.Operation, and run again with Locked set. A
	// lease held by another writer drops the claim (see LeaseHeld).
	StepLock Step = "Lock"
	// StepRederive: derive the claim's input fingerprint again from a fresh
	// read, taken while the lease is held, and run again with it.
	StepRederive Step = "Rederive"
	// StepDispatch: write Status with the dispatch marker, then execute the
	// plan once, on the locked writer, and account for it.
	StepDispatch Step = "Dispatch"
)

// Observation is one fresh reading: the bindings of the moment and the plan
// they give.
type Observation struct {
	Bindings     api.Bindings
	Statements   []api.PlanStatement
	Phases       []api.PlanPhase
	LockCapacity *api.LockCapacity
	Destructive  bool
	LockTimeout  string
	// LockAttemptTimeout and StatementTimeout are the policy's, when set.
	LockAttemptTimeout, StatementTimeout string
	// StatementLocks: the statements carry their locks.
	StatementLocks bool
	// Hints are the plan's advice to its reviewer.
	Hints []string
}

// SchemaPassInput is everything a PtahSchema's pass decides from.
type SchemaPassInput struct {
	PassInput
	Spec   api.PtahSchemaSpec
	Status api.PtahSchemaStatus

	// Observation is a reading taken during this pass; nil until one is.
	Observation *Observation
	// CurrentPlan is the object Status.Plan names, nil when none (or gone).
	CurrentPlan *Plan
	Approvals   []Approval
}

// Decision is the pass's answer. Status is always the complete status to
// write with the step.
type Decision struct {
	Step      Step
	Status    api.PtahSchemaStatus
	Stable    bool
	Err       error
	Plan      *api.PtahSchemaPlanSpec
	Stale     []Approval
	Operation *api.Operation
}

// SchemaPass decides the next step for one PtahSchema (DESIGN.md section 4).
// The shell carries the step out and calls it again until a stable status.
func SchemaPass(in SchemaPassInput) Decision {
	f := &schemaFamily{in: in, st: in.Status}
	o := decide(in.PassInput, f, in.Status.ActiveOperation)
	d := Decision{Step: o.step, Status: f.st, Stable: o.stable, Err: o.err, Plan: f.plan, Stale: f.stale, Operation: o.operation}
	if d.Step == StepRefuse {
		d.Status = in.Status
	}
	return d
}

// schemaFamily is the PtahSchema side of the pass: a run whose outcome is
// unknown owes a fresh observation, which settles it (the schema is
// declarative: the observed database is the whole answer).
type schemaFamily struct {
	in    SchemaPassInput
	st    api.PtahSchemaStatus
	plan  *api.PtahSchemaPlanSpec // to publish
	stale []Approval              // to mark stale
}

func (f *schemaFamily) state() *api.RunState { return &f.st.RunState }

func (f *schemaFamily) observed() bool { return f.in.Observation != nil }

func (f *schemaFamily) settle(in PassInput) (outcome, bool) {
	p := f.st.PendingObservation
	if p == nil {
		return outcome{}, false
	}
	if DispatchedApplyMayStillWrite(in, p.OperationID) {
		return mayStillWrite(&f.st.RunState, p.OperationID), true
	}
	if f.in.Observation == nil {
		return outcome{step: StepObserve}, true
	}
	f.st.Applied = &api.AppliedPlan{OperationID: p.OperationID, Plan: p.Plan, Outcome: api.OutcomeObserved, FinishedAt: api.NewTime(in.Now),
		Message: "the run's outcome was unknown; the database was observed again"}
	f.st.PendingObservation = nil
	f.st.Plan = nil
	return outcome{step: StepWriteStatus}, true
}

func (f *schemaFamily) lostDispatch(in PassInput, op *api.Operation) {
	f.st.PendingObservation = &api.PendingObservation{OperationID: op.ID, Plan: op.Plan, Since: api.NewTime(in.Now), CoordinationDigest: op.CoordinationDigest}
}

func (f *schemaFamily) verifyClaimedPlan(op *api.Operation) error {
	return verifyClaimedPlan(f.in.CurrentPlan, op)
}

func (f *schemaFamily) stillAuthorized(op *api.Operation) string {
	return stillAuthorized(f.in, op)
}

func (f *schemaFamily) authorizedMessage(op *api.Operation) string {
	return authorizedMessage(op.Approval, f.in.Approvals)
}

// authorizedMessage says who authorized a plan, for the Approved phase.
func authorizedMessage(ref *api.ObjectReference, approvals []Approval) string {
	if ref == nil {
		return "the plan is authorized by policy.apply Always; ptah apply runs it"
	}
	for _, a := range approvals {
		if a.UID == ref.UID {
			return approvedMessage(a)
		}
	}
	return "the plan is approved; ptah apply runs it"
}

func approvedMessage(a Approval) string {
	return approvedBy(a.Spec.Approver, a.Spec.ApprovedAt.Time, a.Spec.Reason)
}

func approvedBy(approver string, at time.Time, reason string) string {
	msg := fmt.Sprintf("approved by %s at %s", approver, at.UTC().Format(time.RFC3339))
	if reason != "" {
		msg += " (" + reason + ")"
	}
	return msg + "; ptah apply runs it"
}

// Approved is the run state of a resource of either family awaiting
// approval of its current plan once a person approves that plan (the
// plan's UID and fingerprint; ptah approve records it at once, so that
// status shows it before the next pass). Any other run state is returned
// unchanged: the next pass decides.
func Approved(rs api.RunState, planUID, planFingerprint, approver string, at time.Time, reason string, generation int64, now time.Time) api.RunState {
	if rs.Phase != api.PhaseAwaitingApproval || rs.Plan == nil || rs.Plan.UID != planUID || rs.Plan.Fingerprint != planFingerprint {
		return rs
	}
	setPhase(&rs, api.PhaseApproved, api.ReasonApproved, approvedBy(approver, at, reason))
	rs.Conditions = SetReady(rs.Conditions, rs, generation, now)
	return rs
}

// LeaseHeld records, for either family, that a claim could not take the database's lease
// at dispatch: the claim is dropped, since nothing of it was dispatched,
// and the resource is Blocked naming the holder. The next pass plans anew.
func LeaseHeld(rs *api.RunState, holder string) {
	rs.ActiveOperation = nil
	setPhase(rs, api.PhaseBlocked, api.ReasonLeaseHeld, holder)
}

// ConditionReady is the one condition a PtahSchema carries: True when the
// database matches the declaration, with the phase's reason and message
// otherwise. It mirrors the phase for tools that read conditions (kubectl
// wait --for=condition=Ready).
const ConditionReady = "Ready"

// SetReady returns conditions with the Ready condition brought up to date
// with st. Its transition time moves only when its status flips.
func SetReady(conditions []api.Condition, st api.RunState, generation int64, now time.Time) []api.Condition {
	c := api.Condition{Type: ConditionReady, Status: "False", Reason: st.Reason, Message: st.Message,
		ObservedGeneration: generation, LastTransitionTime: api.NewTime(now)}
	if st.Phase == api.PhaseInSync {
		c.Status = "True"
	}
	if c.Reason == "" {
		c.Reason = "Pending"
	}
	out := make([]api.Condition, 0, len(conditions)+1)
	found := false
	for _, old := range conditions {
		if old.Type != ConditionReady {
			out = append(out, old)
			continue
		}
		found = true
		if old.Status == c.Status {
			c.LastTransitionTime = old.LastTransitionTime
		}
		out = append(out, c)
	}
	if !found {
		out = append(out, c)
	}
	return out
}

// stillAuthorized decides the claim's authorization again from what is
// stored now; "" means it stands, else why it does not.
func stillAuthorized(in SchemaPassInput, op *api.Operation) string {
	v := Authorize(in.Spec.Policy, *in.CurrentPlan, in.Approvals)
	withdrawn := func() string {
		return fmt.Sprintf("approval %s (uid %s), which it was claimed under, was withdrawn or went stale", op.Approval.Name, op.Approval.UID)
	}
	switch {
	case !v.Authorized && op.Approval != nil:
		return withdrawn()
	case !v.Authorized:
		return v.Message
	case op.Approval != nil && v.Approval != nil && v.Approval.UID != op.Approval.UID:
		return withdrawn()
	case op.Approval == nil && v.Approval != nil:
		return "it was claimed without an approval, and the policy now requires one"
	}
	return ""
}

// verifyClaimedPlan checks that the stored plan is the one op claimed, with
// the content its fingerprint covers.
func verifyClaimedPlan(plan *Plan, op *api.Operation) error {
	if plan == nil {
		return checkClaimedPlan(op, api.PlanReference{}, nil)
	}
	return checkClaimedPlan(op, plan.Ref(), func() error { return VerifyPlan(*plan) })
}

// checkClaimedPlan checks, for either family, that the stored plan (its
// reference; verify recomputes its fingerprint) is the one op claimed.
func checkClaimedPlan(op *api.Operation, stored api.PlanReference, verify func() error) error {
	if verify == nil || stored.UID != op.Plan.UID {
		return fmt.Errorf("plan %s (uid %s), claimed by operation %s, is gone", op.Plan.Name, op.Plan.UID, op.ID)
	}
	if err := verify(); err != nil {
		return err
	}
	if stored.Fingerprint != op.Plan.Fingerprint {
		return fmt.Errorf("plan %s (uid %s): %w (operation %s claimed fingerprint %s, the stored plan carries %s); it cannot be applied",
			stored.Name, stored.UID, ErrPlanTampered, op.ID, op.Plan.Fingerprint, stored.Fingerprint)
	}
	return nil
}

func (f *schemaFamily) planAndAuthorize(in PassInput) outcome {
	obs, st, rs := f.in.Observation, &f.st, &f.st.RunState
	if len(obs.Statements) == 0 {
		st.Plan = nil
		if stale := StaleApprovals(nil, f.in.Approvals); len(stale) > 0 {
			f.stale = stale
			return outcome{step: StepMarkStale}
		}
		return stable(rs, api.PhaseInSync, api.ReasonInSync, "the database matches the declared schema")
	}
	if a := st.Applied; repeatsTheLastRun(*st, StatementsDigest(obs.Statements)) {
		st.Plan = nil
		return stable(rs, api.PhaseBlocked, api.ReasonPlanDoesNotConverge, fmt.Sprintf(
			"plan %s, applied by operation %s, is derived again from the database it produced: applying it again would not converge; "+
				"nothing runs until the declared schema or the database changes (this is a ptah defect or a declaration PostgreSQL keeps differently: please report it)",
			a.Plan.Name, a.OperationID))
	}
	spec := NewSchemaPlanSpec(api.ObjectReference{Name: in.Name, UID: in.UID}, *obs)
	cur := f.in.CurrentPlan
	if cur == nil || st.Plan == nil || cur.UID != st.Plan.UID || cur.Spec.Fingerprint != spec.Fingerprint {
		f.plan = &spec
		return outcome{step: StepPublish}
	}
	if err := VerifyPlan(*cur); err != nil {
		return stable(rs, api.PhaseBlocked, api.ReasonPlanTampered, err.Error())
	}
	ref := cur.Ref()
	if stale := StaleApprovals(&ref, f.in.Approvals); len(stale) > 0 {
		f.stale = stale
		return outcome{step: StepMarkStale}
	}
	v := Authorize(f.in.Spec.Policy, *cur, f.in.Approvals)
	if !v.Authorized {
		return stable(rs, v.Phase, v.Reason, v.Message)
	}
	var approval *api.ObjectReference
	if v.Approval != nil {
		approval = &api.ObjectReference{Name: v.Approval.Name, UID: v.Approval.UID}
	}
	return claim(in, rs, ref, cur.Spec.Bindings, approval, StatementsDigest(cur.Spec.Statements))
}

// NewSchemaPlanSpec is the plan of the PtahSchema schema that obs gives,
// fingerprinted: what a pass publishes.
func NewSchemaPlanSpec(schema api.ObjectReference, obs Observation) api.PtahSchemaPlanSpec {
	spec := api.PtahSchemaPlanSpec{
		Schema:       schema,
		Statements:   obs.Statements,
		Phases:       obs.Phases,
		LockCapacity: obs.LockCapacity,
		Destructive:  obs.Destructive,
		LockTimeout:  obs.LockTimeout,
		Bindings:     obs.Bindings,

		LockAttemptTimeout: obs.LockAttemptTimeout,
		StatementTimeout:   obs.StatementTimeout,
		StatementLocks:     obs.StatementLocks,
		Hints:              obs.Hints,
	}
	spec.Fingerprint = PlanFingerprint(spec)
	return spec
}

// ObservationOf is the observation a plan was published from: ptah
// serve's reading Job carries its statements to the manager in a plan.
func ObservationOf(spec api.PtahSchemaPlanSpec) Observation {
	return Observation{Bindings: spec.Bindings, Statements: spec.Statements, Phases: spec.Phases,
		LockCapacity: spec.LockCapacity, Destructive: spec.Destructive, LockTimeout: spec.LockTimeout,
		LockAttemptTimeout: spec.LockAttemptTimeout, StatementTimeout: spec.StatementTimeout,
		StatementLocks: spec.StatementLocks, Hints: spec.Hints}
}

// repeatsTheLastRun: the pass that verifies a successful run (or one that
// found it did not converge) derived the very statements that run executed.
func repeatsTheLastRun(st api.PtahSchemaStatus, digest string) bool {
	a := st.Applied
	if a == nil || a.Outcome != api.OutcomeSucceeded || a.StatementsDigest == "" || a.StatementsDigest != digest {
		return false
	}
	return st.Reason == api.ReasonVerifying || st.Reason == api.ReasonPlanDoesNotConverge
}

// RunResult is how an executed run ended, from the shell's point of view.
type RunResult int

const (
	// RunSucceeded: the plan committed.
	RunSucceeded RunResult = iota
	// RunFailed: the plan certainly did not commit (it rolled back).
	RunFailed
	// RunUncertain: the plan may or may not have committed.
	RunUncertain
)

// Account is the one write after a run: the claim becomes a record, and the
// lease release is owed in the same write.
func Account(st api.PtahSchemaStatus, op api.Operation, result RunResult, message string, now time.Time) api.PtahSchemaStatus {
	st.ActiveOperation = nil
	st.Plan = nil // spent: the next plan is a new object, even with the same content
	st.OwedRelease = &api.LeaseRelease{CoordinationDigest: op.CoordinationDigest, OperationID: op.ID}
	switch result {
	case RunSucceeded:
		st.Applied = &api.AppliedPlan{OperationID: op.ID, Plan: op.Plan, Outcome: api.OutcomeSucceeded, FinishedAt: api.NewTime(now),
			StatementsDigest: op.StatementsDigest}
		return withPhase(st, api.PhaseApplying, api.ReasonVerifying, "applied; verifying")
	case RunFailed:
		st.Applied = &api.AppliedPlan{OperationID: op.ID, Plan: op.Plan, Outcome: api.OutcomeFailed, FinishedAt: api.NewTime(now), Message: message,
			StatementsDigest: op.StatementsDigest}
		return withPhase(st, api.PhaseFailed, api.ReasonApplyFailed, message)
	}
	st.PendingObservation = &api.PendingObservation{OperationID: op.ID, Plan: op.Plan, Since: api.NewTime(now), CoordinationDigest: op.CoordinationDigest}
	return withPhase(st, api.PhaseApplying, api.ReasonApplying, "the run's outcome is unknown: "+message)
}

func withPhase(st api.PtahSchemaStatus, phase api.Phase, reason, message string) api.PtahSchemaStatus {
	setPhase(&st.RunState, phase, reason, message)
	return st
}

func isTampered(err error) bool { return errors.Is(err, ErrPlanTampered) }

func joinClaimants(cs []Claimant) string {
	names := make([]string, len(cs))
	for i, c := range cs {
		names[i] = c.String()
	}
	return strings.Join(names, ", ")
}
