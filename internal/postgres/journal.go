package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/ptah-run/ptah/internal/failpoint"
	api "github.com/ptah-run/ptah/pkg/api/v1alpha1"
)

// Run outcomes as the journal records them.
const (
	// RunSucceeded: the whole plan committed.
	RunSucceeded = "succeeded"
	// RunFailed: nothing of the plan committed: it rolled back, or its
	// first statement, run without a transaction, failed, or it never
	// started (its history precondition refused it, see
	// PlanHistory.Expect; the error says so).
	RunFailed = "failed"
	// RunPartiallyApplied: part of the plan committed (one or more of its
	// phases, see Writer.Execute, or statements of a no-transaction
	// phase), then a later part failed. The committed steps are those
	// with a CommittedAt.
	RunPartiallyApplied = "partially-applied"
)

// Run is one execution of a plan as the run journal (ptah.runs and
// ptah.run_steps) records it: the evidence a person reads before
// resolve-run, and what settles a run whose process vanished.
//
// How to read it, once its writer session is gone (SessionAlive) or its
// deadline has passed:
//
//   - Committed: the whole plan committed. Exact.
//   - finished, not Committed: the run failed (RunFailed: nothing of it
//     committed) or was partially applied (RunPartiallyApplied: exactly
//     its steps with a CommittedAt committed). A step without one, in a
//     finished run, did not take effect (its transaction rolled back, or
//     PostgreSQL refused it).
//   - Unfinished: the process stopped mid-run. Its steps with a
//     CommittedAt committed; of transactional steps, only those are ever
//     visible. Its InFlight steps (at most one: a no-transaction
//     statement whose start was journaled and whose completion was not)
//     may or may not have taken effect, and no reading of the journal can
//     tell: that is a question for the database (a schema observation)
//     or a person (a migration's resolve-run). Without InFlight steps,
//     nothing else of the plan committed.
type Run struct {
	OperationID string
	Resource    string
	PlanUID     string
	Writer      Session
	Deadline    time.Time
	// Phases is how many phases the plan runs in (0 in a run journaled
	// before ptah recorded it).
	Phases     int
	StartedAt  time.Time
	FinishedAt *time.Time // nil: the run never finished
	Outcome    string     // RunSucceeded, RunFailed, RunPartiallyApplied, or "" while unfinished
	Error      string     // why it failed
	Steps      []RunStep
}

// RunStep is one statement of a run, the evidence of what it did: its
// SQL, when it started and when it committed, on the server's clock.
//
// A step of a transactional phase is journaled in the transaction that
// runs its statement, its phase's, so it becomes visible only when that
// transaction commits, and CommittedAt is then the time of that commit. A
// plan of several phases (see Writer.Execute) may have steps visible and
// committed in a run that is unfinished or partially applied: those of
// the phases that committed.
//
// A step of a no-transaction phase (NoTransaction) is journaled in a
// transaction of its own, committed before its statement is sent, and
// gets its CommittedAt in another, right after the statement succeeded.
// Such a step without a CommittedAt is the statement that failed (in a
// finished run) or the one in flight (in an unfinished run, see
// Run.InFlight).
type RunStep struct {
	Step      int // 1-based
	Phase     int // 1-based; 0 in a run journaled before ptah recorded it
	Statement string
	StartedAt time.Time
	// CommittedAt is when the statement committed; nil when it did not,
	// or, for a step in flight, is not known to have.
	CommittedAt *time.Time
	// NoTransaction: the statement ran outside any transaction block.
	NoTransaction bool
	// Version is the migration history version of the phase (the file)
	// the statement belongs to; "" for a schema plan, or a run journaled
	// before ptah recorded it.
	Version string
}

// Committed reports whether the whole plan committed. The outcome commits
// in the plan's last transaction (its last phase's, or the one journaling
// the completion of its last statement run without a transaction), so
// when it says so, it did. An unfinished run whose last statement is in
// flight (InFlight) may have committed whole without saying so.
func (r *Run) Committed() bool { return r.Outcome == RunSucceeded }

// AnyCommitted reports whether any statement of the plan is known to have
// committed: the whole plan, or its first phases, or statements of a
// no-transaction phase. This too is exact: each step's CommittedAt
// commits with the statement, or (run without a transaction) right after
// it. When it is false, an InFlight step may still have taken effect.
func (r *Run) AnyCommitted() bool {
	if r.Committed() {
		return true
	}
	for _, s := range r.Steps {
		if s.CommittedAt != nil {
			return true
		}
	}
	return false
}

// InFlight returns the steps of an unfinished run whose statement, run
// without a transaction, was journaled as started and never as completed:
// it may be running still (while the writer session is alive), or have
// taken effect, or not. A finished run has none: its writer journaled how
// each statement ended. There is at most one, the last step.
func (r *Run) InFlight() []RunStep {
	if !r.Unfinished() {
		return nil
	}
	var out []RunStep
	for _, s := range r.Steps {
		if s.NoTransaction && s.CommittedAt == nil {
			out = append(out, s)
		}
	}
	return out
}

