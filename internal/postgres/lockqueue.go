package postgres

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Lock queue safety. PostgreSQL grants locks in the order they are asked
// for: a statement that waits for a strong lock (ALTER TABLE takes ACCESS
// EXCLUSIVE) behind a session's open transaction holds up, for as long as
// it waits, every session that asks for the table after it, readers
// included. A plan statement that sits in that queue for its whole
// lock_timeout takes the application down for that long. So the writer
// never waits longer than one short attempt (Plan.LockAttempt) in the
// queue ahead of the application: it steps out, lets the queue through,
// backs off, and tries again, until the statement's budget
// (Plan.LockTimeout) is spent.

const (
	// defaultLockAttempt is the attempt of a plan whose LockAttempt is 0.
	defaultLockAttempt = 100 * time.Millisecond
	// firstBackOff is the pause after a statement's first failed attempt;
	// each pause after it doubles, up to maxBackOff.
	firstBackOff = 50 * time.Millisecond
	maxBackOff   = time.Second
	// minLockAttempt is the shortest attempt worth making: one shorter
	// than this is spent before the statement reaches the lock it waits
	// for.
	minLockAttempt = 10 * time.Millisecond
	// watchEvery is how often, during an attempt, the watcher reads what
	// the writer waits for.
	watchEvery = 25 * time.Millisecond
	// waitReportEvery is how often, at most, progress hears that a
	// statement still waits for the same sessions.
	waitReportEvery = time.Second
	// attemptSavepoint is the savepoint each attempt rolls back to.
	attemptSavepoint = "ptah_lock_attempt"
)

// lockAttempt is how long one attempt to take a statement's locks may
// wait; 0 when each statement makes one attempt of LockTimeout (see
// Plan.LockAttempt).
func (p *Plan) lockAttempt() time.Duration {
	a := p.LockAttempt
	if a == 0 {
		a = defaultLockAttempt
	}
	if a < 0 || a >= p.LockTimeout {
		return 0
	}
	return a
}

// mayQueue reports whether statement s may wait for a lock that queues
// the application behind it, and so takes its locks in attempts. When the
// planner knows the statement's locks (LocksKnown), that is a lock the
// application's writes would queue behind (SHARE or stronger): one that
// conflicts with neither its reads nor its writes (SHARE UPDATE
// EXCLUSIVE) holds up only other DDL and VACUUM, and a statement that
// locks only objects the plan created (no Locks) holds up nobody. Such
// statements run as they are, without the savepoint each attempt costs.
// Otherwise the writer guesses from the statement's leading keywords (see
// mayQueueForLock).
func (p *Plan) mayQueue(s Statement) bool {
	if p.LocksKnown {
		return s.StrongestLock().BlocksWrites()
	}
	return mayQueueForLock(s.SQL)
}

// mayQueueForLock reports whether statement sql may wait for a lock
// stronger than ROW EXCLUSIVE on a relation other sessions use, the kind
// of wait that queues the application behind it: the statements that
// alter, drop, index, lock, truncate, rewrite or refresh a relation, put a
// trigger, rule or policy on one, replace a view, or create a table that
// references, inherits or partitions another. Only those take their locks
// in attempts. The others (DML, which takes ROW EXCLUSIVE at most, and the
// creation of new objects) run as they are: each attempt costs a
// savepoint, a subtransaction, and a plan of thousands of CREATE TABLE
// statements would fill the transaction with them for nothing. It reads
// the statement's leading keywords only, as a heuristic: a DO block or a
// function call may take any lock, and runs in one attempt.
func mayQueueForLock(sql string) bool {
	sql = skipComments(sql)
	for _, verb := range []string{"alter", "drop", "lock", "truncate", "reindex", "cluster", "refresh"} {
		if _, ok := keywords(sql, verb); ok {
			return true
		}
	}
	rest, ok := keywords(sql, "create")
	if !ok {
		return false
	}
	if r, ok := keywords(rest, "or", "replace"); ok {
		rest = r
		if _, fn := keywords(rest, "function"); fn {
			return false
		}
		if _, proc := keywords(rest, "procedure"); proc {
			return false
		}
		return true // a view, a rule, a trigger
	}
	for _, what := range [][]string{{"index"}, {"unique", "index"}, {"trigger"}, {"constraint", "trigger"}, {"rule"}, {"policy"}} {
		if _, ok := keywords(rest, what...); ok {
			return true
		}
	}
	for _, table := range [][]string{{"table"}, {"unlogged", "table"}, {"temp", "table"}, {"temporary", "table"}} {
		if _, ok := keywords(rest, table...); ok {
			upper := strings.ToUpper(sql)
			return strings.Contains(upper, "REFERENCES") || strings.Contains(upper, "PARTITION OF") ||
				strings.Contains(upper, "INHERITS") || strings.Contains(upper, "LIKE")
		}
	}
	return false
}

