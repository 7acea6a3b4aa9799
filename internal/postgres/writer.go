package postgres

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/ptah-run/ptah/internal/failpoint"
)

// Writer is the one database session that executes a plan. It holds, for
// as long as it lives, the session advisory lock of the coordination
// digest and the lease row naming it, so that "can this run still write?"
// has a database answer: this session (pid, backend start) is gone from
// pg_stat_activity, or its deadline has passed.
//
// A Writer is not safe for concurrent use.
type Writer struct {
	conn        *pgx.Conn
	digest      string
	operationID string
	resource    string
	deadline    time.Time
	session     Session
	key         int64
}

// OpenWriter connects a dedicated session to url and takes the database for
// operationID: the session advisory lock AdvisoryLockKey(coordinationDigest),
// then the lease row (see acquireLease for when a recorded holder may be
// taken over). deadline is the run's absolute execution deadline; the
// server stops the session from writing past it (see armDeadline).
//
// When another writer holds the database the error is a *LeaseHeldError
// (ErrLeaseHeld) naming it, and nothing is left held.
func OpenWriter(ctx context.Context, url, coordinationDigest, operationID, resource string, deadline time.Time) (*Writer, error) {
	if coordinationDigest == "" || operationID == "" || deadline.IsZero() {
		return nil, errors.New("opening a writer needs a coordination digest, an operation ID and a deadline")
	}
	w := &Writer{digest: coordinationDigest, operationID: operationID, resource: resource,
		deadline: deadline, key: AdvisoryLockKey(coordinationDigest)}
	if err := w.open(ctx, url); err != nil {
		if w.conn != nil {
			// Ending the session also drops the advisory lock if we took it.
			_ = w.conn.Close(context.Background())
		}
		return nil, fmt.Errorf("taking the database for operation %s: %w", operationID, err)
	}
	return w, nil
}

func (w *Writer) open(ctx context.Context, url string) error {
	conn, err := Connect(ctx, url)
	if err != nil {
		return err
	}
	w.conn = conn
	// Makes the writer recognisable in pg_stat_activity (truncated to 63 bytes).
	if _, err := conn.Exec(ctx, "SELECT set_config('application_name', $1, false)", "ptah writer "+w.operationID); err != nil {
		return err
	}
	if err := ensureRuntimeSchema(ctx, conn); err != nil {
		return err
	}
	if w.session, err = currentSession(ctx, conn); err != nil {
		return err
	}
	var locked bool
	if err := conn.QueryRow(ctx, "SELECT pg_try_advisory_lock($1)", w.key).Scan(&locked); err != nil {
		return fmt.Errorf("taking the advisory lock: %w", err)
	}
	if !locked {
		held, err := whoHolds(ctx, conn, w.digest, w.key)
		if err != nil {
			return fmt.Errorf("reading who holds the database: %w", err)
		}
		return held
	}
	err = acquireLease(ctx, conn, Lease{CoordinationDigest: w.digest, Holder: w.operationID,
		Resource: w.resource, Writer: w.session, Deadline: w.deadline})
	if err != nil {
		if _, held := errors.AsType[*LeaseHeldError](err); held || errors.Is(err, ErrDeadlinePassed) {
			return err
		}
		return fmt.Errorf("recording the lease: %w", err)
	}
	return armDeadline(ctx, conn, w.deadline, false)
}

// Session is the writer's database session, as recorded in the lease and
// the run journal.
func (w *Writer) Session() Session { return w.session }

// Deadline is the run's absolute execution deadline.
func (w *Writer) Deadline() time.Time { return w.deadline }

// Release gives the database back: it deletes the lease row if it still
// names this writer, releases the advisory lock and ends the session. It is
// idempotent. An error means the row may remain: the caller owes the
// release (ReleaseLease from another session completes it). The advisory
// lock is gone in every case, with the session.
func (w *Writer) Release(ctx context.Context) error {
	if w.conn == nil {
		return nil
	}
	conn := w.conn
	w.conn = nil
	defer conn.Close(context.Background())
	if err := w.release(ctx, conn); err != nil {
		return fmt.Errorf("releasing the database held by operation %s: %w", w.operationID, err)
	}
	return nil
}

