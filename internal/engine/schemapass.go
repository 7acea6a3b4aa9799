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
}

// SchemaPassInput is everything the pass decides from.
type SchemaPassInput struct {
	// Now is the target server's clock: the server enforces every
	// deadline, so every deadline is judged by its clock too.
	Now        time.Time
	Name, UID  string
	Generation int64
	Spec       api.PtahSchemaSpec
	Status     api.PtahSchemaStatus
	Binding    api.ExecutionBinding

	Stored []StoredObject
	Realm  []Claimant // every registered resource, self included
	Self   Claimant

	// Observation is a reading taken during this pass; nil until one is.
	Observation *Observation
	// CurrentPlan is the object Status.Plan names, nil when none (or gone).
	CurrentPlan *Plan
	Approvals   []Approval
	// Locked: the shell holds the database's lease for the active claim.
	Locked bool
	// Rederived is the input fingerprint derived again from a fresh read
	// for the active claim, taken with the lease held; "" until derived.
	Rederived string
	// LiveWriters are the operations, among those the status names (a
	// dispatched claim, a pending observation, an owed release), whose
	// writer may still write: its session is alive and its deadline, on
	// the server's clock, has not passed. Nothing is settled or released
	// for such an operation.
	LiveWriters map[string]bool

	NewOperationID string        // used if the pass claims
	RunTimeout     time.Duration // a claim's deadline is Now + RunTimeout

	// PlanOnly bounds the pass to publishing (ptah plan): it never claims,
	// never carries an undispatched claim forward, and never dispatches.
	// It still settles what a dead run left behind.
	PlanOnly bool
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
	d := schemaPass(in)
	if in.PlanOnly {
		d = planOnly(in, d)
	}
	if d.Step != StepRefuse {
		d.Status.Conditions = SetReady(d.Status.Conditions, d.Status, in.Generation, in.Now)
	}
	return d
}

// planOnly stops a plan-only pass where it would start executing.
func planOnly(in SchemaPassInput, d Decision) Decision {
	switch {
	case d.Step == StepWriteStatus && d.Status.ActiveOperation != nil && in.Status.ActiveOperation == nil:
		st := d.Status
		st.ActiveOperation = nil // authorized, not claimed: ptah apply claims it
		return stable(st, api.PhaseApproved, api.ReasonApproved, authorizedMessage(d.Operation.Approval, in.Approvals))
	case d.Step == StepLock || d.Step == StepRederive || d.Step == StepDispatch:
		op := in.Status.ActiveOperation
		return stable(d.Status, api.PhaseApplying, api.ReasonApplying, fmt.Sprintf(
			"operation %s claimed plan %s and was interrupted before it ran; ptah apply continues it before %s",
			op.ID, op.Plan.Name, op.Deadline.UTC().Format(time.RFC3339)))
	}
	return d
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
	msg := fmt.Sprintf("approved by %s at %s", a.Spec.Approver, a.Spec.ApprovedAt.UTC().Format(time.RFC3339))
	if a.Spec.Reason != "" {
		msg += " (" + a.Spec.Reason + ")"
	}
	return msg + "; ptah apply runs it"
}

// Approved is the status of a resource awaiting approval of its current
// plan once a approves that plan (ptah approve records it at once, so that
// status shows it before the next pass). Any other status is returned
// unchanged: the next pass decides.
func Approved(st api.PtahSchemaStatus, a Approval, generation int64, now time.Time) api.PtahSchemaStatus {
	if st.Phase != api.PhaseAwaitingApproval || st.Plan == nil || st.Plan.UID != a.Spec.Plan.UID ||
		st.Plan.Fingerprint != a.Spec.PlanFingerprint {
		return st
	}
	st = withPhase(st, api.PhaseApproved, api.ReasonApproved, approvedMessage(a))
	st.Conditions = SetReady(st.Conditions, st, generation, now)
	return st
}

