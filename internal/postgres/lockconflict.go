package postgres

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// lockConflicts is PostgreSQL's table of conflicting lock modes (the
// documentation's "Conflicting Lock Modes", lock.c's LockConflicts): for
// each mode, the set of modes, as bits 1<<mode, that a lock in it
// conflicts with.
var lockConflicts = [...]uint16{
	AccessShare: 1 << AccessExclusive,
	RowShare:    1<<Exclusive | 1<<AccessExclusive,
	RowExclusive: 1<<Share | 1<<ShareRowExclusive | 1<<Exclusive |
		1<<AccessExclusive,
	ShareUpdateExclusive: 1<<ShareUpdateExclusive | 1<<Share | 1<<ShareRowExclusive |
		1<<Exclusive | 1<<AccessExclusive,
	Share: 1<<RowExclusive | 1<<ShareUpdateExclusive | 1<<ShareRowExclusive |
		1<<Exclusive | 1<<AccessExclusive,
	ShareRowExclusive: 1<<RowExclusive | 1<<ShareUpdateExclusive | 1<<Share |
		1<<ShareRowExclusive | 1<<Exclusive | 1<<AccessExclusive,
	Exclusive: 1<<RowShare | 1<<RowExclusive | 1<<ShareUpdateExclusive | 1<<Share |
		1<<ShareRowExclusive | 1<<Exclusive | 1<<AccessExclusive,
	AccessExclusive: 1<<AccessShare | 1<<RowShare | 1<<RowExclusive | 1<<ShareUpdateExclusive |
		1<<Share | 1<<ShareRowExclusive | 1<<Exclusive | 1<<AccessExclusive,
}

// ConflictsWith reports whether a lock in mode m and one in mode o on the
// same relation, taken by two different transactions, conflict: whichever
// asks second waits until the other is released. The relation is
// symmetric. A mode that is not one of the eight conflicts with nothing.
func (m LockMode) ConflictsWith(o LockMode) bool {
	if m < AccessShare || m > AccessExclusive || o < AccessShare || o > AccessExclusive {
		return false
	}
	return lockConflicts[m]&(1<<o) != 0
}

// checksHolders reports whether statement s, made in attempts, is first
// checked for sessions holding locks it would queue behind (see
// Writer.awaitHolders): only when the planner knows its locks, and one of
// them is one the application's reads or writes would queue behind while
// the statement waits for it. Without that knowledge there is nothing to
// check against.
func (p *Plan) checksHolders(s Statement) bool {
	return p.LocksKnown && s.StrongestLock().BlocksWrites()
}

// awaitHolders waits, before an attempt of the statement r runs, for as
// long as other sessions hold locks that conflict with the ones it needs
// (r.needs), or queue for such locks: asking for its locks then would
// queue it behind them, and the application behind it, for the whole
// attempt. An attempt takes the statement out of the queue after a short
// while, but the application's sessions still wait that long, attempt
// after attempt; checking first, from the writer's own transaction, keeps
// them from waiting at all while the holders are known to be there.
//
// While there are such sessions, progress hears of them as it hears of
// an attempt's wait (Step.Waiting), and the writer backs off as it does
// after an attempt, on the same budget. A session arriving between the
// check and the attempt is still met by the attempt's short lock_timeout.
//
// It returns what it armed last, and whether it waited at all (the
// attempt's lock_timeout is then what is left of the budget, at most an
// attempt); or the error that ends the statement: a *LockWaitError when
// the budget, or the deadline, runs out. lockErr is the lock timeout of
// the attempt before, nil before the first.
func (w *Writer) awaitHolders(ctx context.Context, tx pgx.Tx, r *lockRetry, a armed, lockErr error) (armed, bool, error) {
	waited := false
	for {
		var exclude []int32
		if r.watcher != nil && r.watcher.conn != nil {
			exclude = append(exclude, int32(r.watcher.conn.PgConn().PID()))
		}
		held, err := conflictingHolders(ctx, tx, r.needs, exclude)
		if err != nil {
			return armed{}, false, err
		}
		if held == nil {
			return a, waited, nil
		}
		waited = true
		r.saw(held)
		if err := w.yieldAutovacuum(ctx, tx, r, held); err != nil {
			return armed{}, false, err
		}
		// The transaction sits idle during the pause: re-armed first, its
		// idle timeout ends the session at the deadline whatever the
		// client does.
		if a, err = armStatement(ctx, tx, w.deadline, r.limit, 0); err != nil {
			return armed{}, false, err
		}
		wake, try := r.next(time.Now(), a)
		if try < minLockAttempt {
			return armed{}, false, r.gaveUp(lockErr, a)
		}
		r.report()
		if err := sleepUntil(ctx, wake); err != nil {
			return armed{}, false, fmt.Errorf("waiting for sessions holding conflicting locks to finish: %w", err)
		}
		// Armed again after the pause, the next check, and the attempt
		// after it, run under the time left before the deadline.
		if a, err = armStatement(ctx, tx, w.deadline, r.limit, 0); err != nil {
			return armed{}, false, err
		}
	}
}

