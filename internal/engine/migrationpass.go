package engine

import (
	"fmt"
	"strings"
	"time"

	"github.com/ptah-run/ptah/internal/fingerprint"
	api "github.com/ptah-run/ptah/pkg/api/v1alpha1"
)

// StepResolve: write Decision.Status, which records the run
// Decision.Acknowledgment settles as resolved, then mark that
// acknowledgment consumed (PtahMigration only). The status goes first: a
// crash between the two leaves an acknowledgment that names a run no
// longer unresolved, which the next pass marks stale, and never an
// unresolved run whose only acknowledgment is spent.
const StepResolve Step = "Resolve"

// MigrationObservation is one fresh reading for a PtahMigration: its
// history and its source, and what the one gives against the other.
type MigrationObservation struct {
	// Bindings of the moment; HistoryFingerprint is the history read, and
	// ArtifactDigest the source's.
	Bindings api.Bindings
	History  api.HistorySummary
	// Blocked: the history and the source disagree (the history was
	// modified, is ahead of the source, a file is out of order, a run
	// left it dirty), or the source cannot be read. Reason and Message
	// name the versions concerned; nothing is planned.
	Blocked         bool
	Reason, Message string
	// Pending are the versions to run, in order; for a baseline, the
	// versions to record as already present.
	Pending []api.MigrationVersion
	// Baseline: the reading checked that the target already has what the
	// files up to the last of Pending build, on an empty history; the plan
	// records them, and runs nothing.
	Baseline    bool
	LockTimeout string
	// LockAttemptTimeout and StatementTimeout are the policy's, when set.
	LockAttemptTimeout, StatementTimeout string
}

// MigrationPlan is a stored PtahMigrationPlan.
type MigrationPlan struct {
	Name, UID string
	Spec      api.PtahMigrationPlanSpec
}

// Ref is the reference a status keeps to the plan.
func (p MigrationPlan) Ref() api.PlanReference {
	return api.PlanReference{ObjectReference: api.ObjectReference{Name: p.Name, UID: p.UID}, Fingerprint: p.Spec.Fingerprint}
}

// MigrationApproval is a stored PtahMigrationApproval.
type MigrationApproval struct {
	Name, UID string
	Spec      api.PtahMigrationApprovalSpec
	Status    api.DecisionStatus
}

func (a MigrationApproval) terms() decisionTerms {
	return decisionTerms{Plan: a.Spec.Plan, PlanFingerprint: a.Spec.PlanFingerprint, Bindings: a.Spec.Bindings, Spent: a.Status.Spent()}
}

// termsFor are a's terms as they bear on the claim of operation claim
// ("": a new claim). An approval consumed by that very operation still
// authorizes it: ptah serve spends the approval just before it writes the
// dispatch marker, and a manager that stops between the two leaves the
// claim undispatched with its approval spent on it. The claim runs at most
// once (a dispatched claim is never dispatched again, and a dropped one is
// gone); no other claim can ever use that approval.
func (a MigrationApproval) termsFor(claim string) decisionTerms {
	t := a.terms()
	if c := a.Status.Consumed; claim != "" && c != nil && c.OperationID == claim && !a.Status.Stale {
		t.Spent = false
	}
	return t
}

// Acknowledgment is a stored PtahMigrationRunAcknowledgment: a person's
// settling of one unresolved run.
type Acknowledgment struct {
	Name, UID string
	Spec      api.PtahMigrationRunAcknowledgmentSpec
	Status    api.DecisionStatus
}

// MigrationPassInput is everything a PtahMigration's pass decides from.
type MigrationPassInput struct {
	PassInput
	Spec   api.PtahMigrationSpec
	Status api.PtahMigrationStatus

	// Observation is a reading taken during this pass; nil until one is.
	Observation *MigrationObservation
	// CurrentPlan is the object Status.Plan names, nil when none (or gone).
	CurrentPlan     *MigrationPlan
	Approvals       []MigrationApproval
	Acknowledgments []Acknowledgment
	// LeaseHeld names the operations whose lease row is still in place:
	// an unresolved run's lease is owed back once its writer can no
	// longer write, and not before.
	LeaseHeld map[string]bool
	// Journal is what the run journal says of the dispatched claim's run
	// (keyed by operation ID), read by the shell: all a pass knows of a
	// run that never reported how it ended.
	Journal map[string]JournalReading
}

