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

// noTxOutcome is how far a no-transaction phase got before it stopped.
type noTxOutcome struct {
	// committed counts the phase's statements that committed.
	committed int
	// unjournaled is the step (1-based) of a statement that committed and
	// whose completion the journal refused to record; 0 when none.
	unjournaled int
}

// runNoTx runs a no-transaction phase: each statement outside any
// transaction block, each between two small journal transactions, the
// first committed before the statement is sent (see Writer.Execute). The
// phase's history row commits with its last statement's completion, and,
// in the plan's last phase, the run's success.
//
// The error's class: ErrOutcomeUnknown when the session was lost while a
// statement was in flight (or while its completion committed);
// otherwise failureClass of the statements that committed before the one
// that failed, ErrPartiallyApplied when it committed and its completion
// could not be journaled, or ErrNotStarted when the history precondition
// refused.
func (w *Writer) runNoTx(ctx context.Context, p phaseRun, progress ProgressFunc) (out noTxOutcome, err error) {
	total := len(p.plan.Statements)
	// Before the failure is journaled (a statement timeout left armed
	// could stop that write), and so that nothing of the phase's session
	// settings outlives it.
	defer w.resetSession(ctx, p.plan)
	for i := p.from; i < p.to; i++ {
		step := p.step(i)
		if err := w.startNoTx(ctx, p, i, p.first() && i == p.from); err != nil {
			return out, err
		}
		if i == p.from+1 {
			failpoint.Hit(failpoint.MidNoTxPhase)
		}
		if progress != nil {
			progress(step)
		}
		started := time.Now()
		if err := w.sendNoTx(ctx, p, i); err != nil {
			return out, err
		}
		elapsed := time.Since(started)
		out.committed++
		if err := w.completeNoTx(ctx, p, i); err != nil {
			if !errors.Is(err, ErrOutcomeUnknown) {
				out.unjournaled = i + 1
			}
			return out, fmt.Errorf("statement %d/%d, run without a transaction, committed; journaling its completion failed: %w", i+1, total, err)
		}
		if progress != nil {
			step.Done, step.Elapsed = true, elapsed
			progress(step)
		}
	}
	return out, nil
}

// startNoTx journals the start of statement i (0-based) of the plan, run
// without a transaction, in a transaction of its own that checks the
// lease and the deadline first (and, for the plan's first statement, the
// history precondition), and commits before the statement is sent. On any
// error the statement was not sent.
func (w *Writer) startNoTx(ctx context.Context, p phaseRun, i int, checkHistory bool) (err error) {
	class, total, s := failureClass(i), len(p.plan.Statements), p.plan.Statements[i]
	tx, err := w.conn.Begin(ctx)
	if err != nil {
		return fmt.Errorf("%w: journaling statement %d/%d: %w", class, i+1, total, err)
	}
	defer func() {
		if err != nil {
			_ = tx.Rollback(context.WithoutCancel(ctx))
		}
	}()
	if err := armDeadline(ctx, tx, w.deadline, true); err != nil {
		return fmt.Errorf("%w: before statement %d/%d: %w", class, i+1, total, err)
	}
	// FOR SHARE holds the lease only while this transaction lasts: the
	// statement, its own transaction, cannot share it. The session's
	// advisory lock, held throughout, still excludes any other writer.
	if err := w.checkLease(ctx, tx); err != nil {
		return fmt.Errorf("%w: %w", class, err)
	}
	if checkHistory {
		if err := w.expectHistory(ctx, tx, p.plan); err != nil {
			return err
		}
	}
	if err := recordStepStart(ctx, tx, w.operationID, i+1, p.phase, s.SQL, p.version(), true); err != nil {
		return fmt.Errorf("%w: journaling statement %d/%d: %w", class, i+1, total, err)
	}
	if err := tx.Commit(ctx); err != nil {
		// Even a commit whose answer was lost leaves the statement unsent:
		// at worst the journal shows it started, in an unfinished run, as
		// it would a statement in flight.
		return fmt.Errorf("%w: journaling statement %d/%d: committing: %w", class, i+1, total, err)
	}
	return nil
}

