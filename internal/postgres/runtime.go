package postgres

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// The runtime tables: what local mode (and, for the journal, both modes)
// keeps in the target database's ptah schema besides the object store.
//
//   - ptah.leases: one row per coordination digest naming the operation that
//     holds the database and the writer session that may still write for it.
//   - ptah.runs / ptah.run_steps: the run journal. A run row is committed
//     before any plan SQL; step rows commit in the transaction that runs
//     their statement, and a success in the plan's (main) transaction, so
//     a succeeded run row means the plan committed. A failure is recorded
//     after a rollback: failed (nothing committed), or partially-applied
//     (earlier phases of the plan committed, see Writer.Execute). A step
//     names its phase, and a run how many phases its plan has. A step of a
//     no-transaction phase is journaled in a transaction of its own,
//     committed before its statement is sent, and marked committed after
//     the statement succeeded (see Writer.Execute).
//   - ptah.migration_history: the versions of each resource's migration
//     sequence that were applied (run by a writer, marked applied by a
//     person, or recorded as a baseline), one row per (resource, version).
//     A run row commits in its file's own transaction when the file has
//     one, and with the completion of its last statement when it has not.
//   - ptah.target_instance: a minted identifier, only created when the role
//     may not read the server's system identifier (see TargetIdentity).
//
// Other packages create their own tables in the same schema; every creator
// uses CREATE ... IF NOT EXISTS and survives losing a creation race.
//
// RuntimeTables are the tables runtimeDDL creates, in an order they can be
// dropped in.
var RuntimeTables = []string{"ptah.run_steps", "ptah.runs", "ptah.leases", "ptah.migration_history", "ptah.target_instance"}

const runtimeDDL = `
CREATE SCHEMA IF NOT EXISTS ptah;

CREATE TABLE IF NOT EXISTS ptah.leases (
	coordination_digest  text PRIMARY KEY,
	holder               text NOT NULL,
	resource             text,
	writer_pid           integer,
	writer_backend_start timestamptz,
	deadline             timestamptz NOT NULL,
	acquired_at          timestamptz NOT NULL
);
COMMENT ON TABLE ptah.leases IS
	'ptah: the operation holding each coordination digest, and the writer session (pid, backend start) that may still write for it until its deadline';

CREATE TABLE IF NOT EXISTS ptah.runs (
	operation_id         text PRIMARY KEY,
	resource             text,
	plan_uid             text,
	writer_pid           integer,
	writer_backend_start timestamptz,
	deadline             timestamptz,
	phases               integer,
	started_at           timestamptz,
	finished_at          timestamptz,
	outcome              text CONSTRAINT runs_outcome_check
	                     CHECK (outcome IN ('succeeded', 'failed', 'partially-applied')),
	error                text
);
-- A journal created before runs could be partially applied, or had phases.
ALTER TABLE ptah.runs DROP CONSTRAINT IF EXISTS runs_outcome_check,
	ADD CONSTRAINT runs_outcome_check CHECK (outcome IN ('succeeded', 'failed', 'partially-applied')),
	ADD COLUMN IF NOT EXISTS phases integer;
COMMENT ON TABLE ptah.runs IS
	'ptah run journal: recorded before any plan SQL; a success commits with the plan itself, a failure is recorded after its rollback';

CREATE TABLE IF NOT EXISTS ptah.run_steps (
	operation_id text NOT NULL REFERENCES ptah.runs (operation_id) ON DELETE CASCADE,
	step         integer NOT NULL,
	phase        integer,
	statement    text NOT NULL,
	started_at   timestamptz NOT NULL,
	committed_at timestamptz,
	PRIMARY KEY (operation_id, step)
);
ALTER TABLE ptah.run_steps ADD COLUMN IF NOT EXISTS phase integer,
	ADD COLUMN IF NOT EXISTS no_transaction boolean,
	ADD COLUMN IF NOT EXISTS version text;
COMMENT ON TABLE ptah.run_steps IS
	'ptah run journal: each statement of a run as it started and committed';

-- The contract version of the ptah that wrote each row, for the stored-state
-- fence (rows from before it was recorded were written under contract 1).
ALTER TABLE ptah.leases ADD COLUMN IF NOT EXISTS contract_version integer;
ALTER TABLE ptah.runs ADD COLUMN IF NOT EXISTS contract_version integer;

CREATE TABLE IF NOT EXISTS ptah.migration_history (
	resource         text NOT NULL,
	version          text NOT NULL,
	name             text NOT NULL,
	checksum         text NOT NULL,
	applied_at       timestamptz NOT NULL,
	duration         interval,
	operation_id     text,
	applied_by       text,
	how              text NOT NULL CONSTRAINT migration_history_how_check
	                 CHECK (how IN ('run', 'marked', 'baseline')),
	contract_version integer,
	PRIMARY KEY (resource, version)
);
COMMENT ON TABLE ptah.migration_history IS
	'ptah: the applied versions of each migration sequence; a run version commits with its file when the file has a transaction';

CREATE TABLE IF NOT EXISTS ptah.target_instance (
	singleton   boolean PRIMARY KEY DEFAULT true CHECK (singleton),
	instance_id text NOT NULL,
	created_at  timestamptz NOT NULL DEFAULT now()
);
COMMENT ON TABLE ptah.target_instance IS
	'ptah: identifier minted for this database when the role may not call pg_control_system()';
`

