package v1alpha1

import (
	"encoding/json"
	"testing"
	"time"
)

// The JSON names are the API: scripts read them (ptah status -o json), and
// stored objects are decoded by them.
func TestMigrationObjectsEncodeWithTheirAPINames(t *testing.T) {
	at := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	plan := PlanReference{ObjectReference{Name: "app-1a2b", UID: "u1"}, "sha256:p"}
	tests := []struct {
		name string
		v    any
		want string
	}{
		{"status", PtahMigrationStatus{
			RunState: RunState{Phase: PhaseBlocked, Reason: ReasonUnresolvedRun, Plan: &plan},
			History:  &HistorySummary{Applied: 3, LastApplied: "0003", Fingerprint: "sha256:h"},
			LastRun: &AppliedPlan{OperationID: "op0", Plan: plan, Outcome: OutcomeFailed, FinishedAt: NewTime(at),
				Versions: []string{"0002"}, Failure: &RunFailure{Version: "0003", Statement: 2}},
			UnresolvedRun: &UnresolvedRun{Outcome: OutcomePartial, OperationID: "op1", Plan: plan,
				Writer: &WriterSession{PID: 4242, BackendStart: NewTime(at)}, Deadline: NewTime(at), TargetIdentityDigest: "sha256:t",
				CoordinationDigest: "sha256:c", ReportedBy: ReportedByRun, RecordedAt: NewTime(at)},
			ResolvedRun: &ResolvedRun{OperationID: "op0", Acknowledgment: ObjectReference{Name: "ack", UID: "u2"}, By: "alice", At: NewTime(at)},
		}, `{"phase":"Blocked","reason":"UnresolvedRun","plan":{"name":"app-1a2b","uid":"u1","fingerprint":"sha256:p"},` +
			`"history":{"applied":3,"lastApplied":"0003","fingerprint":"sha256:h"},` +
			`"lastRun":{"operationID":"op0","plan":{"name":"app-1a2b","uid":"u1","fingerprint":"sha256:p"},"outcome":"Failed",` +
			`"finishedAt":"2025-01-02T03:04:05Z","versions":["0002"],"failure":{"version":"0003","statement":2}},` +
			`"unresolvedRun":{"outcome":"Partial","operationID":"op1","plan":{"name":"app-1a2b","uid":"u1","fingerprint":"sha256:p"},` +
			`"writer":{"pid":4242,"backendStart":"2025-01-02T03:04:05Z"},"deadline":"2025-01-02T03:04:05Z",` +
			`"targetIdentityDigest":"sha256:t","coordinationDigest":"sha256:c","reportedBy":"Run","recordedAt":"2025-01-02T03:04:05Z"},` +
			`"resolvedRun":{"operationID":"op0","acknowledgment":{"name":"ack","uid":"u2"},"by":"alice","at":"2025-01-02T03:04:05Z"}}`},
		{"plan spec", PtahMigrationPlanSpec{
			Migration:   ObjectReference{Name: "app", UID: "m1"},
			Versions:    []MigrationVersion{{Version: "0004", Name: "add_index", Checksum: "sha256:4", NoTransaction: true}},
			LockTimeout: "5s",
			Bindings:    Bindings{HistoryFingerprint: "sha256:h", ExecutionBinding: ExecutionBinding{PtahVersion: "v", ContractVersion: 2, Engine: "postgres"}},
			Fingerprint: "sha256:f",
		}, `{"migration":{"name":"app","uid":"m1"},"versions":[{"version":"0004","name":"add_index","checksum":"sha256:4","noTransaction":true}],` +
			`"lockTimeout":"5s","artifactDigest":"","coordinationDigest":"","targetIdentityDigest":"","actualStateFingerprint":"",` +
			`"desiredStateFingerprint":"","policyFingerprint":"","historyFingerprint":"sha256:h",` +
			`"executionBinding":{"ptahVersion":"v","contractVersion":2,"engine":"postgres"},"fingerprint":"sha256:f"}`},
		{"consumed approval status", DecisionStatus{Consumed: &Consumption{OperationID: "op1", At: NewTime(at)}},
			`{"consumed":{"operationID":"op1","at":"2025-01-02T03:04:05Z"}}`},
		{"acknowledgment spec", PtahMigrationRunAcknowledgmentSpec{
			Migration: ObjectReference{Name: "app", UID: "m1"}, OperationID: "op1", By: "alice", At: NewTime(at), Reason: "checked",
			MarkedApplied: []MarkedVersion{{Version: "0004", Checksum: "sha256:4"}},
		}, `{"migration":{"name":"app","uid":"m1"},"operationID":"op1","by":"alice","at":"2025-01-02T03:04:05Z","reason":"checked",` +
			`"markedApplied":[{"version":"0004","checksum":"sha256:4"}]}`},
	}
	for _, tt := range tests {
		got, err := json.Marshal(tt.v)
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != tt.want {
			t.Errorf("%s encodes as\n%s\nwant\n%s", tt.name, got, tt.want)
		}
	}
}
