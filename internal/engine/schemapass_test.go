package engine

import (
	"errors"
	"strings"
	"testing"
	"time"

	api "github.com/ptah-run/ptah/pkg/api/v1alpha1"
)

var t0 = time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)

func bindings(actual string) api.Bindings {
	return api.Bindings{
		ArtifactDigest: "sha256:art", CoordinationDigest: "sha256:coord", TargetIdentityDigest: "sha256:target",
		ActualStateFingerprint: actual, DesiredStateFingerprint: "sha256:desired", PolicyFingerprint: "sha256:policy",
		ExecutionBinding: api.ExecutionBinding{PtahVersion: "test", ContractVersion: api.ContractVersion, Engine: "postgres"},
	}
}

func observation(destructive bool) *Observation {
	hz := []string{}
	if destructive {
		hz = []string{"deletes-data"}
	}
	return &Observation{Bindings: bindings("sha256:live1"), LockTimeout: "5s", Destructive: destructive,
		Statements: []api.PlanStatement{{SQL: "ALTER TABLE public.t ADD COLUMN b text", Hazards: hz}}}
}

// published returns the plan object the shell would create for obs.
func published(obs *Observation, uid string) Plan {
	spec := api.PtahSchemaPlanSpec{Schema: api.ObjectReference{Name: "app", UID: "schema-uid"}, Statements: obs.Statements,
		Destructive: obs.Destructive, LockTimeout: obs.LockTimeout, Bindings: obs.Bindings}
	spec.Fingerprint = PlanFingerprint(spec)
	return Plan{Name: "app-" + spec.Fingerprint[7:19], UID: uid, Spec: spec}
}

func approvalFor(p Plan, uid string) Approval {
	return Approval{Name: "approval-" + uid, UID: uid, Spec: api.PtahSchemaApprovalSpec{
		Plan: api.ObjectReference{Name: p.Name, UID: p.UID}, Schema: "app", PlanFingerprint: p.Spec.Fingerprint,
		Bindings: p.Spec.Bindings, Approver: "ana", ApprovedAt: api.NewTime(t0)}}
}

func input(policy api.ApplyPolicy) SchemaPassInput {
	self := Claimant{Kind: api.KindPtahSchema, Namespace: "default", Name: "app", CoordinationDigest: "sha256:coord"}
	return SchemaPassInput{
		PassInput: PassInput{
			Now: t0, Name: "app", UID: "schema-uid", Generation: 1,
			Binding: api.ExecutionBinding{PtahVersion: "test", ContractVersion: api.ContractVersion, Engine: "postgres"},
			Realm:   []Claimant{self}, Self: self,
			NewOperationID: "op-1", RunTimeout: time.Hour,
		},
		Spec: api.PtahSchemaSpec{Policy: api.Policy{Apply: policy}},
	}
}

// withCurrent is in, after the shell published p and made it current.
func withCurrent(in SchemaPassInput, p Plan) SchemaPassInput {
	in.CurrentPlan = &p
	ref := p.Ref()
	in.Status.Plan = &ref
	return in
}

