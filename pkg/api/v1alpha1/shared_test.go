package v1alpha1

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// The schema family's stored objects and fingerprints are JSON encodings of
// these types: generalizing a type for the migration family must leave a
// schema object's encoding byte for byte as it was, or stored plans would no
// longer hash to their fingerprints.
func TestSharedTypesEncodeSchemaObjectsAsBefore(t *testing.T) {
	at := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	tests := []struct {
		name string
		v    any
		want string
	}{
		{"bindings", Bindings{ArtifactDigest: "a", CoordinationDigest: "c", TargetIdentityDigest: "t",
			ActualStateFingerprint: "as", DesiredStateFingerprint: "ds", PolicyFingerprint: "p",
			ExecutionBinding: ExecutionBinding{PtahVersion: "v1", ContractVersion: 2, Engine: "postgres"}},
			`{"artifactDigest":"a","coordinationDigest":"c","targetIdentityDigest":"t","actualStateFingerprint":"as",` +
				`"desiredStateFingerprint":"ds","policyFingerprint":"p","executionBinding":{"ptahVersion":"v1","contractVersion":2,"engine":"postgres"}}`},
		{"approval status", PtahSchemaApprovalStatus{Stale: true, StaleReason: "gone"},
			`{"stale":true,"staleReason":"gone"}`},
		{"live approval status", PtahSchemaApprovalStatus{}, `{}`},
		{"applied", AppliedPlan{OperationID: "op", Plan: PlanReference{ObjectReference{"p", "u"}, "f"},
			Outcome: OutcomeSucceeded, FinishedAt: NewTime(at), StatementsDigest: "s"},
			`{"operationID":"op","plan":{"name":"p","uid":"u","fingerprint":"f"},"outcome":"Succeeded",` +
				`"finishedAt":"2025-01-02T03:04:05Z","statementsDigest":"s"}`},
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

func TestHistoryFingerprintIsABinding(t *testing.T) {
	// Approvals are matched to plans by comparing Bindings whole: a history
	// that moved must make the bindings differ, with no family-specific code.
	a := Bindings{HistoryFingerprint: "sha256:1"}
	b := a
	b.HistoryFingerprint = "sha256:2"
	if a == b {
		t.Fatal("bindings that differ in their history fingerprint compare equal")
	}
	data, err := json.Marshal(a)
	if err != nil {
		t.Fatal(err)
	}
	var back Bindings
	if err := json.Unmarshal(data, &back); err != nil || back != a {
		t.Fatalf("bindings do not survive JSON: %s -> %+v (%v)", data, back, err)
	}
}

func TestDecisionStatusSpent(t *testing.T) {
	for _, tt := range []struct {
		s    DecisionStatus
		want bool
	}{
		{DecisionStatus{}, false},
		{DecisionStatus{Stale: true}, true},
		{DecisionStatus{Consumed: &Consumption{OperationID: "op"}}, true},
	} {
		if got := tt.s.Spent(); got != tt.want {
			t.Errorf("%+v.Spent() = %v, want %v", tt.s, got, tt.want)
		}
	}
}

// Times read back as written, whatever their precision, and read the
// forms ptah wrote before they became Time: seconds only, and nanoseconds.
func TestTimeReadsEveryRFC3339Form(t *testing.T) {
	for _, in := range []string{`"2026-01-01T00:00:00Z"`, `"2026-01-01T00:00:00.123456789Z"`, `"2026-01-01T02:00:00.5+02:00"`} {
		var got Time
		if err := json.Unmarshal([]byte(in), &got); err != nil {
			t.Errorf("reading %s: %v", in, err)
			continue
		}
		want, _ := time.Parse(time.RFC3339Nano, strings.Trim(in, `"`))
		if !got.Equal(want) {
			t.Errorf("reading %s gave %v", in, got)
		}
		out, _ := json.Marshal(got)
		if string(out) != in {
			t.Errorf("%s written back as %s", in, out)
		}
	}
	var zero Time
	if err := json.Unmarshal([]byte("null"), &zero); err != nil || !zero.IsZero() {
		t.Errorf("null: %v, %v", zero, err)
	}
}
