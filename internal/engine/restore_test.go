package engine

import (
	"testing"

	api "github.com/ptah-run/ptah/pkg/api/v1alpha1"
)

func TestRestoreUnresolvedRun(t *testing.T) {
	kept := &api.UnresolvedRun{OperationID: "op-1", Outcome: api.OutcomeUnknown}
	plan := &api.PlanReference{ObjectReference: api.ObjectReference{Name: "p", UID: "u"}}
	cases := []struct {
		name     string
		st       api.PtahMigrationStatus
		kept     *api.UnresolvedRun
		restored bool
	}{
		{"nothing kept", api.PtahMigrationStatus{}, nil, false},
		{"a status that lost it", api.PtahMigrationStatus{RunState: api.RunState{Phase: api.PhaseAwaitingApproval, Plan: plan}}, kept, true},
		{"a status that records it", api.PtahMigrationStatus{UnresolvedRun: &api.UnresolvedRun{OperationID: "op-1"}}, kept, false},
		{"a status where a person resolved it", api.PtahMigrationStatus{ResolvedRun: &api.ResolvedRun{OperationID: "op-1"}}, kept, false},
		{"a status where a person resolved another run", api.PtahMigrationStatus{ResolvedRun: &api.ResolvedRun{OperationID: "op-0"}}, kept, true},
		{"a status with another unresolved run", api.PtahMigrationStatus{UnresolvedRun: &api.UnresolvedRun{OperationID: "op-2"}}, kept, false},
		{"a status whose claim is that run", api.PtahMigrationStatus{RunState: api.RunState{ActiveOperation: &api.Operation{ID: "op-1"}}}, kept, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, changed := RestoreUnresolvedRun(c.st, c.kept, "ledger")
			if changed != c.restored {
				t.Fatalf("changed = %v, want %v", changed, c.restored)
			}
			if !changed {
				if got.UnresolvedRun != c.st.UnresolvedRun || got.Phase != c.st.Phase {
					t.Errorf("an unchanged status changed: %+v", got)
				}
				return
			}
			if got.UnresolvedRun == nil || got.UnresolvedRun.OperationID != "op-1" || got.Phase != api.PhaseBlocked ||
				got.Reason != api.ReasonUnresolvedRun || got.Plan != nil || got.ActiveOperation != nil {
				t.Errorf("restored status: %+v", got)
			}
			if got.UnresolvedRun == kept {
				t.Error("the restored record aliases the kept one")
			}
		})
	}
}