// skipComments skips the white space and SQL comments a statement starts
// with.
func skipComments(sql string) string {
	for {
		sql = strings.TrimLeft(sql, " \t\r\n\f")
		switch {
		case strings.HasPrefix(sql, "--"):
			i := strings.IndexByte(sql, '\n')
			if i < 0 {
				return ""
			}
			sql = sql[i+1:]
		case strings.HasPrefix(sql, "/*"):
			i := strings.Index(sql, "*/")
			if i < 0 {
				return ""
			}
			sql = sql[i+2:]
		default:
			return sql
		}
	}
}

// LockWaitError is a statement of a transactional phase that could not
// take its locks within the plan's LockTimeout, tried in attempts of
// LockAttempt (see Plan.LockAttempt). It wraps the last attempt's lock
// timeout (SQLSTATE 55P03): IsLockTimeout reports it as it does one
// attempt's, and Writer.Execute returns it as the Err of the statement's
// *StatementError, as it does a lock timeout.
//
// A statement whose locks the planner knows may have made no attempt at
// all (Attempts 0): other sessions held conflicting locks for the whole
// budget, and the writer, which checks for them before each attempt (see
// Writer.awaitHolders), never joined the lock queue behind them. It then
// wraps a lock timeout of its own making (see notRequested), as the server
// would word one.
//
// It names the sessions the statement waited for by pid,
// application_name, state and the start of their transaction, never by
// what they run: the error is journaled, and shown to whoever runs ptah.
type LockWaitError struct {
	Attempts int
	// Tried is how long the statement tried, from its first attempt (or
	// the check before it) until it gave up; Attempt, how long each
	// attempt could wait at most.
	Tried, Attempt time.Duration
	// WaitsFor is the lock it waited for, e.g. "AccessExclusiveLock on
	// public.t"; "" when no attempt was seen waiting.
	WaitsFor string
	// BlockedBy are the sessions seen holding it (or queued for it ahead
	// of the statement, or, before an attempt, holding or queued for a
	// lock that conflicts with it), over all the attempts, as last seen.
	BlockedBy []Blocker
	// Deadline: the run's deadline, before the budget, left no time for
	// another attempt.
	Deadline bool
	Err      error
}

func (e *LockWaitError) Error() string {
	var b strings.Builder
	if e.Attempts == 0 {
		fmt.Fprintf(&b, "waited %s for sessions holding conflicting locks to finish, without joining the lock queue",
			e.Tried.Round(time.Millisecond))
		if e.Deadline {
			b.WriteString(", and the run's deadline leaves no time to wait longer")
		}
	} else {
		fmt.Fprintf(&b, "could not take its locks in %d attempts over %s (each waited at most %s, then let the sessions queued behind it through)",
			e.Attempts, e.Tried.Round(time.Millisecond), e.Attempt)
		if e.Deadline {
			b.WriteString(", and the run's deadline leaves no time for another")
		}
	}
	if waiting := (&Activity{WaitsFor: e.WaitsFor, BlockedBy: e.BlockedBy}).Waiting(); waiting != "" {
		b.WriteString(": waiting for " + waiting)
	} else {
		b.WriteString(": the sessions holding them could not be seen")
	}
	fmt.Fprintf(&b, ": %v", e.Err)
	return b.String()
}

func (e *LockWaitError) Unwrap() error { return e.Err }

// notRequested is the lock timeout of a statement that gave up before
// its first attempt (see LockWaitError): no attempt timed out, yet the
// statement failed for the reason a lock timeout fails, and callers tell
// lock timeouts apart by their SQLSTATE (IsLockTimeout). The writer, not
// the server, makes it.
func notRequested() error {
	return &pgconn.PgError{Severity: "ERROR", Code: "55P03",
		Message: "lock not requested: conflicting locks were held throughout the lock timeout"}
}

