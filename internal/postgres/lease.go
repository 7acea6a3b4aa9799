package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	api "github.com/ptah-run/ptah/pkg/api/v1alpha1"
)

// Lease is the row in ptah.leases that says which operation holds a
// coordination digest, and which writer session may still write for it.
type Lease struct {
	CoordinationDigest string
	Holder             string // the operation ID
	Resource           string // e.g. "PtahSchema/default/app"; display only
	Writer             Session
	Deadline           time.Time // the run's absolute execution deadline
	AcquiredAt         time.Time
}

// LeaseHeldError: another operation holds the database. Holder is empty
// when the lock's holder had not recorded its lease row yet when we looked.
type LeaseHeldError struct {
	Holder    string
	Resource  string
	WriterPID int32
	Deadline  time.Time // zero when unknown
}

func (e *LeaseHeldError) Error() string {
	if e.Holder == "" {
		if e.WriterPID != 0 {
			return fmt.Sprintf("the database is held by another ptah writer (session pid %d) that has not recorded its lease", e.WriterPID)
		}
		return "the database is held by another ptah writer that has not recorded its lease"
	}
	msg := fmt.Sprintf("the database is held by operation %s", e.Holder)
	if e.Resource != "" {
		msg += " of " + e.Resource
	}
	if e.WriterPID != 0 {
		msg += fmt.Sprintf(" (writer session pid %d", e.WriterPID)
		if !e.Deadline.IsZero() {
			msg += ", deadline " + e.Deadline.UTC().Format(time.RFC3339)
		}
		msg += ")"
	}
	return msg
}

func (e *LeaseHeldError) Unwrap() error { return ErrLeaseHeld }

func heldBy(l *Lease) *LeaseHeldError {
	return &LeaseHeldError{Holder: l.Holder, Resource: l.Resource, WriterPID: l.Writer.PID, Deadline: l.Deadline}
}

const leaseColumns = `coordination_digest, holder, coalesce(resource, ''), coalesce(writer_pid, 0),
	coalesce(writer_backend_start, '-infinity'), deadline, acquired_at`

func scanLease(row pgx.Row) (*Lease, error) {
	var l Lease
	err := row.Scan(&l.CoordinationDigest, &l.Holder, &l.Resource, &l.Writer.PID,
		&l.Writer.BackendStart, &l.Deadline, &l.AcquiredAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return &l, nil
}

// LeaseHolder returns the lease recorded for coordinationDigest, or nil
// when there is none (or ptah has never written to this database). It does
// not say whether the holder is still alive: see SessionAlive.
func LeaseHolder(ctx context.Context, conn *pgx.Conn, coordinationDigest string) (*Lease, error) {
	l, err := scanLease(conn.QueryRow(ctx, "SELECT "+leaseColumns+
		" FROM ptah.leases WHERE coordination_digest = $1", coordinationDigest))
	if isUndefinedRelation(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading the lease of %s: %w", coordinationDigest, err)
	}
	return l, nil
}

// ReleaseLease deletes the lease of coordinationDigest if operationID
// still holds it, from any session: it completes a release that was owed
// durably (the writer's own Release did not happen). A lease already gone,
// or taken over by another operation since, is left alone without error.
//
// It cannot release the writer's advisory lock, which belongs to the writer
// session and ends with it. Callers owe the release only once the run can
// no longer write (its session gone or its deadline passed).
func ReleaseLease(ctx context.Context, conn *pgx.Conn, coordinationDigest, operationID string) error {
	// A writer holds its lease row FOR SHARE while its plan's transaction
	// is open; never queue behind one without bound.
	err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SET LOCAL lock_timeout = '10s'"); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, "DELETE FROM ptah.leases WHERE coordination_digest = $1 AND holder = $2",
			coordinationDigest, operationID)
		return err
	})
	if err != nil && !isUndefinedRelation(err) {
		return fmt.Errorf("releasing the lease of %s held by %s: %w", coordinationDigest, operationID, err)
	}
	return nil
}

