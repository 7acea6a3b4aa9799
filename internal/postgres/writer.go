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
// error says how it ended. In between, a statement that waits for its
// locks may be reported waiting (Waiting set, Done false), about once a
// second, and whenever the sessions it waits for change: it is not
// starting again.
type Step struct {
	N, Total      int // N is 1-based, in plan order
	Phase, Phases int // the phase it runs in (1-based), of the plan's
	Statement     Statement
	// NoTransaction: the statement runs outside a transaction (see
	// Phase.NoTransaction). When it is reported started, its journal step
	// is committed already; when it is reported done, its completion is.
	NoTransaction bool
	// Version is the migration history version of its phase, if any.
	Version string
	Done    bool
	// Elapsed is, when Done, how long the statement ran; when Waiting, how
	// long it has tried to take its locks.
	Elapsed time.Duration
	// Waiting, when set, says the statement could not take its locks in
	// an attempt, and that the writer has stepped out of the lock queue
	// and is backing off before the next (see Plan.LockAttempt). It says
	// what the statement waits for and who holds it, as Activity.Waiting
	// words it, e.g. "AccessExclusiveLock on public.t, held by pid 42
	// (psql, idle in transaction since 12:00:01 UTC)"; or "a lock" when
	// the holder could not be seen (yet).
	Waiting string
}

// ProgressFunc hears of each statement of a plan as it starts and once it
// has run, and of its waits for locks in between (Step.Waiting). It is
// called with the statement's transaction open (for a statement run
// without a transaction, with none open, just before it is sent and after
// its completion was journaled): it must be quick and must not use the
// Writer.
type ProgressFunc func(Step)

// StatementError is a plan statement PostgreSQL refused. The transaction it
// ran in, its phase's, was rolled back: none of that phase is visible. A
// statement run without a transaction (NoTransaction) is its own
// transaction: the statements of its phase before it stay committed.
//
// Committed counts the statements of the plan that had already committed
// (in the phases before this one, and, run without a transaction, in this
// one; see Writer.Execute) when this one failed. When it is 0 the error is
// ErrPlanFailed: nothing of the plan is visible. When it is more, the
// error is ErrPartiallyApplied instead, and not ErrPlanFailed: those
// statements stay committed.
type StatementError struct {
	Step, Total   int // Step is 1-based
	Phase, Phases int // the phase (1-based) the statement ran in, of the plan's
	SQL           string
	Committed     int
	NoTransaction bool
	Err           error
}

// Error is the failure on its first line and the statement's SQL on the
// lines after it: a record that must not carry SQL (a resource's status)
// keeps the first line only.
func (e *StatementError) Error() string { return e.summary() + "\n" + e.SQL }

func (e *StatementError) summary() string {
	if e.NoTransaction {
		msg := fmt.Sprintf("statement %d/%d failed in phase %d/%d, which runs without a transaction (each statement commits on its own)",
			e.Step, e.Total, e.Phase, e.Phases)
		if e.Committed > 0 {
			msg += fmt.Sprintf(", after %s committed", statementRange(0, e.Committed))
		}
		return fmt.Sprintf("%s: %v", msg, e.Err)
	}
	if e.Committed > 0 {
		return fmt.Sprintf("statement %d/%d failed in transaction %d/%d, after %s (%s) committed: %v",
			e.Step, e.Total, e.Phase, e.Phases, committedPhases(e.Phase-1), statementRange(0, e.Committed), e.Err)
	}
	return fmt.Sprintf("statement %d/%d failed: %v", e.Step, e.Total, e.Err)
}

// Unwrap exposes both the class (ErrPlanFailed, or ErrPartiallyApplied)
// and the cause, which the SQLSTATE predicates read.
func (e *StatementError) Unwrap() []error { return []error{failureClass(e.Committed), e.Err} }