// execInAttempts runs statement step of a transactional phase in tx, its
// journal step written already, in attempts of Plan.LockAttempt, until one
// takes its locks or the plan's LockTimeout is spent; a is what was armed
// for the first attempt.
//
// Every attempt runs under a savepoint taken after the journal step, so
// that rolling an attempt back keeps the step, and the phase's statements
// before it. An attempt that times out waiting for a lock (55P03) is
// rolled back to the savepoint at once: that takes the statement out of
// the lock queue, and the sessions queued behind it go through. The
// writer backs off (see Writer.backOff) and tries again, and, from the
// second attempt, watches from a session of its own whom the statement
// waits for (see lockWatcher), which progress hears (Step.Waiting). Once
// the budget is spent, the statement fails as a lock timeout does, with a
// *LockWaitError. Once an attempt succeeds, the savepoint is released and
// lock_timeout is the preamble's again, for what the phase runs after it.
//
// When the planner knows the statement's locks (see Plan.checksHolders),
// every attempt, the first included, is made only once no other session
// holds, or queues for, a lock that conflicts with them (see
// Writer.awaitHolders): until then the writer does not join the queue at
// all, and waits, reports and gives up as it does between attempts.
func (w *Writer) execInAttempts(ctx context.Context, tx pgx.Tx, p phaseRun, step Step, a armed, progress ProgressFunc) error {
	plan, class, total := p.plan, failureClass(p.from), len(p.plan.Statements)
	r := &lockRetry{budget: plan.LockTimeout, attempt: plan.lockAttempt(), limit: plan.StatementTimeout,
		started: time.Now(), step: step, progress: progress}
	if plan.checksHolders(step.Statement) {
		r.needs = step.Statement.Locks
	}
	defer r.close()
	first := r.attempt
	if r.needs != nil {
		var waited bool
		var err error
		if a, waited, err = w.awaitHolders(ctx, tx, r, a, nil); err != nil {
			return p.refused(step.N, err)
		}
		if waited {
			if first = r.left(a); first < minLockAttempt {
				return p.refused(step.N, r.gaveUp(nil, a))
			}
		}
	}
	_, err := tx.Exec(ctx, fmt.Sprintf("SAVEPOINT %s; SET LOCAL lock_timeout = '%dms'", attemptSavepoint, first.Milliseconds()))
	if err != nil {
		return fmt.Errorf("%w: before statement %d/%d: taking a savepoint: %w", class, step.N, total, err)
	}
	for {
		err := r.try(ctx, func() error {
			_, err := tx.Exec(ctx, step.Statement.SQL)
			return err
		})
		if err == nil {
			break
		}
		if !IsLockTimeout(err) {
			return p.refused(step.N, w.deadlineStruck(ctx, err, a))
		}
		if a, err = w.backOff(ctx, tx, r, err); err != nil {
			return p.refused(step.N, err)
		}
	}
	_, err = tx.Exec(ctx, fmt.Sprintf("RELEASE SAVEPOINT %s; SET LOCAL lock_timeout = '%dms'", attemptSavepoint, plan.LockTimeout.Milliseconds()))
	if err != nil {
		return fmt.Errorf("%w: after statement %d/%d: releasing its savepoint: %w", class, step.N, total, err)
	}
	return nil
}

// backOff rolls an attempt that timed out waiting for a lock (lockErr)
// back to its savepoint, at once, and waits before the next attempt. It
// returns what it armed for that attempt, or the error that ends the
// statement: a *LockWaitError when the budget, or the deadline, leaves no
// room for another attempt.
//
// While it waits, the transaction sits idle: the deadline is re-armed
// first, so that idle_in_transaction_session_timeout still ends the
// session at the deadline whatever the client does, and again after the
// pause, for the attempt, with its lock_timeout. The pause ends before the
// deadline, and ends early when ctx is done. After it, a statement whose
// locks the planner knows waits, too, for the sessions holding locks that
// conflict with them (see Writer.awaitHolders), on the same budget.
func (w *Writer) backOff(ctx context.Context, tx pgx.Tx, r *lockRetry, lockErr error) (armed, error) {
	failed := time.Now()
	if _, err := tx.Exec(ctx, "ROLLBACK TO SAVEPOINT "+attemptSavepoint); err != nil {
		return armed{}, fmt.Errorf("rolling back an attempt that timed out waiting for a lock: %w", err)
	}
	a, err := armStatement(ctx, tx, w.deadline, r.limit, 0)
	if err != nil {
		return armed{}, err
	}
	if r.watcher == nil && !r.watchTried {
		r.watchTried = true
		r.watcher = openLockWatcher(ctx, w, min(time.Second, time.Until(r.end(a))))
	}
	wake, try := r.next(failed, a)
	if try < minLockAttempt {
		return armed{}, r.gaveUp(lockErr, a)
	}
	r.report()
	if err := sleepUntil(ctx, wake); err != nil {
		return armed{}, fmt.Errorf("waiting to try again after a lock timeout: %w", err)
	}
	if r.needs != nil {
		if a, err = armStatement(ctx, tx, w.deadline, r.limit, 0); err != nil {
			return armed{}, err
		}
		var waited bool
		if a, waited, err = w.awaitHolders(ctx, tx, r, a, lockErr); err != nil {
			return armed{}, err
		}
		if waited {
			if try = r.left(a); try < minLockAttempt {
				return armed{}, r.gaveUp(lockErr, a)
			}
		}
	}
	return armStatement(ctx, tx, w.deadline, r.limit, try)
}

