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

// A run that reported its own session may still write is held until its
// deadline and the grace after it; not once its Lease is owed back (the
// shell knows the session ended), nor when only the dispatch reported it.
func TestReportedRunMayStillWrite(t *testing.T) {
	t.Parallel()
	deadline := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	run := func(by string) *api.UnresolvedRun {
		return &api.UnresolvedRun{OperationID: "op", ReportedBy: by, Deadline: api.Time{Time: deadline}}
	}
	grace := 30 * time.Second
	for _, tt := range []struct {
		name string
		u    *api.UnresolvedRun
		owed *api.LeaseRelease
		now  time.Time
		want bool
	}{
		{"no unresolved run", nil, nil, deadline, false},
		{"reported by its run, before the deadline", run(api.ReportedByRun), nil, deadline.Add(-time.Minute), true},
		{"reported by its run, within the grace", run(api.ReportedByRun), nil, deadline.Add(grace), true},
		{"reported by its run, past deadline and grace", run(api.ReportedByRun), nil, deadline.Add(grace + time.Second), false},
		{"reported by its run, its Lease owed back", run(api.ReportedByRun), &api.LeaseRelease{OperationID: "op"}, deadline.Add(-time.Minute), false},
		{"reported by the dispatch", run(api.ReportedByDispatch), nil, deadline.Add(-time.Minute), false},
	} {
		if got := ReportedRunMayStillWrite(tt.u, tt.owed, tt.now, grace); got != tt.want {
			t.Errorf("%s: %v, want %v", tt.name, got, tt.want)
		}
	}
}