// failureClass is the class of a definite failure (its transaction rolled
// back, or its statement run without a transaction was refused) when
// committed statements of the plan had committed before it.
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
// Then the plan runs phase by phase (see Plan.Phases and PlanPhases),
// each committed before the next begins. A transactional phase is ONE
// transaction: the preamble as SET LOCAL, each statement with its journal
// step (which names the phase), the phase's history row if it has one
// (Phase.History), and then, in the last phase, the run marked succeeded,
// or, in an earlier one, the phase's steps marked committed; all committed
// by the phase's COMMIT. A no-transaction phase (Phase.NoTransaction) runs
// its statements one at a time, each outside any transaction block: for
// each, a small transaction commits its journal step, so that the
// statement in flight is on record before it is sent; then the statement
// runs under the preamble, set for the session and reset after it; then
// another small transaction marks it committed, with, after the phase's
// last statement, its history row (and, after the plan's last, the run's
// success). Before each transaction of a plan statement, and each
// statement run without one, the writer checks the lease still names it
// and arms the deadline (see armDeadline), so neither a lost lease nor a
// passed deadline lets a statement start.
//
// A statement of a transactional phase takes its locks in short attempts
// (Plan.LockAttempt), each rolled back to a savepoint taken just before
// the statement when it times out waiting, so that the writer never sits
// in PostgreSQL's lock queue, ahead of the application's sessions, for
// longer than one attempt; it tries again until the plan's LockTimeout is
// spent, and progress hears whom it waits for (Step.Waiting). A statement
// run without a transaction makes one attempt of LockTimeout (see
// Writer.sendNoTx).
//
// What must be durable before a migration file runs, and what may share
// its transaction. Durable first, once per run: the lease row (OpenWriter)
// and the run row with the dispatch marker and the spent approval
// (recordRunStart). The run row is what turns a crash into an unfinished
// run a person is asked about (never a file silently run twice): it names
// the session whose end proves the run can no longer write, and it spends
// the operation ID. Nothing else needs to be durable before a
// transactional file runs: its journal steps, its history row and the
// journal's record of its completion (steps committed, or the run
// succeeded) are written inside the file's own transaction, so they
// become durable with the file's statements, in its one COMMIT, or not
// at all. A crash before that COMMIT leaves none of them and none of the
// file, and the unfinished run still holds the database until a person
// settles it. So a transactional file costs one commit, one WAL flush,
// as it would for a tool that records only a history row; the writes
// around its statements travel in batches (prepare, runStatement, the
// closing writes of runTx), a round trip each, and none is dropped. A
// statement run without a transaction is different: it commits on its
// own, so its journal step must commit before it is sent, and its
// completion after it (see runNoTx): two more commits per statement.
//
// After any crash the journal is exact about transactions: a transactional
// phase committed if and only if its steps are committed, and the whole
// plan if and only if the run succeeded. A statement run without a
// transaction that the journal shows started and not completed, in an
// unfinished run, may or may not have taken effect (Run.InFlight). A plan
// of one transactional phase is all-or-nothing. Statements are numbered,
// reported to progress and journaled in plan order, which is the order
// they run in, each once.
//
// When plan.History.Expect is set, the writer reads the resource's
// migration history just before the plan's first statement, inside the
// transaction that runs it (or, run without a transaction, that journals
// its start), while it holds the lease, and refuses the run if Expect
// does.
//
// Errors:
//   - ErrNotStarted: nothing ran (the plan's phases do not cover its
//     statements, or its run could not be recorded). With ErrHistoryMoved:
//     plan.History.Expect refused the history; the run is journaled as
//     failed.
//   - ErrAlreadyRun: the operation ID was spent already; nothing ran.
//   - ErrPlanFailed (a *StatementError, or a failure around the
//     statements): nothing of the plan committed: the first phase rolled
//     back, or its first statement, run without a transaction, was
//     refused; recorded as failed when the session still allows it. (A
//     refused statement that PostgreSQL runs in several transactions of
//     its own, CREATE INDEX CONCURRENTLY, may leave an invalid index.)
//     A statement whose lock timeout was spent in attempts has a
//     *LockWaitError as its cause, which IsLockTimeout reports.
//   - ErrPartiallyApplied (a *StatementError with Committed > 0, or a
//     failure around the statements): part of the plan committed (phases,
//     or statements of a no-transaction phase), then a later part failed
//     (was rolled back, or refused). The database changed: it has what
//     committed and nothing of the rest. Recorded as partially applied
//     (RunPartiallyApplied) when the session still allows it. It does not
//     wrap ErrPlanFailed. This is also the error when a statement run
//     without a transaction succeeded and its completion could not be
//     journaled.
//   - ErrOutcomeUnknown: the connection was lost during a COMMIT, or
//     while a statement run without a transaction was in flight (which
//     may have taken effect, and may still be running on the server until
//     it notices). Read the journal once the session is gone. When
//     earlier statements committed, the message says so. Never retried.
func (w *Writer) Execute(ctx context.Context, planUID string, plan *Plan, progress ProgressFunc) error {
	return w.ExecuteMarked(ctx, planUID, plan, progress, nil)
}