// JournalReading is what the run journal says of one run.
type JournalReading struct {
	// Succeeded: the journal records the run succeeded. Its success
	// commits in the plan's last transaction, with the last file's
	// history row: the run is known to have applied every version.
	Succeeded bool
	// AnyCommitted: some statement of the run is known to have committed.
	AnyCommitted bool
	// Versions are the versions the journal shows committed, in order.
	Versions []string
	// Writer is the session the journal names, nil when none.
	Writer *api.WriterSession
}

// MigrationDecision is the migration pass's answer. Status is always the
// complete status to write with the step.
type MigrationDecision struct {
	Step      Step
	Status    api.PtahMigrationStatus
	Stable    bool
	Err       error
	Plan      *api.PtahMigrationPlanSpec // StepPublish
	Stale     []MigrationApproval        // StepMarkStale
	StaleAcks []Acknowledgment           // StepMarkStale
	// Acknowledgment is the one StepResolve consumes.
	Acknowledgment *Acknowledgment
	Operation      *api.Operation
}

// MigrationPass decides the next step for one PtahMigration: the pass
// every family runs, with the migration family's differences (migrationFamily).
func MigrationPass(in MigrationPassInput) MigrationDecision {
	f := &migrationFamily{in: in, st: in.Status}
	o := decide(in.PassInput, f, in.Status.ActiveOperation)
	if f.resolve != nil && o.step == StepWriteStatus {
		o.step = StepResolve
	}
	d := MigrationDecision{Step: o.step, Status: f.st, Stable: o.stable, Err: o.err, Plan: f.plan, Stale: f.stale,
		StaleAcks: f.staleAcks, Acknowledgment: f.resolve, Operation: o.operation}
	if d.Step == StepRefuse {
		d.Status = in.Status
	}
	return d
}

// migrationFamily is the PtahMigration side of the pass. Its files are
// written by hand: a file that committed part of itself cannot be run
// again, and no reading tells which part committed, so a run whose outcome
// is unknown is recorded (status.unresolvedRun) and settled by a person,
// never by the pass; and an approval also binds the history its versions
// were selected against, and is spent by the one run it authorizes.
type migrationFamily struct {
	in        MigrationPassInput
	st        api.PtahMigrationStatus
	plan      *api.PtahMigrationPlanSpec
	stale     []MigrationApproval
	staleAcks []Acknowledgment
	resolve   *Acknowledgment
}

func (f *migrationFamily) state() *api.RunState { return &f.st.RunState }

func (f *migrationFamily) observed() bool { return f.in.Observation != nil }

// settle keeps an unresolved run in place until a person's acknowledgment
// names its exact operation and this resource's UID. A later, unrelated
// refusal never clears it: it is a field, not a reason.
func (f *migrationFamily) settle(in PassInput) (outcome, bool) {
	u, rs := f.st.UnresolvedRun, &f.st.RunState
	if u == nil {
		return outcome{}, false
	}
	if DispatchedApplyMayStillWrite(in, u.OperationID) {
		return mayStillWrite(rs, u.OperationID), true
	}
	if f.in.LeaseHeld[u.OperationID] {
		// Its writer can no longer write: the release is owed now.
		rs.OwedRelease = &api.LeaseRelease{CoordinationDigest: u.CoordinationDigest, OperationID: u.OperationID}
		return outcome{step: StepWriteStatus}, true
	}
	var stale []Acknowledgment
	for i, a := range f.in.Acknowledgments {
		switch {
		case a.Status.Spent():
		case a.Spec.OperationID == u.OperationID && a.Spec.Migration.UID == in.UID && f.resolve == nil:
			f.resolve = &f.in.Acknowledgments[i]
		default:
			stale = append(stale, a)
		}
	}
	if len(stale) > 0 {
		f.resolve, f.staleAcks = nil, stale
		return outcome{step: StepMarkStale}, true
	}
	if a := f.resolve; a != nil {
		f.st.ResolvedRun = &api.ResolvedRun{OperationID: u.OperationID, Acknowledgment: api.ObjectReference{Name: a.Name, UID: a.UID},
			By: a.Spec.By, At: api.NewTime(in.Now)}
		f.st.UnresolvedRun = nil
		f.st.Plan = nil // the history is read afresh, and what remains planned anew
		setPhase(rs, api.PhaseApplying, api.ReasonApplying, fmt.Sprintf("run %s resolved by %s (%s); reading the history again",
			u.OperationID, a.Spec.By, a.Spec.Reason))
		return outcome{step: StepWriteStatus}, true
	}
	return stable(rs, api.PhaseBlocked, api.ReasonUnresolvedRun, fmt.Sprintf(
		"run %s of plan %s may have applied part of it (outcome %s); nothing runs until a person establishes what it did: "+
			"ptah resolve-run %s shows the evidence", u.OperationID, u.Plan.Name, u.Outcome, in.Name)), true
}

