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

// Abandon ends the writer's session without deleting its lease row: for a
// run whose outcome could not be recorded, so that the database is not
// handed back while a claim still reads as dispatched. With the session
// gone the run can no longer write, and its advisory lock is gone; the row
// stays as the record of who held the database, and the next writer takes
// it over only because that session is gone (see acquireLease).
func (w *Writer) Abandon() {
	if w.conn == nil {
		return
	}
	conn := w.conn
	w.conn = nil
	_ = conn.Close(context.Background())
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

// Step is one statement of a plan as the writer runs it, reported twice:
// when it starts (Done false) and once it has run (Done true, with the time
// it took). A statement that fails is reported only as started; Execute's
// error says how it ended.
type Step struct {
	N, Total      int // N is 1-based, in plan order
	Phase, Phases int // the transaction it runs in (1-based), of the plan's
	Statement     Statement
	Done          bool
	Elapsed       time.Duration // when Done: how long the statement ran
}

// ProgressFunc hears of each statement of a plan as it starts and once it
// has run. It is called with the statement's transaction open: it must be
// quick and must not use the Writer.
type ProgressFunc func(Step)

// StatementError is a plan statement PostgreSQL refused. The transaction it
// ran in, its phase's, was rolled back: none of that phase is visible.
//
// Committed counts the statements of the plan that had already committed,
// in the phases before this one (see Writer.Execute), when this one
// failed. When it is 0 the error is ErrPlanFailed: nothing of the plan is
// visible. When it is more, the error is ErrPartiallyApplied instead, and
// not ErrPlanFailed: those statements stay committed.
type StatementError struct {
	Step, Total   int // Step is 1-based
	Phase, Phases int // the phase (1-based) the statement ran in, of the plan's
	SQL           string
	Committed     int
	Err           error
}

func (e *StatementError) Error() string {
	if e.Committed > 0 {
		return fmt.Sprintf("statement %d/%d failed in transaction %d/%d, after %s (%s) committed: %v\n%s",
			e.Step, e.Total, e.Phase, e.Phases, committedPhases(e.Phase-1), statementRange(0, e.Committed), e.Err, e.SQL)
	}
	return fmt.Sprintf("statement %d/%d failed: %v\n%s", e.Step, e.Total, e.Err, e.SQL)
}

// Unwrap exposes both the class (ErrPlanFailed, or ErrPartiallyApplied)
// and the cause, which the SQLSTATE predicates read.
func (e *StatementError) Unwrap() []error { return []error{failureClass(e.Committed), e.Err} }

// failureClass is the class of a definite failure (its transaction rolled
// back) when committed statements of the plan had committed before it.
func failureClass(committed int) error {
	if committed > 0 {
		return ErrPartiallyApplied
	}
	return ErrPlanFailed
}

// committedPhases names the first n phases of a plan.
func committedPhases(n int) string {
	if n == 1 {
		return "transaction 1"
	}
	return fmt.Sprintf("transactions 1-%d", n)
}

// Execute runs plan exactly once under the writer's operation ID.
//
// It first commits the run's journal row (operation ID, writer session,
// deadline, number of phases), so that whoever finds the run later knows
// which session to ask about, and so that the operation ID is spent before
// any plan SQL: a second Execute under the same operation ID, from any
// process, executes nothing (ErrAlreadyRun).
//
// Then the plan runs phase by phase (see Plan.Phases and PlanPhases), each
// phase in ONE transaction: the preamble as SET LOCAL, each statement with
// its journal step (which names the phase), and then, in the last phase,
// the run marked succeeded, or, in an earlier one, the phase's steps
// marked committed; all committed by the phase's COMMIT, before the next
// phase begins. Each transaction checks the lease first. After any crash
// the journal is exact: a phase committed if and only if its steps are
// committed, and the whole plan if and only if the run succeeded. A plan
// of one phase is all-or-nothing. Statements are numbered, reported to
// progress and journaled in plan order, which is the order they run in,
// each once.
//
// Errors:
//   - ErrNotStarted: nothing ran (the plan's phases do not cover its
//     statements, or its run could not be recorded).
//   - ErrAlreadyRun: the operation ID was spent already; nothing ran.
//   - ErrPlanFailed (a *StatementError, or a failure around the
//     statements): the first phase rolled back, nothing of the plan
//     committed; recorded as failed when the session still allows it.
//   - ErrPartiallyApplied (a *StatementError with Committed > 0, or a
//     failure around the statements): one or more phases committed, then
//     a later one failed and was rolled back. The database changed: it has
//     the committed phases and nothing of the rest. Recorded as partially
//     applied (RunPartiallyApplied) when the session still allows it. It
//     does not wrap ErrPlanFailed.
//   - ErrOutcomeUnknown: the connection was lost during a COMMIT; read the
//     journal once the session is gone. When earlier phases committed, the
//     message says so.
func (w *Writer) Execute(ctx context.Context, planUID string, plan *Plan, progress ProgressFunc) error {
	if w.conn == nil || w.conn.IsClosed() {
		return fmt.Errorf("%w: executing operation %s: %w", ErrNotStarted, w.operationID, ErrWriterClosed)
	}
	phases, err := plan.phases()
	if err != nil {
		return fmt.Errorf("%w: executing operation %s: %w", ErrNotStarted, w.operationID, err)
	}
	if len(phases) == 0 {
		// A plan of no statements runs all the same: one transaction that
		// journals its run succeeded.
		phases = []Phase{{}}
	}
	run := &Run{OperationID: w.operationID, Resource: w.resource, PlanUID: planUID,
		Writer: w.session, Deadline: w.deadline, Phases: len(phases)}
	if err := recordRunStart(ctx, w.conn, run); err != nil {
		if errors.Is(err, ErrAlreadyRun) {
			return fmt.Errorf("executing operation %s: %w", w.operationID, err)
		}
		return fmt.Errorf("%w: recording the start of run %s: %w", ErrNotStarted, w.operationID, err)
	}
	committed := 0
	for k, ph := range phases {
		if k > 0 {
			failpoint.Hit(failpoint.BetweenPhases)
		}
		tx := phaseTx{plan: plan, phase: k + 1, phases: len(phases), from: committed, to: committed + ph.Statements}
		if err := w.runTx(ctx, tx, progress); err != nil {
			return w.failed(ctx, err, k, committed)
		}
		committed = tx.to
	}
	// Back to idle: the session must not outlive the deadline holding the
	// lock. Past it already, the plan committed all the same.
	if err := armDeadline(ctx, w.conn, w.deadline, false); err != nil && !errors.Is(err, ErrDeadlinePassed) {
		return fmt.Errorf("run %s committed, but re-arming its deadline failed: %w", w.operationID, err)
	}
	return nil
}

// failed journals a phase of the plan that did not commit, after the
// phases before it (done of them, committed statements) had, and returns
// its error.
func (w *Writer) failed(ctx context.Context, err error, done, committed int) error {
	if errors.Is(err, ErrOutcomeUnknown) {
		if committed > 0 {
			return fmt.Errorf("executing run %s (its %s, %s, committed): %w",
				w.operationID, committedPhases(done), statementRange(0, committed), err)
		}
		return fmt.Errorf("executing run %s: %w", w.operationID, err)
	}
	outcome := RunFailed
	if committed > 0 {
		outcome = RunPartiallyApplied
	}
	return w.recordFailure(ctx, err, outcome)
}

// recordFailure journals a transaction of the plan that rolled back, and
// returns its error.
func (w *Writer) recordFailure(ctx context.Context, planErr error, outcome string) error {
	planErr = fmt.Errorf("executing run %s: %w", w.operationID, planErr)
	if w.conn.IsClosed() {
		// The session is gone, and with it the transaction: the unfinished
		// run row says the same once SessionAlive says it is gone.
		return planErr
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	if err := recordRunEnd(ctx, w.conn, w.operationID, outcome, planErr.Error()); err != nil {
		return errors.Join(planErr, fmt.Errorf("recording the failure of run %s: %w", w.operationID, err))
	}
	return planErr
}

// phaseTx is one phase of a plan: statements [from, to), the phase-th of
// phases.
type phaseTx struct {
	plan          *Plan
	phase, phases int
	from, to      int
}

func (p phaseTx) last() bool { return p.to == len(p.plan.Statements) }

// runTx runs one phase of the plan in one transaction. The last phase
// marks the run succeeded; an earlier one only marks its steps committed.
// Any error but ErrOutcomeUnknown means the transaction did not commit;
// its class is failureClass(p.from): statements before from committed
// already.
func (w *Writer) runTx(ctx context.Context, p phaseTx, progress ProgressFunc) (err error) {
	class := failureClass(p.from)
	tx, err := w.conn.Begin(ctx)
	if err != nil {
		return fmt.Errorf("%w: beginning transaction %d/%d of the plan: %w", class, p.phase, p.phases, err)
	}
	committing := false
	defer func() {
		if err != nil && !committing {
			// The server rolls back on its own if the session is gone.
			_ = tx.Rollback(context.WithoutCancel(ctx))
		}
	}()
	if err := w.prepare(ctx, tx, p.plan); err != nil {
		return fmt.Errorf("%w: %w", class, err)
	}
	total := len(p.plan.Statements)
	for i := p.from; i < p.to; i++ {
		s := p.plan.Statements[i]
		step := Step{N: i + 1, Total: total, Phase: p.phase, Phases: p.phases, Statement: s}
		if progress != nil {
			progress(step)
		}
		started := time.Now()
		if err := w.runStatement(ctx, tx, p, i+1, s); err != nil {
			return err
		}
		if progress != nil {
			step.Done, step.Elapsed = true, time.Since(started)
			progress(step)
		}
		if i == 0 {
			failpoint.Hit(failpoint.MidPlan)
		}
	}
	if err := armDeadline(ctx, tx, w.deadline, true); err != nil {
		return fmt.Errorf("%w: %w", class, err)
	}
	if p.last() {
		if err := recordRunSucceeded(ctx, tx, w.operationID); err != nil {
			return fmt.Errorf("%w: recording the run's success: %w", class, err)
		}
	} else if err := recordStepsCommitted(ctx, tx, w.operationID, p.from+1, p.to); err != nil {
		return fmt.Errorf("%w: recording the commit of transaction %d/%d: %w", class, p.phase, p.phases, err)
	}
	committing = true
	return commitError(tx.Commit(ctx), class)
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

func (w *Writer) runStatement(ctx context.Context, tx pgx.Tx, p phaseTx, step int, s Statement) error {
	class, total := failureClass(p.from), len(p.plan.Statements)
	if err := armDeadline(ctx, tx, w.deadline, true); err != nil {
		return fmt.Errorf("%w: before statement %d/%d: %w", class, step, total, err)
	}
	if err := recordStepStart(ctx, tx, w.operationID, step, p.phase, s.SQL); err != nil {
		return fmt.Errorf("%w: journaling statement %d/%d: %w", class, step, total, err)
	}
	if _, err := tx.Exec(ctx, s.SQL); err != nil {
		// The only statement timeout the writer sets is the time left
		// before its deadline, on the server's clock (armDeadline): a
		// cancellation nobody asked for (the caller's context is live) is
		// the deadline striking.
		if IsQueryCanceled(err) && ctx.Err() == nil {
			err = fmt.Errorf("%w: %w", ErrDeadlinePassed, err)
		}
		return &StatementError{Step: step, Total: total, Phase: p.phase, Phases: p.phases, SQL: s.SQL, Committed: p.from, Err: err}
	}
	return nil
}

// commitError classifies the result of COMMIT. An answer from the server
// (an error, or the ROLLBACK an aborted transaction commits as) is
// definite, of class failed; a lost connection leaves the outcome to the
// journal.
func commitError(err, failed error) error {
	var pgErr *pgconn.PgError
	switch {
	case err == nil:
		return nil
	case IsConnectionLost(err):
		// Even a FATAL the server sent may follow a commit already durable.
		return fmt.Errorf("%w: committing: %w", ErrOutcomeUnknown, err)
	case errors.Is(err, pgx.ErrTxCommitRollback), errors.As(err, &pgErr):
		return fmt.Errorf("%w: committing: %w", failed, err)
	default:
		return fmt.Errorf("%w: committing: %w", ErrOutcomeUnknown, err)
	}
}