func TestSchemaPassSteps(t *testing.T) {
	t.Parallel()
	obs := observation(false)
	plan := published(obs, "plan-uid-1")
	claimed := func() SchemaPassInput {
		in := withCurrent(input(api.ApplyAlways), plan)
		in.Observation = obs
		op := SchemaPass(in).Operation
		in.Status.ActiveOperation = op
		return in
	}

	tests := []struct {
		name   string
		in     func() SchemaPassInput
		step   Step
		phase  api.Phase
		reason string
		stable bool
	}{
		{"nothing observed yet: observe", func() SchemaPassInput { return input(api.ApplyOnApproval) }, StepObserve, "", "", false},
		{"an empty plan is InSync", func() SchemaPassInput {
			in := input(api.ApplyOnApproval)
			in.Observation = &Observation{Bindings: bindings("x")}
			return in
		}, StepWriteStatus, api.PhaseInSync, api.ReasonInSync, true},
		{"a new plan is published", func() SchemaPassInput {
			in := input(api.ApplyOnApproval)
			in.Observation = obs
			return in
		}, StepPublish, "", "", false},
		{"a current plan without approval awaits one", func() SchemaPassInput {
			in := withCurrent(input(api.ApplyOnApproval), plan)
			in.Observation = obs
			return in
		}, StepWriteStatus, api.PhaseAwaitingApproval, api.ReasonAwaitingApproval, true},
		{"policy Never stops at Planned", func() SchemaPassInput {
			in := withCurrent(input(api.ApplyNever), plan)
			in.Observation = obs
			return in
		}, StepWriteStatus, api.PhasePlanned, api.ReasonPlanned, true},
		{"an approved plan is claimed", func() SchemaPassInput {
			in := withCurrent(input(api.ApplyOnApproval), plan)
			in.Observation = obs
			in.Approvals = []Approval{approvalFor(plan, "a1")}
			return in
		}, StepWriteStatus, api.PhaseApplying, api.ReasonApplying, false},
		{"Always applies a non-destructive plan without approval", func() SchemaPassInput {
			in := withCurrent(input(api.ApplyAlways), plan)
			in.Observation = obs
			return in
		}, StepWriteStatus, api.PhaseApplying, api.ReasonApplying, false},
		{"a destructive plan is blocked without allowDestructive, approved or not", func() SchemaPassInput {
			p := published(observation(true), "plan-uid-2")
			in := withCurrent(input(api.ApplyAlways), p)
			in.Observation = observation(true)
			in.Approvals = []Approval{approvalFor(p, "a1")}
			return in
		}, StepWriteStatus, api.PhaseBlocked, api.ReasonDestructiveNotAllowed, true},
		{"Always still needs an approval for a destructive plan", func() SchemaPassInput {
			p := published(observation(true), "plan-uid-2")
			in := withCurrent(input(api.ApplyAlways), p)
			in.Spec.Policy.AllowDestructive = true
			in.Observation = observation(true)
			return in
		}, StepWriteStatus, api.PhaseAwaitingApproval, api.ReasonAwaitingApproval, true},
		{"a claim takes the lease first", claimed, StepLock, "", "", false},
		{"a claim is re-derived under the lease, before dispatch", func() SchemaPassInput {
			in := claimed()
			in.Locked = true
			return in
		}, StepRederive, "", "", false},
		{"a claim whose inputs held is dispatched", func() SchemaPassInput {
			in := claimed()
			in.Locked = true
			in.Rederived = in.Status.ActiveOperation.InputFingerprint
			return in
		}, StepDispatch, "", "", false},
		{"a re-derivation taken without the lease is not enough", func() SchemaPassInput {
			in := claimed()
			in.Rederived = in.Status.ActiveOperation.InputFingerprint
			return in
		}, StepLock, "", "", false},
		{"a tampered plan is refused", func() SchemaPassInput {
			p := plan
			p.Spec.Statements = []api.PlanStatement{{SQL: "DROP TABLE public.t", Hazards: []string{}}}
			// Its stored fingerprint still matches the observation, but its
			// statements were edited in the store.
			in := withCurrent(input(api.ApplyAlways), p)
			in.Observation = obs
			return in
		}, StepWriteStatus, api.PhaseBlocked, api.ReasonPlanTampered, true},
		{"an owed release is completed first", func() SchemaPassInput {
			in := input(api.ApplyAlways)
			in.Status.OwedRelease = &api.LeaseRelease{CoordinationDigest: "sha256:coord", OperationID: "op-0"}
			return in
		}, StepReleaseOwed, "", "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			d := SchemaPass(tt.in())
			if d.Step != tt.step || d.Status.Phase != tt.phase || d.Status.Reason != tt.reason || d.Stable != tt.stable {
				t.Fatalf("got step %s phase %q reason %q stable %v (%s); want %s %q %q %v",
					d.Step, d.Status.Phase, d.Status.Reason, d.Stable, d.Status.Message, tt.step, tt.phase, tt.reason, tt.stable)
			}
		})
	}
}

func TestSchemaPassRefusesFutureState(t *testing.T) {
	t.Parallel()
	in := input(api.ApplyAlways)
	in.Stored = []StoredObject{{Kind: api.KindPtahSchemaPlan, Namespace: "default", Name: "app-1", ContractVersion: api.ContractVersion + 1}}
	d := SchemaPass(in)
	var fe *FutureStateError
	if d.Step != StepRefuse || !errors.As(d.Err, &fe) || !strings.Contains(d.Err.Error(), "PtahSchemaPlan default/app-1") {
		t.Fatalf("got %s, %v; want a refusal naming the object", d.Step, d.Err)
	}
}