// lockRetry is the state of one statement's attempts.
type lockRetry struct {
	budget, attempt, limit time.Duration // the plan's LockTimeout, lockAttempt and StatementTimeout
	started                time.Time     // when the first attempt, or the check before it, began
	attempts               int
	pauses                 int // the pauses made so far, after attempts or checks

	// needs are the statement's locks, checked for conflicting holders
	// before each attempt (see Writer.awaitHolders); nil when the
	// statement is not checked.
	needs []Lock
	// latest is what the statement was last seen waiting for, by the
	// watcher during an attempt or by a check before one; seen are all the
	// sessions seen blocking it, in the order first seen, as last seen.
	latest *Activity
	seen   []Blocker
	// cancelledAutovacuum counts the autovacuum workers cancelled for the
	// statement; autovacuumRefused: the server refused to cancel one.
	cancelledAutovacuum int
	autovacuumRefused   bool

	// watcher, once the first attempt failed (watchTried); nil when it
	// could not be opened.
	watcher    *lockWatcher
	watchTried bool

	step       Step
	progress   ProgressFunc
	reportedAt time.Time
	reported   string // the blockers last reported, as blockerKey words them
}

// try makes one attempt, watched from the second on.
func (r *lockRetry) try(ctx context.Context, exec func() error) error {
	r.attempts++
	var before *Activity
	if r.watcher != nil {
		before = r.watcher.latest
	}
	stop := r.watcher.observe(ctx)
	err := exec()
	stop()
	if r.watcher != nil {
		if r.watcher.latest != before {
			r.latest = r.watcher.latest
		}
		r.seeBlockers(r.watcher.blockers)
	}
	return err
}

// saw records that a check before an attempt saw the statement blocked as
// a says.
func (r *lockRetry) saw(a *Activity) {
	r.latest = a
	r.seeBlockers(a.BlockedBy)
}

// seeBlockers adds bs to the sessions seen blocking the statement, or
// updates them.
func (r *lockRetry) seeBlockers(bs []Blocker) {
	for _, b := range bs {
		if i := slices.IndexFunc(r.seen, func(s Blocker) bool { return s.PID == b.PID }); i >= 0 {
			r.seen[i] = b
		} else {
			r.seen = append(r.seen, b)
		}
	}
}

// left is how long the next attempt, made now, may wait: an attempt, or
// what is left before the end, if less.
func (r *lockRetry) left(a armed) time.Duration {
	return min(r.attempt, time.Until(r.end(a)))
}

// end is when the statement must have stopped trying: the budget spent,
// or the deadline, as a armed it, whichever comes first.
func (r *lockRetry) end(a armed) time.Time {
	end := r.started.Add(r.budget)
	if d := a.deadline(); d.Before(end) {
		return d
	}
	return end
}

// next is when the next attempt starts, after an attempt that failed (or
// a check that found conflicting holders) at failed, and how long it may
// wait; an attempt shorter than minLockAttempt is not to be made. The
// pause doubles from firstBackOff up to maxBackOff, with up to a fifth
// more at random, so that writers retrying together drift apart; near the
// end it shrinks, down to firstBackOff, to fit a last full attempt in.
func (r *lockRetry) next(failed time.Time, a armed) (wake time.Time, try time.Duration) {
	pause := firstBackOff << min(r.pauses, 8)
	r.pauses++
	pause = min(pause+rand.N(pause/5+1), maxBackOff)
	end := r.end(a)
	wake = failed.Add(pause)
	if wake.Add(r.attempt).After(end) {
		wake = failed.Add(firstBackOff)
		if last := end.Add(-r.attempt); last.After(wake) {
			wake = last
		}
	}
	if now := time.Now(); wake.Before(now) {
		// Opening the watcher took longer than the pause.
		wake = now
	}
	return wake, min(r.attempt, end.Sub(wake))
}