func (w *Writer) release(ctx context.Context, conn *pgx.Conn) error {
	if conn.IsClosed() {
		return ErrWriterClosed
	}
	// Past the deadline the session would otherwise be ended under us.
	if err := disarmDeadline(ctx, conn); err != nil {
		return err
	}
	_, err := conn.Exec(ctx, `DELETE FROM ptah.leases WHERE coordination_digest = $1 AND holder = $2
		AND writer_pid = $3 AND writer_backend_start = $4`,
		w.digest, w.operationID, w.session.PID, w.session.BackendStart)
	if err != nil {
		return err
	}
	_, err = conn.Exec(ctx, "SELECT pg_advisory_unlock($1)", w.key)
	return err
}

// ProgressFunc is told after each statement of a plan ran (done of total).
// It is called with the plan's transaction open: it must be quick and must
// not use the Writer.
type ProgressFunc func(done, total int, s Statement)

// StatementError is a plan statement PostgreSQL refused. The plan was rolled
// back; none of it is visible.
type StatementError struct {
	Step, Total int // Step is 1-based
	SQL         string
	Err         error
}

func (e *StatementError) Error() string {
	return fmt.Sprintf("statement %d/%d failed: %v\n%s", e.Step, e.Total, e.Err, e.SQL)
}

// Unwrap exposes both the class (ErrPlanFailed) and the cause, which the
// SQLSTATE predicates read.
func (e *StatementError) Unwrap() []error { return []error{ErrPlanFailed, e.Err} }

// Execute runs plan exactly once under the writer's operation ID.
//
// It first commits the run's journal row (operation ID, writer session,
// deadline), so that whoever finds the run later knows which session to
// ask about. Then the whole plan runs in ONE transaction: the preamble as
// SET LOCAL, each statement with its journal step, and the run marked
// succeeded, all committed by one COMMIT. After any crash the journal is
// exact: the run is finished and succeeded if and only if the plan
// committed. A second Execute under the same operation ID, from any
// process, executes nothing (ErrAlreadyRun).
//
// Errors: ErrNotStarted (nothing ran), ErrAlreadyRun, ErrPlanFailed (a
// *StatementError, or a failure around the statements; rolled back and
// recorded as failed when the session still allows it), ErrOutcomeUnknown
// (the connection was lost during COMMIT; read the journal).
//
// Limitation: ALTER TYPE ... ADD VALUE runs inside a transaction on
// PostgreSQL 12 and later, but the new label cannot be used before that
// transaction commits (SQLSTATE 55P04). A plan that adds an enum label and
// uses it in the same plan (a default, a check, an index predicate) fails
// here and is rolled back; splitting such a plan is not done.
func (w *Writer) Execute(ctx context.Context, planUID string, plan *Plan, progress ProgressFunc) error {
	if w.conn == nil || w.conn.IsClosed() {
		return fmt.Errorf("%w: executing operation %s: %w", ErrNotStarted, w.operationID, ErrWriterClosed)
	}
	run := &Run{OperationID: w.operationID, Resource: w.resource, PlanUID: planUID,
		Writer: w.session, Deadline: w.deadline}
	if err := recordRunStart(ctx, w.conn, run); err != nil {
		if errors.Is(err, ErrAlreadyRun) {
			return fmt.Errorf("executing operation %s: %w", w.operationID, err)
		}
		return fmt.Errorf("%w: recording the start of run %s: %w", ErrNotStarted, w.operationID, err)
	}
	err := w.runPlan(ctx, plan, progress)
	if err == nil {
		// Back to idle: the session must not outlive the deadline holding
		// the lock. Past it already, the plan committed all the same.
		if err := armDeadline(ctx, w.conn, w.deadline, false); err != nil && !errors.Is(err, ErrDeadlinePassed) {
			return fmt.Errorf("run %s committed, but re-arming its deadline failed: %w", w.operationID, err)
		}
		return nil
	}
	if errors.Is(err, ErrOutcomeUnknown) {
		return fmt.Errorf("executing run %s: %w", w.operationID, err)
	}
	return w.recordFailure(ctx, err)
}