func TestSchemaPassApprovalForReplacedUIDIsStale(t *testing.T) {
	t.Parallel()
	obs := observation(false)
	old := published(obs, "uid-old")
	// The same content published again under the same name: a new object.
	replacement := published(obs, "uid-new")
	in := withCurrent(input(api.ApplyOnApproval), replacement)
	in.Observation = obs
	in.Approvals = []Approval{approvalFor(old, "a1")}

	d := SchemaPass(in)
	if d.Step != StepMarkStale || len(d.Stale) != 1 || d.Stale[0].UID != "a1" {
		t.Fatalf("got %s %v; want the old approval marked stale", d.Step, d.Stale)
	}
	in.Approvals[0].Status.Stale = true
	if d := SchemaPass(in); d.Status.Phase != api.PhaseAwaitingApproval {
		t.Fatalf("after marking stale: phase %s; the old approval must not authorize the replacement", d.Status.Phase)
	}
}

func TestSchemaPassMovedInputsDiscardTheClaim(t *testing.T) {
	t.Parallel()
	obs := observation(false)
	plan := published(obs, "p1")
	in := withCurrent(input(api.ApplyAlways), plan)
	in.Observation = obs
	in.Status.ActiveOperation = SchemaPass(in).Operation
	in.Locked = true
	in.Rederived = InputFingerprint(plan.Spec.Fingerprint, bindings("sha256:live2"))

	d := SchemaPass(in)
	if d.Step != StepWriteStatus || d.Status.ActiveOperation != nil || d.Status.Plan != nil || d.Stable {
		t.Fatalf("got %s claim=%v plan=%v stable=%v; want the claim and plan discarded and the pass continued",
			d.Step, d.Status.ActiveOperation, d.Status.Plan, d.Stable)
	}
}

// A claim is dispatched only with the plan it claimed, as it was: a plan
// rewritten in the store after the claim blocks; a plan gone is observed
// again.
func TestSchemaPassClaimedPlanIsVerifiedBeforeDispatch(t *testing.T) {
	t.Parallel()
	obs := observation(false)
	plan := published(obs, "p1")
	claimed := func(mutate func(*SchemaPassInput)) Decision {
		in := withCurrent(input(api.ApplyAlways), plan)
		in.Observation = obs
		in.Status.ActiveOperation = SchemaPass(in).Operation
		in.Locked = true
		in.Rederived = in.Status.ActiveOperation.InputFingerprint
		mutate(&in)
		return SchemaPass(in)
	}
	if d := claimed(func(*SchemaPassInput) {}); d.Step != StepDispatch {
		t.Fatalf("untouched: got %s, want Dispatch", d.Step)
	}
	d := claimed(func(in *SchemaPassInput) {
		tampered := plan
		tampered.Spec.Statements = []api.PlanStatement{{SQL: "DROP TABLE public.t", Hazards: []string{}}}
		in.CurrentPlan = &tampered
	})
	if d.Step != StepWriteStatus || !d.Stable || d.Status.Reason != api.ReasonPlanTampered || d.Status.ActiveOperation != nil {
		t.Fatalf("statements rewritten: got %s %s claim=%v; want Blocked PlanTampered, claim dropped", d.Step, d.Status.Reason, d.Status.ActiveOperation)
	}
	d = claimed(func(in *SchemaPassInput) {
		other := published(observation(true), "p2")
		other.UID = plan.UID
		in.CurrentPlan = &other // consistent in itself, but not what was claimed
	})
	if d.Status.Reason != api.ReasonPlanTampered || d.Status.ActiveOperation != nil {
		t.Fatalf("another plan under the claimed UID: got %s %s; want Blocked PlanTampered", d.Step, d.Status.Reason)
	}
	d = claimed(func(in *SchemaPassInput) { in.CurrentPlan = nil })
	if d.Step != StepWriteStatus || d.Stable || d.Status.ActiveOperation != nil || d.Status.Plan != nil {
		t.Fatalf("plan gone: got %s stable=%v claim=%v; want the claim dropped and the pass continued", d.Step, d.Stable, d.Status.ActiveOperation)
	}
}

