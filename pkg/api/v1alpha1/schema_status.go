package v1alpha1

// Phase is where a resource stands, for either family. The set is small on
// purpose: scripts branch on it.
type Phase string

const (
	// PhaseInSync: the database matches the declaration: a fresh, empty
	// plan (PtahSchema), or a history holding every version of the source,
	// unchanged (PtahMigration).
	PhaseInSync Phase = "InSync"
	// PhasePlanned: a plan exists and policy.apply is Never.
	PhasePlanned Phase = "Planned"
	// PhaseAwaitingApproval: a plan exists and needs an approval naming it.
	PhaseAwaitingApproval Phase = "AwaitingApproval"
	// PhaseApproved: the current plan is authorized; ptah apply runs it.
	PhaseApproved Phase = "Approved"
	// PhaseBlocked: nothing may run until the reason is dealt with.
	PhaseBlocked Phase = "Blocked"
	// PhaseApplying: a claim exists; a run is, or may be, under way.
	PhaseApplying Phase = "Applying"
	// PhaseFailed: the last run failed and rolled back; the next pass plans again.
	PhaseFailed Phase = "Failed"
)

// Reasons qualify a phase. Those below serve both families unless their
// comment says otherwise; migration_status.go adds the migration family's.
const (
	ReasonInSync                = "InSync"
	ReasonPlanned               = "PlanPublished"
	ReasonAwaitingApproval      = "AwaitingApproval"
	ReasonApproved              = "Approved"
	ReasonRealmConflict         = "RealmConflict"
	ReasonDestructiveNotAllowed = "DestructiveNotAllowed" // PtahSchema only
	ReasonPlanTampered          = "PlanTampered"
	ReasonLeaseHeld             = "LeaseHeld"
	ReasonRunMayStillWrite      = "RunMayStillWrite"
	ReasonApplying              = "Applying"
	ReasonVerifying             = "Verifying"
	ReasonApplyFailed           = "ApplyFailed"
	// ReasonInvalidSpec: ptah serve cannot act on the spec as written
	// (the message names the field): nothing was read or run.
	ReasonInvalidSpec = "InvalidSpec"
	// ReasonSuspended: spec.suspend is true; ptah serve starts nothing
	// for the resource (the phase is where it was).
	ReasonSuspended = "Suspended"
	// ReasonReadingFailed: ptah serve's reading of the database or the
	// declared files failed (the message says why); it tries again.
	ReasonReadingFailed = "ReadingFailed"
	// ReasonPlanDoesNotConverge: the plan that just ran is derived again
	// from the database it produced; running it again would change nothing.
	// PtahSchema only.
	ReasonPlanDoesNotConverge = "PlanDoesNotConverge"
)

// RunState is the part of a resource's status every family keeps the same
// way: where it stands, its current plan, the claim under way and the
// release owed. It is embedded (inline) in each family's status.
type RunState struct {
	Phase              Phase       `json:"phase,omitempty"`
	Reason             string      `json:"reason,omitempty"`
	Message            string      `json:"message,omitempty"`
	Conditions         []Condition `json:"conditions,omitempty"`
	ObservedGeneration int64       `json:"observedGeneration,omitempty"`
	// ExecutionBinding is the ptah that last wrote this status.
	ExecutionBinding *ExecutionBinding `json:"executionBinding,omitempty"`
	// Plan is the current plan, if any.
	Plan *PlanReference `json:"plan,omitempty"`
	// ActiveOperation is the claim: recorded before any dispatch.
	ActiveOperation *Operation `json:"activeOperation,omitempty"`
	// StoreContractVersion is the contract version of the ptah that last
	// wrote this status, kept here by the store in a cluster, where a status
	// write cannot touch the object's metadata. The store reads it into the
	// object's contract version and leaves it out of the status it returns.
	StoreContractVersion int `json:"contractVersion,omitempty"`
	// Target is the database the last reading found (ptah serve): the
	// realm census of every resource in the cluster is taken from it.
	Target *ObservedTarget `json:"target,omitempty"`
	// OwedRelease is a lease release owed by a claim that ended, recorded
	// only once its run can no longer write (a schema's in the same write
	// that cleared the claim); a later pass completes it before anything
	// else.
	OwedRelease *LeaseRelease `json:"owedRelease,omitempty"`
}

