package runner

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/ptah-run/ptah/internal/engine"
	"github.com/ptah-run/ptah/internal/postgres"
	"github.com/ptah-run/ptah/internal/store"
	api "github.com/ptah-run/ptah/pkg/api/v1alpha1"
)

// Refusals of Acknowledge; the CLI gives each its exit code.
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
	// ErrUnaccounted: a file of the run committed part of itself, and the
	// acknowledgment neither marks it applied nor says it is to run again.
	ErrUnaccounted = errors.New("a file the run stopped part way is not accounted for")
)

// Evidence is what a person needs to settle a PtahMigration's unresolved
// run: the record, its plan, the journal of the run and the history now.
type Evidence struct {
	Migration string
	// Unresolved is the record; nil when nothing is unresolved (the rest
	// is then empty).
	Unresolved *api.UnresolvedRun
	// Plan is the run's plan, nil if it is no longer stored.
	Plan *engine.MigrationPlan
	// Run is the run's journal, nil when the run never journaled (it
	// stopped before its first statement).
	Run *postgres.Run
	// History is the migration history now.
	History []postgres.HistoryRow
	// Versions are the plan's versions, each with what the evidence says
	// of it.
	Versions []VersionEvidence
	// WriterMayStillWrite: the run's writer session is alive and its
	// deadline has not passed; nothing can be settled until it cannot.
	WriterMayStillWrite bool
}

// VersionEvidence is what the evidence says of one version of the run's
// plan.
type VersionEvidence struct {
	api.MigrationVersion
	// Recorded: the history holds the version (its file committed, or a
	// person marked it).
	Recorded bool
	// Started counts the file's statements the journal shows started,
	// Committed those it shows committed.
	Started, Committed int
	// InFlight are the statements, run without a transaction, that the
	// journal shows started and not finished: each may or may not have
	// taken effect.
	InFlight []postgres.RunStep
}

// Evidence reads what is known of res's unresolved run.
func (r *Runner) Evidence(ctx context.Context, res Resource) (*Evidence, error) {
	if err := r.Fence(ctx); err != nil {
		return nil, err
	}
	obj, st, err := r.migrationStatus(ctx, res)
	if err != nil {
		return nil, err
	}
	if op := st.ActiveOperation; op != nil && op.DispatchedAt != nil {
		// A run dispatched and never accounted for: a pass records what
		// it is (unresolved, once its writer is gone) before anyone can
		// look at it as such. It runs nothing.
		if _, err := r.Run(ctx, res, PlanOnly); err != nil {
			return nil, err
		}
		if obj, st, err = r.migrationStatus(ctx, res); err != nil {
			return nil, err
		}
	}
	ev := &Evidence{Migration: obj.Name, Unresolved: st.UnresolvedRun}
	u := st.UnresolvedRun
	if u == nil {
		return ev, nil
	}
	if o, err := r.Store.GetByUID(ctx, u.Plan.UID); err == nil {
		if plan, err := decodeMigrationPlan(o); err == nil {
			ev.Plan = &plan
		}
	} else if !errors.Is(err, store.ErrNotFound) {
		return nil, err
	}
	if ev.Run, err = postgres.ReadRun(ctx, r.Target, u.OperationID); errors.Is(err, postgres.ErrRunNotFound) {
		ev.Run = nil
	} else if err != nil {
		return nil, err
	}
	if ev.History, err = postgres.ReadHistory(ctx, r.Target, res.storeResource()); err != nil {
		return nil, err
	}
	if ev.WriterMayStillWrite, err = postgres.WriterMayStillWrite(ctx, r.Target, u.OperationID, u.CoordinationDigest); err != nil {
		return nil, err
	}
	if ev.Plan == nil {
		return ev, nil
	}
	recorded := map[string]bool{}
	for _, h := range ev.History {
		recorded[canonical(h.Version)] = true
	}
	for _, v := range ev.Plan.Spec.Versions {
		ve := VersionEvidence{MigrationVersion: v, Recorded: recorded[canonical(v.Version)]}
		if ev.Run != nil {
			for _, s := range ev.Run.Steps {
				if canonical(s.Version) != canonical(v.Version) {
					continue
				}
				ve.Started++
				if s.CommittedAt != nil {
					ve.Committed++
				}
			}
			for _, s := range ev.Run.InFlight() {
				if canonical(s.Version) == canonical(v.Version) {
					ve.InFlight = append(ve.InFlight, s)
				}
			}
		}
		ev.Versions = append(ev.Versions, ve)
	}
	return ev, nil
}

// AcknowledgeRequest is a person's settling of an unresolved run.
type AcknowledgeRequest struct {
	OperationID string
	By, Reason  string
	// MarkApplied are versions of the run's plan, missing from the
	// history, that the person established the run applied (or completed
	// by hand).
	MarkApplied []string
	// Rerun are versions of the run's plan that the journal shows
	// committed in part, which the person undid by hand: they run again,
	// whole, in the next plan. A file that committed part of itself and is
	// in neither list is refused (ErrUnaccounted): its next run would
	// repeat what committed.
	Rerun []string
}

