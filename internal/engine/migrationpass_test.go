package engine

import (
	"strings"
	"testing"
	"time"

	api "github.com/ptah-run/ptah/pkg/api/v1alpha1"
)

func migrationObservation(history string, pending ...string) *MigrationObservation {
	b := bindings("")
	b.DesiredStateFingerprint = ""
	b.HistoryFingerprint = history
	obs := &MigrationObservation{Bindings: b, LockTimeout: "5s", History: api.HistorySummary{Fingerprint: history}}
	for _, v := range pending {
		obs.Pending = append(obs.Pending, api.MigrationVersion{Version: v, Name: "step" + v, Checksum: "sha256:" + v})
	}
	return obs
}

func migrationInput(policy api.ApplyPolicy) MigrationPassInput {
	self := Claimant{Kind: api.KindPtahMigration, Namespace: "default", Name: "app", CoordinationDigest: "sha256:coord",
		TargetIdentityDigest: "sha256:target"}
	return MigrationPassInput{
		PassInput: PassInput{
			Now: t0, Name: "app", UID: "migration-uid", Generation: 1,
			Binding: api.ExecutionBinding{PtahVersion: "test", ContractVersion: api.ContractVersion, Engine: "postgres"},
			Realm:   []Claimant{self}, Self: self, TargetIdentityDigest: self.TargetIdentityDigest,
			NewOperationID: "op-1", RunTimeout: time.Hour,
		},
		Spec: api.PtahMigrationSpec{Policy: api.MigrationPolicy{Apply: policy}},
	}
}

// publishedMigration is the plan object the shell would create for spec,
// made current in in.
func publishedMigration(in MigrationPassInput, spec api.PtahMigrationPlanSpec, uid string) MigrationPassInput {
	p := MigrationPlan{Name: "app-" + spec.Fingerprint[7:19], UID: uid, Spec: spec}
	in.CurrentPlan = &p
	ref := p.Ref()
	in.Status.Plan = &ref
	return in
}

func migrationApproval(p MigrationPlan, uid string) MigrationApproval {
	return MigrationApproval{Name: "approval-" + uid, UID: uid, Spec: api.PtahMigrationApprovalSpec{
		Plan: api.ObjectReference{Name: p.Name, UID: p.UID}, Migration: "app", PlanFingerprint: p.Spec.Fingerprint,
		Bindings: p.Spec.Bindings, Approver: "ana", ApprovedAt: api.NewTime(t0)}}
}

// planned is a migration with versions 3 and 4 pending, its plan published.
func planned(policy api.ApplyPolicy) MigrationPassInput {
	in := migrationInput(policy)
	in.Observation = migrationObservation("sha256:hist-2", "3", "4")
	d := MigrationPass(in)
	if d.Step != StepPublish || d.Plan == nil {
		panic("a pending reading must publish a plan, got " + string(d.Step))
	}
	return publishedMigration(in, *d.Plan, "plan-uid-1")
}

