package catalog

import (
	"errors"
	"fmt"
	"strings"
)

// Sentinels callers classify with errors.Is; the concrete errors below carry
// the detail and unwrap to them.
var (
	// ErrDevDatabase: no dev database could be created to load the declared files.
	ErrDevDatabase = errors.New("cannot create the dev database")
	// ErrLoad: a declared SQL file failed to load in the dev database.
	ErrLoad = errors.New("declared SQL failed to load")
	// ErrUnsupported: the managed scope holds objects ptah does not manage.
	ErrUnsupported = errors.New("unsupported database objects")
	// ErrScope: the declared files create objects outside the managed schemas.
	ErrScope = errors.New("declared objects outside the managed schemas")
)

// LoadError is a declared file that PostgreSQL refused.
type LoadError struct {
	File string
	// Line and Column (1-based; the column in characters) are where
	// PostgreSQL placed the error, or else where the statement it refused
	// starts. Line is 0 when nothing in the file can be pointed at.
	Line    int
	Column  int
	Message string // PostgreSQL's message, with its SQLSTATE
}

func (e *LoadError) Error() string {
	pos := e.File
	if e.Line > 0 {
		pos = fmt.Sprintf("%s:%d:%d", e.File, e.Line, e.Column)
	}
	return fmt.Sprintf("loading %s: %s", pos, e.Message)
}

func (e *LoadError) Unwrap() error { return ErrLoad }

// UnsupportedError names every object in the managed scope that ptah does
// not manage. A plan is never computed around them.
type UnsupportedError struct {
	Where   string   // "target database" or "declared schema"
	Objects []string // e.g. `row-level security policy "p" on table public.t`
}

func (e *UnsupportedError) Error() string {
	return fmt.Sprintf("the %s holds objects ptah does not manage yet; remove them from the managed schemas or manage them outside ptah:\n  %s",
		e.Where, strings.Join(e.Objects, "\n  "))
}

func (e *UnsupportedError) Unwrap() error { return ErrUnsupported }