func TestSchemaPassDispatchedClaimIsNeverDispatchedAgain(t *testing.T) {
	t.Parallel()
	dispatched := t0.Add(-time.Minute)
	op := &api.Operation{ID: "op-9", CoordinationDigest: "sha256:coord", DispatchedAt: &api.Time{Time: dispatched}, Deadline: api.NewTime(t0.Add(time.Hour))}
	in := input(api.ApplyAlways)
	in.Status.ActiveOperation = op

	in.LiveWriters = map[string]bool{"op-9": true}
	if d := SchemaPass(in); d.Status.Reason != api.ReasonRunMayStillWrite || !d.Stable || d.Status.ActiveOperation == nil {
		t.Fatalf("writer alive: got %s %s; want Blocked RunMayStillWrite holding the claim", d.Step, d.Status.Reason)
	}
	in.LiveWriters = nil
	d := SchemaPass(in)
	if d.Step != StepWriteStatus || d.Status.PendingObservation == nil || d.Status.ActiveOperation != nil || d.Status.OwedRelease == nil {
		t.Fatalf("writer gone: got %s %+v; want pendingObservation and an owed release, no claim", d.Step, d.Status)
	}
	// The owed release comes first, then the observation settles it.
	in.Status = d.Status
	if d := SchemaPass(in); d.Step != StepReleaseOwed {
		t.Fatalf("got %s, want the owed release first", d.Step)
	}
	in.Status.OwedRelease = nil
	if d := SchemaPass(in); d.Step != StepObserve {
		t.Fatalf("got %s, want a fresh observation owed", d.Step)
	}
	in.Observation = &Observation{Bindings: bindings("x")}
	d = SchemaPass(in)
	if d.Status.PendingObservation != nil || d.Status.Applied == nil || d.Status.Applied.Outcome != api.OutcomeObserved {
		t.Fatalf("got %+v; want the pending observation settled", d.Status)
	}
}

func TestSchemaPassRealmConflict(t *testing.T) {
	t.Parallel()
	in := input(api.ApplyAlways)
	rival := Claimant{Kind: api.KindPtahSchema, Namespace: "default", Name: "other", CoordinationDigest: "sha256:coord"}
	in.Realm = append(in.Realm, rival)
	d := SchemaPass(in)
	if d.Status.Reason != api.ReasonRealmConflict || !d.Stable || !strings.Contains(d.Status.Message, "default/other") {
		t.Fatalf("got %s %q", d.Status.Reason, d.Status.Message)
	}
	in.Self.SharedRealm = true
	if d := SchemaPass(in); d.Status.Reason != api.ReasonRealmConflict {
		t.Fatalf("only self declared the sharing: got %s, want RealmConflict", d.Status.Reason)
	}
	in.Realm[1].SharedRealm = true
	if d := SchemaPass(in); d.Status.Reason == api.ReasonRealmConflict {
		t.Fatal("every claimant declared the sharing: no conflict expected")
	}
}

func TestAccount(t *testing.T) {
	t.Parallel()
	op := api.Operation{ID: "op-1", CoordinationDigest: "sha256:coord"}
	for _, tt := range []struct {
		result  RunResult
		phase   api.Phase
		pending bool
		outcome string
	}{
		{RunSucceeded, api.PhaseApplying, false, api.OutcomeSucceeded},
		{RunFailed, api.PhaseFailed, false, api.OutcomeFailed},
		{RunUncertain, api.PhaseApplying, true, ""},
	} {
		st := Account(api.PtahSchemaStatus{RunState: api.RunState{ActiveOperation: &op}}, op, tt.result, "boom", t0)
		if st.ActiveOperation != nil || st.OwedRelease == nil || st.OwedRelease.OperationID != "op-1" {
			t.Errorf("result %d: the claim must be swapped for an owed release in one write: %+v", tt.result, st)
		}
		if st.Phase != tt.phase || (st.PendingObservation != nil) != tt.pending {
			t.Errorf("result %d: phase %s pending %v", tt.result, st.Phase, st.PendingObservation != nil)
		}
		if tt.outcome != "" && (st.Applied == nil || st.Applied.Outcome != tt.outcome) {
			t.Errorf("result %d: applied %+v", tt.result, st.Applied)
		}
	}
}