// report tells progress the statement is waiting: once the watcher, or a
// check before an attempt, saw whom it waits for (or, without a watcher,
// after its first failed attempt), whenever those sessions change, and
// otherwise about once a second.
func (r *lockRetry) report() {
	if r.progress == nil {
		return
	}
	waiting, key := "a lock", ""
	if r.latest != nil {
		waiting, key = r.latest.Waiting(), blockerKey(r.latest.BlockedBy)
	}
	switch {
	case key == "" && r.watcher != nil && r.watcher.conn != nil && time.Since(r.started) < waitReportEvery:
		// The watcher, just opened, names them after the next attempt.
		return
	case !r.reportedAt.IsZero() && key == r.reported && time.Since(r.reportedAt) < waitReportEvery:
		return
	}
	r.reportedAt, r.reported = time.Now(), key
	st := r.step
	st.Waiting, st.Elapsed = waiting, time.Since(r.started)
	r.progress(st)
}

// blockerKey tells sets of blocking sessions apart.
func blockerKey(bs []Blocker) string {
	pids := make([]string, len(bs))
	for i, b := range bs {
		pids[i] = fmt.Sprint(b.PID)
	}
	slices.Sort(pids)
	return strings.Join(pids, ",")
}

// gaveUp is the error of a statement whose last attempt failed with
// lockErr (nil when it made none) and that has no time left for another.
func (r *lockRetry) gaveUp(lockErr error, a armed) *LockWaitError {
	if lockErr == nil {
		lockErr = notRequested()
	}
	e := &LockWaitError{Attempts: r.attempts, Tried: time.Since(r.started), Attempt: r.attempt,
		Deadline: a.deadline().Before(r.started.Add(r.budget)), Err: lockErr, BlockedBy: slices.Clone(r.seen)}
	if r.latest != nil {
		e.WaitsFor = r.latest.WaitsFor
	}
	return e
}

func (r *lockRetry) close() {
	if r.watcher != nil {
		r.watcher.close()
	}
}

// sleepUntil waits until t, or until ctx is done.
func sleepUntil(ctx context.Context, t time.Time) error {
	d := time.Until(t)
	if d <= 0 {
		return ctx.Err()
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-timer.C:
		return nil
	}
}

// lockWatcher watches, from a session of its own, whom the writer's
// session waits for during an attempt: the writer's own session is busy
// waiting. It is opened once a statement's first attempt failed, and
// closed when the statement is done. A watcher that fails is closed, and
// the attempts go on without it.
type lockWatcher struct {
	conn *pgx.Conn // nil once closed
	pid  uint32    // the writer's
	// latest is the last activity of the writer seen waiting for a lock;
	// blockers are all the sessions seen blocking it, in the order first
	// seen, as last seen.
	latest   *Activity
	blockers []Blocker
}

// openLockWatcher opens a watcher session with the writer's connection
// settings, within timeout; nil when it cannot.
func openLockWatcher(ctx context.Context, w *Writer, timeout time.Duration) *lockWatcher {
	if timeout <= 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cfg := w.conn.Config()
	cfg.RuntimeParams["application_name"] = "ptah lock watcher " + w.operationID
	conn, err := ConnectConfig(ctx, cfg)
	if err != nil {
		return nil
	}
	return &lockWatcher{conn: conn, pid: uint32(w.session.PID)}
}

// observe reads, every watchEvery until stop is called, what the writer
// waits for. stop returns once the watcher no longer uses its session. A
// nil watcher observes nothing.
func (lw *lockWatcher) observe(ctx context.Context) (stop func()) {
	if lw == nil || lw.conn == nil {
		return func() {}
	}
	quit, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(watchEvery)
		defer tick.Stop()
		for {
			select {
			case <-quit:
				return
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			if !lw.read(ctx) {
				return
			}
		}
	}()
	return func() {
		close(quit)
		<-done
	}
}

// read reads what the writer waits for once; false when the watcher
// could not, and is closed.
func (lw *lockWatcher) read(ctx context.Context) bool {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	a, err := PIDActivity(ctx, lw.conn, lw.pid)
	if err != nil {
		lw.close()
		return false
	}
	if a.Waiting() == "" {
		return true
	}
	lw.latest = a
	for _, b := range a.BlockedBy {
		if i := slices.IndexFunc(lw.blockers, func(s Blocker) bool { return s.PID == b.PID }); i >= 0 {
			lw.blockers[i] = b
		} else {
			lw.blockers = append(lw.blockers, b)
		}
	}
	return true
}

func (lw *lockWatcher) close() {
	if lw.conn == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = lw.conn.Close(ctx)
	lw.conn = nil
}
