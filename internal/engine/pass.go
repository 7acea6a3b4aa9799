package engine

import (
	"fmt"
	"time"

	api "github.com/ptah-run/ptah/pkg/api/v1alpha1"
)

// PassInput is what the pass decides from, whatever the family: the
// moment, the resource, the store's records, and what the shell holds.
// Each family's input embeds it beside its own (SchemaPassInput).
type PassInput struct {
	// Now is the target server's clock: the server enforces every
	// deadline, so every deadline is judged by its clock too.
	Now        time.Time
	Name, UID  string
	Generation int64
	Binding    api.ExecutionBinding

	Stored []StoredObject
	Realm  []Claimant // every registered resource, self included
	Self   Claimant
	// TargetIdentityDigest is the database the shell read, in full (a
	// claimant's, from the store's labels, may be short).
	TargetIdentityDigest string

	// Locked: the shell holds the database's lease for the active claim.
	Locked bool
	// Rederived is the input fingerprint derived again from a fresh read
	// for the active claim, taken with the lease held; "" until derived.
	Rederived string
	// LiveWriters are the operations, among those the status names (a
	// dispatched claim, a record of an uncertain run, an owed release),
	// whose writer may still write: its session is alive and its deadline,
	// on the server's clock, has not passed. Nothing is settled or
	// released for such an operation.
	LiveWriters map[string]bool

	NewOperationID string        // used if the pass claims
	RunTimeout     time.Duration // a claim's deadline is Now + RunTimeout

	// PlanOnly bounds the pass to publishing (ptah plan): it never claims,
	// never carries an undispatched claim forward, and never dispatches.
	// It still settles what a dead run left behind.
	PlanOnly bool
}

// family is what one family of resources adds to the pass both run: the
// record it keeps of a run whose outcome is unknown and who settles it,
// its plans and what authorizes them. Everything else is the pass's, once.
type family interface {
	// state is the part of the family's status the pass keeps.
	state() *api.RunState
	// settle is step 4: the family's record of a dispatched run whose
	// outcome is unknown, if there is one to act on (done).
	settle(in PassInput) (o outcome, done bool)
	// lostDispatch records a dispatched claim whose writer can no longer
	// write and that was never accounted for: its outcome is unknown.
	lostDispatch(in PassInput, op *api.Operation)
	// observed reports whether a fresh reading was taken during the pass.
	observed() bool
	// verifyClaimedPlan checks that the stored plan is the one op claimed,
	// with the content its fingerprint covers (ErrPlanTampered if not).
	verifyClaimedPlan(op *api.Operation) error
	// stillAuthorized decides op's authorization again from what is
	// stored now: "" when it stands, else why not.
	stillAuthorized(op *api.Operation) string
	// planAndAuthorize is steps 6 to 8: the plan of the fresh reading,
	// published, authorized and claimed.
	planAndAuthorize(in PassInput) outcome
	// authorizedMessage says who authorized the claim op, for a plan-only
	// pass that stops before claiming.
	authorizedMessage(op *api.Operation) string
}

// outcome is a decision before the family dresses it in its status.
type outcome struct {
	step      Step
	stable    bool
	err       error
	operation *api.Operation
}

// decide runs the pass over f, stops a plan-only pass where it would start
// executing (before is the claim the pass started from), and brings the
// Ready condition up to date: what both families' entry points share.
func decide(in PassInput, f family, before *api.Operation) outcome {
	o := runPass(in, f)
	if in.PlanOnly {
		o = planOnly(f, before, o)
	}
	if o.step != StepRefuse {
		rs := f.state()
		rs.Conditions = SetReady(rs.Conditions, *rs, in.Generation, in.Now)
	}
	return o
}