// sendNoTx runs statement i (0-based) of the plan outside a transaction
// block, under the plan's preamble, set for the session before the
// phase's first statement (so that a SET the phase runs itself holds for
// the statements after it, as in psql) and reset after its last (see
// resetSession), and under the deadline, armed for this statement alone
// (reset by completeNoTx, or resetSession after a failure).
//
// It makes one attempt, under the preamble's lock_timeout, the plan's
// whole LockTimeout: unlike a statement of a transactional phase (see
// Writer.execInAttempts) it is not retried after a lock timeout. There is
// no savepoint to step back to outside a transaction block, and a
// statement PostgreSQL runs in several transactions of its own, CREATE
// INDEX CONCURRENTLY, cut short by a lock timeout leaves an invalid index
// behind: a retry would fail on it, or build it twice.
func (w *Writer) sendNoTx(ctx context.Context, p phaseRun, i int) error {
	class, total, s := failureClass(i), len(p.plan.Statements), p.plan.Statements[i]
	a, err := w.armNoTx(ctx, p.plan, i == p.from)
	if err != nil {
		return fmt.Errorf("%w: before statement %d/%d: %w", class, i+1, total, err)
	}
	_, err = w.conn.Exec(ctx, s.SQL)
	switch {
	case err == nil:
		return nil
	case pgconn.SafeToRetry(err):
		// The driver sent nothing (the context was done already).
		return fmt.Errorf("%w: statement %d/%d was not sent: %w", class, i+1, total, err)
	case statementAnswered(w.conn, err):
		return &StatementError{Step: i + 1, Total: total, Phase: p.phase, Phases: p.phases, SQL: s.SQL,
			Committed: i, NoTransaction: true, Err: w.deadlineStruck(ctx, err, a)}
	}
	return fmt.Errorf("%w: statement %d/%d, run without a transaction, was in flight when the session was lost: "+
		"it may or may not have taken effect, and the server may still be running it: %w\n%s",
		ErrOutcomeUnknown, i+1, total, err, s.SQL)
}

// statementAnswered reports whether err is the server's definite refusal
// of a statement, after which the session is still usable: the statement
// did not take effect (PostgreSQL rolled back its implicit transaction).
// Anything else (a lost session, a cancelled context that made the driver
// drop the connection, a network error) leaves the statement's fate
// unknown.
func statementAnswered(conn *pgx.Conn, err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && !IsConnectionLost(err) && !conn.IsClosed()
}

// completeNoTx resets the session after statement i (0-based) succeeded,
// and journals its completion: its step committed, and, when it is the
// phase's last, the phase's history row, and, when the plan's last, the
// run's success, together in one transaction. The error is
// ErrOutcomeUnknown when the session was lost during that COMMIT (the
// completion may or may not be on record), and ErrPartiallyApplied
// otherwise: the statement committed, its completion did not.
func (w *Writer) completeNoTx(ctx context.Context, p phaseRun, i int) (err error) {
	// The journal writes carry no statement timeout (see armDeadline).
	if _, err := w.conn.Exec(ctx, "RESET statement_timeout"); err != nil {
		return fmt.Errorf("%w: %w", ErrPartiallyApplied, err)
	}
	tx, err := w.conn.Begin(ctx)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrPartiallyApplied, err)
	}
	committing := false
	defer func() {
		if err != nil && !committing {
			_ = tx.Rollback(context.WithoutCancel(ctx))
		}
	}()
	if err := recordStepCompleted(ctx, tx, w.operationID, i+1); err != nil {
		return fmt.Errorf("%w: %w", ErrPartiallyApplied, err)
	}
	if i == p.to-1 && p.ph.History != nil {
		if err := recordRunHistory(ctx, tx, p.plan.History.Resource, w.operationID, p.phase, p.ph.History); err != nil {
			return fmt.Errorf("%w: %w", ErrPartiallyApplied, err)
		}
	}
	if i == p.to-1 && p.last() {
		if err := runSucceeded(w.operationID).exec(ctx, tx); err != nil {
			return fmt.Errorf("%w: recording the run's success: %w", ErrPartiallyApplied, err)
		}
	}
	committing = true
	return commitError(tx.Commit(ctx), ErrPartiallyApplied)
}

// armNoTx applies the plan's preamble to the session (first: before the
// phase's first statement), and arms the deadline, and the plan's
// StatementTimeout when it is set and the smaller, for the next statement
// (armStatementDeadline): a statement outside a transaction block has no
// transaction to scope them to.
func (w *Writer) armNoTx(ctx context.Context, plan *Plan, first bool) (armed, error) {
	if first {
		for _, set := range plan.Preamble() {
			if _, err := w.conn.Exec(ctx, set); err != nil {
				return armed{}, fmt.Errorf("applying %q: %w", set, err)
			}
		}
	}
	return armStatementDeadline(ctx, w.conn, w.deadline, plan.StatementTimeout)
}

// resetSession undoes armNoTx, the preamble and the statement timeout, so
// that neither leaks into the journal writes after a failure or into
// whatever the session runs next. The session may be gone; then so are
// its settings. It is bounded, and runs even when ctx is done.
func (w *Writer) resetSession(ctx context.Context, plan *Plan) {
	if w.conn.IsClosed() {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	resets := []string{"RESET statement_timeout"}
	for _, set := range plan.Preamble() {
		// "SET name = value"
		if f := strings.Fields(set); len(f) > 1 {
			resets = append(resets, "RESET "+f[1])
		}
	}
	// A session that cannot run this is unusable; what follows says so.
	_, _ = w.conn.Exec(ctx, strings.Join(resets, "; "))
}