// SchemaLockKey is the transaction advisory lock (the single-bigint key
// space) ptah takes around creating its schema and tables, so that several
// processes using a fresh database at once create them one after another.
// Any ptah package creating tables in the ptah schema should take it too;
// a creator that does not is still survived (see ensureRuntimeSchema).
// The value is "ptahDDL" in ASCII.
const SchemaLockKey int64 = 0x7074616844444c

// ensureRuntimeSchema creates the runtime tables if they are missing, and
// brings an older journal up to date (the partially-applied outcome, the
// phase, no-transaction and version columns, the migration history).
// CREATE ... IF NOT EXISTS alone is not safe under concurrency: two sessions
// can both see the schema missing and one fails on a unique index of the
// catalog. The advisory lock serializes ptah's creators; the retry covers a
// creator that does not take it.
func ensureRuntimeSchema(ctx context.Context, conn *pgx.Conn) error {
	present, err := runtimeSchemaPresent(ctx, conn)
	if err != nil {
		return err
	}
	if present {
		return nil
	}
	for attempt := 1; ; attempt++ {
		err = pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", SchemaLockKey); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, runtimeDDL)
			return err
		})
		if err == nil {
			return nil
		}
		if !isDuplicateObject(err) || attempt == 3 {
			return fmt.Errorf("creating the ptah runtime tables: %w", err)
		}
	}
}

// ensureRuntimeSchemaIn is ensureRuntimeSchema inside a caller's
// transaction, which then holds the creation lock until it ends: no retry
// is possible there, so a creator that does not take the lock can still
// make it fail (the caller's transaction then rolls back, and a retry of
// it finds the tables).
func ensureRuntimeSchemaIn(ctx context.Context, tx pgx.Tx) error {
	present, err := runtimeSchemaPresent(ctx, tx)
	if err != nil || present {
		return err
	}
	if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", SchemaLockKey); err != nil {
		return fmt.Errorf("creating the ptah runtime tables: %w", err)
	}
	if _, err := tx.Exec(ctx, runtimeDDL); err != nil {
		return fmt.Errorf("creating the ptah runtime tables: %w", err)
	}
	return nil
}

// runtimeSchemaPresent reports whether the runtime tables exist, as this
// version of ptah writes them.
func runtimeSchemaPresent(ctx context.Context, q querier) (bool, error) {
	var present bool
	err := q.QueryRow(ctx, `SELECT to_regclass('ptah.leases') IS NOT NULL
		AND to_regclass('ptah.runs') IS NOT NULL
		AND to_regclass('ptah.run_steps') IS NOT NULL
		AND to_regclass('ptah.target_instance') IS NOT NULL
		AND EXISTS (SELECT 1 FROM pg_constraint WHERE conrelid = to_regclass('ptah.runs')
			AND conname = 'runs_outcome_check' AND pg_get_constraintdef(oid) LIKE '%partially-applied%')
		AND (SELECT count(*) FROM pg_attribute WHERE attname = 'contract_version' AND NOT attisdropped
			AND attrelid IN (to_regclass('ptah.leases'), to_regclass('ptah.runs'))) = 2
		AND to_regclass('ptah.migration_history') IS NOT NULL
		AND (SELECT count(*) FROM pg_attribute WHERE NOT attisdropped AND (attrelid, attname) IN
			((to_regclass('ptah.runs'), 'phases'), (to_regclass('ptah.run_steps'), 'phase'),
			 (to_regclass('ptah.run_steps'), 'no_transaction'), (to_regclass('ptah.run_steps'), 'version'),
			 (to_regclass('ptah.migration_history'), 'contract_version'))) = 5`).Scan(&present)
	if err != nil {
		return false, fmt.Errorf("checking the ptah runtime tables: %w", err)
	}
	return present, nil
}

// AdvisoryLockKey is the session advisory lock key (single-bigint key space)
// a writer holds for a coordination digest: the first 8 bytes of
// SHA-256(digest), big-endian, as a signed integer. In SQL:
//
//	('x' || left(encode(sha256(convert_to(digest, 'UTF8')), 'hex'), 16))::bit(64)::bigint
//
// pg_locks shows it as classid = the high 32 bits, objid = the low 32 bits,
// objsubid = 1.
func AdvisoryLockKey(coordinationDigest string) int64 {
	sum := sha256.Sum256([]byte(coordinationDigest))
	return int64(binary.BigEndian.Uint64(sum[:8]))
}