// runPass is the one ordered pass (DESIGN.md section 4). It changes the
// family's status in place and says what the shell does next.
func runPass(in PassInput, f family) outcome {
	rs := f.state()
	rs.ExecutionBinding = &in.Binding
	rs.ObservedGeneration = in.Generation

	if err := VerifyStoredState(in.Stored, in.Binding.ContractVersion); err != nil {
		return outcome{step: StepRefuse, err: err}
	}
	if owed := rs.OwedRelease; owed != nil {
		if DispatchedApplyMayStillWrite(in, owed.OperationID) {
			return mayStillWrite(rs, owed.OperationID)
		}
		rs.OwedRelease = nil
		return outcome{step: StepReleaseOwed}
	}
	if contested, rivals := TakeRealmCensus(in.Self, in.Realm); contested && !claimDispatched(rs) {
		rs.ActiveOperation = nil // nothing of it was dispatched
		return stable(rs, api.PhaseBlocked, api.ReasonRealmConflict, fmt.Sprintf(
			"the database is also claimed by %s; one database has one writer unless every claimant sets spec.target.sharedRealm "+
				"(a resource you no longer manage, renamed or mistyped, keeps counting until ptah forget NAME removes its record)",
			joinClaimants(rivals)))
	}
	if op := rs.ActiveOperation; op != nil {
		return continueClaim(in, f, rs, op)
	}
	if o, done := f.settle(in); done {
		return o
	}
	if !f.observed() {
		return outcome{step: StepObserve}
	}
	return f.planAndAuthorize(in)
}

// DispatchedApplyMayStillWrite is the one answer, for either family, to
// whether the dispatched run op may still write: its writer session is
// alive and its deadline, on the server's clock, has not passed (the shell
// asks the database; see PassInput.LiveWriters). Until it says no, the
// database stays held and no release is owed.
func DispatchedApplyMayStillWrite(in PassInput, operationID string) bool {
	return in.LiveWriters[operationID]
}

// ReportedRunMayStillWrite: a migration run left unresolved whose own run
// reported that its session may still write (ReportedByRun), and whose
// Lease is not owed back, is taken to be writing until its deadline, plus
// grace for the clocks, has passed: a shell that sees its Pod gone knows
// only that the Pod is gone, not that the session it opened has ended,
// and only the deadline, enforced by the server, ends that for sure.
func ReportedRunMayStillWrite(u *api.UnresolvedRun, owed *api.LeaseRelease, now time.Time, grace time.Duration) bool {
	return u != nil && u.ReportedBy == api.ReportedByRun && owed == nil && !now.After(u.Deadline.Add(grace))
}

// mayStillWrite holds everything while a dispatched run's writer may still
// be writing: the database stays held, and its outcome is not settled,
// since a reading could be taken before a commit that then lands.
func mayStillWrite(rs *api.RunState, operationID string) outcome {
	return stable(rs, api.PhaseBlocked, api.ReasonRunMayStillWrite, fmt.Sprintf(
		"the writer session of operation %s may still be running; ptah waits until it is gone or its deadline has passed", operationID))
}

func claimDispatched(rs *api.RunState) bool {
	return rs.ActiveOperation != nil && rs.ActiveOperation.DispatchedAt != nil
}

