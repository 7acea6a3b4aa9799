package postgres

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// ServerNow is the server's clock. The server enforces every deadline a
// writer runs under (see armDeadline), so every decision about a deadline
// is taken on its clock, never on the client's.
func ServerNow(ctx context.Context, conn *pgx.Conn) (time.Time, error) {
	var now time.Time
	if err := conn.QueryRow(ctx, "SELECT clock_timestamp()").Scan(&now); err != nil {
		return time.Time{}, fmt.Errorf("reading the server's clock: %w", err)
	}
	return now.UTC(), nil
}

// WriterMayStillWrite is local mode's "Pod-level answer" for a dispatched
// operation: whether its writer may still be writing. It may unless its
// run's deadline has passed on the server's clock, or its writer session
// is gone, or its run is recorded as finished.
//
// The writer session is the one the run journal names, or, when the
// writer never journaled the run, the one the lease of coordinationDigest
// names for the operation (a writer takes the lease before it journals).
// With neither, no session of the operation ever held the database, so
// none can write.
func WriterMayStillWrite(ctx context.Context, conn *pgx.Conn, operationID, coordinationDigest string) (bool, error) {
	may, err := writerMayStillWrite(ctx, conn, operationID, coordinationDigest)
	if err != nil {
		return false, fmt.Errorf("asking whether the writer of operation %s may still write: %w", operationID, err)
	}
	return may, nil
}

func writerMayStillWrite(ctx context.Context, conn *pgx.Conn, operationID, coordinationDigest string) (bool, error) {
	var writer Session
	var deadline time.Time
	run, err := readRun(ctx, conn, operationID)
	switch {
	case err == nil && !run.Unfinished():
		return false, nil
	case err == nil:
		writer, deadline = run.Writer, run.Deadline
	case errors.Is(err, ErrRunNotFound):
		l, err := LeaseHolder(ctx, conn, coordinationDigest)
		if err != nil {
			return false, err
		}
		if l == nil || l.Holder != operationID {
			return false, nil
		}
		writer, deadline = l.Writer, l.Deadline
	default:
		return false, err
	}
	var passed bool
	if err := conn.QueryRow(ctx, "SELECT $1::timestamptz <= clock_timestamp()", deadline).Scan(&passed); err != nil {
		return false, err
	}
	if passed {
		return false, nil
	}
	return sessionAlive(ctx, conn, writer)
}

// RuntimeRecord is the newest row (by contract version) of one of ptah's
// runtime tables, for the stored-state fence.
type RuntimeRecord struct {
	Table           string // "leases", "runs" or "migration_history"
	Key             string // its coordination digest, operation ID, or "resource version"
	ContractVersion int
}

// NewestRuntimeRecords returns, for ptah.leases, ptah.runs and
// ptah.migration_history, the row written under the highest contract
// version (rows written before the version was recorded count as
// contract 1). Missing tables (ptah never wrote here) hold nothing.
func NewestRuntimeRecords(ctx context.Context, conn *pgx.Conn) ([]RuntimeRecord, error) {
	var out []RuntimeRecord
	for _, t := range []struct{ table, key string }{{"leases", "coordination_digest"}, {"runs", "operation_id"},
		{"migration_history", "resource || ' ' || version"}} {
		var present bool
		if err := conn.QueryRow(ctx, "SELECT to_regclass('ptah.'||$1) IS NOT NULL AND EXISTS (SELECT FROM pg_attribute "+
			"WHERE attrelid = to_regclass('ptah.'||$1) AND attname = 'contract_version' AND NOT attisdropped)", t.table).Scan(&present); err != nil {
			return nil, fmt.Errorf("reading ptah's runtime tables: %w", err)
		}
		if !present {
			continue
		}
		r := RuntimeRecord{Table: t.table}
		err := conn.QueryRow(ctx, "SELECT "+t.key+", coalesce(contract_version, 1) FROM ptah."+t.table+
			" ORDER BY coalesce(contract_version, 1) DESC LIMIT 1").Scan(&r.Key, &r.ContractVersion)
		if errors.Is(err, pgx.ErrNoRows) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("reading the contract versions of ptah.%s: %w", t.table, err)
		}
		out = append(out, r)
	}
	return out, nil
}

// Activity is what a session is doing right now, as the server reports it.
type Activity struct {
	State         string    // pg_stat_activity.state: active, idle in transaction, ...
	WaitEventType string    // "" when not waiting
	WaitEvent     string    // e.g. "relation" for a lock wait
	Query         string    // the statement it runs (or last ran), cut to 200 bytes
	QueryStart    time.Time // when that statement started
	Now           time.Time // the server's clock when this was read
	// WaitsFor is the lock it waits for, e.g. "AccessExclusiveLock on public.users";
	// "" when it waits for none.
	WaitsFor string
	// BlockedBy are the sessions holding what it waits for.
	BlockedBy []Blocker
}

