package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// A pass lock makes one process at a time run the pass of one resource, as
// the controller's work queue does in cluster mode: two ptah processes never
// interleave status writes for the same resource. It is a session advisory
// lock on the runner's own session, so a process that dies releases it with
// its connection. It is not the lease: the lease holds the database for a
// writer, across resources and crashes; the pass lock only serialises the
// bookkeeping of one resource.

// PassLockKey is the advisory lock key of a resource's pass. Its domain
// prefix keeps it apart from the lease keys (AdvisoryLockKey).
func PassLockKey(resource string) int64 {
	return AdvisoryLockKey("ptah.run/pass/v1\x00" + resource)
}

// PassBusyError: another session holds the pass lock of Resource.
type PassBusyError struct {
	Resource string
	// Holder is the session holding the lock, when it could be read (it may
	// have let go between the attempt and the look).
	Holder *SessionInfo
}

// ErrPassBusy is what PassBusyError matches with errors.Is.
var ErrPassBusy = errors.New("another ptah is running the pass of this resource")

func (e *PassBusyError) Error() string {
	msg := fmt.Sprintf("another ptah is running the pass of %s", e.Resource)
	if e.Holder != nil {
		msg += " (" + e.Holder.String() + ")"
	}
	return msg
}

func (e *PassBusyError) Unwrap() error { return ErrPassBusy }

// SessionInfo describes a database session for people.
type SessionInfo struct {
	Session
	ApplicationName string
	ClientAddr      string // empty for a unix socket
}

func (s SessionInfo) String() string {
	who := s.ApplicationName
	if who == "" {
		who = "a session"
	}
	msg := fmt.Sprintf("%s, database session pid %d since %s", who, s.PID, s.BackendStart.UTC().Format(time.RFC3339))
	if s.ClientAddr != "" {
		msg += " from " + s.ClientAddr
	}
	return msg
}

// TryPassLock takes the pass lock of resource on conn without waiting. It
// returns a release function, or a *PassBusyError naming the holder.
func TryPassLock(ctx context.Context, conn *pgx.Conn, resource string) (func(context.Context) error, error) {
	key := PassLockKey(resource)
	var ok bool
	if err := conn.QueryRow(ctx, "SELECT pg_try_advisory_lock($1)", key).Scan(&ok); err != nil {
		return nil, fmt.Errorf("taking the pass lock of %s: %w", resource, err)
	}
	if !ok {
		holder, err := advisoryLockHolder(ctx, conn, key)
		if err != nil {
			return nil, err
		}
		return nil, &PassBusyError{Resource: resource, Holder: holder}
	}
	return func(ctx context.Context) error {
		if _, err := conn.Exec(ctx, "SELECT pg_advisory_unlock($1)", key); err != nil {
			return fmt.Errorf("releasing the pass lock of %s: %w", resource, err)
		}
		return nil
	}, nil
}

// advisoryLockHolder finds the session holding the session-level advisory
// lock key in this database, or nil if none holds it now.
func advisoryLockHolder(ctx context.Context, conn *pgx.Conn, key int64) (*SessionInfo, error) {
	// A bigint key is stored as classid (high 32 bits) and objid (low 32
	// bits), with objsubid 1.
	var s SessionInfo
	err := conn.QueryRow(ctx, `
		SELECT a.pid, a.backend_start, coalesce(a.application_name, ''), coalesce(host(a.client_addr), '')
		FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
		WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1
		  AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
		  AND l.classid::bigint = (($1::bigint >> 32) & 4294967295)
		  AND l.objid::bigint = ($1::bigint & 4294967295)
		LIMIT 1`, key).Scan(&s.PID, &s.BackendStart, &s.ApplicationName, &s.ClientAddr)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading who holds advisory lock %d: %w", key, err)
	}
	return &s, nil
}
