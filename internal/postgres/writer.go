package postgres

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode"

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

// ProgressFunc is told after each statement of a plan ran (done of total).
// It is called with the statement's transaction open: it must be quick and
// must not use the Writer.
type ProgressFunc func(done, total int, s Statement)

// StatementError is a plan statement PostgreSQL refused. The transaction it
// ran in was rolled back: none of that transaction is visible.
//
// Committed counts the statements of the plan that had already committed,
// in the plan's enum phase (see Writer.Execute), when this one failed. When
// it is 0 the error is ErrPlanFailed: nothing of the plan is visible. When
// it is more, the error is ErrPartiallyApplied instead, and not
// ErrPlanFailed: those statements stay committed.
type StatementError struct {
	Step, Total int // Step is 1-based
	SQL         string
	Committed   int
	Err         error
}

func (e *StatementError) Error() string {
	if e.Committed > 0 {
		return fmt.Sprintf("statement %d/%d failed after the plan's enum phase (statements 1-%d) committed: %v\n%s",
			e.Step, e.Total, e.Committed, e.Err, e.SQL)
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

// EnumPhase returns how many statements, at the start of the plan, add
// labels to existing enum types (ALTER TYPE ... ADD VALUE) and are followed
// by other statements. Writer.Execute commits those in a transaction of
// their own, the plan's enum phase, before running the rest in the main
// one; 0 means the whole plan runs in one transaction.
//
// PostgreSQL refuses to use a label (as a default, in a check, a view, an
// index predicate, a row) in the transaction that added it (SQLSTATE
// 55P04), so a plan that adds a label and uses it cannot be one
// transaction. Diff puts every ADD VALUE first in its plans, where the move
// is known to be safe (see alterEnum). Execute moves nothing: an ADD VALUE
// after another kind of statement stays in the main transaction, in its
// place, and a plan of ADD VALUE statements alone runs in one transaction
// as any other.
func (p *Plan) EnumPhase() int {
	n := 0
	for n < len(p.Statements) && addsEnumLabel(p.Statements[n].SQL) {
		n++
	}
	if n == len(p.Statements) {
		return 0
	}
	return n
}

// addsEnumLabel reports whether sql is an ALTER TYPE name ADD VALUE
// statement: keywords in any case, the name optionally schema-qualified,
// either part quoted or not.
func addsEnumLabel(sql string) bool {
	rest, ok := keywords(sql, "alter", "type")
	if !ok {
		return false
	}
	if rest, ok = identifier(rest); !ok {
		return false
	}
	if after, dot := strings.CutPrefix(strings.TrimLeft(rest, " \t\r\n\f"), "."); dot {
		if rest, ok = identifier(after); !ok {
			return false
		}
	}
	_, ok = keywords(rest, "add", "value")
	return ok
}

// keywords consumes the words, each preceded by optional white space and
// followed by white space, or the end, or a quote or parenthesis.
func keywords(s string, words ...string) (string, bool) {
	for _, w := range words {
		s = strings.TrimLeft(s, " \t\r\n\f")
		if len(s) < len(w) || !strings.EqualFold(s[:len(w)], w) {
			return s, false
		}
		s = s[len(w):]
		if s != "" && !strings.ContainsAny(s[:1], " \t\r\n\f\"'(") {
			return s, false
		}
	}
	return s, true
}

// identifier consumes one identifier, quoted or not, after optional white
// space.
func identifier(s string) (string, bool) {
	s = strings.TrimLeft(s, " \t\r\n\f")
	if after, quoted := strings.CutPrefix(s, `"`); quoted {
		for i := 0; i < len(after); i++ {
			if after[i] != '"' {
				continue
			}
			if i+1 < len(after) && after[i+1] == '"' {
				i++ // a doubled quote
				continue
			}
			return after[i+1:], i > 0
		}
		return s, false
	}
	end := strings.IndexFunc(s, func(r rune) bool {
		return !(r == '_' || r == '$' || r >= 0x80 || unicode.IsLetter(r) || unicode.IsDigit(r))
	})
	if end < 0 {
		end = len(s)
	}
	return s[end:], end > 0
}

// Execute runs plan exactly once under the writer's operation ID.
//
// It first commits the run's journal row (operation ID, writer session,
// deadline), so that whoever finds the run later knows which session to
// ask about, and so that the operation ID is spent before any plan SQL: a
// second Execute under the same operation ID, from any process, executes
// nothing (ErrAlreadyRun).
//
// Then the plan runs in ONE transaction: the preamble as SET LOCAL, each
// statement with its journal step, and the run marked succeeded, all
// committed by one COMMIT. After any crash the journal is exact: the run is
// finished and succeeded if and only if the plan committed.
//
// The exception is a plan that adds labels to existing enum types and goes
// on to do more (see Plan.EnumPhase): its leading ADD VALUE statements
// first run in a transaction of their own, the enum phase, with their
// journal steps, which that transaction marks committed (the run row stays
// unfinished); then the rest of the plan runs in the main transaction as
// above. Each transaction checks the lease and applies the preamble. The
// journal stays exact: the enum phase committed if and only if its steps
// are committed, and the rest of the plan if and only if the run succeeded.
// Statements are numbered, reported to progress and journaled in plan
// order, which is the order they run in, each once.
//
// Errors:
//   - ErrNotStarted: nothing ran.
//   - ErrAlreadyRun: the operation ID was spent already; nothing ran.
//   - ErrPlanFailed (a *StatementError, or a failure around the
//     statements): rolled back, nothing of the plan committed; recorded as
//     failed when the session still allows it.
//   - ErrPartiallyApplied (a *StatementError with Committed > 0, or a
//     failure around the statements): the enum phase committed, then the
//     main transaction failed and was rolled back. The database changed: it
//     has the new labels and nothing else of the plan. Recorded as
//     partially applied (RunPartiallyApplied) when the session still allows
//     it. It does not wrap ErrPlanFailed.
//   - ErrOutcomeUnknown: the connection was lost during a COMMIT (of the
//     enum phase or of the main transaction); read the journal once the
//     session is gone. When the enum phase committed, the message says so.
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
	// The phases: [0, enum) in its own transaction, then [enum, total).
	committed := 0
	if enum := plan.EnumPhase(); enum > 0 {
		if err := w.runTx(ctx, plan, 0, enum, progress); err != nil {
			return w.failed(ctx, err, 0)
		}
		committed = enum
	}
	if err := w.runTx(ctx, plan, committed, len(plan.Statements), progress); err != nil {
		return w.failed(ctx, err, committed)
	}
	// Back to idle: the session must not outlive the deadline holding the
	// lock. Past it already, the plan committed all the same.
	if err := armDeadline(ctx, w.conn, w.deadline, false); err != nil && !errors.Is(err, ErrDeadlinePassed) {
		return fmt.Errorf("run %s committed, but re-arming its deadline failed: %w", w.operationID, err)
	}
	return nil
}

// failed journals a transaction of the plan that did not commit, after
// committed statements had, and returns its error.
func (w *Writer) failed(ctx context.Context, err error, committed int) error {
	if errors.Is(err, ErrOutcomeUnknown) {
		if committed > 0 {
			return fmt.Errorf("executing run %s (its enum phase, statements 1-%d, committed): %w", w.operationID, committed, err)
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

// runTx runs statements [from, to) of the plan in one transaction. The
// last transaction of the plan (to is the plan's end) marks the run
// succeeded; an earlier one, the enum phase, only marks its steps
// committed. Any error but ErrOutcomeUnknown means the transaction did not
// commit; its class is failureClass(from): statements before from
// committed already.
func (w *Writer) runTx(ctx context.Context, plan *Plan, from, to int, progress ProgressFunc) (err error) {
	class := failureClass(from)
	tx, err := w.conn.Begin(ctx)
	if err != nil {
		return fmt.Errorf("%w: beginning a transaction of the plan: %w", class, err)
	}
	committing := false
	defer func() {
		if err != nil && !committing {
			// The server rolls back on its own if the session is gone.
			_ = tx.Rollback(context.WithoutCancel(ctx))
		}
	}()
	if err := w.prepare(ctx, tx, plan); err != nil {
		return fmt.Errorf("%w: %w", class, err)
	}
	total := len(plan.Statements)
	for i := from; i < to; i++ {
		s := plan.Statements[i]
		if err := w.runStatement(ctx, tx, i+1, total, from, s); err != nil {
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
		return fmt.Errorf("%w: %w", class, err)
	}
	if to == total {
		if err := recordRunSucceeded(ctx, tx, w.operationID); err != nil {
			return fmt.Errorf("%w: recording the run's success: %w", class, err)
		}
	} else if err := recordStepsCommitted(ctx, tx, w.operationID); err != nil {
		return fmt.Errorf("%w: recording the enum phase's commit: %w", class, err)
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

func (w *Writer) runStatement(ctx context.Context, tx pgx.Tx, step, total, committed int, s Statement) error {
	class := failureClass(committed)
	if err := armDeadline(ctx, tx, w.deadline, true); err != nil {
		return fmt.Errorf("%w: before statement %d/%d: %w", class, step, total, err)
	}
	if err := recordStepStart(ctx, tx, w.operationID, step, s.SQL); err != nil {
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
		return &StatementError{Step: step, Total: total, SQL: s.SQL, Committed: committed, Err: err}
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