// lostDispatch: a dispatched run never reported how it ended, and its
// writer can no longer write. The journal settles it only when it records
// the run succeeded; anything else is for a person (Partial when the
// journal shows a statement committed), with the writer session the
// journal names as evidence.
func (f *migrationFamily) lostDispatch(in PassInput, op *api.Operation) {
	j, read := f.in.Journal[op.ID]
	if read && j.Succeeded {
		f.st.LastRun = &api.AppliedPlan{OperationID: op.ID, Plan: op.Plan, Outcome: api.OutcomeSucceeded, FinishedAt: api.NewTime(in.Now), Versions: j.Versions,
			Message: "the run never reported how it ended; the journal records it succeeded"}
		f.st.Plan = nil // spent
		setPhase(&f.st.RunState, api.PhaseApplying, api.ReasonVerifying, fmt.Sprintf("applied %s (the journal records it); verifying",
			versionList(j.Versions)))
		return
	}
	outcome := api.OutcomeUnknown
	if j.AnyCommitted {
		outcome = api.OutcomePartial
	}
	f.st.UnresolvedRun = &api.UnresolvedRun{Outcome: outcome, OperationID: op.ID, Plan: op.Plan, Writer: j.Writer, Deadline: op.Deadline,
		TargetIdentityDigest: in.TargetIdentityDigest, CoordinationDigest: op.CoordinationDigest,
		ReportedBy: api.ReportedByDispatch, RecordedAt: api.NewTime(in.Now)}
	setPhase(&f.st.RunState, api.PhaseBlocked, api.ReasonUnresolvedRun, fmt.Sprintf(
		"run %s was dispatched and never reported how it ended; ptah resolve-run %s shows the evidence", op.ID, in.Name))
}

func (f *migrationFamily) verifyClaimedPlan(op *api.Operation) error {
	plan := f.in.CurrentPlan
	if plan == nil {
		return checkClaimedPlan(op, api.PlanReference{}, nil)
	}
	return checkClaimedPlan(op, plan.Ref(), func() error { return VerifyMigrationPlan(*plan) })
}

func (f *migrationFamily) stillAuthorized(op *api.Operation) string {
	v := f.authorize(*f.in.CurrentPlan, op.ID)
	switch {
	case !v.Authorized && op.Approval != nil:
		return fmt.Sprintf("approval %s (uid %s), which it was claimed under, was withdrawn, spent or went stale", op.Approval.Name, op.Approval.UID)
	case !v.Authorized:
		return v.Message
	case op.Approval != nil && (v.approval < 0 || f.in.Approvals[v.approval].UID != op.Approval.UID):
		return fmt.Sprintf("approval %s (uid %s), which it was claimed under, no longer authorizes it", op.Approval.Name, op.Approval.UID)
	case op.Approval == nil && v.approval >= 0:
		return "it was claimed without an approval, and the policy now requires one"
	}
	return ""
}

// authorize judges plan for the claim of operation claim ("": a new
// claim).
func (f *migrationFamily) authorize(plan MigrationPlan, claim string) familyVerdict {
	return authorize(f.in.Spec.Policy.Apply, false, false, plan.Ref(), func() (int, bool) {
		for i, a := range f.in.Approvals {
			if a.termsFor(claim).authorizes(plan.Name, plan.UID, plan.Spec.Fingerprint, plan.Spec.Bindings) {
				return i, true
			}
		}
		return 0, false
	})
}

func (f *migrationFamily) authorizedMessage(op *api.Operation) string {
	if op.Approval == nil {
		return "the plan is authorized by policy.apply Always; ptah apply runs it"
	}
	for _, a := range f.in.Approvals {
		if a.UID == op.Approval.UID {
			return approvedBy(a.Spec.Approver, a.Spec.ApprovedAt.Time, a.Spec.Reason)
		}
	}
	return "the plan is approved; ptah apply runs it"
}

