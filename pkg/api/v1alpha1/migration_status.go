package v1alpha1

// Reasons of the migration family, beside the shared ones (see Phase).
// Each of the history verdicts blocks before any plan is published, and
// the status message lists the versions concerned.
const (
	// ReasonHistoryModified: an applied file's checksum changed.
	ReasonHistoryModified = "HistoryModified"
	// ReasonOutOfOrder: a file not yet applied is older than the newest
	// applied version.
	ReasonOutOfOrder = "OutOfOrder"
	// ReasonHistoryAhead: history holds versions the source lacks.
	ReasonHistoryAhead = "HistoryAhead"
	// ReasonHistoryDirty: history shows a run that started and never
	// finished, and no status.unresolvedRun stands for it.
	ReasonHistoryDirty = "HistoryDirty"
	// ReasonUnresolvedRun: status.unresolvedRun names a run whose outcome
	// only a person can settle (ptah resolve-run).
	ReasonUnresolvedRun = "UnresolvedRun"
	// ReasonSourceInvalid: the source directory cannot be read as a
	// sequence (bad or duplicate versions, mixed layouts, a ptah.sum that
	// does not match).
	ReasonSourceInvalid = "SourceInvalid"
	// ReasonBaselineMismatch: a baseline was asked for, and the target's
	// schema is not what the files up to its version build.
	ReasonBaselineMismatch = "BaselineMismatch"
)

// PtahMigrationStatus is the observed state of a PtahMigration, and the
// durable record of the work under way on it.
type PtahMigrationStatus struct {
	RunState `json:",inline"`
	// History summarizes the last reading of the history table.
	History *HistorySummary `json:"history,omitempty"`
	// LastRun is the last run that finished with a known outcome.
	LastRun *AppliedPlan `json:"lastRun,omitempty"`
	// UnresolvedRun: a dispatched run whose outcome no reading can settle.
	// Nothing runs until a person's acknowledgment names its operation; a
	// later, unrelated refusal leaves it in place.
	UnresolvedRun *UnresolvedRun `json:"unresolvedRun,omitempty"`
	// ResolvedRun is the last unresolved run a person settled.
	ResolvedRun *ResolvedRun `json:"resolvedRun,omitempty"`
}

// HistorySummary is what a reading of the history table found.
type HistorySummary struct {
	// Applied is how many versions history holds as applied (run, marked
	// by a person, or baselined).
	Applied int `json:"applied"`
	// LastApplied is the newest of them; empty for an empty history.
	LastApplied string `json:"lastApplied,omitempty"`
	// Fingerprint is the history fingerprint: the ordered versions and
	// their checksums, and any unresolved mark.
	Fingerprint string `json:"fingerprint"`
}

// Outcomes of an unresolved run (see UnresolvedRun.Outcome).
const (
	// OutcomePartial: part of the run is known to have committed and part
	// is not (e.g. a no-transaction file stopped after some statements).
	OutcomePartial = "Partial"
	// OutcomeUnknown: nothing tells what the run did (a crash after the
	// dispatch marker, a connection lost during a COMMIT, evidence that
	// cannot be read, a writer that may still be alive).
	OutcomeUnknown = "Unknown"
)

// Where an unresolved run's record comes from (see UnresolvedRun.ReportedBy).
const (
	// ReportedByRun: the run itself reported the uncertainty.
	ReportedByRun = "Run"
	// ReportedByDispatch: the run never reported; the record was made from
	// the claim's dispatch marker.
	ReportedByDispatch = "Dispatch"
)

// UnresolvedRun names a dispatched run whose outcome is Partial or Unknown,
// and everything a person needs to find its evidence in the journal and the
// history. It holds no SQL: the journal does.
type UnresolvedRun struct {
	// Outcome is OutcomePartial or OutcomeUnknown.
	Outcome     string        `json:"outcome"`
	OperationID string        `json:"operationID"`
	Plan        PlanReference `json:"plan"`
	// Writer is the database session that ran (or may still run) the
	// files; nil if the run was dispatched and never recorded one, when
	// only Deadline says when it can no longer write.
	Writer *WriterSession `json:"writer,omitempty"`
	// Deadline is the run's absolute execution deadline: past it, the run
	// can no longer be writing.
	Deadline Time `json:"deadline"`
	// TargetIdentityDigest is the database the run addressed.
	TargetIdentityDigest string `json:"targetIdentityDigest"`
	// CoordinationDigest names the lease the run held, to ask whether its
	// writer may still write.
	CoordinationDigest string `json:"coordinationDigest"`
	// ReportedBy is ReportedByRun or ReportedByDispatch.
	ReportedBy string `json:"reportedBy"`
	RecordedAt Time   `json:"recordedAt"`
}

// WriterSession identifies one database session: a backend pid is reused,
// its pid and start time together are not.
type WriterSession struct {
	PID          int32 `json:"pid"`
	BackendStart Time  `json:"backendStart"`
}

// ResolvedRun records who settled an unresolved run, and with which
// acknowledgment.
type ResolvedRun struct {
	OperationID    string          `json:"operationID"`
	Acknowledgment ObjectReference `json:"acknowledgment"`
	By             string          `json:"by"`
	At             Time            `json:"at"`
}
