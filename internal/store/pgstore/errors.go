package pgstore

import (
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/ptah-run/ptah/internal/store"
)

// ErrNewerLayout: the ptah schema's object tables were laid out by a newer
// ptah. This one neither reads nor rewrites them.
var ErrNewerLayout = errors.New("the ptah schema was laid out by a newer ptah")

// ErrNoStore: the database holds no ptah object tables (ptah never recorded
// anything there), and Open does not create them.
var ErrNoStore = errors.New("ptah has recorded nothing in this database")

// SQLSTATEs this package acts on.
const (
	uniqueViolation = "23505"
	duplicateSchema = "42P06"
	duplicateTable  = "42P07"
	duplicateObject = "42710"
	dataException   = "22" // the class: a value PostgreSQL will not store
)

// objectsNameKey is the constraint that makes kind/namespace/name unique.
const objectsNameKey = "objects_kind_namespace_name_key"

func sqlState(err error) (string, *pgconn.PgError) {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr.Code, pgErr
	}
	return "", nil
}

// isDuplicateName reports a Create that lost to an existing object.
func isDuplicateName(err error) bool {
	code, pgErr := sqlState(err)
	return code == uniqueViolation && pgErr.ConstraintName == objectsNameKey
}

// isConcurrentDDL reports DDL that lost a race with another process creating
// the same object, which IF NOT EXISTS does not prevent: the catalog's own
// unique index fires first. Retrying sees the object and skips it.
func isConcurrentDDL(err error) bool {
	switch code, _ := sqlState(err); code {
	case uniqueViolation, duplicateSchema, duplicateTable, duplicateObject:
		return true
	}
	return false
}

// classify maps values PostgreSQL refuses (a \u0000 in a JSON string, a
// number beyond numeric's range) to store.ErrInvalid, like the checks every
// backend makes before writing; other errors pass through.
func classify(err error) error {
	if code, pgErr := sqlState(err); len(code) == 5 && code[:2] == dataException {
		return fmt.Errorf("%w: %s (SQLSTATE %s)", store.ErrInvalid, pgErr.Message, code)
	}
	return err
}
