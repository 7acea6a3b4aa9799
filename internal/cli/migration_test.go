package cli

import "testing"

// What resolve-run says of each file of an unresolved run's plan, from the
// history and the journal alone.
func TestVersionVerdict(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		v    evidenceVersion
		want string
		mark bool
	}{
		{"recorded", evidenceVersion{Recorded: true, Started: 2, Committed: 2, Statements: 2},
			"the history records it: it applied (nothing to settle)", false},
		{"not started", evidenceVersion{Statements: 3},
			"the journal shows none of its statements started: it did not run, and runs on the next apply", false},
		{"transaction rolled back", evidenceVersion{Statements: 2, Started: 1},
			"its transaction did not commit (its history row would have committed with it): none of it applied, and it runs again in full on the next apply", false},
		{"no transaction, stopped part way", evidenceVersion{NoTransaction: true, Statements: 3, Started: 2, Committed: 1,
			InFlight: []evidenceStep{{InFile: 2}}},
			"it runs without a transaction: 1 of its 3 statements committed; statement 2 was in flight when the run stopped: it may or may not have taken effect; statement 3 did not start", true},
		{"no transaction, every statement committed", evidenceVersion{NoTransaction: true, Statements: 2, Started: 2, Committed: 2},
			"it runs without a transaction: 2 of its 2 statements committed (all of them; only its history row is missing)", true},
		{"no transaction, a statement failed", evidenceVersion{NoTransaction: true, Statements: 2, Started: 2, Committed: 1,
			Failed: []evidenceStep{{InFile: 2}}},
			"it runs without a transaction: 1 of its 2 statements committed; statement 2 failed", true},
		{"no transaction, the file unknown here", evidenceVersion{NoTransaction: true, Started: 2, Committed: 1,
			InFlight: []evidenceStep{{InFile: 2}}},
			"it runs without a transaction: 1 of its statements committed; statement 2 was in flight when the run stopped: it may or may not have taken effect", true},
		{"no transaction, nothing committed", evidenceVersion{NoTransaction: true, Statements: 3, Started: 1,
			InFlight: []evidenceStep{{InFile: 1}}},
			"it runs without a transaction: 0 of its 3 statements committed; statement 1 was in flight when the run stopped: it may or may not have taken effect; statements 2 to 3 did not start", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := versionVerdict(tt.v); got != tt.want {
				t.Errorf("versionVerdict:\n got %s\nwant %s", got, tt.want)
			}
			if got := partial(tt.v); got != tt.mark {
				t.Errorf("partial = %v, want %v", got, tt.mark)
			}
		})
	}
}

// A failed run's recorded message numbers the statement in the whole plan
// and may end with its SQL; apply and status show PostgreSQL's words.
func TestPostgresError(t *testing.T) {
	t.Parallel()
	for msg, want := range map[string]string{
		"executing run 2eb2: statement 3/4 failed in transaction 2/3, after transaction 1 (statement 1) committed: ERROR: duplicate key value (SQLSTATE 23505)\nINSERT INTO t VALUES (1)": "ERROR: duplicate key value (SQLSTATE 23505)",
		"executing run 2eb2: the lease was lost": "the lease was lost",
		"executing run 17fc: statement 2/2 failed in transaction 2/2, after transaction 1 (statement 1) committed: context canceled": "context canceled",
		"something else": "something else",
		"":               "",
	} {
		if got := postgresError(msg); got != want {
			t.Errorf("postgresError(%q) = %q, want %q", msg, got, want)
		}
	}
}
