package migrate

import (
	"slices"
	"testing"
	"time"
)

func TestHistoryFingerprint(t *testing.T) {
	t.Parallel()
	rows := []Applied{
		{Version: "1", Name: "a", Checksum: "sha256:aa", How: HowRun},
		{Version: "2", Name: "b", Checksum: "sha256:bb", How: HowRun},
		{Version: "10", Name: "c", Checksum: "sha256:cc", How: HowMarked},
	}
	base := HistoryFingerprint(rows, "")

	// Pinned: approvals bind this value, so its encoding must not change
	// without a new domain. Computed outside Go from the documented
	// encoding: domain, rows (3), then version and checksum per row in
	// version order (1, 2, 10), then unresolved.
	if want := "sha256:5541293b8b9adf364b13bc9e89e25a8e18a1414a05952cd4195f5793a1f21976"; base != want {
		t.Errorf("fingerprint %s, want %s", base, want)
	}

	// The order rows were read in does not matter.
	shuffled := []Applied{rows[2], rows[0], rows[1]}
	if got := HistoryFingerprint(shuffled, ""); got != base {
		t.Errorf("rows in another order: %s, want %s", got, base)
	}
	// Nor what does not select or block anything.
	other := slices.Clone(rows)
	other[0].Name, other[0].How, other[0].AppliedAt, other[0].OperationID = "renamed", HowBaseline, time.Unix(1, 0), "op"
	if got := HistoryFingerprint(other, ""); got != base {
		t.Errorf("another name, how, time or operation: %s, want %s", got, base)
	}

	for _, tt := range []struct {
		name       string
		rows       []Applied
		unresolved string
	}{
		{"another checksum", []Applied{rows[0], {Version: "2", Checksum: "sha256:b2"}, rows[2]}, ""},
		{"another version", []Applied{rows[0], {Version: "3", Checksum: "sha256:bb"}, rows[2]}, ""},
		{"the same version spelled otherwise", []Applied{rows[0], {Version: "02", Checksum: "sha256:bb"}, rows[2]}, ""},
		{"a row fewer", rows[:2], ""},
		{"a row more", append(slices.Clone(rows), Applied{Version: "11", Checksum: "sha256:dd"}), ""},
		{"an unresolved run", rows, "op-1"},
		{"no rows", nil, ""},
	} {
		if got := HistoryFingerprint(tt.rows, tt.unresolved); got == base {
			t.Errorf("%s: the fingerprint did not change", tt.name)
		}
	}
	if HistoryFingerprint(nil, "op-1") == HistoryFingerprint(nil, "op-2") {
		t.Error("two unresolved runs fingerprint alike")
	}
}

func TestSortedHistory(t *testing.T) {
	t.Parallel()
	// One version spelled twice sorts by its spellings, so that the
	// fingerprint does not depend on the order rows were read in.
	rows := []Applied{{Version: "10"}, {Version: "by hand"}, {Version: "9"}, {Version: "1.5"}, {Version: "9.0"}, {Version: "0001"}, {Version: "a hand"}}
	var got []string
	for _, r := range sortedHistory(rows) {
		got = append(got, r.Version)
	}
	if want := []string{"0001", "1.5", "9", "9.0", "10", "a hand", "by hand"}; !slices.Equal(got, want) {
		t.Errorf("sorted %q, want %q", got, want)
	}
	if rows[0].Version != "10" {
		t.Error("sortedHistory sorted its argument in place")
	}
}