func TestReadyConditionFollowsThePhase(t *testing.T) {
	t.Parallel()
	t1 := t0.Add(time.Minute)
	var st api.PtahSchemaStatus
	st.Phase, st.Reason, st.Message = api.PhaseAwaitingApproval, api.ReasonAwaitingApproval, "plan p awaits approval"
	cs := SetReady(nil, st.RunState, 3, t0)
	if len(cs) != 1 || cs[0].Type != ConditionReady || cs[0].Status != "False" || cs[0].Reason != api.ReasonAwaitingApproval ||
		cs[0].ObservedGeneration != 3 || !cs[0].LastTransitionTime.Equal(t0) {
		t.Fatalf("awaiting approval: %+v", cs)
	}
	// Still not ready, for another reason: the transition time stays.
	st.Phase, st.Reason = api.PhaseBlocked, api.ReasonRealmConflict
	cs = SetReady(cs, st.RunState, 3, t1)
	if len(cs) != 1 || cs[0].Reason != api.ReasonRealmConflict || !cs[0].LastTransitionTime.Equal(t0) {
		t.Fatalf("blocked: %+v", cs)
	}
	// Ready: the status flips, and so does the time; other conditions stay.
	cs = append(cs, api.Condition{Type: "Other", Status: "True"})
	st.Phase, st.Reason = api.PhaseInSync, api.ReasonInSync
	cs = SetReady(cs, st.RunState, 4, t1)
	if len(cs) != 2 || cs[0].Status != "True" || !cs[0].LastTransitionTime.Equal(t1) || cs[0].ObservedGeneration != 4 || cs[1].Type != "Other" {
		t.Fatalf("in sync: %+v", cs)
	}
	// The pass keeps it on every status it writes.
	in := input(api.ApplyAlways)
	in.Observation = &Observation{Bindings: bindings("x")}
	d := SchemaPass(in)
	if d.Status.Phase != api.PhaseInSync || len(d.Status.Conditions) != 1 || d.Status.Conditions[0].Status != "True" {
		t.Fatalf("pass: %+v", d.Status)
	}
}

// A plan-only pass (ptah plan) publishes and may settle, but never claims,
// re-derives or dispatches.
func TestSchemaPassPlanOnlyNeverExecutes(t *testing.T) {
	t.Parallel()
	obs := observation(false)
	plan := published(obs, "p1")
	in := withCurrent(input(api.ApplyAlways), plan)
	in.Observation = obs
	in.PlanOnly = true
	d := SchemaPass(in)
	if d.Step != StepWriteStatus || !d.Stable || d.Status.ActiveOperation != nil || d.Status.Phase != api.PhaseApproved {
		t.Fatalf("authorized plan: got %s %s claim=%v; want Approved, no claim", d.Step, d.Status.Phase, d.Status.ActiveOperation)
	}

	// A claim an interrupted apply left: not re-derived, not dispatched, kept.
	in.PlanOnly = false
	in.Status.ActiveOperation = SchemaPass(in).Operation
	in.PlanOnly = true
	for _, rederived := range []string{"", in.Status.ActiveOperation.InputFingerprint} {
		in.Rederived = rederived
		d = SchemaPass(in)
		if d.Step != StepWriteStatus || !d.Stable || d.Status.ActiveOperation == nil || d.Status.Phase != api.PhaseApplying {
			t.Fatalf("rederived %q: got %s %s claim=%v; want the claim kept and the pass stopped", rederived, d.Step, d.Status.Phase, d.Status.ActiveOperation)
		}
	}

	// Settling a dead run is not execution: it still happens.
	dispatched := t0
	in.Status.ActiveOperation.DispatchedAt = &api.Time{Time: dispatched}
	if d := SchemaPass(in); d.Status.PendingObservation == nil || d.Status.ActiveOperation != nil {
		t.Fatalf("dead dispatched run: got %+v; want it settled into a pending observation", d.Status)
	}
}

func TestLeaseHeldDropsTheClaim(t *testing.T) {
	t.Parallel()
	got := api.RunState{ActiveOperation: &api.Operation{ID: "op-1"}}
	LeaseHeld(&got, "operation op-0 holds it")
	if got.ActiveOperation != nil || got.Phase != api.PhaseBlocked || got.Reason != api.ReasonLeaseHeld || got.Message != "operation op-0 holds it" {
		t.Fatalf("%+v", got)
	}
}