func TestMigrationPassPlansAndClaimsTheApprovedPlan(t *testing.T) {
	t.Parallel()
	in := migrationInput(api.ApplyOnApproval)
	if d := MigrationPass(in); d.Step != StepObserve {
		t.Fatalf("fresh: %s, want Observe", d.Step)
	}
	in = planned(api.ApplyOnApproval)
	if got := in.CurrentPlan.Spec; len(got.Versions) != 2 || got.Versions[0].Version != "3" || got.Bindings.HistoryFingerprint != "sha256:hist-2" {
		t.Fatalf("plan %+v: want versions 3, 4 bound to history sha256:hist-2", got)
	}
	d := MigrationPass(in)
	if !d.Stable || d.Status.Phase != api.PhaseAwaitingApproval || !strings.Contains(d.Status.Message, "ptah approve plan-uid-1") {
		t.Fatalf("unapproved: %s %s %q", d.Step, d.Status.Phase, d.Status.Message)
	}
	in.Approvals = []MigrationApproval{migrationApproval(*in.CurrentPlan, "a1")}
	d = MigrationPass(in)
	if d.Step != StepWriteStatus || d.Operation == nil || d.Operation.Approval == nil || d.Operation.Approval.UID != "a1" ||
		d.Operation.Plan.UID != "plan-uid-1" || d.Status.ActiveOperation == nil {
		t.Fatalf("approved: %s op %+v; want the claim of plan-uid-1 under approval a1", d.Step, d.Operation)
	}
	// The claim carries on: lock, re-derive under the lock, dispatch.
	in.Status = d.Status
	if d := MigrationPass(in); d.Step != StepLock {
		t.Fatalf("claimed: %s, want Lock", d.Step)
	}
	in.Locked = true
	if d := MigrationPass(in); d.Step != StepRederive {
		t.Fatalf("locked: %s, want Rederive", d.Step)
	}
	in.Rederived = in.Status.ActiveOperation.InputFingerprint
	if d := MigrationPass(in); d.Step != StepDispatch {
		t.Fatalf("re-derived: %s, want Dispatch", d.Step)
	}
	// The history moved between the claim and the dispatch: the claim
	// is dropped, and the plan with it.
	in.Rederived = InputFingerprint(in.CurrentPlan.Spec.Fingerprint, migrationObservation("sha256:hist-3").Bindings)
	if d := MigrationPass(in); d.Step != StepWriteStatus || d.Status.ActiveOperation != nil || d.Status.Plan != nil {
		t.Fatalf("history moved: %s, claim %+v, plan %+v; want both dropped", d.Step, d.Status.ActiveOperation, d.Status.Plan)
	}
}

// A migration approval binds the history the versions were selected
// against, and is spent by the one run it authorized.
func TestMigrationApprovalBindsTheHistoryAndIsSpentOnce(t *testing.T) {
	t.Parallel()
	in := planned(api.ApplyOnApproval)
	a := migrationApproval(*in.CurrentPlan, "a1")
	a.Spec.Bindings.HistoryFingerprint = "sha256:hist-1" // approved against an older history
	in.Approvals = []MigrationApproval{a}
	if d := MigrationPass(in); d.Step == StepWriteStatus && d.Operation != nil {
		t.Fatalf("an approval of another history authorized the plan")
	}
	a = migrationApproval(*in.CurrentPlan, "a2")
	a.Status.Consumed = &api.Consumption{OperationID: "op-0", At: api.NewTime(t0)}
	in.Approvals = []MigrationApproval{a}
	if d := MigrationPass(in); d.Operation != nil || d.Status.Phase != api.PhaseAwaitingApproval {
		t.Fatalf("a consumed approval: %s %s; want AwaitingApproval", d.Step, d.Status.Phase)
	}
	// Consumed between the claim and the dispatch: nothing runs.
	in.Approvals = []MigrationApproval{migrationApproval(*in.CurrentPlan, "a3")}
	d := MigrationPass(in)
	in.Status, in.Locked = d.Status, true
	in.Rederived = d.Operation.InputFingerprint
	in.Approvals[0].Status.Consumed = &api.Consumption{OperationID: "op-0", At: api.NewTime(t0)}
	if d := MigrationPass(in); d.Step == StepDispatch || d.Status.ActiveOperation != nil {
		t.Fatalf("approval spent before dispatch: %s; want the claim dropped", d.Step)
	}
	// Spent by the claim itself (ptah serve spends it just before the
	// dispatch marker, and may stop between the two): the claim goes on
	// to its one dispatch; a new claim is never authorized by it.
	in.Approvals[0].Status.Consumed = &api.Consumption{OperationID: in.Status.ActiveOperation.ID, At: api.NewTime(t0)}
	if d := MigrationPass(in); d.Step != StepDispatch {
		t.Fatalf("approval spent by its own claim: %s (%s); want Dispatch", d.Step, d.Status.Message)
	}
	fresh := in
	fresh.Status.ActiveOperation, fresh.Locked, fresh.Rederived = nil, false, ""
	if d := MigrationPass(fresh); d.Operation != nil || d.Status.Phase != api.PhaseAwaitingApproval {
		t.Fatalf("a new claim under an approval spent by another: %s %s; want AwaitingApproval", d.Step, d.Status.Phase)
	}
}