// ErrNotMarked wraps the error of ExecuteMarked's mark: the transaction
// that would have journaled the run rolled back, and nothing ran.
var ErrNotMarked = errors.New("the dispatch could not be recorded")

// ExecuteMarked is Execute with the caller's own records of the dispatch
// (mark: the dispatch marker, an approval spent) written in the same
// transaction as the run's journal row, so that all of them commit
// together or none does. A mark that fails rolls that transaction back:
// nothing ran, and the error wraps ErrNotStarted and ErrNotMarked. Once it
// committed, the failpoint AfterDispatch stops the process before any plan
// statement.
func (w *Writer) ExecuteMarked(ctx context.Context, planUID string, plan *Plan, progress ProgressFunc,
	mark func(context.Context, pgx.Tx) error) error {
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
	if err := recordRunStart(ctx, w.conn, run, mark); err != nil {
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
		p := phaseRun{plan: plan, ph: ph, phase: k + 1, phases: len(phases), from: committed, to: committed + ph.Statements}
		if ph.outsideTx() {
			if out, err := w.runNoTx(ctx, p, progress); err != nil {
				return w.failed(ctx, err, k, committed, committed+out.committed, out.unjournaled)
			}
		} else if err := w.runTx(ctx, p, progress); err != nil {
			return w.failed(ctx, err, k, committed, committed, 0)
		}
		committed = p.to
	}
	// Back to idle: the session must not outlive the deadline holding the
	// lock. Past it already, the plan committed all the same.
	if err := armDeadline(ctx, w.conn, w.deadline, false); err != nil && !errors.Is(err, ErrDeadlinePassed) {
		return fmt.Errorf("run %s committed, but re-arming its deadline failed: %w", w.operationID, err)
	}
	return nil
}

// failed journals a phase of the plan that did not complete, after the
// phases before it (done of them, their statements before from) had
// committed, and committed statements in all (those of this phase too,
// when it runs without a transaction), and returns its error. unjournaled
// is a statement that committed without its completion journaled (0 when
// none).
func (w *Writer) failed(ctx context.Context, err error, done, from, committed, unjournaled int) error {
	if errors.Is(err, ErrOutcomeUnknown) {
		switch {
		case committed == 0:
			return fmt.Errorf("executing run %s: %w", w.operationID, err)
		case committed == from:
			return fmt.Errorf("executing run %s (its %s, %s, committed): %w",
				w.operationID, committedPhases(done), statementRange(0, committed), err)
		default:
			return fmt.Errorf("executing run %s (its %s committed): %w", w.operationID, statementRange(0, committed), err)
		}
	}
	outcome := RunFailed
	if committed > 0 {
		outcome = RunPartiallyApplied
	}
	return w.recordFailure(ctx, err, outcome, unjournaled)
}