// claimedInput is an authorized claim of plan p, recorded and locked, with
// its inputs re-derived unchanged: the pass's next step is dispatch.
func claimedInput(policy api.ApplyPolicy, p Plan, approvals ...Approval) SchemaPassInput {
	in := withCurrent(input(policy), p)
	in.Observation = &Observation{Bindings: p.Spec.Bindings, Statements: p.Spec.Statements,
		Destructive: p.Spec.Destructive, LockTimeout: p.Spec.LockTimeout}
	in.Approvals = approvals
	in.Status.ActiveOperation = SchemaPass(in).Operation
	in.Locked = true
	in.Rederived = in.Status.ActiveOperation.InputFingerprint
	return in
}

// Nothing ran under an undispatched claim, and nothing may once its
// deadline has passed: the claim is dropped and the pass decides again,
// in ptah apply and ptah plan alike.
func TestSchemaPassDropsAnUndispatchedClaimPastItsDeadline(t *testing.T) {
	t.Parallel()
	plan := published(observation(false), "p1")
	for _, planOnly := range []bool{false, true} {
		in := claimedInput(api.ApplyAlways, plan)
		in.Locked, in.Rederived = false, ""
		in.PlanOnly = planOnly
		op := in.Status.ActiveOperation
		in.Now = op.Deadline.Time
		d := SchemaPass(in)
		if d.Step != StepWriteStatus || d.Stable || d.Status.ActiveOperation != nil ||
			!strings.Contains(d.Status.Message, "not dispatched before its deadline") || !strings.Contains(d.Status.Message, "nothing ran") {
			t.Fatalf("plan-only %v: got %s stable=%v claim=%v %q; want the claim dropped, saying so, and the pass continued",
				planOnly, d.Step, d.Stable, d.Status.ActiveOperation, d.Status.Message)
		}
		// A moment before, the claim stands (and ptah plan says when it expires).
		in.Now = op.Deadline.Add(-time.Second)
		if d := SchemaPass(in); d.Status.ActiveOperation == nil {
			t.Fatalf("plan-only %v: a claim before its deadline was dropped: %q", planOnly, d.Status.Message)
		}
	}
	// A dispatched claim past its deadline is not dropped: it may have run.
	in := claimedInput(api.ApplyAlways, plan)
	dispatched := t0
	in.Status.ActiveOperation.DispatchedAt = &api.Time{Time: dispatched}
	in.Now = in.Status.ActiveOperation.Deadline.Add(time.Hour)
	if d := SchemaPass(in); d.Status.PendingObservation == nil || d.Status.PendingObservation.OperationID != in.Status.ActiveOperation.ID {
		t.Fatalf("dispatched, past the deadline: got %+v; want a pending observation", d.Status)
	}
}

// The approval is the decision: one withdrawn (deleted, or gone stale)
// between the claim and the dispatch authorizes nothing.
func TestSchemaPassRechecksTheApprovalAtDispatch(t *testing.T) {
	t.Parallel()
	plan := published(observation(false), "p1")
	approval := approvalFor(plan, "a1")
	if d := SchemaPass(claimedInput(api.ApplyOnApproval, plan, approval)); d.Step != StepDispatch {
		t.Fatalf("approval in place: got %s, want Dispatch", d.Step)
	}
	for name, mutate := range map[string]func(*SchemaPassInput){
		"deleted":  func(in *SchemaPassInput) { in.Approvals = nil },
		"stale":    func(in *SchemaPassInput) { in.Approvals[0].Status.Stale = true },
		"replaced": func(in *SchemaPassInput) { in.Approvals = []Approval{approvalFor(plan, "a2")} },
		"policy Never": func(in *SchemaPassInput) {
			in.Spec.Policy.Apply = api.ApplyNever
		},
	} {
		in := claimedInput(api.ApplyOnApproval, plan, approval)
		mutate(&in)
		d := SchemaPass(in)
		if d.Step != StepWriteStatus || d.Status.ActiveOperation != nil || !strings.Contains(d.Status.Message, "no longer authorized") {
			t.Errorf("approval %s: got %s claim=%v %q; want the claim dropped", name, d.Step, d.Status.ActiveOperation, d.Status.Message)
		}
	}
}

