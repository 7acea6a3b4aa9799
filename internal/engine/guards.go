// Package engine holds the decisions ptah makes, for every mode and family,
// as pure functions: the shells (the local runner, the controller) read the
// store and the database, pass what they saw in, and carry out what comes
// back. Nothing here does I/O, reads a clock or draws a random number.
package engine

import (
	"fmt"
	"sort"
	"strings"

	api "github.com/ptah-run/ptah/pkg/api/v1alpha1"
)

// StoredObject is what the fence needs of one stored record: an object of
// the store, or a row of ptah's runtime tables (RecordLease, RecordRun).
type StoredObject struct {
	Kind, Namespace, Name string
	// ContractVersion is the highest contract version recorded on the
	// object: the store's own record and any carried in its spec or status.
	ContractVersion int
}

// The runtime records the fence reads beside the store's objects.
const (
	RecordLease   = "Lease"   // a row of ptah.leases
	RecordRun     = "Run"     // a run of the journal, ptah.runs
	RecordHistory = "History" // a row of ptah.migration_history
)

// knownKinds are the kinds of stored record this ptah can read. A record of
// any other kind was written by a ptah that knows more.
var knownKinds = map[string]bool{
	api.KindPtahSchema: true, api.KindPtahSchemaPlan: true, api.KindPtahSchemaApproval: true,
	api.KindPtahMigration: true, api.KindPtahMigrationPlan: true, api.KindPtahMigrationApproval: true,
	api.KindPtahMigrationRunAcknowledgment: true,
	api.KindPtahRealm:                      true, // a cluster's, read from the API, never stored
	RecordLease:                            true, RecordRun: true, RecordHistory: true,
}

// FutureStateError refuses stored state written under a newer contract, or
// of a kind this ptah does not know.
type FutureStateError struct {
	Objects []StoredObject
	Own     int
}

func (e *FutureStateError) Error() string {
	names := make([]string, len(e.Objects))
	for i, o := range e.Objects {
		if !knownKinds[o.Kind] {
			names[i] = fmt.Sprintf("%s %s/%s (a kind this ptah does not know, contract version %d)", o.Kind, o.Namespace, o.Name, o.ContractVersion)
			continue
		}
		names[i] = fmt.Sprintf("%s %s/%s (contract version %d)", o.Kind, o.Namespace, o.Name, o.ContractVersion)
	}
	return fmt.Sprintf("stored state was written by a newer ptah than this one (contract version %d), which would misread it: %s; upgrade ptah",
		e.Own, strings.Join(names, ", "))
}

// VerifyStoredState is the fence of the pass: every stored record must be
// of a kind this binary knows, written under a contract it understands.
func VerifyStoredState(objects []StoredObject, own int) error {
	var newer []StoredObject
	for _, o := range objects {
		if o.ContractVersion > own || !knownKinds[o.Kind] {
			newer = append(newer, o)
		}
	}
	if len(newer) == 0 {
		return nil
	}
	return &FutureStateError{Objects: newer, Own: own}
}

// Claimant is a resource that addresses a database.
type Claimant struct {
	Kind, Namespace, Name string
	CoordinationDigest    string
	// TargetIdentityDigest is the database it addresses, whatever its
	// coordination key says; "" when not known.
	TargetIdentityDigest string
	SharedRealm          bool
}

func (c Claimant) String() string { return c.Kind + " " + c.Namespace + "/" + c.Name }

// TakeRealmCensus decides whether self may write its database: it may when
// no other resource addresses the same database, or when every claimant,
// self included, declared the sharing. Two resources address the same
// database when they share a coordination digest, or when they target the
// same database under different coordination keys: a key names a realm, it
// does not make one database two. It returns the rivals.
func TakeRealmCensus(self Claimant, all []Claimant) (contested bool, rivals []Claimant) {
	everyoneShares := self.SharedRealm
	for _, c := range all {
		if c.Kind == self.Kind && c.Namespace == self.Namespace && c.Name == self.Name {
			continue
		}
		sameDatabase := c.TargetIdentityDigest != "" && c.TargetIdentityDigest == self.TargetIdentityDigest
		if c.CoordinationDigest != self.CoordinationDigest && !sameDatabase {
			continue
		}
		rivals = append(rivals, c)
		everyoneShares = everyoneShares && c.SharedRealm
	}
	sort.Slice(rivals, func(i, j int) bool { return rivals[i].String() < rivals[j].String() })
	return len(rivals) > 0 && !everyoneShares, rivals
}