// continueClaim carries a recorded claim forward after a restart or between
// steps of one pass.
func continueClaim(in PassInput, f family, rs *api.RunState, op *api.Operation) outcome {
	if op.DispatchedAt != nil {
		// The run may have executed: never dispatch it again. While its
		// writer may still be writing, the database stays held.
		if DispatchedApplyMayStillWrite(in, op.ID) {
			return stable(rs, api.PhaseBlocked, api.ReasonRunMayStillWrite, fmt.Sprintf(
				"operation %s was dispatched and its writer session may still be running (deadline %s)", op.ID, op.Deadline.UTC().Format(time.RFC3339)))
		}
		f.lostDispatch(in, op)
		rs.ActiveOperation = nil
		rs.OwedRelease = &api.LeaseRelease{CoordinationDigest: op.CoordinationDigest, OperationID: op.ID}
		return outcome{step: StepWriteStatus}
	}
	// Nothing of an undispatched claim ran. Past its deadline nothing may
	// run under it either: drop it and decide again.
	if !in.Now.Before(op.Deadline.Time) {
		return dropClaim(rs, fmt.Sprintf("operation %s claimed plan %s but was not dispatched before its deadline %s; nothing ran under it; planning again",
			op.ID, op.Plan.Name, op.Deadline.UTC().Format(time.RFC3339)))
	}
	if !in.Locked {
		return outcome{step: StepLock, operation: op}
	}
	if in.Rederived == "" {
		return outcome{step: StepRederive, operation: op}
	}
	if in.Rederived != op.InputFingerprint {
		// The inputs moved between decision and dispatch: the plan is
		// evidence of a database that no longer exists.
		rs.Plan = nil
		return dropClaim(rs, fmt.Sprintf("inputs moved since operation %s was claimed; observing again", op.ID))
	}
	// The last look before SQL runs: the input fingerprint covers the plan's
	// recorded fingerprint, not its stored statements, so these must still
	// hash to what the claim recorded.
	if err := f.verifyClaimedPlan(op); err != nil {
		rs.ActiveOperation = nil // nothing was dispatched
		if isTampered(err) {
			return stable(rs, api.PhaseBlocked, api.ReasonPlanTampered, err.Error())
		}
		rs.Plan = nil
		return dropClaim(rs, err.Error()+"; observing again")
	}
	// And the decision that authorized it must still stand: an approval
	// withdrawn (or gone stale) since the claim authorizes nothing.
	if why := f.stillAuthorized(op); why != "" {
		return dropClaim(rs, fmt.Sprintf("operation %s is no longer authorized (%s); nothing ran", op.ID, why))
	}
	return outcome{step: StepDispatch, operation: op}
}

// dropClaim clears an undispatched claim and continues the pass.
func dropClaim(rs *api.RunState, message string) outcome {
	rs.ActiveOperation = nil
	setPhase(rs, api.PhaseApplying, api.ReasonApplying, message)
	return outcome{step: StepWriteStatus}
}

// planOnly stops a plan-only pass where it would start executing. before
// is the claim the pass started from.
func planOnly(f family, before *api.Operation, o outcome) outcome {
	rs := f.state()
	switch {
	case o.step == StepWriteStatus && rs.ActiveOperation != nil && before == nil:
		claimed := rs.ActiveOperation
		rs.ActiveOperation = nil // authorized, not claimed: ptah apply claims it
		return stable(rs, api.PhaseApproved, api.ReasonApproved, f.authorizedMessage(claimed))
	case o.step == StepLock || o.step == StepRederive || o.step == StepDispatch:
		return stable(rs, api.PhaseApplying, api.ReasonApplying, fmt.Sprintf(
			"operation %s claimed plan %s and was interrupted before it ran; ptah apply continues it before %s",
			before.ID, before.Plan.Name, before.Deadline.UTC().Format(time.RFC3339)))
	}
	return o
}

// claim records the operation that will run plan, authorized by approval
// (nil: by policy), with the inputs it was decided from.
func claim(in PassInput, rs *api.RunState, plan api.PlanReference, b api.Bindings, approval *api.ObjectReference, statementsDigest string) outcome {
	op := &api.Operation{
		ID:                 in.NewOperationID,
		Plan:               plan,
		Approval:           approval,
		InputFingerprint:   InputFingerprint(plan.Fingerprint, b),
		CoordinationDigest: b.CoordinationDigest,
		StatementsDigest:   statementsDigest,
		ClaimedAt:          api.NewTime(in.Now),
		Deadline:           api.NewTime(in.Now.Add(in.RunTimeout)),
	}
	rs.ActiveOperation = op
	setPhase(rs, api.PhaseApplying, api.ReasonApplying, fmt.Sprintf("operation %s claims plan %s", op.ID, plan.Name))
	return outcome{step: StepWriteStatus, operation: op}
}

func setPhase(rs *api.RunState, phase api.Phase, reason, message string) {
	rs.Phase, rs.Reason, rs.Message = phase, reason, message
}

func stable(rs *api.RunState, phase api.Phase, reason, message string) outcome {
	setPhase(rs, phase, reason, message)
	return outcome{step: StepWriteStatus, stable: true}
}
