package engine

import (
	"errors"
	"fmt"
	"strings"
	"time"

	api "github.com/ptah-run/ptah/pkg/api/v1alpha1"
)

// Refusals of a person's acknowledgment of an unresolved run
// (DecideAcknowledgment); each has its own exit code.
var (
	// ErrNothingUnresolved: the migration has no unresolved run.
	ErrNothingUnresolved = errors.New("no run of it is unresolved")
	// ErrWrongOperation: the operation named is not the unresolved run's.
	ErrWrongOperation = errors.New("the operation named is not the unresolved run")
	// ErrNotMarkable: a version given to mark applied is not one the
	// run's plan holds and the history lacks.
	ErrNotMarkable = errors.New("the version cannot be marked applied")
	// ErrWriterMayStillWrite: the run's writer may still be writing; no
	// one can establish what it did yet.
	ErrWriterMayStillWrite = errors.New("the run's writer may still be writing")
	// ErrUnaccounted: a file the run stopped part way is in neither the
	// versions marked applied nor those to run again.
	ErrUnaccounted = errors.New("a file the run stopped part way is not accounted for")
)

// RunEvidence is what the shell read of an unresolved run, for deciding
// what a person may record about it.
type RunEvidence struct {
	Migration  string
	Unresolved *api.UnresolvedRun // nil: nothing is unresolved
	// WriterMayStillWrite is DispatchedApplyMayStillWrite's answer for
	// the run.
	WriterMayStillWrite bool
	// PlanKnown: the run's plan is still stored; Versions are its
	// versions, in order.
	PlanKnown bool
	Versions  []VersionEvidence
}

// VersionEvidence is what the history, the journal and the source say of
// one version of the run's plan.
type VersionEvidence struct {
	api.MigrationVersion
	// Key is the version's canonical form, which what a person names is
	// matched by (the shell computes it: "007" and "7" are one version).
	Key string
	// Recorded: the history holds it.
	Recorded bool
	// Started and Committed count its statements the journal shows
	// started and committed.
	Started, Committed int
	// InSource: the source holds it with the checksum the run ran.
	InSource bool
}

// Partial reports whether the run stopped part way through the file: some
// of its statements committed, and the history does not record it.
func (v VersionEvidence) Partial() bool { return !v.Recorded && v.Committed > 0 }

// AcknowledgmentRequest is what a person asks to record.
type AcknowledgmentRequest struct {
	OperationID string
	// MarkApplied and Rerun are versions as the person named them; key
	// gives each its canonical form.
	MarkApplied, Rerun []string
}

// DecideAcknowledgment decides whether a person's acknowledgment of an
// unresolved run may be recorded, and returns the versions to record as
// marked applied (in the plan's order). It refuses, in this order: nothing
// unresolved, another operation than the unresolved one, a run whose
// writer may still write, a version to mark that the plan does not hold,
// that the history has, that the source does not hold as it ran, or that
// is named twice; and a file the run stopped part way that is neither
// marked applied (finished by hand) nor named to run again (its committed
// part undone by hand), or a version to run again that did not stop part
// way. Every problem of the last two kinds is named at once.
func DecideAcknowledgment(ev RunEvidence, req AcknowledgmentRequest, key func(string) string) ([]api.MigrationVersion, error) {
	name, u := ev.Migration, ev.Unresolved
	switch {
	case u == nil:
		return nil, fmt.Errorf("resolving a run of %s: %w (ptah status %s shows where it stands)", name, ErrNothingUnresolved, name)
	case u.OperationID != req.OperationID:
		return nil, fmt.Errorf("resolving operation %s of %s: %w: the unresolved run is operation %s; "+
			"ptah resolve-run %s shows its evidence", req.OperationID, name, ErrWrongOperation, u.OperationID, name)
	case ev.WriterMayStillWrite:
		return nil, fmt.Errorf("resolving operation %s of %s: %w (its session is alive and its deadline %s has not passed); "+
			"wait for it to end, or end it (pg_terminate_backend), then look again", u.OperationID, name, ErrWriterMayStillWrite,
			u.Deadline.UTC().Format(time.RFC3339))
	}
	marked, err := markable(ev, req.MarkApplied, key)
	if err != nil {
		return nil, err
	}
	if err := accounted(ev, req, key); err != nil {
		return nil, err
	}
	return marked, nil
}

// markable checks the versions to mark applied against the evidence.
func markable(ev RunEvidence, versions []string, key func(string) string) ([]api.MigrationVersion, error) {
	if len(versions) == 0 {
		return nil, nil
	}
	if !ev.PlanKnown {
		return nil, fmt.Errorf("%w: the plan of operation %s is no longer stored, so no version of it can be marked", ErrNotMarkable,
			ev.Unresolved.OperationID)
	}
	byKey := map[string]VersionEvidence{}
	names := make([]string, len(ev.Versions))
	for i, v := range ev.Versions {
		byKey[v.Key], names[i] = v, v.Version
	}
	var problems []string
	seen := map[string]bool{}
	wanted := map[string]bool{}
	for _, want := range versions {
		k := key(want)
		v, inPlan := byKey[k]
		switch {
		case seen[k]:
			problems = append(problems, fmt.Sprintf("version %s is named twice", want))
		case !inPlan:
			problems = append(problems, fmt.Sprintf("version %s is not in the plan of operation %s (its versions: %s)", want,
				ev.Unresolved.OperationID, strings.Join(names, ", ")))
		case v.Recorded:
			problems = append(problems, fmt.Sprintf("version %s is already in the history", want))
		case !v.InSource:
			problems = append(problems, fmt.Sprintf("version %s is not in the migration source with the checksum the plan ran (%s)", want, v.Checksum))
		default:
			wanted[k] = true
		}
		seen[k] = true
	}
	if len(problems) > 0 {
		return nil, fmt.Errorf("%w: %s; nothing was recorded", ErrNotMarkable, strings.Join(problems, "; "))
	}
	var out []api.MigrationVersion
	for _, v := range ev.Versions {
		if wanted[v.Key] {
			out = append(out, v.MigrationVersion)
		}
	}
	return out, nil
}

// accounted checks that every file the run stopped part way is named one
// way or the other, and that only such files are named to run again.
func accounted(ev RunEvidence, req AcknowledgmentRequest, key func(string) string) error {
	keys := func(list []string) map[string]bool {
		m := map[string]bool{}
		for _, v := range list {
			m[key(v)] = true
		}
		return m
	}
	mark, rerun := keys(req.MarkApplied), keys(req.Rerun)
	var problems []string
	partial := map[string]bool{}
	for _, v := range ev.Versions {
		if !v.Partial() {
			continue
		}
		partial[v.Key] = true
		if !mark[v.Key] && !rerun[v.Key] {
			problems = append(problems, fmt.Sprintf("version %s committed %d of its statements (the journal shows %d started): "+
				"finish it by hand and mark it applied, or undo what committed and name it to run again", v.Version, v.Committed, v.Started))
		}
	}
	for _, v := range req.Rerun {
		if !partial[key(v)] {
			problems = append(problems, fmt.Sprintf("version %s is not a file the run stopped part way: it runs again anyway if the history lacks it", v))
		}
		if mark[key(v)] {
			problems = append(problems, fmt.Sprintf("version %s is both marked applied and named to run again", v))
		}
	}
	if len(problems) > 0 {
		return fmt.Errorf("%w: %s; nothing was recorded", ErrUnaccounted, strings.Join(problems, "; "))
	}
	return nil
}