// maxTimeoutMS is the largest value PostgreSQL accepts for a timeout
// setting (INT_MAX milliseconds, about 24.8 days).
const maxTimeoutMS = 1<<31 - 1

// armDeadline makes the server itself stop this session at deadline, so
// that "its absolute deadline has passed" really means the session can no
// longer write, whatever the client process is doing.
//
// Inside the plan's transaction (inTx), statement_timeout and
// idle_in_transaction_session_timeout, scoped to the transaction, cancel
// the statement or end the session no later than the deadline. Outside a
// transaction, idle_session_timeout ends a session that sits idle past the
// deadline, holding its advisory lock, which frees the lock for the next
// writer. Each of these counts from the start of a statement or of an idle
// period, so it is re-armed with the time left before each plan statement
// and before the writer goes idle. Journal writes outside the plan's
// transaction carry no statement timeout: recording what happened is not
// writing the plan, and must still work after the deadline.
//
// A COMMIT already executing when the deadline strikes still completes:
// the bound is the deadline plus the time a commit takes. It returns
// ErrDeadlinePassed when no time is left.
func armDeadline(ctx context.Context, q querier, deadline time.Time, inTx bool) error {
	_, err := arm(ctx, q, deadline, 0, deadlineSettings(inTx))
	return err
}

// deadlineSettings are armDeadline's settings.
func deadlineSettings(inTx bool) string {
	if inTx {
		return `concat(set_config('statement_timeout', t.arm::text, true),
		set_config('idle_in_transaction_session_timeout', t.arm::text, true))`
	}
	return `set_config('idle_session_timeout', t.arm::text, false)`
}

// armStatement is armDeadline inside the plan's transaction, for the next
// attempt of a plan statement: its statement_timeout is the smaller of the
// time left and limit, the plan's StatementTimeout (0 for none), and, when
// lock is not 0, its lock_timeout is lock (one attempt's, see
// Plan.LockAttempt). All are scoped to the transaction (or, set after a
// savepoint, to it: rolling back to the savepoint undoes them).
func armStatement(ctx context.Context, q querier, deadline time.Time, limit, lock time.Duration) (armed, error) {
	return arm(ctx, q, deadline, limit, statementSettings(lock))
}

// statementSettings are armStatement's settings.
func statementSettings(lock time.Duration) string {
	settings := `concat(set_config('statement_timeout', t.stmt::text, true),
		set_config('idle_in_transaction_session_timeout', t.arm::text, true)`
	if lock > 0 {
		// An integer, written by us: safe to inline.
		settings += fmt.Sprintf(`, set_config('lock_timeout', '%dms', true)`, max(lock.Milliseconds(), 1))
	}
	return settings + ")"
}

// armStatementDeadline arms the deadline for the next statement only, run
// outside a transaction block (a statement of a no-transaction phase): a
// statement_timeout at session level, the time left, or limit (the plan's
// StatementTimeout) when that is smaller, which the caller resets as soon
// as the statement has returned (see Writer.completeNoTx and
// Writer.resetSession), so that the journal writes after it carry none.
func armStatementDeadline(ctx context.Context, conn *pgx.Conn, deadline time.Time, limit time.Duration) (armed, error) {
	return arm(ctx, conn, deadline, limit, `set_config('statement_timeout', t.stmt::text, false)`)
}

// armed is what arm set.
type armed struct {
	// left is the time that was left before the deadline, on the server's
	// clock, when the client asked at at (on its own clock).
	left time.Duration
	at   time.Time
	// limit is the statement's own limit (the plan's StatementTimeout)
	// when it, not the deadline, is the statement_timeout armed: a
	// cancellation is then that limit striking, not the deadline.
	limit time.Duration
}

// deadline is the run's deadline on the client's clock, as near as the
// client can tell, and no later: the server, which enforces it, decides.
func (a armed) deadline() time.Time { return a.at.Add(a.left) }

// arm applies settings, an SQL expression over t.arm (the time left before
// deadline, in milliseconds, at least 1 and at most maxTimeoutMS) and
// t.stmt (the smaller of that and limit; t.arm when limit is 0).
func arm(ctx context.Context, q querier, deadline time.Time, limit time.Duration, settings string) (armed, error) {
	c := newArming(deadline, limit, settings)
	if err := c.scan(q.QueryRow(ctx, c.sql, c.args...)); err != nil {
		return armed{}, err
	}
	return c.result()
}