func TestMigrationVerdictsBlockBeforeAnyPlan(t *testing.T) {
	t.Parallel()
	in := planned(api.ApplyOnApproval)
	in.Approvals = []MigrationApproval{migrationApproval(*in.CurrentPlan, "a1")}
	obs := migrationObservation("sha256:hist-2")
	obs.Blocked, obs.Reason, obs.Message = true, api.ReasonHistoryModified, "version 2 was edited after it was applied"
	in.Observation = obs
	d := MigrationPass(in)
	if d.Step != StepMarkStale || len(d.Stale) != 1 {
		t.Fatalf("blocked with a live approval: %s; want it marked stale first", d.Step)
	}
	in.Approvals[0].Status.Stale = true
	d = MigrationPass(in)
	if !d.Stable || d.Status.Phase != api.PhaseBlocked || d.Status.Reason != api.ReasonHistoryModified || d.Status.Plan != nil || d.Plan != nil {
		t.Fatalf("blocked: %s %s/%s plan %+v", d.Step, d.Status.Phase, d.Status.Reason, d.Status.Plan)
	}
	in.Observation = migrationObservation("sha256:hist-4")
	in.Observation.History = api.HistorySummary{Applied: 4, LastApplied: "4", Fingerprint: "sha256:hist-4"}
	if d := MigrationPass(in); !d.Stable || d.Status.Phase != api.PhaseInSync || d.Status.History.Applied != 4 {
		t.Fatalf("nothing pending: %s %s", d.Step, d.Status.Phase)
	}
}

// claimedMigration is a claim of in's plan, dispatched at t0.
func dispatched(in MigrationPassInput) (MigrationPassInput, api.Operation) {
	in.Approvals = []MigrationApproval{migrationApproval(*in.CurrentPlan, "a1")}
	op := *MigrationPass(in).Operation
	at := t0
	op.DispatchedAt = &api.Time{Time: at}
	in.Status.ActiveOperation = &op
	in.Status.Phase = api.PhaseApplying
	return in, op
}

// A dispatched run is never run again: whatever became of it, the pass
// records it for a person, and holds the database while its writer may
// still write.
func TestMigrationDispatchedRunIsNeverRunAgain(t *testing.T) {
	t.Parallel()
	in, op := dispatched(planned(api.ApplyAlways))
	in.LiveWriters = map[string]bool{op.ID: true}
	d := MigrationPass(in)
	if !d.Stable || d.Status.Reason != api.ReasonRunMayStillWrite || d.Status.UnresolvedRun != nil || d.Status.OwedRelease != nil {
		t.Fatalf("writer alive: %s/%s unresolved %+v owed %+v", d.Status.Phase, d.Status.Reason, d.Status.UnresolvedRun, d.Status.OwedRelease)
	}
	in.LiveWriters = nil
	d = MigrationPass(in)
	u := d.Status.UnresolvedRun
	if u == nil || u.OperationID != op.ID || u.Outcome != api.OutcomeUnknown || u.ReportedBy != api.ReportedByDispatch ||
		u.TargetIdentityDigest != "sha256:target" || d.Status.ActiveOperation != nil || d.Status.OwedRelease == nil {
		t.Fatalf("writer gone: unresolved %+v claim %+v owed %+v", u, d.Status.ActiveOperation, d.Status.OwedRelease)
	}
	// The journal names the writer, and a committed statement: Partial,
	// with the session as evidence. Only a journal that records the run
	// succeeded settles it without a person.
	writer := &api.WriterSession{PID: 7, BackendStart: api.NewTime(t0)}
	in.Journal = map[string]JournalReading{op.ID: {AnyCommitted: true, Versions: []string{"3"}, Writer: writer}}
	if u := MigrationPass(in).Status.UnresolvedRun; u == nil || u.Outcome != api.OutcomePartial || u.Writer != writer {
		t.Fatalf("journal with a commit: unresolved %+v", u)
	}
	in.Journal = map[string]JournalReading{op.ID: {Succeeded: true, AnyCommitted: true, Versions: []string{"3", "4"}}}
	if s := MigrationPass(in).Status; s.UnresolvedRun != nil || s.LastRun == nil || s.LastRun.Outcome != api.OutcomeSucceeded ||
		strings.Join(s.LastRun.Versions, ",") != "3,4" || s.OwedRelease == nil || s.Reason != api.ReasonVerifying {
		t.Fatalf("journal records success: %+v", s)
	}
	in.Journal = nil
	// The release is completed, then the resource stays Blocked, whatever
	// else the readings say, until a person settles the run.
	in.Status = d.Status
	in.Status.OwedRelease = nil
	in.Observation = migrationObservation("sha256:hist-2", "3", "4")
	for i := 0; i < 2; i++ {
		d = MigrationPass(in)
		if !d.Stable || d.Status.Reason != api.ReasonUnresolvedRun || d.Operation != nil || d.Status.UnresolvedRun == nil ||
			!strings.Contains(d.Status.Message, "ptah resolve-run app") {
			t.Fatalf("unresolved: %s %s/%s %q", d.Step, d.Status.Phase, d.Status.Reason, d.Status.Message)
		}
		// An unrelated refusal later does not clear it.
		in.Observation.Blocked, in.Observation.Reason = true, api.ReasonHistoryAhead
	}
}

