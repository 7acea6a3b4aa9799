package postgres

import (
	"errors"
	"io"
	"net"
	"strings"
	"syscall"

	"github.com/jackc/pgx/v5/pgconn"
)

// SQLSTATE classification. Callers outside this package decide what an
// error means (retry, wait, give up, report a missing grant) with these
// predicates, never by reading codes themselves: only this package knows
// SQLSTATEs. Each predicate looks through any wrapping.

// SQLState returns the SQLSTATE PostgreSQL reported for err, or "" when err
// did not come from the server.
func SQLState(err error) string {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr.Code
	}
	return ""
}

// IsLockTimeout: a lock could not be had within lock_timeout, or at once
// under NOWAIT (55P03 lock_not_available). Nothing the statement would have
// done happened; the statement may be retried later.
func IsLockTimeout(err error) bool { return SQLState(err) == "55P03" }

// IsQueryCanceled: the statement was cancelled, by statement_timeout (which
// the writer derives from the run's deadline) or by a cancel request
// (57014 query_canceled).
func IsQueryCanceled(err error) bool { return SQLState(err) == "57014" }

// IsSerializationOrDeadlock: the transaction lost a serialization conflict
// or was chosen as a deadlock victim (40001, 40P01). It was rolled back.
func IsSerializationOrDeadlock(err error) bool {
	switch SQLState(err) {
	case "40001", "40P01":
		return true
	}
	return false
}

// IsInsufficientPrivilege: the role lacks a grant (42501).
func IsInsufficientPrivilege(err error) bool { return SQLState(err) == "42501" }

// IsConnectionLost: the session is gone or unusable, so whatever it had not
// committed is rolled back by the server — except a COMMIT already sent,
// whose outcome only the database can tell (see ErrOutcomeUnknown).
//
// It covers the server ending the session (class 08 connection exceptions;
// 57P01 admin_shutdown, which pg_terminate_backend also sends; 57P02
// crash_shutdown; 57P03 cannot_connect_now; 57P05 idle_session_timeout;
// 25P03 idle_in_transaction_session_timeout), a failed connection attempt,
// a closed driver connection and network errors.
func IsConnectionLost(err error) bool {
	if err == nil {
		return false
	}
	if code := SQLState(err); code != "" {
		switch code {
		case "57P01", "57P02", "57P03", "57P05", "25P03":
			return true
		}
		return strings.HasPrefix(code, "08")
	}
	var connectErr *pgconn.ConnectError
	var netErr net.Error
	switch {
	case errors.As(err, &connectErr), errors.Is(err, ErrConnect),
		errors.Is(err, pgconn.ErrConnClosed),
		errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF),
		errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE),
		errors.As(err, &netErr):
		return true
	}
	return false
}

// isUndefinedRelation: the ptah schema or one of its tables does not exist
// yet (42P01 undefined_table, 3F000 invalid_schema_name). Readers treat it
// as "nothing recorded" rather than creating anything.
func isUndefinedRelation(err error) bool {
	switch SQLState(err) {
	case "42P01", "3F000":
		return true
	}
	return false
}

// isDuplicateObject: a concurrent CREATE ... IF NOT EXISTS won the race for
// a catalog row (23505 on pg_namespace/pg_type, 42P06 duplicate_schema,
// 42P07 duplicate_table, 42710 duplicate_object).
func isDuplicateObject(err error) bool {
	switch SQLState(err) {
	case "23505", "42P06", "42P07", "42710":
		return true
	}
	return false
}
