package engine

import (
	"testing"
	"time"

	api "github.com/ptah-run/ptah/pkg/api/v1alpha1"
)

func TestHeld(t *testing.T) {
	now := time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC)
	inSync := api.RunState{Phase: api.PhaseInSync, Reason: api.ReasonInSync}
	claimed := api.RunState{Phase: api.PhaseApplying, ActiveOperation: &api.Operation{ID: "op"}}
	owing := api.RunState{Phase: api.PhaseApplying, OwedRelease: &api.LeaseRelease{OperationID: "op"}}
	cases := []struct {
		name   string
		rs     api.RunState
		hold   Hold
		held   bool
		phase  api.Phase
		reason string
	}{
		{"nothing holds it", inSync, Hold{}, false, api.PhaseInSync, api.ReasonInSync},
		{"suspended: the phase stays", inSync, Hold{Suspended: true}, true, api.PhaseInSync, api.ReasonSuspended},
		{"an unservable spec", inSync, Hold{Unservable: "no Secret"}, true, api.PhaseBlocked, api.ReasonInvalidSpec},
		{"a failed reading", inSync, Hold{ReadingFailed: "connection refused"}, true, api.PhaseBlocked, api.ReasonReadingFailed},
		{"suspension first", inSync, Hold{Suspended: true, Unservable: "x", ReadingFailed: "y"}, true, api.PhaseInSync, api.ReasonSuspended},
		{"the spec before a reading", inSync, Hold{Unservable: "x", ReadingFailed: "y"}, true, api.PhaseBlocked, api.ReasonInvalidSpec},
		{"a claim is accounted for, suspended or not", claimed, Hold{Suspended: true, Unservable: "x"}, false, api.PhaseApplying, ""},
		{"an owed release is completed", owing, Hold{Suspended: true}, false, api.PhaseApplying, ""},
		{"an uncertain run is settled", inSync, Hold{Uncertain: true, Suspended: true, ReadingFailed: "y"}, false, api.PhaseInSync, api.ReasonInSync},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, held := Held(c.rs, c.hold, 7, now)
			if held != c.held || got.Phase != c.phase || got.Reason != c.reason {
				t.Fatalf("Held = %s/%s, %v; want %s/%s, %v", got.Phase, got.Reason, held, c.phase, c.reason, c.held)
			}
			if !held {
				if got.ObservedGeneration != c.rs.ObservedGeneration || len(got.Conditions) != len(c.rs.Conditions) {
					t.Errorf("a status not held changed: %+v", got)
				}
				return
			}
			if got.ObservedGeneration != 7 || len(got.Conditions) != 1 || got.Conditions[0].Reason != c.reason {
				t.Errorf("held status: generation %d, conditions %+v", got.ObservedGeneration, got.Conditions)
			}
		})
	}
}