// LeaseHeld is the status when a claim could not take the database's lease
// at dispatch: the claim is dropped, since nothing of it was dispatched,
// and the resource is Blocked naming the holder. The next pass plans anew.
func LeaseHeld(st api.PtahSchemaStatus, holder string) api.PtahSchemaStatus {
	st.ActiveOperation = nil
	return withPhase(st, api.PhaseBlocked, api.ReasonLeaseHeld, holder)
}

// ConditionReady is the one condition a PtahSchema carries: True when the
// database matches the declaration, with the phase's reason and message
// otherwise. It mirrors the phase for tools that read conditions (kubectl
// wait --for=condition=Ready).
const ConditionReady = "Ready"

// SetReady returns conditions with the Ready condition brought up to date
// with st. Its transition time moves only when its status flips.
func SetReady(conditions []api.Condition, st api.PtahSchemaStatus, generation int64, now time.Time) []api.Condition {
	c := api.Condition{Type: ConditionReady, Status: "False", Reason: st.Reason, Message: st.Message,
		ObservedGeneration: generation, LastTransitionTime: now}
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

func schemaPass(in SchemaPassInput) Decision {
	st := in.Status
	st.ExecutionBinding = &in.Binding
	st.ObservedGeneration = in.Generation

	if err := VerifyStoredState(in.Stored, in.Binding.ContractVersion); err != nil {
		return Decision{Step: StepRefuse, Err: err}
	}
	if owed := st.OwedRelease; owed != nil {
		if in.LiveWriters[owed.OperationID] {
			return mayStillWrite(st, owed.OperationID)
		}
		st.OwedRelease = nil
		return Decision{Step: StepReleaseOwed, Status: st}
	}
	if contested, rivals := TakeRealmCensus(in.Self, in.Realm); contested && !claimDispatched(st) {
		st.ActiveOperation = nil // nothing of it was dispatched
		return stable(st, api.PhaseBlocked, api.ReasonRealmConflict, fmt.Sprintf(
			"the database is also claimed by %s; one database has one writer unless every claimant sets spec.target.sharedRealm "+
				"(a resource you no longer manage, renamed or mistyped, keeps counting until ptah forget NAME removes its record)",
			joinClaimants(rivals)))
	}
	if op := st.ActiveOperation; op != nil {
		return continueClaim(in, st, op)
	}
	if p := st.PendingObservation; p != nil {
		if in.LiveWriters[p.OperationID] {
			return mayStillWrite(st, p.OperationID)
		}
		if in.Observation == nil {
			return Decision{Step: StepObserve, Status: st}
		}
		// The fresh reading answers what the run did: the schema is
		// declarative, so the observed database is the whole answer.
		st.Applied = &api.AppliedPlan{OperationID: p.OperationID, Plan: p.Plan, Outcome: api.OutcomeObserved, FinishedAt: in.Now,
			Message: "the run's outcome was unknown; the database was observed again"}
		st.PendingObservation = nil
		st.Plan = nil
		return Decision{Step: StepWriteStatus, Status: st}
	}
	if in.Observation == nil {
		return Decision{Step: StepObserve, Status: st}
	}
	return planAndAuthorize(in, st)
}

// mayStillWrite holds everything while a dispatched run's writer may still
// be writing: the database stays held, and its outcome is not observed,
// since the observation could be taken before a commit that then lands.
func mayStillWrite(st api.PtahSchemaStatus, operationID string) Decision {
	return stable(st, api.PhaseBlocked, api.ReasonRunMayStillWrite, fmt.Sprintf(
		"the writer session of operation %s may still be running; ptah waits until it is gone or its deadline has passed", operationID))
}

func claimDispatched(st api.PtahSchemaStatus) bool {
	return st.ActiveOperation != nil && st.ActiveOperation.DispatchedAt != nil
}

// continueClaim carries a recorded claim forward after a restart or between
// steps of one pass.
func continueClaim(in SchemaPassInput, st api.PtahSchemaStatus, op *api.Operation) Decision {
	if op.DispatchedAt != nil {
		// The run may have executed: never dispatch it again. While its
		// writer may still be writing, the database stays held.
		if in.LiveWriters[op.ID] {
			return stable(st, api.PhaseBlocked, api.ReasonRunMayStillWrite, fmt.Sprintf(
				"operation %s was dispatched and its writer session may still be running (deadline %s)", op.ID, op.Deadline.UTC().Format(time.RFC3339)))
		}
		st.PendingObservation = &api.PendingObservation{OperationID: op.ID, Plan: op.Plan, Since: in.Now, CoordinationDigest: op.CoordinationDigest}
		st.ActiveOperation = nil
		st.OwedRelease = &api.LeaseRelease{CoordinationDigest: op.CoordinationDigest, OperationID: op.ID}
		return Decision{Step: StepWriteStatus, Status: st}
	}
	// Nothing of an undispatched claim ran. Past its deadline nothing may
	// run under it either: drop it and decide again.
	if !in.Now.Before(op.Deadline) {
		return dropClaim(st, fmt.Sprintf("operation %s claimed plan %s but was not dispatched before its deadline %s; nothing ran under it; planning again",
			op.ID, op.Plan.Name, op.Deadline.UTC().Format(time.RFC3339)))
	}
	if !in.Locked {
		return Decision{Step: StepLock, Status: st, Operation: op}
	}
	if in.Rederived == "" {
		return Decision{Step: StepRederive, Status: st, Operation: op}
	}
	if in.Rederived != op.InputFingerprint {
		// The inputs moved between decision and dispatch: the plan is
		// evidence of a database that no longer exists.
		st.Plan = nil
		return dropClaim(st, fmt.Sprintf("inputs moved since operation %s was claimed; observing again", op.ID))
	}
	// The last look before SQL runs: the input fingerprint covers the plan's
	// recorded fingerprint, not its stored statements, so these must still
	// hash to what the claim recorded.
	if err := verifyClaimedPlan(in.CurrentPlan, op); err != nil {
		st.ActiveOperation = nil // nothing was dispatched
		if errors.Is(err, ErrPlanTampered) {
			return stable(st, api.PhaseBlocked, api.ReasonPlanTampered, err.Error())
		}
		st.Plan = nil
		return dropClaim(st, err.Error()+"; observing again")
	}
	// And the decision that authorized it must still stand: an approval
	// withdrawn (or gone stale) since the claim authorizes nothing.
	if why := stillAuthorized(in, op); why != "" {
		return dropClaim(st, fmt.Sprintf("operation %s is no longer authorized (%s); nothing ran", op.ID, why))
	}
	return Decision{Step: StepDispatch, Status: st, Operation: op}
}

// dropClaim clears an undispatched claim and continues the pass.
func dropClaim(st api.PtahSchemaStatus, message string) Decision {
	st.ActiveOperation = nil
	return Decision{Step: StepWriteStatus, Status: withPhase(st, api.PhaseApplying, api.ReasonApplying, message)}
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
	if plan == nil || plan.UID != op.Plan.UID {
		return fmt.Errorf("plan %s (uid %s), claimed by operation %s, is gone", op.Plan.Name, op.Plan.UID, op.ID)
	}
	if err := VerifyPlan(*plan); err != nil {
		return err
	}
	if plan.Spec.Fingerprint != op.Plan.Fingerprint {
		return fmt.Errorf("plan %s (uid %s): %w (operation %s claimed fingerprint %s, the stored plan carries %s); it cannot be applied",
			plan.Name, plan.UID, ErrPlanTampered, op.ID, op.Plan.Fingerprint, plan.Spec.Fingerprint)
	}
	return nil
}

func planAndAuthorize(in SchemaPassInput, st api.PtahSchemaStatus) Decision {
	obs := in.Observation
	if len(obs.Statements) == 0 {
		st.Plan = nil
		if stale := StaleApprovals(nil, in.Approvals); len(stale) > 0 {
			return Decision{Step: StepMarkStale, Status: st, Stale: stale}
		}
		return stable(st, api.PhaseInSync, api.ReasonInSync, "the database matches the declared schema")
	}
	if a := st.Applied; repeatsTheLastRun(st, StatementsDigest(obs.Statements)) {
		st.Plan = nil
		return stable(st, api.PhaseBlocked, api.ReasonPlanDoesNotConverge, fmt.Sprintf(
			"plan %s, applied by operation %s, is derived again from the database it produced: applying it again would not converge; "+
				"nothing runs until the declared schema or the database changes (this is a ptah defect or a declaration PostgreSQL keeps differently: please report it)",
			a.Plan.Name, a.OperationID))
	}
	spec := api.PtahSchemaPlanSpec{
		Schema:       api.ObjectReference{Name: in.Name, UID: in.UID},
		Statements:   obs.Statements,
		Phases:       obs.Phases,
		LockCapacity: obs.LockCapacity,
		Destructive:  obs.Destructive,
		LockTimeout:  obs.LockTimeout,
		Bindings:     obs.Bindings,
	}
	spec.Fingerprint = PlanFingerprint(spec)
	cur := in.CurrentPlan
	if cur == nil || st.Plan == nil || cur.UID != st.Plan.UID || cur.Spec.Fingerprint != spec.Fingerprint {
		return Decision{Step: StepPublish, Status: st, Plan: &spec}
	}
	if err := VerifyPlan(*cur); err != nil {
		return stable(st, api.PhaseBlocked, api.ReasonPlanTampered, err.Error())
	}
	ref := cur.Ref()
	if stale := StaleApprovals(&ref, in.Approvals); len(stale) > 0 {
		return Decision{Step: StepMarkStale, Status: st, Stale: stale}
	}
	v := Authorize(in.Spec.Policy, *cur, in.Approvals)
	if !v.Authorized {
		return stable(st, v.Phase, v.Reason, v.Message)
	}
	op := &api.Operation{
		ID:                 in.NewOperationID,
		Plan:               ref,
		InputFingerprint:   InputFingerprint(ref.Fingerprint, cur.Spec.Bindings),
		CoordinationDigest: cur.Spec.CoordinationDigest,
		StatementsDigest:   StatementsDigest(cur.Spec.Statements),
		ClaimedAt:          in.Now,
		Deadline:           in.Now.Add(in.RunTimeout),
	}
	if v.Approval != nil {
		op.Approval = &api.ObjectReference{Name: v.Approval.Name, UID: v.Approval.UID}
	}
	st.ActiveOperation = op
	return Decision{Step: StepWriteStatus, Status: withPhase(st, api.PhaseApplying, api.ReasonApplying,
		fmt.Sprintf("operation %s claims plan %s", op.ID, ref.Name)), Operation: op}
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
		st.Applied = &api.AppliedPlan{OperationID: op.ID, Plan: op.Plan, Outcome: api.OutcomeSucceeded, FinishedAt: now,
			StatementsDigest: op.StatementsDigest}
		return withPhase(st, api.PhaseApplying, api.ReasonVerifying, "applied; verifying")
	case RunFailed:
		st.Applied = &api.AppliedPlan{OperationID: op.ID, Plan: op.Plan, Outcome: api.OutcomeFailed, FinishedAt: now, Message: message,
			StatementsDigest: op.StatementsDigest}
		return withPhase(st, api.PhaseFailed, api.ReasonApplyFailed, message)
	}
	st.PendingObservation = &api.PendingObservation{OperationID: op.ID, Plan: op.Plan, Since: now, CoordinationDigest: op.CoordinationDigest}
	return withPhase(st, api.PhaseApplying, api.ReasonApplying, "the run's outcome is unknown: "+message)
}

func withPhase(st api.PtahSchemaStatus, phase api.Phase, reason, message string) api.PtahSchemaStatus {
	st.Phase, st.Reason, st.Message = phase, reason, message
	return st
}

func stable(st api.PtahSchemaStatus, phase api.Phase, reason, message string) Decision {
	return Decision{Step: StepWriteStatus, Status: withPhase(st, phase, reason, message), Stable: true}
}

func joinClaimants(cs []Claimant) string {
	names := make([]string, len(cs))
	for i, c := range cs {
		names[i] = c.String()
	}
	return strings.Join(names, ", ")
}