// recordFailure journals a plan that did not commit and returns its error.
func (w *Writer) recordFailure(ctx context.Context, planErr error) error {
	planErr = fmt.Errorf("executing run %s: %w", w.operationID, planErr)
	if w.conn.IsClosed() {
		// The session is gone, and with it the transaction: the unfinished
		// run row says the same once SessionAlive says it is gone.
		return planErr
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	if err := recordRunFailed(ctx, w.conn, w.operationID, planErr.Error()); err != nil {
		return errors.Join(planErr, fmt.Errorf("recording the failure of run %s: %w", w.operationID, err))
	}
	return planErr
}

// runPlan runs the plan's transaction. Any error but ErrOutcomeUnknown
// means the transaction did not commit.
func (w *Writer) runPlan(ctx context.Context, plan *Plan, progress ProgressFunc) (err error) {
	tx, err := w.conn.Begin(ctx)
	if err != nil {
		return fmt.Errorf("%w: beginning the plan's transaction: %w", ErrPlanFailed, err)
	}
	committing := false
	defer func() {
		if err != nil && !committing {
			// The server rolls back on its own if the session is gone.
			_ = tx.Rollback(context.WithoutCancel(ctx))
		}
	}()
	if err := w.prepare(ctx, tx, plan); err != nil {
		return fmt.Errorf("%w: %w", ErrPlanFailed, err)
	}
	total := len(plan.Statements)
	for i, s := range plan.Statements {
		if err := w.runStatement(ctx, tx, i+1, total, s); err != nil {
			return err
		}
		if progress != nil {
			progress(i+1, total, s)
		}
		if i == 0 {
			failpoint.Hit(failpoint.MidPlan)
		}
	}
	if err := armDeadline(ctx, tx, w.deadline, true); err != nil {
		return fmt.Errorf("%w: %w", ErrPlanFailed, err)
	}
	if err := recordRunSucceeded(ctx, tx, w.operationID); err != nil {
		return fmt.Errorf("%w: recording the run's success: %w", ErrPlanFailed, err)
	}
	committing = true
	return commitError(tx.Commit(ctx))
}

// prepare checks, inside the plan's transaction, that the lease still names
// this writer, and keeps it so until COMMIT (FOR SHARE blocks a concurrent
// ReleaseLease); then it applies the plan's preamble to the transaction.
func (w *Writer) prepare(ctx context.Context, tx pgx.Tx, plan *Plan) error {
	var ours bool
	err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM ptah.leases WHERE coordination_digest = $1
		AND holder = $2 AND writer_pid = $3 AND writer_backend_start = $4 FOR SHARE)`,
		w.digest, w.operationID, w.session.PID, w.session.BackendStart).Scan(&ours)
	if err != nil {
		return fmt.Errorf("checking the lease: %w", err)
	}
	if !ours {
		return ErrLeaseLost
	}
	for _, set := range plan.Preamble() {
		// The preamble is written for a session (psql runs it as is);
		// scoped to the transaction it cannot leak into the journal writes
		// that follow a rollback.
		local := strings.Replace(set, "SET ", "SET LOCAL ", 1)
		if _, err := tx.Exec(ctx, local); err != nil {
			return fmt.Errorf("applying %q: %w", local, err)
		}
	}
	return nil
}

func (w *Writer) runStatement(ctx context.Context, tx pgx.Tx, step, total int, s Statement) error {
	if err := armDeadline(ctx, tx, w.deadline, true); err != nil {
		return fmt.Errorf("%w: before statement %d/%d: %w", ErrPlanFailed, step, total, err)
	}
	if err := recordStepStart(ctx, tx, w.operationID, step, s.SQL); err != nil {
		return fmt.Errorf("%w: journaling statement %d/%d: %w", ErrPlanFailed, step, total, err)
	}
	if _, err := tx.Exec(ctx, s.SQL); err != nil {
		if IsQueryCanceled(err) && !time.Now().Before(w.deadline) {
			err = fmt.Errorf("%w: %w", ErrDeadlinePassed, err)
		}
		return &StatementError{Step: step, Total: total, SQL: s.SQL, Err: err}
	}
	return nil
}

// commitError classifies the result of COMMIT. An answer from the server
// (an error, or the ROLLBACK an aborted transaction commits as) is
// definite; a lost connection leaves the outcome to the journal.
func commitError(err error) error {
	var pgErr *pgconn.PgError
	switch {
	case err == nil:
		return nil
	case IsConnectionLost(err):
		// Even a FATAL the server sent may follow a commit already durable.
		return fmt.Errorf("%w: committing: %w", ErrOutcomeUnknown, err)
	case errors.Is(err, pgx.ErrTxCommitRollback), errors.As(err, &pgErr):
		return fmt.Errorf("%w: committing: %w", ErrPlanFailed, err)
	default:
		return fmt.Errorf("%w: committing: %w", ErrOutcomeUnknown, err)
	}
}
