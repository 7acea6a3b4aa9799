package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

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
// +kubebuilder:resource:shortName=pmigplan,categories=ptah
// +kubebuilder:metadata:annotations="ptah.run/contract-version=2"
// +kubebuilder:printcolumn:name="Migration",type=string,JSONPath=`.spec.migration.name`
// +kubebuilder:printcolumn:name="Baseline",type=boolean,JSONPath=`.spec.baseline`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type PtahMigrationPlan struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="a plan is immutable: ptah publishes a changed plan as a new object"
	Spec PtahMigrationPlanSpec `json:"spec"`
}

// PtahMigrationPlanList is a list of PtahMigrationPlan.
//
// +kubebuilder:object:root=true
type PtahMigrationPlanList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []PtahMigrationPlan `json:"items"`
}

// PtahMigrationPlanSpec is the content of a migration plan.
type PtahMigrationPlanSpec struct {
	// Migration is the PtahMigration the plan advances.
	Migration ObjectReference `json:"migration"`
	// Versions are the pending files, in the order they run.
	// Null when empty: Go encodes an empty list as null, and the fingerprint
	// covers that encoding.
	// +nullable
	Versions []MigrationVersion `json:"versions"`
	// Baseline: the versions are recorded in history as baselined and none
	// of them runs, because the target already holds what they build (see
	// Bindings.ActualStateFingerprint). Allowed only on an empty history.
	Baseline    bool   `json:"baseline,omitempty"`
	LockTimeout string `json:"lockTimeout"`
	// LockAttemptTimeout and StatementTimeout are the policy's, when set.
	LockAttemptTimeout string `json:"lockAttemptTimeout,omitempty"`
	StatementTimeout   string `json:"statementTimeout,omitempty"`
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
// +kubebuilder:resource:shortName=pmigapproval,categories=ptah
// +kubebuilder:subresource:status
// +kubebuilder:metadata:annotations="ptah.run/contract-version=2"
// +kubebuilder:printcolumn:name="Plan",type=string,JSONPath=`.spec.plan.name`
// +kubebuilder:printcolumn:name="Approver",type=string,JSONPath=`.spec.approver`
// +kubebuilder:printcolumn:name="Consumed",type=string,JSONPath=`.status.consumed.operationID`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type PtahMigrationApproval struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="a recorded decision is immutable: record a new one"
	Spec PtahMigrationApprovalSpec `json:"spec"`
	// +optional
	Status DecisionStatus `json:"status,omitempty"`
}

// PtahMigrationApprovalList is a list of PtahMigrationApproval.
//
// +kubebuilder:object:root=true
type PtahMigrationApprovalList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []PtahMigrationApproval `json:"items"`
}

// PtahMigrationApprovalSpec binds a decision to one plan instance, and
// (through Bindings.HistoryFingerprint) to the history its versions were
// selected against.
type PtahMigrationApprovalSpec struct {
	Plan            ObjectReference `json:"plan"`
	Migration       string          `json:"migration"`
	PlanFingerprint string          `json:"planFingerprint"`
	Bindings        `json:",inline"`
	Approver        string `json:"approver"`
	ApprovedAt      Time   `json:"approvedAt"`
	Reason          string `json:"reason,omitempty"`
}

// PtahMigrationRunAcknowledgment records a person's settling of one
// unresolved run, after establishing what it did. It is immutable but for
// its status: consumed when it clears status.unresolvedRun, stale when it
// names an operation that is not (or no longer) the unresolved one.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:shortName=pmigack,categories=ptah
// +kubebuilder:subresource:status
// +kubebuilder:metadata:annotations="ptah.run/contract-version=2"
// +kubebuilder:printcolumn:name="Migration",type=string,JSONPath=`.spec.migration.name`
// +kubebuilder:printcolumn:name="Operation",type=string,JSONPath=`.spec.operationID`
// +kubebuilder:printcolumn:name="By",type=string,JSONPath=`.spec.by`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type PtahMigrationRunAcknowledgment struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="a recorded decision is immutable: record a new one"
	Spec PtahMigrationRunAcknowledgmentSpec `json:"spec"`
	// +optional
	Status DecisionStatus `json:"status,omitempty"`
}

// PtahMigrationRunAcknowledgmentList is a list of PtahMigrationRunAcknowledgment.
//
// +kubebuilder:object:root=true
type PtahMigrationRunAcknowledgmentList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []PtahMigrationRunAcknowledgment `json:"items"`
}

// PtahMigrationRunAcknowledgmentSpec names the exact run it settles: a
// recreated migration (another UID) or another operation is not settled by
// it.
type PtahMigrationRunAcknowledgmentSpec struct {
	Migration   ObjectReference `json:"migration"`
	OperationID string          `json:"operationID"`
	By          string          `json:"by"`
	At          Time            `json:"at"`
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