func TestMigrationUnresolvedRunIsSettledByItsAcknowledgmentOnly(t *testing.T) {
	t.Parallel()
	in := planned(api.ApplyAlways)
	in.Status.UnresolvedRun = &api.UnresolvedRun{Outcome: api.OutcomePartial, OperationID: "op-7", Plan: *in.Status.Plan,
		CoordinationDigest: "sha256:coord", ReportedBy: api.ReportedByRun}
	ack := func(uid, op, migrationUID string) Acknowledgment {
		return Acknowledgment{Name: "ack-" + uid, UID: uid, Spec: api.PtahMigrationRunAcknowledgmentSpec{
			Migration: api.ObjectReference{Name: "app", UID: migrationUID}, OperationID: op, By: "bo", At: api.NewTime(t0), Reason: "checked the journal"}}
	}
	for _, tt := range []struct {
		name string
		acks []Acknowledgment
	}{
		{"another operation", []Acknowledgment{ack("k1", "op-6", "migration-uid")}},
		{"a recreated resource", []Acknowledgment{ack("k1", "op-7", "old-uid")}},
	} {
		in.Acknowledgments = tt.acks
		d := MigrationPass(in)
		if d.Step != StepMarkStale || len(d.StaleAcks) != 1 || d.Status.UnresolvedRun == nil {
			t.Fatalf("%s: %s, stale %v; want the acknowledgment marked stale, the run still unresolved", tt.name, d.Step, d.StaleAcks)
		}
	}
	spent := ack("k2", "op-7", "migration-uid")
	spent.Status.Consumed = &api.Consumption{OperationID: "op-7", At: api.NewTime(t0)}
	in.Acknowledgments = []Acknowledgment{spent}
	if d := MigrationPass(in); d.Status.Reason != api.ReasonUnresolvedRun || d.Status.UnresolvedRun == nil {
		t.Fatalf("a spent acknowledgment settled the run: %s/%s", d.Status.Phase, d.Status.Reason)
	}
	in.Acknowledgments = []Acknowledgment{ack("k3", "op-7", "migration-uid")}
	d := MigrationPass(in)
	r := d.Status.ResolvedRun
	if d.Step != StepResolve || d.Acknowledgment == nil || d.Acknowledgment.UID != "k3" || d.Status.UnresolvedRun != nil ||
		r == nil || r.OperationID != "op-7" || r.By != "bo" || r.Acknowledgment.UID != "k3" || d.Status.Plan != nil {
		t.Fatalf("acknowledged: %s resolved %+v unresolved %+v", d.Step, r, d.Status.UnresolvedRun)
	}
}

