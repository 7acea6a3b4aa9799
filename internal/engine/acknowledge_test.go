package engine

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	api "github.com/ptah-run/ptah/pkg/api/v1alpha1"
)

// DecideAcknowledgment, each refusal and what is marked, over the
// evidence of a run of three files: 1 recorded, 2 stopped part way (one of
// its two statements committed), 3 never started.
func TestDecideAcknowledgment(t *testing.T) {
	t.Parallel()
	key := func(v string) string { return strings.TrimLeft(v, "0") } // "02" is version 2
	evidence := func() RunEvidence {
		return RunEvidence{Migration: "app", Unresolved: &api.UnresolvedRun{OperationID: "op-1"}, PlanKnown: true,
			Versions: []VersionEvidence{
				{MigrationVersion: api.MigrationVersion{Version: "1", Checksum: "sha256:1"}, Key: "1", Recorded: true, Started: 1, Committed: 1, InSource: true},
				{MigrationVersion: api.MigrationVersion{Version: "2", Checksum: "sha256:2"}, Key: "2", Started: 2, Committed: 1, InSource: true},
				{MigrationVersion: api.MigrationVersion{Version: "3", Checksum: "sha256:3"}, Key: "3", InSource: true},
			}}
	}
	for _, tt := range []struct {
		name   string
		change func(*RunEvidence)
		req    AcknowledgmentRequest
		err    error
		says   string
		marked string
	}{
		{name: "nothing unresolved", change: func(e *RunEvidence) { e.Unresolved = nil }, req: AcknowledgmentRequest{OperationID: "op-1"},
			err: ErrNothingUnresolved},
		{name: "another operation", req: AcknowledgmentRequest{OperationID: "op-0", MarkApplied: []string{"2"}}, err: ErrWrongOperation,
			says: "the unresolved run is operation op-1"},
		{name: "writer may still write", change: func(e *RunEvidence) { e.WriterMayStillWrite = true },
			req: AcknowledgmentRequest{OperationID: "op-1", MarkApplied: []string{"2"}}, err: ErrWriterMayStillWrite},
		{name: "the partial file unaccounted", req: AcknowledgmentRequest{OperationID: "op-1"}, err: ErrUnaccounted,
			says: "version 2 committed 1 of its statements"},
		{name: "rerun of a file that did not stop part way", req: AcknowledgmentRequest{OperationID: "op-1", Rerun: []string{"2", "3"}},
			err: ErrUnaccounted, says: "version 3 is not a file the run stopped part way"},
		{name: "both marked and rerun", req: AcknowledgmentRequest{OperationID: "op-1", MarkApplied: []string{"2"}, Rerun: []string{"2"}},
			err: ErrUnaccounted, says: "both marked applied and named to run again"},
		{name: "mark a recorded version", req: AcknowledgmentRequest{OperationID: "op-1", MarkApplied: []string{"1", "2"}}, err: ErrNotMarkable,
			says: "version 1 is already in the history"},
		{name: "mark a version not in the plan", req: AcknowledgmentRequest{OperationID: "op-1", MarkApplied: []string{"2", "9"}},
			err: ErrNotMarkable, says: "version 9 is not in the plan of operation op-1 (its versions: 1, 2, 3)"},
		{name: "mark a version twice", req: AcknowledgmentRequest{OperationID: "op-1", MarkApplied: []string{"2", "02"}}, err: ErrNotMarkable,
			says: "named twice"},
		{name: "mark a version the source no longer holds", change: func(e *RunEvidence) { e.Versions[1].InSource = false },
			req: AcknowledgmentRequest{OperationID: "op-1", MarkApplied: []string{"2"}}, err: ErrNotMarkable, says: "not in the migration source"},
		{name: "mark with the plan gone", change: func(e *RunEvidence) { e.PlanKnown = false },
			req: AcknowledgmentRequest{OperationID: "op-1", MarkApplied: []string{"2"}}, err: ErrNotMarkable, says: "no longer stored"},
		{name: "finished by hand", req: AcknowledgmentRequest{OperationID: "op-1", MarkApplied: []string{"02"}}, marked: "[2]"},
		{name: "finished by hand, and the next file too", req: AcknowledgmentRequest{OperationID: "op-1", MarkApplied: []string{"3", "2"}},
			marked: "[2 3]"},
		{name: "undone by hand", req: AcknowledgmentRequest{OperationID: "op-1", Rerun: []string{"2"}}, marked: "[]"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ev := evidence()
			if tt.change != nil {
				tt.change(&ev)
			}
			got, err := DecideAcknowledgment(ev, tt.req, key)
			if tt.err != nil {
				if !errors.Is(err, tt.err) || !strings.Contains(err.Error(), tt.says) || got != nil {
					t.Fatalf("got %v, %v; want %v saying %q", got, err, tt.err, tt.says)
				}
				return
			}
			versions := []string{}
			for _, v := range got {
				versions = append(versions, v.Version)
			}
			if err != nil || fmt.Sprint(versions) != tt.marked {
				t.Fatalf("got %v, %v; want %s marked", versions, err, tt.marked)
			}
		})
	}
}