// Nothing is settled or released for a run whose writer may still write:
// not the owed release (the database would be handed back under a live
// writer), not the pending observation (it could be read before a commit
// that then lands).
func TestSchemaPassWaitsForALiveWriterInEveryPath(t *testing.T) {
	t.Parallel()
	ref := api.PlanReference{ObjectReference: api.ObjectReference{Name: "app-1", UID: "p1"}}
	owed := input(api.ApplyAlways)
	owed.Status.OwedRelease = &api.LeaseRelease{CoordinationDigest: "sha256:coord", OperationID: "op-7"}
	owed.Status.PendingObservation = &api.PendingObservation{OperationID: "op-7", Plan: ref, Since: api.NewTime(t0)}
	pending := input(api.ApplyAlways)
	pending.Status.PendingObservation = &api.PendingObservation{OperationID: "op-7", Plan: ref, Since: api.NewTime(t0)}
	pending.Observation = &Observation{Bindings: bindings("x")}
	for name, in := range map[string]SchemaPassInput{"owed release": owed, "pending observation": pending} {
		in.LiveWriters = map[string]bool{"op-7": true}
		d := SchemaPass(in)
		if d.Step != StepWriteStatus || !d.Stable || d.Status.Reason != api.ReasonRunMayStillWrite ||
			d.Status.OwedRelease == nil && in.Status.OwedRelease != nil || d.Status.PendingObservation == nil {
			t.Errorf("%s, writer alive: got %s %s %+v; want Blocked RunMayStillWrite, nothing settled", name, d.Step, d.Status.Reason, d.Status)
		}
		in.LiveWriters = map[string]bool{"op-other": true}
		if d := SchemaPass(in); d.Status.Reason == api.ReasonRunMayStillWrite {
			t.Errorf("%s: another operation's live writer must not hold this one", name)
		}
	}
}

// A plan that, once applied, is derived again from the database it
// produced would run forever under policy Always: the pass stops Blocked
// instead, until the declaration or the database changes.
func TestSchemaPassStopsAPlanThatDoesNotConverge(t *testing.T) {
	t.Parallel()
	obs := observation(false)
	plan := published(obs, "p1")
	in := claimedInput(api.ApplyAlways, plan)
	op := in.Status.ActiveOperation
	verifying := input(api.ApplyAlways)
	verifying.Status = Account(in.Status, *op, RunSucceeded, "", t0)
	if verifying.Status.Reason != api.ReasonVerifying || verifying.Status.Applied.StatementsDigest != StatementsDigest(plan.Spec.Statements) {
		t.Fatalf("account: %+v", verifying.Status)
	}
	verifying.Status.OwedRelease = nil // released
	again := obs
	again.Bindings.ActualStateFingerprint = "sha256:after" // the run changed something, not enough
	verifying.Observation = again

	d := SchemaPass(verifying)
	if d.Step != StepWriteStatus || !d.Stable || d.Status.Phase != api.PhaseBlocked || d.Status.Reason != api.ReasonPlanDoesNotConverge ||
		!strings.Contains(d.Status.Message, op.ID) {
		t.Fatalf("the same statements after the run: got %s %s/%s %q; want Blocked PlanDoesNotConverge", d.Step, d.Status.Phase, d.Status.Reason, d.Status.Message)
	}
	// It stays blocked on the next pass (ptah serve reconciles again) ...
	blocked := verifying
	blocked.Status = d.Status
	if d := SchemaPass(blocked); d.Status.Reason != api.ReasonPlanDoesNotConverge {
		t.Fatalf("next pass: got %s; want still PlanDoesNotConverge", d.Status.Reason)
	}
	// ... until the declaration changes what is planned.
	changed := *again
	changed.Statements = []api.PlanStatement{{SQL: "ALTER TABLE public.t ADD COLUMN c text", Hazards: []string{}}}
	blocked.Observation = &changed
	if d := SchemaPass(blocked); d.Step != StepPublish {
		t.Fatalf("a different plan: got %s %s; want it published", d.Step, d.Status.Reason)
	}
	// The same statements derived later, once the resource was in sync
	// (the database was changed back by hand), are a plan like any other.
	later := verifying
	later.Status.Phase, later.Status.Reason = api.PhaseInSync, api.ReasonInSync
	if d := SchemaPass(later); d.Step != StepPublish {
		t.Fatalf("after InSync: got %s %s; want the plan published", d.Step, d.Status.Reason)
	}
}