func (f *migrationFamily) planAndAuthorize(in PassInput) outcome {
	obs, st, rs := f.in.Observation, &f.st, &f.st.RunState
	st.History = &obs.History
	if obs.Blocked || len(obs.Pending) == 0 {
		st.Plan = nil
		if stale := f.staleApprovals(nil); len(stale) > 0 {
			f.stale = stale
			return outcome{step: StepMarkStale}
		}
		if obs.Blocked {
			return stable(rs, api.PhaseBlocked, obs.Reason, obs.Message)
		}
		return stable(rs, api.PhaseInSync, api.ReasonInSync, upToDate(obs.History))
	}
	spec := api.PtahMigrationPlanSpec{
		Migration:   api.ObjectReference{Name: in.Name, UID: in.UID},
		Versions:    obs.Pending,
		Baseline:    obs.Baseline,
		LockTimeout: obs.LockTimeout,
		Bindings:    obs.Bindings,

		LockAttemptTimeout: obs.LockAttemptTimeout,
		StatementTimeout:   obs.StatementTimeout,
	}
	spec.Fingerprint = MigrationPlanFingerprint(spec)
	cur := f.in.CurrentPlan
	if cur == nil || st.Plan == nil || cur.UID != st.Plan.UID || cur.Spec.Fingerprint != spec.Fingerprint {
		f.plan = &spec
		return outcome{step: StepPublish}
	}
	if err := VerifyMigrationPlan(*cur); err != nil {
		return stable(rs, api.PhaseBlocked, api.ReasonPlanTampered, err.Error())
	}
	ref := cur.Ref()
	if stale := f.staleApprovals(&ref); len(stale) > 0 {
		f.stale = stale
		return outcome{step: StepMarkStale}
	}
	v := f.authorize(*cur, "")
	if !v.Authorized {
		return stable(rs, v.Phase, v.Reason, v.Message)
	}
	var approval *api.ObjectReference
	if v.approval >= 0 {
		a := f.in.Approvals[v.approval]
		approval = &api.ObjectReference{Name: a.Name, UID: a.UID}
	}
	return claim(in, rs, ref, cur.Spec.Bindings, approval, "")
}

func (f *migrationFamily) staleApprovals(current *api.PlanReference) []MigrationApproval {
	var stale []MigrationApproval
	for _, a := range f.in.Approvals {
		if a.terms().staleFor(current) {
			stale = append(stale, a)
		}
	}
	return stale
}

func upToDate(h api.HistorySummary) string {
	if h.Applied == 0 {
		return "the source holds no versions and the history none"
	}
	return fmt.Sprintf("every version of the source is applied (%d, the last %s)", h.Applied, h.LastApplied)
}

// MigrationRun is how a dispatched migration run ended, from the shell's
// point of view.
type MigrationRun struct {
	Result RunResult
	// Versions are the versions that committed, in order (for a failed
	// run, those before the file that failed; for an uncertain one, those
	// the journal shows committed).
	Versions []string
	// Failure is where a failed run stopped (RunFailed only).
	Failure *api.RunFailure
	// Partial: for RunUncertain, part of the run is known to have
	// committed and part is not (a no-transaction file stopped part way).
	Partial bool
	Message string
	// Writer is the session that ran the files, nil if none was recorded.
	Writer *api.WriterSession
	// MayStillWrite: the writer may still be writing (its session was cut
	// off from the shell, not ended). No release is owed until it cannot.
	MayStillWrite bool
}