// Acknowledged is the recorded acknowledgment.
type Acknowledged struct {
	Name, UID string
	Spec      api.PtahMigrationRunAcknowledgmentSpec
}

// Acknowledge records a person's acknowledgment of res's unresolved run,
// bound to its exact operation and to the resource's UID, with the
// versions marked applied recorded in the history (each with its plan's
// checksum, as marked by the person) in the same transaction. It refuses
// (each with its own error) a migration with nothing unresolved, another
// operation than the unresolved one, a run whose writer may still write,
// and a version to mark that the run's plan does not hold or the history
// already has. The next pass consumes it (engine.MigrationPass).
func (r *Runner) Acknowledge(ctx context.Context, res Resource, req AcknowledgeRequest) (Acknowledged, error) {
	ev, err := r.Evidence(ctx, res)
	if err != nil {
		return Acknowledged{}, err
	}
	name := res.Name()
	u := ev.Unresolved
	switch {
	case u == nil:
		return Acknowledged{}, fmt.Errorf("resolving a run of %s: %w (ptah status %s shows where it stands)", name, ErrNothingUnresolved, name)
	case u.OperationID != req.OperationID:
		return Acknowledged{}, fmt.Errorf("resolving operation %s of %s: %w: the unresolved run is operation %s; "+
			"ptah resolve-run %s shows its evidence", req.OperationID, name, ErrWrongOperation, u.OperationID, name)
	case ev.WriterMayStillWrite:
		return Acknowledged{}, fmt.Errorf("resolving operation %s of %s: %w (its session is alive and its deadline %s has not passed); "+
			"wait for it to end, or end it (pg_terminate_backend), then look again", u.OperationID, name, ErrWriterMayStillWrite,
			u.Deadline.UTC().Format("2006-01-02T15:04:05Z"))
	}
	marks, err := markable(ev, res, req.MarkApplied)
	if err != nil {
		return Acknowledged{}, err
	}
	if err := accounted(ev, req); err != nil {
		return Acknowledged{}, err
	}
	obj, _, err := r.migrationStatus(ctx, res)
	if err != nil {
		return Acknowledged{}, err
	}
	now, err := postgres.ServerNow(ctx, r.Target)
	if err != nil {
		return Acknowledged{}, err
	}
	spec := api.PtahMigrationRunAcknowledgmentSpec{Migration: api.ObjectReference{Name: obj.Name, UID: obj.UID},
		OperationID: u.OperationID, By: req.By, At: now, Reason: req.Reason}
	rows := make([]postgres.HistoryRow, len(marks))
	for i, v := range marks {
		spec.MarkedApplied = append(spec.MarkedApplied, api.MarkedVersion{Version: v.Version, Checksum: v.Checksum})
		rows[i] = postgres.HistoryRow{Version: v.Version, Name: v.Name, Checksum: v.Checksum, OperationID: u.OperationID, AppliedBy: req.By}
	}
	raw, err := json.Marshal(spec)
	if err != nil {
		return Acknowledged{}, err
	}
	tx, err := r.Target.Begin(ctx)
	if err != nil {
		return Acknowledged{}, err
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	s := r.storeIn(tx)
	if s == nil {
		return Acknowledged{}, errors.New("the store cannot join a transaction on the target; this is a bug")
	}
	if len(rows) > 0 {
		if err := postgres.RecordHistory(ctx, tx, res.storeResource(), rows, postgres.HowMarked); err != nil {
			return Acknowledged{}, err
		}
	}
	created, err := s.Create(ctx, store.Object{Kind: api.KindPtahMigrationRunAcknowledgment, Namespace: obj.Namespace,
		Name: name + "-" + u.OperationID[:min(8, len(u.OperationID))] + "-" + r.NewID()[:6], ContractVersion: api.ContractVersion,
		Immutable: true, Labels: map[string]string{LabelMigration: name}, Spec: raw})
	if err != nil {
		return Acknowledged{}, fmt.Errorf("recording the acknowledgment of operation %s: %w", u.OperationID, err)
	}
	if err := tx.Commit(ctx); err != nil {
		return Acknowledged{}, fmt.Errorf("recording the acknowledgment of operation %s: %w", u.OperationID, err)
	}
	return Acknowledged{Name: created.Name, UID: created.UID, Spec: spec}, nil
}

// markable checks the versions a person marks applied: each must be a
// version of the run's plan, in the source with the plan's checksum,
// missing from the history, and named once.
func markable(ev *Evidence, res Resource, versions []string) ([]api.MigrationVersion, error) {
	if len(versions) == 0 {
		return nil, nil
	}
	if ev.Plan == nil {
		return nil, fmt.Errorf("%w: the plan of operation %s is no longer stored, so no version of it can be marked", ErrNotMarkable,
			ev.Unresolved.OperationID)
	}
	var out []api.MigrationVersion
	var problems []string
	seen := map[string]bool{}
	for _, want := range versions {
		c := canonical(want)
		i := slices.IndexFunc(ev.Versions, func(v VersionEvidence) bool { return canonical(v.Version) == c })
		switch {
		case seen[c]:
			problems = append(problems, fmt.Sprintf("version %s is named twice", want))
		case i < 0:
			problems = append(problems, fmt.Sprintf("version %s is not in the plan of operation %s (its versions: %s)", want,
				ev.Unresolved.OperationID, planVersions(ev.Plan)))
		case ev.Versions[i].Recorded:
			problems = append(problems, fmt.Sprintf("version %s is already in the history", want))
		case !inSource(res, ev.Versions[i].MigrationVersion):
			problems = append(problems, fmt.Sprintf("version %s is not in the migration source with the checksum the plan ran (%s)", want,
				ev.Versions[i].Checksum))
		default:
			out = append(out, ev.Versions[i].MigrationVersion)
		}
		seen[c] = true
	}
	if len(problems) > 0 {
		return nil, fmt.Errorf("%w: %s; nothing was recorded", ErrNotMarkable, strings.Join(problems, "; "))
	}
	return out, nil
}

// accounted refuses an acknowledgment that leaves a file the run stopped
// part way (the journal shows some of its statements committed, the
// history does not record it) in neither MarkApplied nor Rerun; and a
// Rerun version that is not such a file.
func accounted(ev *Evidence, req AcknowledgeRequest) error {
	in := func(list []string, v string) bool {
		for _, x := range list {
			if canonical(x) == canonical(v) {
				return true
			}
		}
		return false
	}
	var problems []string
	partial := map[string]bool{}
	for _, v := range ev.Versions {
		if v.Recorded || v.Committed == 0 {
			continue
		}
		partial[canonical(v.Version)] = true
		if !in(req.MarkApplied, v.Version) && !in(req.Rerun, v.Version) {
			problems = append(problems, fmt.Sprintf("version %s committed %d of its statements (the journal shows %d started): "+
				"finish it by hand and mark it applied, or undo what committed and name it to run again", v.Version, v.Committed, v.Started))
		}
	}
	for _, v := range req.Rerun {
		if !partial[canonical(v)] {
			problems = append(problems, fmt.Sprintf("version %s is not a file the run stopped part way: it runs again anyway if the history lacks it", v))
		}
		if in(req.MarkApplied, v) {
			problems = append(problems, fmt.Sprintf("version %s is both marked applied and named to run again", v))
		}
	}
	if len(problems) > 0 {
		return fmt.Errorf("%w: %s; nothing was recorded", ErrUnaccounted, strings.Join(problems, "; "))
	}
	return nil
}

func inSource(res Resource, v api.MigrationVersion) bool {
	if res.Source == nil {
		return false
	}
	for _, f := range res.Source.Files {
		if f.Version.Canonical() == canonical(v.Version) {
			return f.Checksum == v.Checksum
		}
	}
	return false
}

func planVersions(p *engine.MigrationPlan) string {
	vs := make([]string, len(p.Spec.Versions))
	for i, v := range p.Spec.Versions {
		vs[i] = v.Version
	}
	return strings.Join(vs, ", ")
}

// migrationStatus reads res's stored object and status.
func (r *Runner) migrationStatus(ctx context.Context, res Resource) (store.Object, api.PtahMigrationStatus, error) {
	var st api.PtahMigrationStatus
	if res.Migration == nil {
		return store.Object{}, st, fmt.Errorf("%s is a %s: only a PtahMigration has runs to resolve", res.Name(), res.Kind())
	}
	obj, err := r.Store.Get(ctx, api.KindPtahMigration, res.namespace(), res.Name())
	if errors.Is(err, store.ErrNotFound) {
		return obj, st, fmt.Errorf("%w: PtahMigration %s (ptah plan registers it)", ErrNotRegistered, res.Name())
	}
	if err != nil {
		return obj, st, err
	}
	return obj, st, decodeStatus(obj, &st)
}

// PreviewMigration is a reading of res taken without running a pass (ptah
// plan --no-publish): its history compared with its source, with the holds
// a pass would see (an unresolved run, a dirty one), and the status it was
// read against. It writes nothing; a migration never registered reads as
// one with an empty status.
func (r *Runner) PreviewMigration(ctx context.Context, res Resource) (*engine.MigrationObservation, api.PtahMigrationStatus, error) {
	var st api.PtahMigrationStatus
	if err := r.Fence(ctx); err != nil {
		return nil, st, err
	}
	obj, err := r.Store.Get(ctx, api.KindPtahMigration, res.namespace(), res.Name())
	switch {
	case errors.Is(err, store.ErrNotFound):
	case err != nil:
		return nil, st, err
	default:
		if err := decodeStatus(obj, &st); err != nil {
			return nil, st, err
		}
	}
	identity, err := r.Identity(ctx)
	if err != nil {
		return nil, st, err
	}
	obs, err := observeMigration(ctx, r.Target, res, identity, st, r.binding())
	return obs, st, err
}
