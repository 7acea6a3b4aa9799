package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Kinds of the durable objects beside PtahSchema.
const (
	KindPtahSchemaPlan     = "PtahSchemaPlan"
	KindPtahSchemaApproval = "PtahSchemaApproval"
)

// ObjectReference names one object instance: a name alone may be reused by
// a different object, so every reference that authorizes anything carries
// the UID too.
type ObjectReference struct {
	Name string `json:"name"`
	UID  string `json:"uid"`
}

// ExecutionBinding is what executes a plan: a plan computed by one ptah is
// applied only by a ptah with the same binding.
type ExecutionBinding struct {
	PtahVersion     string `json:"ptahVersion"`
	ContractVersion int    `json:"contractVersion"`
	Engine          string `json:"engine"`
}

// Bindings are the inputs a plan was computed from. A plan and an approval
// carry the same bindings; an approval authorizes a plan only while every
// binding still matches.
type Bindings struct {
	// ArtifactDigest fingerprints the declared files (names and contents).
	ArtifactDigest string `json:"artifactDigest"`
	// CoordinationDigest names the database for coordination: the engine and
	// spec.target.coordinationKey, else the target identity.
	CoordinationDigest string `json:"coordinationDigest"`
	// TargetIdentityDigest fingerprints the server's system identifier and
	// the database name.
	TargetIdentityDigest string `json:"targetIdentityDigest"`
	// ActualStateFingerprint fingerprints the observed managed schemas. A
	// PtahMigration plan leaves it empty, except a baseline plan, where it
	// fingerprints the target's schema that the baseline was checked against.
	ActualStateFingerprint string `json:"actualStateFingerprint"`
	// DesiredStateFingerprint fingerprints the declared schema as loaded. A
	// PtahMigration plan leaves it empty, except a baseline plan, where it
	// fingerprints the schema the files up to the baseline version build.
	DesiredStateFingerprint string `json:"desiredStateFingerprint"`
	// PolicyFingerprint fingerprints spec.policy (and, for a PtahSchema,
	// spec.schemas).
	PolicyFingerprint string `json:"policyFingerprint"`
	// HistoryFingerprint is the migration history the plan's versions were
	// selected against (PtahMigration only: what a migration approval binds
	// beyond a schema approval). A database whose history moved between
	// planning and approval has other versions pending. Empty, and absent
	// from the JSON, for a PtahSchema plan, whose encoding (and so its
	// fingerprint) is what it was before the field existed.
	HistoryFingerprint string `json:"historyFingerprint,omitempty"`
	// ExecutionBinding is the ptah that computed the plan.
	ExecutionBinding ExecutionBinding `json:"executionBinding"`
}

// PlanStatement is one statement of a plan.
type PlanStatement struct {
	SQL string `json:"sql"`
	// Null when empty: Go encodes an empty list as null, and the fingerprint
	// covers that encoding.
	// +nullable
	Hazards []string `json:"hazards"`
	// Locks are the locks stronger than ROW EXCLUSIVE the statement takes
	// on relations that existed when it was planned, the strongest per
	// relation: what the application may wait for while it runs. Absent
	// when it takes none, and from plans that predate it (StatementLocks).
	Locks []PlanLock `json:"locks,omitempty"`
}

// PlanLock is a lock a statement takes on one relation.
type PlanLock struct {
	// Relation is the schema-qualified name, quoted as SQL quotes it.
	Relation string `json:"relation"`
	// Mode is PostgreSQL's name for the lock mode: ACCESS EXCLUSIVE,
	// EXCLUSIVE, SHARE ROW EXCLUSIVE, SHARE or SHARE UPDATE EXCLUSIVE.
	// +kubebuilder:validation:Enum="ACCESS EXCLUSIVE";"EXCLUSIVE";"SHARE ROW EXCLUSIVE";"SHARE";"SHARE UPDATE EXCLUSIVE"
	Mode string `json:"mode"`
}

// PlanPhase is one transaction of a plan: a run of its statements that
// commit together, before the next phase begins. A plan of several phases
// is not all-or-nothing: a phase that fails rolls back, and those before
// it stay committed.
type PlanPhase struct {
	// Statements is how many statements the phase runs, following those
	// of the phases before it.
	Statements int `json:"statements"`
	// Locks is the planner's estimate of how many objects the phase's
	// transaction locks.
	Locks int `json:"locks"`
	// Reason says why the phase is a transaction of its own:
	// "enum-labels" (labels added to existing enums commit before the
	// statements that use them), "lock-budget" (the plan locks more than
	// one transaction may hold on the server, see LockCapacity), "online"
	// (statements run without a transaction, see NoTransaction), or empty
	// for the plan's only transaction, or its main one after enum labels.
	Reason string `json:"reason,omitempty"`
	// NoTransaction: the phase's statements run one at a time outside any
	// transaction block, each committing on its own, because PostgreSQL
	// refuses them in one (CREATE INDEX CONCURRENTLY in an online plan;
	// reason "online"). Each is journaled before it is sent and when it
	// ends; a run cut short in one leaves what committed, which the next
	// plan observes.
	NoTransaction bool `json:"noTransaction,omitempty"`
}

// LockCapacity is what sizes a server's shared lock table: one
// transaction of a plan may hold half of max_locks_per_transaction ×
// (max_connections + max_prepared_transactions) locks.
type LockCapacity struct {
	MaxLocksPerTransaction  int `json:"maxLocksPerTransaction"`
	MaxConnections          int `json:"maxConnections"`
	MaxPreparedTransactions int `json:"maxPreparedTransactions"`
}

