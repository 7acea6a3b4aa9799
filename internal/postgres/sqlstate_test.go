package postgres

import (
	"errors"
	"fmt"
	"io"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
)

func TestSQLStatePredicates(t *testing.T) {
	pg := func(code string) error { return fmt.Errorf("layer: %w", &pgconn.PgError{Code: code}) }
	cases := []struct {
		err                                          error
		lock, lost, serialization, privilege, cancel bool
	}{
		{err: nil},
		{err: errors.New("plain")},
		{err: pg("55P03"), lock: true},
		{err: pg("40001"), serialization: true},
		{err: pg("40P01"), serialization: true},
		{err: pg("42501"), privilege: true},
		{err: pg("57014"), cancel: true},
		{err: pg("57P01"), lost: true},
		{err: pg("57P02"), lost: true},
		{err: pg("57P05"), lost: true},
		{err: pg("25P03"), lost: true},
		{err: pg("08006"), lost: true},
		{err: pg("42P01")},
		{err: fmt.Errorf("x: %w", io.ErrUnexpectedEOF), lost: true},
		{err: fmt.Errorf("x: %w", pgconn.ErrConnClosed), lost: true},
		{err: &ConnectError{Reason: "refused"}, lost: true},
	}
	for _, c := range cases {
		got := [5]bool{IsLockTimeout(c.err), IsConnectionLost(c.err), IsSerializationOrDeadlock(c.err),
			IsInsufficientPrivilege(c.err), IsQueryCanceled(c.err)}
		want := [5]bool{c.lock, c.lost, c.serialization, c.privilege, c.cancel}
		if got != want {
			t.Errorf("%v: lock, lost, serialization, privilege, cancel = %v, want %v", c.err, got, want)
		}
	}
}