// Unfinished reports whether the run has no recorded end. While its writer
// session is alive it may still be running; once the session is gone (see
// SessionAlive), an unfinished run is one whose process stopped before its
// last transaction committed. What of it committed before is in its steps:
// see AnyCommitted and InFlight.
func (r *Run) Unfinished() bool { return r.FinishedAt == nil }

// ReadRun returns the journal of operationID with its steps, or an error
// wrapping ErrRunNotFound.
func ReadRun(ctx context.Context, conn *pgx.Conn, operationID string) (*Run, error) {
	run, err := readRun(ctx, conn, operationID)
	if err != nil {
		return nil, fmt.Errorf("reading the run journal of %s: %w", operationID, err)
	}
	return run, nil
}

func readRun(ctx context.Context, conn *pgx.Conn, operationID string) (*Run, error) {
	var r Run
	err := conn.QueryRow(ctx, `
SELECT operation_id, coalesce(resource, ''), coalesce(plan_uid, ''), coalesce(writer_pid, 0),
       coalesce(writer_backend_start, '-infinity'), coalesce(deadline, '-infinity'),
       coalesce(phases, 0), coalesce(started_at, '-infinity'), finished_at, coalesce(outcome, ''), coalesce(error, '')
FROM ptah.runs WHERE operation_id = $1`, operationID).Scan(
		&r.OperationID, &r.Resource, &r.PlanUID, &r.Writer.PID, &r.Writer.BackendStart, &r.Deadline,
		&r.Phases, &r.StartedAt, &r.FinishedAt, &r.Outcome, &r.Error)
	if errors.Is(err, pgx.ErrNoRows) || isUndefinedRelation(err) {
		return nil, ErrRunNotFound
	}
	if err != nil {
		return nil, err
	}
	rows, err := conn.Query(ctx, `SELECT step, coalesce(phase, 0), statement, started_at, committed_at,
		coalesce(no_transaction, false), coalesce(version, '')
		FROM ptah.run_steps WHERE operation_id = $1 ORDER BY step`, operationID)
	if err != nil {
		return nil, err
	}
	r.Steps, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (RunStep, error) {
		var s RunStep
		err := row.Scan(&s.Step, &s.Phase, &s.Statement, &s.StartedAt, &s.CommittedAt, &s.NoTransaction, &s.Version)
		return s, err
	})
	if err != nil {
		return nil, err
	}
	return &r, nil
}