// Approval is a stored approval object.
type Approval struct {
	Name, UID string
	Spec      api.PtahSchemaApprovalSpec
	Status    api.PtahSchemaApprovalStatus
}

// Plan is a stored plan object.
type Plan struct {
	Name, UID string
	Spec      api.PtahSchemaPlanSpec
}

// Ref is the reference a status keeps to the plan.
func (p Plan) Ref() api.PlanReference {
	return api.PlanReference{ObjectReference: api.ObjectReference{Name: p.Name, UID: p.UID}, Fingerprint: p.Spec.Fingerprint}
}

// FindApproval returns the approval that authorizes plan: it names the
// plan's name and UID and fingerprint, carries the plan's bindings, and was
// never marked stale. An approval for a same-named plan with another UID
// authorizes nothing.
func FindApproval(plan Plan, approvals []Approval) *Approval {
	for i, a := range approvals {
		if a.terms().authorizes(plan.Name, plan.UID, plan.Spec.Fingerprint, plan.Spec.Bindings) {
			return &approvals[i]
		}
	}
	return nil
}

func (a Approval) terms() decisionTerms {
	return decisionTerms{Plan: a.Spec.Plan, PlanFingerprint: a.Spec.PlanFingerprint, Bindings: a.Spec.Bindings, Spent: a.Status.Spent()}
}

// decisionTerms is what binds a person's approval to one plan, in either
// family: the plan's name and UID (a plan republished under the same name
// is another object), its fingerprint, and every binding (for a migration,
// the history fingerprint its versions were selected against too).
type decisionTerms struct {
	Plan            api.ObjectReference
	PlanFingerprint string
	Bindings        api.Bindings
	// Spent: stale, or consumed by the run it authorized.
	Spent bool
}

// authorizes reports whether the decision authorizes the plan of that
// name, UID, fingerprint and bindings.
func (t decisionTerms) authorizes(name, uid, fingerprint string, b api.Bindings) bool {
	return !t.Spent && t.Plan.Name == name && t.Plan.UID == uid && t.PlanFingerprint == fingerprint && t.Bindings == b
}

// staleFor reports whether a decision that still looks live names a plan
// other than current (nil: there is none).
func (t decisionTerms) staleFor(current *api.PlanReference) bool {
	return !t.Spent && (current == nil || t.Plan.UID != current.UID || t.PlanFingerprint != current.Fingerprint)
}

// StaleApprovals returns the approvals that still look live but name a plan
// other than current (nil: there is no current plan). Once marked stale they
// never authorize again, even if a plan with the same name comes back.
func StaleApprovals(current *api.PlanReference, approvals []Approval) []Approval {
	var stale []Approval
	for _, a := range approvals {
		if a.terms().staleFor(current) {
			stale = append(stale, a)
		}
	}
	return stale
}

// Verdict is what policy and approvals allow for a plan.
type Verdict struct {
	Authorized bool
	Approval   *Approval // the approval that authorized, if one was needed
	Phase      api.Phase
	Reason     string
	Message    string
}

// PlansToPrune returns, of a resource's stored plans (by UID), those
// nothing needs any more: not current, not claimed, not owed an
// observation or a person's resolution, not the last applied. They can be
// approved no more (only the current plan can) nor run; the approvals and
// the run journal (each statement as it ran) keep the record of what was
// decided and what ran. st is a PtahSchemaStatus or a
// PtahMigrationStatus.
func PlansToPrune[S api.PtahSchemaStatus | api.PtahMigrationStatus](st S, planUIDs []string) []string {
	var refs []*api.PlanReference
	switch s := any(st).(type) {
	case api.PtahSchemaStatus:
		refs = append(refs, s.Plan)
		if p := s.PendingObservation; p != nil {
			refs = append(refs, &p.Plan)
		}
		if a := s.Applied; a != nil {
			refs = append(refs, &a.Plan)
		}
		if op := s.ActiveOperation; op != nil {
			refs = append(refs, &op.Plan)
		}
	case api.PtahMigrationStatus:
		refs = append(refs, s.Plan)
		if u := s.UnresolvedRun; u != nil {
			refs = append(refs, &u.Plan)
		}
		if a := s.LastRun; a != nil {
			refs = append(refs, &a.Plan)
		}
		if op := s.ActiveOperation; op != nil {
			refs = append(refs, &op.Plan)
		}
	}
	keep := map[string]bool{}
	for _, r := range refs {
		if r != nil {
			keep[r.UID] = true
		}
	}
	var prune []string
	for _, uid := range planUIDs {
		if !keep[uid] {
			prune = append(prune, uid)
		}
	}
	return prune
}