// recordFailure journals a part of the plan that failed, and returns its
// error.
func (w *Writer) recordFailure(ctx context.Context, planErr error, outcome string, unjournaled int) error {
	planErr = fmt.Errorf("executing run %s: %w", w.operationID, planErr)
	if w.conn.IsClosed() {
		// The session is gone, and with it the transaction: the unfinished
		// run row says the same once SessionAlive says it is gone.
		return planErr
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	if err := recordRunEnd(ctx, w.conn, w.operationID, outcome, planErr.Error(), unjournaled); err != nil {
		return errors.Join(planErr, fmt.Errorf("recording the failure of run %s: %w", w.operationID, err))
	}
	return planErr
}

// phaseRun is one phase of a plan, ph: statements [from, to), the
// phase-th of phases.
type phaseRun struct {
	plan          *Plan
	ph            Phase
	phase, phases int
	from, to      int
}

// last reports whether the phase is the plan's last, which records the
// run's success. (Phases of no statements may follow the last statement.)
func (p phaseRun) last() bool { return p.phase == p.phases }

// first reports whether the phase is the plan's first, where the history
// precondition is checked.
func (p phaseRun) first() bool { return p.phase == 1 }

// version is the history version of the phase's statements, if any.
func (p phaseRun) version() string {
	if p.ph.History == nil {
		return ""
	}
	return p.ph.History.Version
}

func (p phaseRun) step(i int) Step {
	return Step{N: i + 1, Total: len(p.plan.Statements), Phase: p.phase, Phases: p.phases,
		Statement: p.plan.Statements[i], NoTransaction: p.ph.outsideTx(), Version: p.version()}
}

// runTx runs one phase of the plan in one transaction. The last phase
// marks the run succeeded; an earlier one only marks its steps committed.
// Any error but ErrOutcomeUnknown means the transaction did not commit;
// its class is failureClass(p.from): statements before from committed
// already (or ErrNotStarted, when the history precondition refused).
func (w *Writer) runTx(ctx context.Context, p phaseRun, progress ProgressFunc) (err error) {
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
	if p.first() {
		if err := w.expectHistory(ctx, tx, p.plan); err != nil {
			return err
		}
	}
	for i := p.from; i < p.to; i++ {
		step := p.step(i)
		if progress != nil {
			progress(step)
		}
		started := time.Now()
		if err := w.runStatement(ctx, tx, p, step, progress); err != nil {
			return err
		}
		if progress != nil {
			step.Done, step.Elapsed = true, time.Since(started)
			progress(step)
		}
		if i == p.from {
			failpoint.Hit(failpoint.MidPlan)
		}
	}
	// The phase's closing writes, in one round trip: the deadline armed
	// for them, the history rows, and the journal's record that the phase
	// (or, in the last one, the run) committed. They commit with the
	// phase, so none of them need be durable before it: a crash before
	// the COMMIT leaves neither the statements nor these rows, and the
	// journal shows the run unfinished (see Execute).
	b := &pgx.Batch{}
	newArming(w.deadline, 0, deadlineSettings(true)).queue(b)
	if p.ph.History != nil {
		runHistory(p.plan.History.Resource, w.operationID, p.phase, p.ph.History).queue(b)
		for i := range p.ph.Also {
			runHistory(p.plan.History.Resource, w.operationID, p.phase, &p.ph.Also[i]).queue(b)
		}
	}
	done := stepsCommitted(w.operationID, p.from+1, p.to)
	what := fmt.Sprintf("recording the commit of transaction %d/%d", p.phase, p.phases)
	if p.last() {
		done, what = runSucceeded(w.operationID), "recording the run's success"
	}
	b.Queue(done.sql, done.args...).Fn = func(br pgx.BatchResults) error {
		if err := done.result(br.Exec()); err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		return nil
	}
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return fmt.Errorf("%w: %w", class, err)
	}
	committing = true
	return commitError(tx.Commit(ctx), class)
}

// prepare checks, inside the plan's transaction, that the lease still
// names this writer, and keeps it so until COMMIT (see checkLease); then it
// applies the plan's preamble to the transaction.
func (w *Writer) prepare(ctx context.Context, tx pgx.Tx, plan *Plan) error {
	// One round trip: the check's answer is read before any plan
	// statement is sent, and the settings are the transaction's own.
	b := &pgx.Batch{}
	w.queueLeaseCheck(b)
	for _, set := range plan.Preamble() {
		// The preamble is written for a session (psql runs it as is);
		// scoped to the transaction it cannot leak into the journal writes
		// that follow a rollback.
		local := strings.Replace(set, "SET ", "SET LOCAL ", 1)
		b.Queue(local).Fn = func(br pgx.BatchResults) error {
			if _, err := br.Exec(); err != nil {
				return fmt.Errorf("applying %q: %w", local, err)
			}
			return nil
		}
	}
	return tx.SendBatch(ctx, b).Close()
}

// checkLease checks, inside tx, that the lease still names this writer,
// and keeps it so until tx ends: FOR SHARE blocks a concurrent
// ReleaseLease.
func (w *Writer) checkLease(ctx context.Context, tx pgx.Tx) error {
	b := &pgx.Batch{}
	w.queueLeaseCheck(b)
	return tx.SendBatch(ctx, b).Close()
}

// queueLeaseCheck adds checkLease's query to b: the batch fails with
// ErrLeaseLost when the lease no longer names this writer.
func (w *Writer) queueLeaseCheck(b *pgx.Batch) {
	b.Queue(`SELECT EXISTS (SELECT 1 FROM ptah.leases WHERE coordination_digest = $1
		AND holder = $2 AND writer_pid = $3 AND writer_backend_start = $4 FOR SHARE)`,
		w.digest, w.operationID, w.session.PID, w.session.BackendStart).QueryRow(func(row pgx.Row) error {
		var ours bool
		if err := row.Scan(&ours); err != nil {
			return fmt.Errorf("checking the lease: %w", err)
		}
		if !ours {
			return ErrLeaseLost
		}
		return nil
	})
}