// recordRunStart commits the run row before any plan SQL, so that the
// journal names the writer session and deadline of every run that may have
// written. ON CONFLICT makes the operation ID a once-only ticket: a second
// attempt under the same ID finds the row and executes nothing.
func recordRunStart(ctx context.Context, conn *pgx.Conn, r *Run, mark func(context.Context, pgx.Tx) error) error {
	tx, err := conn.Begin(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	tag, err := tx.Exec(ctx, `
INSERT INTO ptah.runs (operation_id, resource, plan_uid, writer_pid, writer_backend_start, deadline, phases, started_at, contract_version)
VALUES ($1, $2, $3, $4, $5, $6, $7, clock_timestamp(), $8)
ON CONFLICT (operation_id) DO NOTHING`,
		r.OperationID, r.Resource, r.PlanUID, r.Writer.PID, r.Writer.BackendStart, r.Deadline, r.Phases, api.ContractVersion)
	if err != nil {
		return err
	}
	if tag.RowsAffected() == 0 {
		return ErrAlreadyRun
	}
	if mark != nil {
		if err := mark(ctx, tx); err != nil {
			return fmt.Errorf("%w: %w", ErrNotMarked, err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return err
	}
	failpoint.Hit(failpoint.AfterDispatch)
	return nil
}

// write is one journal or history write: its statement, its arguments
// and what its result must be. exec runs it at once; queue lets a batch
// carry it with the writes around it in one round trip, in order, inside
// the same transaction (see Writer.runTx), which changes nothing of what
// commits, or when.
type write struct {
	sql   string
	args  []any
	check func(pgconn.CommandTag, error) error
}

func (wr write) exec(ctx context.Context, q querier) error {
	tag, err := q.Exec(ctx, wr.sql, wr.args...)
	return wr.result(tag, err)
}

func (wr write) queue(b *pgx.Batch) {
	b.Queue(wr.sql, wr.args...).Fn = func(br pgx.BatchResults) error { return wr.result(br.Exec()) }
}

func (wr write) result(tag pgconn.CommandTag, err error) error {
	if wr.check == nil {
		return err
	}
	return wr.check(tag, err)
}

// recordStepStart journals a statement: inside its transaction, or, for
// one run without a transaction (noTx), in a transaction of its own that
// commits before the statement is sent.
func recordStepStart(ctx context.Context, tx pgx.Tx, operationID string, step, phase int, sql, version string, noTx bool) error {
	return stepStart(operationID, step, phase, sql, version, noTx).exec(ctx, tx)
}

func stepStart(operationID string, step, phase int, sql, version string, noTx bool) write {
	return write{sql: `INSERT INTO ptah.run_steps (operation_id, step, phase, statement, started_at, no_transaction, version)
		VALUES ($1, $2, $3, $4, clock_timestamp(), $5, nullif($6, ''))`, args: []any{operationID, step, phase, sql, noTx, version}}
}

// recordStepCompleted marks a statement run without a transaction
// committed, right after it succeeded.
func recordStepCompleted(ctx context.Context, tx pgx.Tx, operationID string, step int) error {
	tag, err := tx.Exec(ctx, `UPDATE ptah.run_steps SET committed_at = clock_timestamp()
		WHERE operation_id = $1 AND step = $2 AND committed_at IS NULL`, operationID, step)
	if err != nil {
		return err
	}
	if tag.RowsAffected() != 1 {
		return fmt.Errorf("the journal step %d of %s is missing or already completed", step, operationID)
	}
	return nil
}

// stepsCommitted marks steps [from, to] (1-based), journaled in a phase's
// transaction before the last, committed, inside it, immediately before
// its COMMIT.
func stepsCommitted(operationID string, from, to int) write {
	return write{sql: `UPDATE ptah.run_steps SET committed_at = clock_timestamp()
		WHERE operation_id = $1 AND step BETWEEN $2 AND $3`, args: []any{operationID, from, to}}
}

// runSucceeded marks the run and its steps committed, inside the plan's
// last transaction, immediately before COMMIT: the marks become visible
// exactly when the plan does. Steps of earlier phases keep the time their
// own transaction committed.
func runSucceeded(operationID string) write {
	return write{sql: `
WITH steps AS (
	UPDATE ptah.run_steps SET committed_at = clock_timestamp() WHERE operation_id = $1 AND committed_at IS NULL
)
UPDATE ptah.runs SET finished_at = clock_timestamp(), outcome = 'succeeded'
WHERE operation_id = $1 AND finished_at IS NULL`, args: []any{operationID},
		check: func(tag pgconn.CommandTag, err error) error {
			if err != nil {
				return err
			}
			if tag.RowsAffected() != 1 {
				// The row was recorded by this writer and only it finishes runs.
				return fmt.Errorf("the run row of %s is missing or already finished", operationID)
			}
			return nil
		}}
}

// recordRunEnd marks a run failed (RunFailed) or partially applied
// (RunPartiallyApplied) after a part of its plan failed, in one statement
// of its own. completed, when not 0, is a step run without a transaction
// that committed and whose completion could not be journaled (the
// transaction journaling it was refused): it is marked committed too, so
// that the finished run's steps say exactly what committed.
func recordRunEnd(ctx context.Context, conn *pgx.Conn, operationID, outcome, reason string, completed int) error {
	_, err := conn.Exec(ctx, `
WITH step AS (
	UPDATE ptah.run_steps SET committed_at = clock_timestamp()
	WHERE operation_id = $1 AND step = $4 AND committed_at IS NULL
)
UPDATE ptah.runs SET finished_at = clock_timestamp(), outcome = $2, error = $3
WHERE operation_id = $1 AND finished_at IS NULL`, operationID, outcome, reason, completed)
	return err
}

// ListRuns returns the journal's runs of resource (as the writer named it),
// oldest first, without their steps. A database where no run was ever
// journaled has none.
func ListRuns(ctx context.Context, conn *pgx.Conn, resource string) ([]Run, error) {
	rows, err := conn.Query(ctx, `
SELECT operation_id, coalesce(resource, ''), coalesce(plan_uid, ''), coalesce(writer_pid, 0),
       coalesce(writer_backend_start, '-infinity'), coalesce(deadline, '-infinity'),
       coalesce(started_at, '-infinity'), finished_at, coalesce(outcome, ''), coalesce(error, ''),
       (SELECT count(*) FROM ptah.run_steps s WHERE s.operation_id = r.operation_id)
FROM ptah.runs r WHERE resource = $1 ORDER BY started_at, operation_id`, resource)
	if isUndefinedRelation(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("listing the runs of %s: %w", resource, err)
	}
	runs, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Run, error) {
		var r Run
		var steps int
		err := row.Scan(&r.OperationID, &r.Resource, &r.PlanUID, &r.Writer.PID, &r.Writer.BackendStart, &r.Deadline,
			&r.StartedAt, &r.FinishedAt, &r.Outcome, &r.Error, &steps)
		r.Steps = make([]RunStep, steps) // counted, not read
		return r, err
	})
	if isUndefinedRelation(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("listing the runs of %s: %w", resource, err)
	}
	return runs, nil
}