func TestAccountMigration(t *testing.T) {
	t.Parallel()
	in, op := dispatched(planned(api.ApplyAlways))
	self := "sha256:db"
	st := AccountMigration(in.Status, op, MigrationRun{Result: RunSucceeded, Versions: []string{"3", "4"}}, self, t0)
	if st.ActiveOperation != nil || st.Plan != nil || st.OwedRelease == nil || st.LastRun == nil || st.LastRun.Outcome != api.OutcomeSucceeded ||
		strings.Join(st.LastRun.Versions, ",") != "3,4" {
		t.Fatalf("succeeded: %+v", st)
	}
	st = AccountMigration(in.Status, op, MigrationRun{Result: RunFailed, Versions: []string{"3"},
		Failure: &api.RunFailure{Version: "4", Statement: 2}, Message: "division by zero"}, self, t0)
	if st.Phase != api.PhaseFailed || st.UnresolvedRun != nil || st.OwedRelease == nil || st.LastRun.Failure.Version != "4" ||
		!strings.Contains(st.Message, "version 3 committed before it") {
		t.Fatalf("failed: %+v", st)
	}
	// Uncertain: recorded for a person; no release owed while the writer
	// may still write, owed by a later pass once it cannot.
	writer := &api.WriterSession{PID: 42, BackendStart: api.NewTime(t0)}
	st = AccountMigration(in.Status, op, MigrationRun{Result: RunUncertain, Partial: true, Writer: writer, MayStillWrite: true,
		Message: "connection lost in file 4"}, self, t0)
	u := st.UnresolvedRun
	if u == nil || u.Outcome != api.OutcomePartial || u.ReportedBy != api.ReportedByRun || u.Writer != writer || st.OwedRelease != nil ||
		st.Reason != api.ReasonUnresolvedRun {
		t.Fatalf("uncertain: %+v (unresolved %+v)", st, u)
	}
	in.Status, in.Observation = st, migrationObservation("sha256:hist-3", "4")
	in.LeaseHeld = map[string]bool{op.ID: true}
	in.LiveWriters = map[string]bool{op.ID: true}
	if d := MigrationPass(in); d.Status.OwedRelease != nil || d.Status.Reason != api.ReasonRunMayStillWrite {
		t.Fatalf("writer alive: owed %+v, %s", d.Status.OwedRelease, d.Status.Reason)
	}
	in.LiveWriters = nil
	if d := MigrationPass(in); d.Status.OwedRelease == nil || d.Status.OwedRelease.OperationID != op.ID || d.Status.UnresolvedRun == nil {
		t.Fatalf("writer gone: owed %+v", d.Status.OwedRelease)
	}
}

// A tampered migration plan is refused, when it is current and when a
// claim reaches dispatch.
func TestMigrationPlanTampered(t *testing.T) {
	t.Parallel()
	tamper := func(in MigrationPassInput) MigrationPassInput {
		p := *in.CurrentPlan
		p.Spec.Versions = append([]api.MigrationVersion(nil), p.Spec.Versions...)
		p.Spec.Versions[1].Checksum = "sha256:evil"
		in.CurrentPlan = &p
		return in
	}
	in := tamper(planned(api.ApplyAlways))
	if d := MigrationPass(in); d.Step != StepWriteStatus || d.Status.Reason != api.ReasonPlanTampered || d.Operation != nil {
		t.Fatalf("tampered current plan: %s %s", d.Step, d.Status.Reason)
	}
	in = planned(api.ApplyAlways)
	d := MigrationPass(in)
	in.Status, in.Locked = d.Status, true
	in.Rederived = d.Operation.InputFingerprint
	in = tamper(in)
	if d := MigrationPass(in); d.Step == StepDispatch || d.Status.Reason != api.ReasonPlanTampered || d.Status.ActiveOperation != nil {
		t.Fatalf("tampered before dispatch: %s %s", d.Step, d.Status.Reason)
	}
	if err := VerifyMigrationPlan(*in.CurrentPlan); err == nil || !isTampered(err) {
		t.Fatalf("VerifyMigrationPlan = %v", err)
	}
}

// A baseline reading publishes a baseline plan, which is another plan than
// running the same versions: its fingerprint differs, so an approval of
// the one never authorizes the other.
func TestMigrationBaselinePlanIsAPlanOfItsOwn(t *testing.T) {
	t.Parallel()
	publish := func(baseline bool) *api.PtahMigrationPlanSpec {
		in := migrationInput(api.ApplyOnApproval)
		in.Observation = migrationObservation("sha256:empty", "1", "2")
		in.Observation.Baseline = baseline
		d := MigrationPass(in)
		if d.Step != StepPublish || d.Plan == nil {
			t.Fatalf("baseline %v: want StepPublish, got %s", baseline, d.Step)
		}
		return d.Plan
	}
	run, base := publish(false), publish(true)
	if run.Baseline || !base.Baseline || run.Fingerprint == base.Fingerprint {
		t.Fatalf("run plan baseline %v, baseline plan baseline %v, fingerprints equal %v", run.Baseline, base.Baseline, run.Fingerprint == base.Fingerprint)
	}
}