// acquireLease records self as the holder of the lease, in one transaction
// on the writer's own session, which must already hold the digest's
// advisory lock (so no other acquirer can interleave).
//
// An existing row whose writer session is not self is taken over only when
// that session is gone from pg_stat_activity or its deadline has passed.
// The advisory lock decides first: a live writer never lets it go, so a row
// reached here whose session is still alive is one whose writer gave up the
// lock without deleting the row (a Release that failed half way). Its
// deadline then bounds how long it blocks others: past it, the server has
// stopped that session from writing (see armDeadline).
func acquireLease(ctx context.Context, conn *pgx.Conn, l Lease) error {
	return pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		// The row lock can only be held by another session's ReleaseLease,
		// which is short; never hang on it.
		if _, err := tx.Exec(ctx, "SET LOCAL lock_timeout = '10s'"); err != nil {
			return err
		}
		var passed bool
		if err := tx.QueryRow(ctx, "SELECT $1::timestamptz <= clock_timestamp()", l.Deadline).Scan(&passed); err != nil {
			return err
		}
		if passed {
			return fmt.Errorf("%w (%s)", ErrDeadlinePassed, l.Deadline.UTC().Format(time.RFC3339))
		}
		prev, err := scanLease(tx.QueryRow(ctx, "SELECT "+leaseColumns+
			" FROM ptah.leases WHERE coordination_digest = $1 FOR UPDATE", l.CoordinationDigest))
		if err != nil {
			return err
		}
		if prev != nil && !prev.Writer.Same(l.Writer) {
			if err := mayTakeOver(ctx, tx, prev); err != nil {
				return err
			}
		}
		_, err = tx.Exec(ctx, `
INSERT INTO ptah.leases (coordination_digest, holder, resource, writer_pid, writer_backend_start, deadline, acquired_at, contract_version)
VALUES ($1, $2, $3, $4, $5, $6, clock_timestamp(), $7)
ON CONFLICT (coordination_digest) DO UPDATE SET
	holder = EXCLUDED.holder, resource = EXCLUDED.resource,
	writer_pid = EXCLUDED.writer_pid, writer_backend_start = EXCLUDED.writer_backend_start,
	deadline = EXCLUDED.deadline, acquired_at = EXCLUDED.acquired_at, contract_version = EXCLUDED.contract_version`,
			l.CoordinationDigest, l.Holder, l.Resource, l.Writer.PID, l.Writer.BackendStart, l.Deadline, api.ContractVersion)
		return err
	})
}

// mayTakeOver returns nil when prev's writer can no longer write, and a
// *LeaseHeldError otherwise.
func mayTakeOver(ctx context.Context, tx pgx.Tx, prev *Lease) error {
	var passed bool
	if err := tx.QueryRow(ctx, "SELECT $1::timestamptz <= clock_timestamp()", prev.Deadline).Scan(&passed); err != nil {
		return err
	}
	if passed {
		return nil
	}
	alive, err := sessionAlive(ctx, tx, prev.Writer)
	if err != nil {
		return err
	}
	if alive {
		return heldBy(prev)
	}
	return nil
}

// lockHolderPID returns the pid of the session holding the advisory lock
// key in the current database, or 0 if none does. pg_locks is readable by
// every role.
func lockHolderPID(ctx context.Context, conn *pgx.Conn, key int64) (int32, error) {
	var pid int32
	err := conn.QueryRow(ctx, `SELECT pid FROM pg_locks
		WHERE locktype = 'advisory' AND granted
		  AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
		  AND classid = $1 AND objid = $2 AND objsubid = 1`,
		uint32(uint64(key)>>32), uint32(uint64(key))).Scan(&pid)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, nil
	}
	return pid, err
}

// whoHolds describes the holder of a digest whose advisory lock we could
// not take. A winner takes the lock a moment before it records its row, so
// a row that does not (yet) name the lock's holder is read again briefly:
// the losers of a race should name the winner, not a predecessor.
func whoHolds(ctx context.Context, conn *pgx.Conn, digest string, key int64) (*LeaseHeldError, error) {
	const settle = 2 * time.Second
	give := time.Now().Add(settle)
	for {
		pid, err := lockHolderPID(ctx, conn, key)
		if err != nil {
			return nil, err
		}
		l, err := scanLease(conn.QueryRow(ctx, "SELECT "+leaseColumns+
			" FROM ptah.leases WHERE coordination_digest = $1", digest))
		if err != nil {
			return nil, err
		}
		switch {
		case l != nil && (pid == 0 || l.Writer.PID == pid):
			return heldBy(l), nil
		case time.Now().After(give):
			if l != nil {
				return heldBy(l), nil
			}
			return &LeaseHeldError{WriterPID: pid}, nil
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}