// Blocker is a session another one waits for.
type Blocker struct {
	PID             int32  `json:"pid"`
	ApplicationName string `json:"applicationName"`
	State           string `json:"state"`
	// XactStart is when its current transaction began; zero when it is in
	// none, or when the server does not show it (another role's session,
	// to a role without pg_read_all_stats). It is not part of the JSON
	// documents that carry a Blocker (ptah status), whose fields are
	// their own; Waiting words it.
	XactStart time.Time `json:"-"`
	// Autovacuum: the session is an autovacuum worker that PostgreSQL
	// itself would cancel to let a lock request through, one not run to
	// prevent transaction ID wraparound (see Writer.yieldAutovacuum);
	// false when the server does not show what the worker runs.
	Autovacuum bool `json:"-"`
}

// SessionActivity reads what session s is doing, nil when it is gone.
// pg_blocking_pids names the sessions holding the locks it waits for, and
// pg_locks the lock itself.
func SessionActivity(ctx context.Context, conn *pgx.Conn, s Session) (*Activity, error) {
	return sessionActivity(ctx, conn, s)
}

// PIDActivity is SessionActivity for a session known by its pid alone (one
// of this process's own connections), nil when it is gone.
func PIDActivity(ctx context.Context, conn *pgx.Conn, pid uint32) (*Activity, error) {
	return sessionActivity(ctx, conn, Session{PID: int32(pid)})
}

// sessionActivity reads what s is doing; a zero BackendStart matches the
// pid alone.
func sessionActivity(ctx context.Context, conn *pgx.Conn, s Session) (*Activity, error) {
	if _, err := conn.Exec(ctx, "SELECT pg_stat_clear_snapshot()"); err != nil {
		return nil, err
	}
	var a Activity
	var blockers []int32
	err := conn.QueryRow(ctx, `
SELECT coalesce(a.state, ''), coalesce(a.wait_event_type, ''), coalesce(a.wait_event, ''),
       left(coalesce(a.query, ''), 200), coalesce(a.query_start, clock_timestamp()), clock_timestamp(),
       coalesce((SELECT l.mode || ' on ' || coalesce(l.relation::regclass::text, l.locktype)
                 FROM pg_locks l WHERE l.pid = a.pid AND NOT l.granted LIMIT 1), ''),
       pg_blocking_pids(a.pid)
FROM pg_stat_activity a
WHERE a.pid = $1 AND ($2::timestamptz IS NULL OR a.backend_start = $2 OR a.backend_start IS NULL)`, s.PID, startOrNil(s.BackendStart)).Scan(
		&a.State, &a.WaitEventType, &a.WaitEvent, &a.Query, &a.QueryStart, &a.Now, &a.WaitsFor, &blockers)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading the activity of session %d: %w", s.PID, err)
	}
	for _, pid := range blockers {
		b := Blocker{PID: pid}
		var xactStart *time.Time
		err := conn.QueryRow(ctx, `SELECT coalesce(application_name, ''), coalesce(state, ''), xact_start FROM pg_stat_activity WHERE pid = $1`, pid).
			Scan(&b.ApplicationName, &b.State, &xactStart)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return nil, fmt.Errorf("reading the session blocking %d: %w", s.PID, err)
		}
		if xactStart != nil {
			b.XactStart = xactStart.UTC()
		}
		a.BlockedBy = append(a.BlockedBy, b)
	}
	return &a, nil
}

func startOrNil(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return t
}

// Waiting describes what an activity waits for and who holds it, e.g.
// "AccessShareLock on public.users, held by pid 42 (psql, idle in
// transaction since 12:00:01 UTC)"; "" when it waits for no lock. It
// names each session by pid, application_name, state and the start of its
// transaction, never by what it runs.
func (a *Activity) Waiting() string {
	if a == nil || a.WaitsFor == "" {
		return ""
	}
	var by []string
	for _, b := range a.BlockedBy {
		by = append(by, b.String())
	}
	if len(by) == 0 {
		return a.WaitsFor
	}
	return a.WaitsFor + ", held by " + strings.Join(by, ", ")
}

// String names the session, e.g. "pid 42 (psql, idle in transaction since
// 12:00:01 UTC)".
func (b Blocker) String() string {
	s := fmt.Sprintf("pid %d", b.PID)
	var about []string
	worker := ""
	if b.Autovacuum {
		worker = "autovacuum worker"
	}
	for _, x := range []string{worker, b.ApplicationName, b.state()} {
		if x != "" {
			about = append(about, x)
		}
	}
	if len(about) > 0 {
		s += " (" + strings.Join(about, ", ") + ")"
	}
	return s
}

// state is the session's state with the start of its transaction, if
// known: how long a transaction has been open is what a person deciding
// whether to end it wants to know.
func (b Blocker) state() string {
	if b.XactStart.IsZero() {
		return b.State
	}
	since := b.XactStart.UTC().Format("15:04:05 UTC")
	if time.Since(b.XactStart) > 20*time.Hour {
		since = b.XactStart.UTC().Format("2006-01-02 15:04:05 UTC")
	}
	switch {
	case strings.HasSuffix(b.State, "in transaction") || strings.HasSuffix(b.State, "in transaction (aborted)"):
		return b.State + " since " + since
	case b.State == "":
		return "in a transaction since " + since
	}
	return b.State + ", in a transaction since " + since
}