// PtahSchemaPlan is an immutable plan: once published, its spec never
// changes; a different plan is a different object with a new UID.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:shortName=pschemaplan,categories=ptah
// +kubebuilder:metadata:annotations="ptah.run/contract-version=2"
// +kubebuilder:printcolumn:name="Schema",type=string,JSONPath=`.spec.schema.name`
// +kubebuilder:printcolumn:name="Destructive",type=boolean,JSONPath=`.spec.destructive`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type PtahSchemaPlan struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="a plan is immutable: ptah publishes a changed plan as a new object"
	Spec PtahSchemaPlanSpec `json:"spec"`
}

// PtahSchemaPlanList is a list of PtahSchemaPlan.
//
// +kubebuilder:object:root=true
type PtahSchemaPlanList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []PtahSchemaPlan `json:"items"`
}

// PtahSchemaPlanSpec is the content of a plan.
type PtahSchemaPlanSpec struct {
	// Schema is the PtahSchema the plan converges.
	Schema ObjectReference `json:"schema"`
	// Null when empty: Go encodes an empty list as null, and the fingerprint
	// covers that encoding.
	// +nullable
	Statements []PlanStatement `json:"statements"`
	// Phases are the transactions the statements run in, in order; their
	// statements add up to the plan's. Absent only from a plan of no
	// statements (and from plans of contract version 1, which predate
	// phases).
	Phases []PlanPhase `json:"phases,omitempty"`
	// LockCapacity is the target server's, which the phases were cut to
	// fit.
	LockCapacity *LockCapacity `json:"lockCapacity,omitempty"`
	Destructive  bool          `json:"destructive"`
	LockTimeout  string        `json:"lockTimeout"`
	// LockAttemptTimeout and StatementTimeout are the policy's, when set.
	LockAttemptTimeout string `json:"lockAttemptTimeout,omitempty"`
	StatementTimeout   string `json:"statementTimeout,omitempty"`
	// StatementLocks: each statement lists the locks it takes (a
	// statement without Locks takes none the application could wait
	// for), and the writer runs it accordingly. False for plans made
	// before statements carried their locks.
	StatementLocks bool `json:"statementLocks,omitempty"`
	// Hints are advice for whoever reviews the plan, such as a table or
	// column it drops and adds again that the declared files could say
	// was renamed. They change nothing the plan does.
	Hints    []string `json:"hints,omitempty"`
	Bindings `json:",inline"`
	// Fingerprint covers every field above; a stored plan whose content no
	// longer hashes to it has been tampered with and is refused.
	Fingerprint string `json:"fingerprint"`
}

// PtahSchemaApproval records a person's decision to apply one plan. It is
// immutable but for its status, which marks it stale.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:shortName=pschemaapproval,categories=ptah
// +kubebuilder:subresource:status
// +kubebuilder:metadata:annotations="ptah.run/contract-version=2"
// +kubebuilder:printcolumn:name="Plan",type=string,JSONPath=`.spec.plan.name`
// +kubebuilder:printcolumn:name="Approver",type=string,JSONPath=`.spec.approver`
// +kubebuilder:printcolumn:name="Stale",type=boolean,JSONPath=`.status.stale`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type PtahSchemaApproval struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="a recorded decision is immutable: record a new one"
	Spec PtahSchemaApprovalSpec `json:"spec"`
	// +optional
	Status DecisionStatus `json:"status,omitempty"`
}

// PtahSchemaApprovalList is a list of PtahSchemaApproval.
//
// +kubebuilder:object:root=true
type PtahSchemaApprovalList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []PtahSchemaApproval `json:"items"`
}

// PtahSchemaApprovalSpec binds a decision to one plan instance.
type PtahSchemaApprovalSpec struct {
	Plan            ObjectReference `json:"plan"`
	Schema          string          `json:"schema"`
	PlanFingerprint string          `json:"planFingerprint"`
	Bindings        `json:",inline"`
	Approver        string `json:"approver"`
	ApprovedAt      Time   `json:"approvedAt"`
	Reason          string `json:"reason,omitempty"`
}

// DecisionStatus says whether a person's recorded decision (an approval,
// a run acknowledgment) can still take effect. A decision is spent once,
// and a spent decision never takes effect again, whatever comes back under
// the names it carries.
type DecisionStatus struct {
	// Stale: what it names stopped being current (a schema approval's plan,
	// an acknowledgment's operation) before it took effect.
	Stale       bool   `json:"stale,omitempty"`
	StaleReason string `json:"staleReason,omitempty"`
	// Consumed: it took effect, for the operation named. A migration
	// approval is consumed at the dispatch boundary, in the same write as
	// the dispatch marker; an acknowledgment when it clears the unresolved
	// run. A schema approval is never consumed: it goes stale once its plan
	// stops being current.
	Consumed *Consumption `json:"consumed,omitempty"`
	// StoreContractVersion is the contract version of the ptah that last
	// wrote this status, kept here by the store in a cluster, where a status
	// write cannot touch the object's metadata. The store reads it into the
	// object's contract version and leaves it out of the status it returns.
	StoreContractVersion int `json:"contractVersion,omitempty"`
}

// Spent reports whether the decision can no longer take effect.
func (s DecisionStatus) Spent() bool { return s.Stale || s.Consumed != nil }

// Consumption records the operation a decision took effect for.
type Consumption struct {
	OperationID string `json:"operationID"`
	At          Time   `json:"at"`
}

// PtahSchemaApprovalStatus is the status of a PtahSchemaApproval.
type PtahSchemaApprovalStatus = DecisionStatus
