package runner

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/ptah-run/ptah/internal/engine"
	"github.com/ptah-run/ptah/internal/postgres"
	"github.com/ptah-run/ptah/internal/store"
	api "github.com/ptah-run/ptah/pkg/api/v1alpha1"
)

// Refusals of Acknowledge (engine.DecideAcknowledgment); the CLI gives
// each its exit code.
var (
	ErrNothingUnresolved   = engine.ErrNothingUnresolved
	ErrWrongOperation      = engine.ErrWrongOperation
	ErrNotMarkable         = engine.ErrNotMarkable
	ErrWriterMayStillWrite = engine.ErrWriterMayStillWrite
	ErrUnaccounted         = engine.ErrUnaccounted
)

// ErrNotYetAccounted: the store is a cluster's, and its status shows a run
// dispatched that ptah serve has not accounted for yet. Locally a pass run
// here accounts for it (from the journal); in a cluster that is the
// manager's, which alone knows the Job's Pod, so this process waits for it
// rather than run a pass of its own.
var ErrNotYetAccounted = errors.New("ptah serve has not yet accounted for a dispatched run")

// ErrSourceElsewhere stands for a migration's source (Resource.SourceErr)
// that another process reads: in a cluster, ptah serve reads it (a
// ConfigMap, an OCI artifact), not the person settling a run. Evidence
// then cannot say whether the source holds a version as the run ran it
// (VersionEvidence.SourceElsewhere), and Acknowledge leaves that check to
// the pass that consumes the acknowledgment (see Acknowledge).
var ErrSourceElsewhere = errors.New("the migration source is read by ptah serve, not here")

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
// plan: the engine's reading of it, and the statements in flight.
type VersionEvidence struct {
	engine.VersionEvidence
	// InFlight are the statements, run without a transaction, that the
	// journal shows started and not finished: each may or may not have
	// taken effect.
	InFlight []postgres.RunStep
	// SourceElsewhere: the source is not read here (ErrSourceElsewhere),
	// so InSource is false without saying anything of the source.
	SourceElsewhere bool
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
		// look at it as such. It runs nothing. In a cluster that pass is
		// ptah serve's: this process has no say on the Job's Pod, and its
		// passes run against a store in the target database only.
		if !r.storeInTarget() {
			return nil, fmt.Errorf("%w: run %s of plan %s (its writer may still be running it, until its deadline %s); look again in a moment",
				ErrNotYetAccounted, op.ID, op.Plan.Name, op.Deadline.UTC().Format(time.RFC3339))
		}
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
		ve := VersionEvidence{VersionEvidence: engine.VersionEvidence{MigrationVersion: v, Key: canonical(v.Version),
			Recorded: recorded[canonical(v.Version)], InSource: inSource(res, v)}, SourceElsewhere: errors.Is(res.SourceErr, ErrSourceElsewhere)}
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
// checksum, as marked by the person): in the same transaction when the
// store is in the target database, else committed first (a cluster's
// store; see recordAcknowledgmentAfterHistory). It refuses
// (each with its own error) a migration with nothing unresolved, another
// operation than the unresolved one, a run whose writer may still write,
// and a version to mark that the run's plan does not hold or the history
// already has. The next pass consumes it (engine.MigrationPass).
func (r *Runner) Acknowledge(ctx context.Context, res Resource, req AcknowledgeRequest) (Acknowledged, error) {
	ev, err := r.Evidence(ctx, res)
	if err != nil {
		return Acknowledged{}, err
	}
	in := engine.RunEvidence{Migration: res.Name(), Unresolved: ev.Unresolved, WriterMayStillWrite: ev.WriterMayStillWrite,
		PlanKnown: ev.Plan != nil}
	for _, v := range ev.Versions {
		e := v.VersionEvidence
		if v.SourceElsewhere {
			// The source is ptah serve's to read. A version marked is
			// recorded with the checksum the run's plan ran (the plan the
			// manager computed from the source), and the pass that
			// consumes the acknowledgment reads the history against the
			// source: a file changed since blocks the migration
			// (HistoryModified), it is never run or recorded silently.
			e.InSource = true
		}
		in.Versions = append(in.Versions, e)
	}
	marks, err := engine.DecideAcknowledgment(in, engine.AcknowledgmentRequest{OperationID: req.OperationID, MarkApplied: req.MarkApplied,
		Rerun: req.Rerun}, canonical)
	if err != nil {
		return Acknowledged{}, err
	}
	u, name := ev.Unresolved, res.Name()
	obj, _, err := r.migrationStatus(ctx, res)
	if err != nil {
		return Acknowledged{}, err
	}
	now, err := postgres.ServerNow(ctx, r.Target)
	if err != nil {
		return Acknowledged{}, err
	}
	spec := api.PtahMigrationRunAcknowledgmentSpec{Migration: api.ObjectReference{Name: obj.Name, UID: obj.UID},
		OperationID: u.OperationID, By: req.By, At: api.NewTime(now), Reason: req.Reason}
	rows := make([]postgres.HistoryRow, len(marks))
	for i, v := range marks {
		spec.MarkedApplied = append(spec.MarkedApplied, api.MarkedVersion{Version: v.Version, Checksum: v.Checksum})
		rows[i] = postgres.HistoryRow{Version: v.Version, Name: v.Name, Checksum: v.Checksum, OperationID: u.OperationID, AppliedBy: req.By}
	}
	raw, err := json.Marshal(spec)
	if err != nil {
		return Acknowledged{}, err
	}
	ack := store.Object{Kind: api.KindPtahMigrationRunAcknowledgment, Namespace: obj.Namespace,
		Name: name + "-" + u.OperationID[:min(8, len(u.OperationID))] + "-" + r.NewID()[:6], ContractVersion: api.ContractVersion,
		Immutable: true, Labels: map[string]string{LabelMigration: name}, Spec: raw}
	record := r.recordAcknowledgmentInOneTx
	if !r.storeInTarget() {
		record = r.recordAcknowledgmentAfterHistory
	}
	created, err := record(ctx, res, u.OperationID, rows, ack)
	if err != nil {
		return Acknowledged{}, err
	}
	return Acknowledged{Name: created.Name, UID: created.UID, Spec: spec}, nil
}

// storeInTarget reports whether r's store is kept in the target database
// (local mode's, a TxStore): its writes can join a transaction there, and
// the passes that account for a run are this process's to run. A store
// elsewhere is a cluster's, whose passes are ptah serve's.
func (r *Runner) storeInTarget() bool {
	_, ok := r.Store.(TxStore)
	return ok
}

// recordAcknowledgmentInOneTx records the history rows of the versions
// marked applied and the acknowledgment in one transaction on the target:
// both, or neither (local mode).
func (r *Runner) recordAcknowledgmentInOneTx(ctx context.Context, res Resource, op string, rows []postgres.HistoryRow,
	ack store.Object) (store.Object, error) {
	tx, err := r.Target.Begin(ctx)
	if err != nil {
		return store.Object{}, err
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	s := r.storeIn(tx)
	if s == nil {
		return store.Object{}, errors.New("the store cannot join a transaction on the target; this is a bug")
	}
	if len(rows) > 0 {
		if err := postgres.RecordHistory(ctx, tx, res.storeResource(), rows, postgres.HowMarked); err != nil {
			return store.Object{}, err
		}
	}
	created, err := s.Create(ctx, ack)
	if err != nil {
		return store.Object{}, fmt.Errorf("recording the acknowledgment of operation %s: %w", op, err)
	}
	if err := tx.Commit(ctx); err != nil {
		return store.Object{}, fmt.Errorf("recording the acknowledgment of operation %s: %w", op, err)
	}
	return created, nil
}

// recordAcknowledgmentAfterHistory records the history rows of the
// versions marked applied, commits them, and only then creates the
// acknowledgment in the store, which cannot join the target's transaction
// (a cluster's).
//
// The order is the safe one. The manager consumes an acknowledgment as
// soon as it sees it, and then reads the history to plan what remains:
// were the acknowledgment first, a crash before the history rows commit
// would leave the run settled and the versions the person established as
// applied missing from the history, to be run again. History first, a
// crash in between leaves the versions recorded and the run still
// unresolved, which nothing runs past; the evidence then shows them
// recorded, and the same acknowledgment without them (they are no longer
// to mark, nor partial) settles the run.
func (r *Runner) recordAcknowledgmentAfterHistory(ctx context.Context, res Resource, op string, rows []postgres.HistoryRow,
	ack store.Object) (store.Object, error) {
	if len(rows) > 0 {
		tx, err := r.Target.Begin(ctx)
		if err != nil {
			return store.Object{}, err
		}
		defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
		if err := postgres.RecordHistory(ctx, tx, res.storeResource(), rows, postgres.HowMarked); err != nil {
			return store.Object{}, err
		}
		if err := tx.Commit(ctx); err != nil {
			return store.Object{}, fmt.Errorf("recording the versions marked applied of operation %s: %w", op, err)
		}
	}
	created, err := r.Store.Create(ctx, ack)
	if err != nil && len(rows) > 0 {
		vs := make([]string, len(rows))
		for i, row := range rows {
			vs[i] = row.Version
		}
		which := "version " + vs[0]
		if len(vs) > 1 {
			which = "versions " + strings.Join(vs, ", ")
		}
		return store.Object{}, fmt.Errorf("recording the acknowledgment of operation %s (the history records %s as marked "+
			"applied now, and the run is still unresolved: record it again without marking them): %w", op, which, err)
	}
	if err != nil {
		return store.Object{}, fmt.Errorf("recording the acknowledgment of operation %s: %w", op, err)
	}
	return created, nil
}

// inSource reports whether res's source holds v with the checksum the
// plan ran.
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
