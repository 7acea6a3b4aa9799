package v1alpha1

import "time"

// Kinds of the durable objects beside PtahMigration.
const (
	KindPtahMigrationPlan              = "PtahMigrationPlan"
	KindPtahMigrationApproval          = "PtahMigrationApproval"
	KindPtahMigrationRunAcknowledgment = "PtahMigrationRunAcknowledgment"
)

// PtahMigrationPlan is an immutable plan: the versions a migration would
// run, selected against one reading of its history. Once published, its
// spec never changes; a different plan is a different object with a new
// UID.
//
// +kubebuilder:object:root=true
type PtahMigrationPlan struct {
	TypeMeta   `json:",inline"`
	ObjectMeta `json:"metadata,omitempty"`
	Spec       PtahMigrationPlanSpec `json:"spec"`
}

// PtahMigrationPlanSpec is the content of a migration plan.
type PtahMigrationPlanSpec struct {
	// Migration is the PtahMigration the plan advances.
	Migration ObjectReference `json:"migration"`
	// Versions are the pending files, in the order they run.
	Versions []MigrationVersion `json:"versions"`
	// Baseline: the versions are recorded in history as baselined and none
	// of them runs, because the target already holds what they build (see
	// Bindings.ActualStateFingerprint). Allowed only on an empty history.
	Baseline    bool   `json:"baseline,omitempty"`
	LockTimeout string `json:"lockTimeout"`
	// Bindings include the history fingerprint the versions were selected
	// against.
	Bindings `json:",inline"`
	// Fingerprint covers every field above; a stored plan whose content no
	// longer hashes to it has been tampered with and is refused.
	Fingerprint string `json:"fingerprint"`
}

// MigrationVersion is one file of a migration plan.
type MigrationVersion struct {
	// Version as the file name spells it.
	Version string `json:"version"`
	// Name is the file name's description part.
	Name string `json:"name"`
	// Checksum fingerprints the file's content.
	Checksum string `json:"checksum"`
	// NoTransaction: the file runs outside a transaction, statement by
	// statement, each journaled before it is sent and when it completes.
	// Otherwise it runs in a transaction of its own, with its history row.
	NoTransaction bool `json:"noTransaction,omitempty"`
}

// PtahMigrationApproval records a person's decision to apply one migration
// plan. It is immutable but for its status, which marks it consumed at the
// dispatch boundary, or stale.
//
// +kubebuilder:object:root=true
type PtahMigrationApproval struct {
	TypeMeta   `json:",inline"`
	ObjectMeta `json:"metadata,omitempty"`
	Spec       PtahMigrationApprovalSpec `json:"spec"`
	Status     DecisionStatus            `json:"status,omitempty"`
}

// PtahMigrationApprovalSpec binds a decision to one plan instance, and
// (through Bindings.HistoryFingerprint) to the history its versions were
// selected against.
type PtahMigrationApprovalSpec struct {
	Plan            ObjectReference `json:"plan"`
	Migration       string          `json:"migration"`
	PlanFingerprint string          `json:"planFingerprint"`
	Bindings        `json:",inline"`
	Approver        string    `json:"approver"`
	ApprovedAt      time.Time `json:"approvedAt"`
	Reason          string    `json:"reason,omitempty"`
}

// PtahMigrationRunAcknowledgment records a person's settling of one
// unresolved run, after establishing what it did. It is immutable but for
// its status: consumed when it clears status.unresolvedRun, stale when it
// names an operation that is not (or no longer) the unresolved one.
//
// +kubebuilder:object:root=true
type PtahMigrationRunAcknowledgment struct {
	TypeMeta   `json:",inline"`
	ObjectMeta `json:"metadata,omitempty"`
	Spec       PtahMigrationRunAcknowledgmentSpec `json:"spec"`
	Status     DecisionStatus                     `json:"status,omitempty"`
}

// PtahMigrationRunAcknowledgmentSpec names the exact run it settles: a
// recreated migration (another UID) or another operation is not settled by
// it.
type PtahMigrationRunAcknowledgmentSpec struct {
	Migration   ObjectReference `json:"migration"`
	OperationID string          `json:"operationID"`
	By          string          `json:"by"`
	At          time.Time       `json:"at"`
	Reason      string          `json:"reason"`
	// MarkedApplied are versions of the run's plan that history lacks and
	// the person asserts the run applied; each is recorded in history as
	// marked by them, with its checksum, in the same transaction as the
	// acknowledgment.
	MarkedApplied []MarkedVersion `json:"markedApplied,omitempty"`
}

// MarkedVersion is a version a person marks as applied.
type MarkedVersion struct {
	Version  string `json:"version"`
	Checksum string `json:"checksum"`
}