// One database has one writer, whatever the coordination keys say.
func TestSchemaPassRealmConflictOnTheSameDatabaseUnderAnotherKey(t *testing.T) {
	t.Parallel()
	in := input(api.ApplyAlways)
	in.Self.TargetIdentityDigest = "sha256:db"
	in.Realm = []Claimant{in.Self, {Kind: api.KindPtahSchema, Namespace: "default", Name: "keyed",
		CoordinationDigest: "sha256:other-key", TargetIdentityDigest: "sha256:db"}}
	if d := SchemaPass(in); d.Status.Reason != api.ReasonRealmConflict || !strings.Contains(d.Status.Message, "default/keyed") {
		t.Fatalf("same database, another key: got %s %q; want RealmConflict naming the rival", d.Status.Reason, d.Status.Message)
	}
	in.Realm[1].TargetIdentityDigest = "sha256:another-db"
	if d := SchemaPass(in); d.Status.Reason == api.ReasonRealmConflict {
		t.Fatal("another database under another key: no conflict expected")
	}
}

func TestSchemaPassRefusesAStoredKindItDoesNotKnow(t *testing.T) {
	t.Parallel()
	in := input(api.ApplyAlways)
	in.Stored = []StoredObject{{Kind: "PtahSchemaFuture", Namespace: "default", Name: "x", ContractVersion: api.ContractVersion}}
	d := SchemaPass(in)
	if d.Step != StepRefuse || !strings.Contains(d.Err.Error(), "PtahSchemaFuture default/x (a kind this ptah does not know") {
		t.Fatalf("got %s, %v; want a refusal naming the unknown kind", d.Step, d.Err)
	}
	in.Stored = []StoredObject{{Kind: RecordRun, Name: "op-1", ContractVersion: api.ContractVersion + 1}}
	if d := SchemaPass(in); d.Step != StepRefuse || !strings.Contains(d.Err.Error(), "Run /op-1") {
		t.Fatalf("got %s, %v; want a refusal naming the run", d.Step, d.Err)
	}
}

func TestRunnableSaysWhyPolicyWouldNotRunAPlan(t *testing.T) {
	t.Parallel()
	safe, destructive := published(observation(false), "p1"), published(observation(true), "p2")
	for _, tt := range []struct {
		policy api.Policy
		plan   Plan
		why    string
	}{
		{api.Policy{Apply: api.ApplyOnApproval}, safe, ""},
		{api.Policy{Apply: api.ApplyAlways}, safe, ""},
		{api.Policy{Apply: api.ApplyNever}, safe, "policy.apply is Never"},
		{api.Policy{Apply: api.ApplyOnApproval}, destructive, "allowDestructive is false"},
		{api.Policy{Apply: api.ApplyOnApproval, AllowDestructive: true}, destructive, ""},
	} {
		got := Runnable(tt.policy, tt.plan.Spec.Destructive)
		if (got == "") != (tt.why == "") || !strings.Contains(got, tt.why) {
			t.Errorf("Runnable(%+v, destructive=%v) = %q, want %q", tt.policy, tt.plan.Spec.Destructive, got, tt.why)
		}
	}
}

func TestPlansToPruneKeepsWhatTheStatusNames(t *testing.T) {
	t.Parallel()
	ref := func(uid string) api.PlanReference {
		return api.PlanReference{ObjectReference: api.ObjectReference{Name: "app-" + uid, UID: uid}}
	}
	cur, claimed, pending, applied := ref("cur"), ref("claimed"), ref("pending"), ref("applied")
	st := api.PtahSchemaStatus{RunState: api.RunState{Plan: &cur, ActiveOperation: &api.Operation{ID: "op", Plan: claimed}},
		PendingObservation: &api.PendingObservation{OperationID: "op0", Plan: pending}, Applied: &api.AppliedPlan{Plan: applied}}
	got := PlansToPrune(st, []string{"old1", "cur", "claimed", "pending", "applied", "old2"})
	if strings.Join(got, ",") != "old1,old2" {
		t.Fatalf("PlansToPrune = %v, want old1 and old2 only", got)
	}
	if got := PlansToPrune(api.PtahSchemaStatus{}, []string{"a"}); len(got) != 1 {
		t.Fatalf("nothing named: %v, want every plan pruned", got)
	}
}