// AccountMigration is the one write after a migration run: the claim
// becomes a record. A known outcome owes the lease release in the same
// write; an uncertain one is recorded for a person to settle, and owes the
// release only if its writer can no longer write (else a later pass owes
// it, once DispatchedApplyMayStillWrite says no).
func AccountMigration(st api.PtahMigrationStatus, op api.Operation, run MigrationRun, targetIdentity string, now time.Time) api.PtahMigrationStatus {
	rs := &st.RunState
	rs.ActiveOperation = nil
	rs.Plan = nil // spent: the next plan is a new object
	owed := &api.LeaseRelease{CoordinationDigest: op.CoordinationDigest, OperationID: op.ID}
	switch run.Result {
	case RunSucceeded:
		rs.OwedRelease = owed
		st.LastRun = &api.AppliedPlan{OperationID: op.ID, Plan: op.Plan, Outcome: api.OutcomeSucceeded, FinishedAt: api.NewTime(now), Versions: run.Versions}
		setPhase(rs, api.PhaseApplying, api.ReasonVerifying, fmt.Sprintf("applied %s; verifying", versionList(run.Versions)))
		return st
	case RunFailed:
		rs.OwedRelease = owed
		st.LastRun = &api.AppliedPlan{OperationID: op.ID, Plan: op.Plan, Outcome: api.OutcomeFailed, FinishedAt: api.NewTime(now), Message: run.Message,
			Versions: run.Versions, Failure: run.Failure}
		msg := run.Message
		if len(run.Versions) > 0 {
			msg = fmt.Sprintf("%s committed before it; %s", versionList(run.Versions), msg)
		}
		setPhase(rs, api.PhaseFailed, api.ReasonApplyFailed, msg)
		return st
	}
	if !run.MayStillWrite {
		rs.OwedRelease = owed
	}
	outcome := api.OutcomeUnknown
	if run.Partial {
		outcome = api.OutcomePartial
	}
	st.UnresolvedRun = &api.UnresolvedRun{Outcome: outcome, OperationID: op.ID, Plan: op.Plan, Writer: run.Writer, Deadline: op.Deadline,
		TargetIdentityDigest: targetIdentity, CoordinationDigest: op.CoordinationDigest, ReportedBy: api.ReportedByRun, RecordedAt: api.NewTime(now)}
	setPhase(rs, api.PhaseBlocked, api.ReasonUnresolvedRun, "the run's outcome is not known: "+run.Message)
	return st
}

func versionList(vs []string) string {
	switch len(vs) {
	case 0:
		return "no version"
	case 1:
		return "version " + vs[0]
	}
	return "versions " + strings.Join(vs, ", ")
}

// MigrationPlanFingerprint covers a migration plan's content and every
// binding (the history fingerprint among them), in this order: migration
// name and UID, each version (version, name, checksum, no-transaction),
// baseline, lock timeout, the lock attempt and statement timeouts when set,
// then the bindings as their JSON encoding.
func MigrationPlanFingerprint(s api.PtahMigrationPlanSpec) string {
	b := fingerprint.New("ptah.run/migration-plan/v1").
		String("migration.name", s.Migration.Name).
		String("migration.uid", s.Migration.UID).
		Int("versions", int64(len(s.Versions)))
	for _, v := range s.Versions {
		b.String("version", v.Version).String("name", v.Name).String("checksum", v.Checksum).Bool("noTransaction", v.NoTransaction)
	}
	b.Bool("baseline", s.Baseline).String("lockTimeout", s.LockTimeout)
	statementLimits(b, s.LockAttemptTimeout, s.StatementTimeout)
	return b.JSON("bindings", s.Bindings).Sum()
}

// VerifyMigrationPlan refuses a plan whose stored content was changed
// after it was published.
func VerifyMigrationPlan(p MigrationPlan) error {
	if got := MigrationPlanFingerprint(p.Spec); got != p.Spec.Fingerprint {
		return fmt.Errorf("plan %s (uid %s): %w (stored %s, content hashes to %s); it cannot be approved or applied",
			p.Name, p.UID, ErrPlanTampered, p.Spec.Fingerprint, got)
	}
	return nil
}

// RestoreUnresolvedRun puts back into a PtahMigration's status the
// unresolved run kept outside it (ptah serve keeps it in an annotation,
// written before the status records the run), when the status lost it: a
// status restored from a backup that drops status, or written over. A
// person's settling is the one thing that clears an unresolved run, so it
// is restored unless the status records it, or records that a person
// resolved that very run. It reports whether the status changed.
func RestoreUnresolvedRun(st api.PtahMigrationStatus, kept *api.UnresolvedRun, name string) (api.PtahMigrationStatus, bool) {
	switch {
	case kept == nil,
		st.UnresolvedRun != nil && st.UnresolvedRun.OperationID == kept.OperationID,
		st.ResolvedRun != nil && st.ResolvedRun.OperationID == kept.OperationID:
		return st, false
	case st.UnresolvedRun != nil:
		// Another run is unresolved: the status's own record stands, and
		// the kept one is for after it (the pass blocks on either alike).
		return st, false
	}
	u := *kept
	st.UnresolvedRun = &u
	if op := st.ActiveOperation; op != nil && op.ID == u.OperationID {
		st.ActiveOperation = nil
	}
	st.Plan = nil
	setPhase(&st.RunState, api.PhaseBlocked, api.ReasonUnresolvedRun, fmt.Sprintf(
		"run %s may have applied part of its plan; the status had lost its record of it, which was restored from where ptah keeps it: "+
			"ptah resolve-run %s shows the evidence", u.OperationID, name))
	return st, true
}