// expectHistory reads the plan's migration history inside tx, the
// transaction that runs (or journals) the plan's first statement, and asks
// plan.History.Expect whether it is the history the plan was selected
// against. The error wraps ErrNotStarted, and ErrHistoryMoved when Expect
// refused.
//
// No lock is taken on the history: the read is enough because every
// writer of history rows for a run holds the database's lease, which this
// writer holds (checkLease just confirmed it, FOR SHARE, in tx), so no
// other run can record a version between this read and the plan's
// statements. What is left is a person's RecordHistory (resolve-run),
// which settles a run whose writer can no longer write and is not a
// writer; should one race with this run, the primary key (resource,
// version) refuses the second row of a version, and a transactional file
// whose row is refused rolls back with it.
func (w *Writer) expectHistory(ctx context.Context, tx pgx.Tx, plan *Plan) error {
	if plan.History == nil || plan.History.Expect == nil {
		return nil
	}
	rows, err := readHistory(ctx, tx, plan.History.Resource)
	if err != nil {
		return fmt.Errorf("%w: reading the migration history of %s: %w", ErrNotStarted, plan.History.Resource, err)
	}
	if err := plan.History.Expect(rows); err != nil {
		return fmt.Errorf("%w: %w: %w", ErrNotStarted, ErrHistoryMoved, err)
	}
	return nil
}

// runStatement runs one statement of a transactional phase in tx, after
// its journal step: in attempts (see Writer.execInAttempts) when the plan
// makes them and the statement may queue the application behind it (see
// Plan.mayQueue), or else in one, under the preamble's lock_timeout. A
// statement run in one takes no savepoint: a schema plan of thousands of
// statements on the objects it creates makes no subtransaction.
func (w *Writer) runStatement(ctx context.Context, tx pgx.Tx, p phaseRun, step Step, progress ProgressFunc) error {
	class, total, s := failureClass(p.from), len(p.plan.Statements), step.Statement
	// The deadline armed and the journal step, in one round trip, both
	// answered before the statement is sent. The step need not be durable
	// before the statement runs: it commits with it, or neither does.
	b := &pgx.Batch{}
	arming := newArming(w.deadline, p.plan.StatementTimeout, statementSettings(0))
	b.Queue(arming.sql, arming.args...).QueryRow(func(row pgx.Row) error {
		if err := arming.scan(row); err != nil {
			return fmt.Errorf("before statement %d/%d: %w", step.N, total, err)
		}
		if _, err := arming.result(); err != nil {
			return fmt.Errorf("before statement %d/%d: %w", step.N, total, err)
		}
		return nil
	})
	journal := stepStart(w.operationID, step.N, p.phase, s.SQL, p.version(), false)
	b.Queue(journal.sql, journal.args...).Fn = func(br pgx.BatchResults) error {
		if err := journal.result(br.Exec()); err != nil {
			return fmt.Errorf("journaling statement %d/%d: %w", step.N, total, err)
		}
		return nil
	}
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return fmt.Errorf("%w: %w", class, err)
	}
	a, _ := arming.result()
	if p.plan.lockAttempt() > 0 && p.plan.mayQueue(s) {
		return w.execInAttempts(ctx, tx, p, step, a, progress)
	}
	if _, err := tx.Exec(ctx, s.SQL); err != nil {
		return p.refused(step.N, w.deadlineStruck(ctx, err, a))
	}
	return nil
}

// refused is the *StatementError of statement n (1-based) of a
// transactional phase: its transaction rolls back.
func (p phaseRun) refused(n int, err error) *StatementError {
	return &StatementError{Step: n, Total: len(p.plan.Statements), Phase: p.phase, Phases: p.phases,
		SQL: p.plan.Statements[n-1].SQL, Committed: p.from, Err: err}
}

// deadlineStruck words a statement's cancellation as the deadline
// striking, or as the plan's StatementTimeout when that is what a armed
// (see armStatement): the only statement timeout the writer sets is the
// smaller of the two, on the server's clock, so a cancellation nobody
// asked for (the caller's context is live) is that.
func (w *Writer) deadlineStruck(ctx context.Context, err error, a armed) error {
	switch {
	case !IsQueryCanceled(err) || ctx.Err() != nil:
		return err
	case a.limit > 0:
		return fmt.Errorf("the statement ran past the plan's statement timeout (%s): %w", a.limit, err)
	}
	return fmt.Errorf("%w: %w", ErrDeadlinePassed, err)
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