// arming is one call of arm, which a batch can carry (queue) with the
// writes that follow it in the same round trip: the settings it makes
// apply to the statements after it, and its verdict (result) is read
// before any plan statement is sent.
type arming struct {
	sql      string
	args     []any
	deadline time.Time
	limit    time.Duration
	at       time.Time
	leftMS   int64
	limited  bool
}

func newArming(deadline time.Time, limit time.Duration, settings string) *arming {
	limitMS := int64(maxTimeoutMS)
	if limit > 0 {
		limitMS = min(max(limit.Milliseconds(), 1), limitMS)
	}
	return &arming{sql: `
SELECT t.ms, t.stmt < t.arm, ` + settings + `
FROM (SELECT s.ms, least(greatest(s.ms, 1), $2) AS arm, least(greatest(s.ms, 1), $2, $3) AS stmt
      FROM (SELECT ceil(extract(epoch FROM $1::timestamptz - clock_timestamp()) * 1000)::bigint AS ms) s) t`,
		args: []any{deadline, int64(maxTimeoutMS), limitMS}, deadline: deadline, limit: limit, at: time.Now()}
}

func (c *arming) scan(row pgx.Row) error {
	if err := row.Scan(&c.leftMS, &c.limited, nil); err != nil {
		return fmt.Errorf("arming the deadline: %w", err)
	}
	return nil
}

// queue adds the call to b; the batch fails with its result's error.
func (c *arming) queue(b *pgx.Batch) {
	b.Queue(c.sql, c.args...).QueryRow(func(row pgx.Row) error {
		if err := c.scan(row); err != nil {
			return err
		}
		_, err := c.result()
		return err
	})
}

func (c *arming) result() (armed, error) {
	if c.leftMS <= 0 {
		return armed{}, fmt.Errorf("%w (%s)", ErrDeadlinePassed, c.deadline.UTC().Format(time.RFC3339))
	}
	a := armed{left: time.Duration(c.leftMS) * time.Millisecond, at: c.at}
	if c.limited {
		a.limit = c.limit
	}
	return a, nil
}

// disarmDeadline lifts the idle timeout, for work that must still be done
// after the deadline (releasing the lease is not writing).
func disarmDeadline(ctx context.Context, conn *pgx.Conn) error {
	_, err := conn.Exec(ctx, "SET idle_session_timeout = 0")
	return err
}

// querier is what both a connection and a transaction offer.
type querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Session identifies one database session across pid reuse: PostgreSQL
// recycles pids, never the pair (pid, backend start).
type Session struct {
	PID          int32
	BackendStart time.Time
}

// Same reports whether s and o are the same session.
func (s Session) Same(o Session) bool {
	return s.PID == o.PID && s.BackendStart.Equal(o.BackendStart)
}

func (s Session) String() string {
	return fmt.Sprintf("pid %d started %s", s.PID, s.BackendStart.UTC().Format(time.RFC3339Nano))
}

// currentSession reads this connection's own session identity.
func currentSession(ctx context.Context, q querier) (Session, error) {
	var s Session
	err := q.QueryRow(ctx, `SELECT pg_backend_pid(), (SELECT backend_start FROM pg_stat_activity WHERE pid = pg_backend_pid())`).
		Scan(&s.PID, &s.BackendStart)
	if err != nil {
		return Session{}, fmt.Errorf("reading the session's pid and start time: %w", err)
	}
	return s, nil
}

// SessionAlive reports whether the session (pid, backendStart) still
// exists on the server conn is connected to. This is local mode's
// "Pod-level answer" to whether a run can still write.
//
// A role without pg_read_all_stats sees other roles' sessions in
// pg_stat_activity with a NULL backend_start; such a session with the
// recorded pid is taken to be alive, because pid reuse cannot be ruled out
// and "alive" is the answer that keeps the database held. The run's
// deadline is then the way out.
func SessionAlive(ctx context.Context, conn *pgx.Conn, pid int32, backendStart time.Time) (bool, error) {
	alive, err := sessionAlive(ctx, conn, Session{PID: pid, BackendStart: backendStart})
	if err != nil {
		return false, fmt.Errorf("checking whether session %d is alive: %w", pid, err)
	}
	return alive, nil
}

func sessionAlive(ctx context.Context, q querier, s Session) (bool, error) {
	// pg_stat_activity is a snapshot taken at its first use in a transaction;
	// drop it so a session that ended since is seen as gone.
	if _, err := q.Exec(ctx, "SELECT pg_stat_clear_snapshot()"); err != nil {
		return false, err
	}
	var alive bool
	err := q.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_stat_activity
		WHERE pid = $1 AND (backend_start = $2 OR backend_start IS NULL))`, s.PID, s.BackendStart).Scan(&alive)
	return alive, err
}