// Forgettable says why a resource's record may not be removed yet ("" when
// it may): not while its status names an operation that may have run, or
// is about to, whose outcome or release is still owed. Removing the record
// would lose the only evidence that the database still owes an answer.
func Forgettable[S api.PtahSchemaStatus | api.PtahMigrationStatus](st S) string {
	var rs api.RunState
	switch s := any(st).(type) {
	case api.PtahSchemaStatus:
		rs = s.RunState
		if p := s.PendingObservation; p != nil {
			return fmt.Sprintf("the outcome of operation %s is unknown and owes an observation (ptah apply settles it)", p.OperationID)
		}
	case api.PtahMigrationStatus:
		rs = s.RunState
		if u := s.UnresolvedRun; u != nil {
			return fmt.Sprintf("the outcome of run %s is unknown and only a person can settle it (ptah resolve-run shows its evidence)", u.OperationID)
		}
	}
	switch {
	case rs.ActiveOperation != nil && rs.ActiveOperation.DispatchedAt != nil:
		return fmt.Sprintf("operation %s was dispatched and its outcome is not recorded yet", rs.ActiveOperation.ID)
	case rs.ActiveOperation != nil:
		return fmt.Sprintf("operation %s has claimed plan %s (ptah apply runs or drops it)", rs.ActiveOperation.ID, rs.ActiveOperation.Plan.Name)
	case rs.OwedRelease != nil:
		return fmt.Sprintf("the lease of operation %s is still to be released (ptah apply completes it)", rs.OwedRelease.OperationID)
	}
	return ""
}

// Runnable says why policy would not run plan even once approved: "" when
// an approval would authorize it. An approval recorded anyway would be
// wasted, since changing the policy publishes a new plan (the policy is one
// of its bindings), which needs its own approval.
func Runnable(policy api.Policy, destructive bool) string {
	switch {
	case policy.Apply == api.ApplyNever:
		return "policy.apply is Never, so ptah never applies it"
	case destructive && !policy.AllowDestructive:
		return "it deletes data and policy.allowDestructive is false, so ptah apply refuses it, approved or not"
	}
	return ""
}

// Authorize applies spec.policy to a current plan.
func Authorize(policy api.Policy, plan Plan, approvals []Approval) Verdict {
	v := authorize(policy.Apply, plan.Spec.Destructive, policy.AllowDestructive, plan.Ref(), func() (int, bool) {
		for i, a := range approvals {
			if a.terms().authorizes(plan.Name, plan.UID, plan.Spec.Fingerprint, plan.Spec.Bindings) {
				return i, true
			}
		}
		return 0, false
	})
	if v.approval >= 0 {
		v.Approval = &approvals[v.approval]
	}
	return v.Verdict
}

// familyVerdict is a Verdict with the index of the approval that
// authorized (-1 for none), whatever the family's approval type.
type familyVerdict struct {
	Verdict
	approval int
}

// authorize is the policy of either family: Never publishes only;
// a destructive plan needs allowDestructive; Always runs what deletes no
// data; otherwise (OnApproval) an approval of exactly this plan (find)
// authorizes it.
func authorize(apply api.ApplyPolicy, destructive, allowDestructive bool, plan api.PlanReference, find func() (int, bool)) familyVerdict {
	if apply == api.ApplyNever {
		return familyVerdict{Verdict{Phase: api.PhasePlanned, Reason: api.ReasonPlanned,
			Message: fmt.Sprintf("plan %s is published; policy.apply is Never, so ptah does not apply it", plan.Name)}, -1}
	}
	if destructive && !allowDestructive {
		return familyVerdict{Verdict{Phase: api.PhaseBlocked, Reason: api.ReasonDestructiveNotAllowed,
			Message: fmt.Sprintf("plan %s deletes data and policy.allowDestructive is false; review it, then set allowDestructive to apply it", plan.Name)}, -1}
	}
	if apply == api.ApplyAlways && !destructive {
		return familyVerdict{Verdict{Authorized: true, Phase: api.PhaseApplying, Reason: api.ReasonApplying}, -1}
	}
	if i, ok := find(); ok {
		return familyVerdict{Verdict{Authorized: true, Phase: api.PhaseApplying, Reason: api.ReasonApplying}, i}
	}
	return familyVerdict{Verdict{Phase: api.PhaseAwaitingApproval, Reason: api.ReasonAwaitingApproval,
		Message: fmt.Sprintf("plan %s (uid %s) awaits approval: ptah approve %s --fingerprint %s", plan.Name, plan.UID, plan.UID, plan.Fingerprint)}, -1}
}