// yieldAutovacuum cancels the autovacuum workers among held's sessions,
// when they are all the statement waits for. PostgreSQL cancels such a
// worker itself when a lock request has waited deadlock_timeout behind
// it (one vacuuming to prevent wraparound excepted), and autovacuum comes
// back to the table later; but the writer does not queue, so PostgreSQL
// never would, and a slow vacuum of a large table would outlast the
// statement's budget. Cancelling takes the privilege to signal the worker
// (a superuser's; from PostgreSQL 18, pg_signal_autovacuum_worker's) and
// to see what it runs (pg_read_all_stats), without which Autovacuum is
// never set: a refusal is remembered, and the writer waits as for any
// other session.
func (w *Writer) yieldAutovacuum(ctx context.Context, tx pgx.Tx, r *lockRetry, held *Activity) error {
	if r.autovacuumRefused || !slices.ContainsFunc(held.BlockedBy, func(b Blocker) bool { return b.Autovacuum }) ||
		slices.ContainsFunc(held.BlockedBy, func(b Blocker) bool { return !b.Autovacuum }) {
		return nil
	}
	for _, b := range held.BlockedBy {
		sp, err := tx.Begin(ctx)
		if err != nil {
			return fmt.Errorf("cancelling autovacuum worker %d: %w", b.PID, err)
		}
		_, err = sp.Exec(ctx, "SELECT pg_catalog.pg_cancel_backend($1)", b.PID)
		if err == nil {
			err = sp.Commit(ctx)
		}
		if err != nil {
			if rbErr := sp.Rollback(ctx); rbErr != nil {
				return fmt.Errorf("cancelling autovacuum worker %d: %w", b.PID, rbErr)
			}
			if !IsInsufficientPrivilege(err) {
				return fmt.Errorf("cancelling autovacuum worker %d: %w", b.PID, err)
			}
			r.autovacuumRefused = true
			return nil
		}
		r.cancelledAutovacuum++
	}
	return nil
}

// conflictingHolders reads, from the writer's transaction q, the sessions
// (other than the writer's and the pids in exclude) that hold a lock
// conflicting with one of needs, or queue for one: what a request for
// needs would queue behind. It returns nil when there are none, or else
// an Activity that says which of needs they conflict with (WaitsFor, as
// pg_locks words it: "AccessExclusiveLock on public.t") and who they are
// (BlockedBy), by pid, application_name, state and the start of their
// transaction, never by what they run.
//
// It takes no lock that could queue: pg_locks and pg_stat_activity lock
// no user relation, and to_regclass resolves a name without locking it.
// A session queued for a lock that waits for the writer itself (a lock an
// earlier statement of the phase took) is not counted: PostgreSQL grants
// the writer's request ahead of it. Neither is a prepared transaction,
// which has no session to name (pg_locks shows no pid): the attempt's
// short lock_timeout meets it.
func conflictingHolders(ctx context.Context, q pgx.Tx, needs []Lock, exclude []int32) (*Activity, error) {
	rels := make([]string, len(needs))
	for i, l := range needs {
		rels[i] = l.Relation
	}
	if exclude == nil {
		exclude = []int32{}
	}
	// pg_stat_activity is read once per transaction unless cleared, and
	// the writer reads it from its transaction, check after check.
	if _, err := q.Exec(ctx, "SELECT pg_catalog.pg_stat_clear_snapshot()"); err != nil {
		return nil, fmt.Errorf("reading the sessions holding locks the statement needs: %w", err)
	}
	rows, err := q.Query(ctx, `
SELECT w.i, l.pid, l.mode, coalesce(a.application_name, ''), coalesce(a.state, ''), a.xact_start,
	coalesce(a.backend_type = 'autovacuum worker' AND a.query LIKE 'autovacuum: %'
		AND a.query NOT LIKE '%(to prevent wraparound)', false)
FROM pg_catalog.unnest($1::text[]) WITH ORDINALITY AS w(rel, i)
JOIN pg_catalog.pg_locks l ON l.locktype = 'relation' AND l.relation = pg_catalog.to_regclass(w.rel)
     AND l.database = (SELECT oid FROM pg_catalog.pg_database WHERE datname = pg_catalog.current_database())
LEFT JOIN pg_catalog.pg_stat_activity a ON a.pid = l.pid
WHERE l.pid IS NOT NULL AND l.pid <> pg_catalog.pg_backend_pid() AND l.pid <> ALL ($2::int4[])
  AND (l.granted OR NOT pg_catalog.pg_backend_pid() = ANY (pg_catalog.pg_blocking_pids(l.pid)))
ORDER BY l.pid, w.i`, rels, exclude)
	if err != nil {
		return nil, fmt.Errorf("reading the sessions holding locks the statement needs: %w", err)
	}
	var conflicts []int // indexes into needs
	var by []Blocker
	for rows.Next() {
		var i int64
		var mode string
		var b Blocker
		var xactStart *time.Time
		if err := rows.Scan(&i, &b.PID, &mode, &b.ApplicationName, &b.State, &xactStart, &b.Autovacuum); err != nil {
			rows.Close()
			return nil, fmt.Errorf("reading the sessions holding locks the statement needs: %w", err)
		}
		need := needs[i-1]
		// A mode that is not a table lock mode (SIReadLock) blocks nobody.
		if m, ok := ParseLockMode(mode); !ok || !m.ConflictsWith(need.Mode) {
			continue
		}
		if !slices.Contains(conflicts, int(i-1)) {
			conflicts = append(conflicts, int(i-1))
		}
		if xactStart != nil {
			b.XactStart = xactStart.UTC()
		}
		if !slices.ContainsFunc(by, func(o Blocker) bool { return o.PID == b.PID }) {
			by = append(by, b)
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("reading the sessions holding locks the statement needs: %w", err)
	}
	if len(by) == 0 {
		return nil, nil
	}
	slices.Sort(conflicts)
	what := make([]string, len(conflicts))
	for k, i := range conflicts {
		what[k] = pgLocksName(needs[i].Mode) + " on " + needs[i].Relation
	}
	return &Activity{WaitsFor: strings.Join(what, " and "), BlockedBy: by}, nil
}