// ObservedTarget names the database a reading found, for the census.
type ObservedTarget struct {
	CoordinationDigest   string `json:"coordinationDigest"`
	TargetIdentityDigest string `json:"targetIdentityDigest"`
}

// PtahSchemaStatus is the observed state of a PtahSchema, and the durable
// record of the work under way on it.
type PtahSchemaStatus struct {
	RunState `json:",inline"`
	// Applied is the last plan that ran, and how it ended.
	Applied *AppliedPlan `json:"applied,omitempty"`
	// PendingObservation: a dispatched run's outcome is unknown. A fresh
	// observation of the database is owed before anything is planned again.
	PendingObservation *PendingObservation `json:"pendingObservation,omitempty"`
}

// Condition follows the Kubernetes condition convention.
type Condition struct {
	Type               string `json:"type"`
	Status             string `json:"status"`
	Reason             string `json:"reason,omitempty"`
	Message            string `json:"message,omitempty"`
	ObservedGeneration int64  `json:"observedGeneration,omitempty"`
	LastTransitionTime Time   `json:"lastTransitionTime"`
}

// PlanReference names a plan instance and its fingerprint.
type PlanReference struct {
	ObjectReference `json:",inline"`
	Fingerprint     string `json:"fingerprint"`
}

// Operation is a claim to apply one plan.
type Operation struct {
	ID       string           `json:"id"`
	Plan     PlanReference    `json:"plan"`
	Approval *ObjectReference `json:"approval,omitempty"`
	// InputFingerprint covers what the decision was made from; it is derived
	// again from a fresh read before dispatch, and the claim is dropped if it
	// moved.
	InputFingerprint   string `json:"inputFingerprint"`
	CoordinationDigest string `json:"coordinationDigest"`
	// StatementsDigest fingerprints the claimed plan's statements alone,
	// so that a plan derived again after it ran can be recognised.
	StatementsDigest string `json:"statementsDigest,omitempty"`
	ClaimedAt        Time   `json:"claimedAt"`
	// Deadline is absolute: past it, the run can no longer be writing.
	Deadline Time `json:"deadline"`
	// DispatchedAt is set, durably, before the first statement may run.
	DispatchedAt *Time `json:"dispatchedAt,omitempty"`
}

// PendingObservation records a dispatched run whose outcome is unknown.
type PendingObservation struct {
	OperationID string        `json:"operationID"`
	Plan        PlanReference `json:"plan"`
	Since       Time          `json:"since"`
	// CoordinationDigest names the lease the run held, to ask whether its
	// writer may still write.
	CoordinationDigest string `json:"coordinationDigest,omitempty"`
}

// AppliedPlan records a finished run, of either family: a PtahSchema's
// status.applied, a PtahMigration's status.lastRun.
type AppliedPlan struct {
	OperationID string        `json:"operationID"`
	Plan        PlanReference `json:"plan"`
	// Outcome is Succeeded or Failed; for a PtahSchema also Observed.
	Outcome    string `json:"outcome"`
	FinishedAt Time   `json:"finishedAt"`
	Message    string `json:"message,omitempty"`
	// StatementsDigest is the operation's (see Operation). PtahSchema only.
	StatementsDigest string `json:"statementsDigest,omitempty"`
	// Versions are the migration versions this run committed, in order;
	// for a failed run, those before the file that failed. PtahMigration
	// only: history holds exactly these, so the next plan starts after them.
	Versions []string `json:"versions,omitempty"`
	// Failure is where a failed run stopped. PtahMigration only.
	Failure *RunFailure `json:"failure,omitempty"`
}

// RunFailure locates the statement a failed run stopped at. It never holds
// SQL: the journal has the statement, and Message PostgreSQL's error.
type RunFailure struct {
	// Version is the migration file that failed and rolled back.
	Version string `json:"version"`
	// Statement is the failed statement's position in that file, from 1;
	// 0 when the failure was not at a statement (e.g. at its COMMIT).
	Statement int `json:"statement,omitempty"`
}

// Outcomes of a run.
const (
	OutcomeSucceeded = "Succeeded"
	OutcomeFailed    = "Failed"
	// OutcomeObserved: the run's outcome was unknown and settled by a fresh
	// observation of the database.
	OutcomeObserved = "Observed"
)

// LeaseRelease is a release owed for the lease an operation held.
type LeaseRelease struct {
	CoordinationDigest string `json:"coordinationDigest"`
	OperationID        string `json:"operationID"`
}
