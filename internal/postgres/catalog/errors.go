package catalog

import (
	"errors"
	"fmt"
	"strings"
	"time"
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
	// ErrObserveTimeout: reading the target's catalog waited longer than
	// its bound, behind a lock another session holds.
	ErrObserveTimeout = errors.New("reading the target's catalog timed out")
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
// not manage, or every change ptah will not plan. A plan is never computed
// around them.
type UnsupportedError struct {
	Where   string   // "target database", "declared schema" or "plan"
	Objects []string // e.g. `rule "r" on table public.t`
	// Reason, when set, says what ptah will not plan and what the user can
	// do instead; it replaces the explanation for unmanaged objects.
	Reason string
}

func (e *UnsupportedError) Error() string {
	if e.Reason != "" {
		return fmt.Sprintf("%s:\n  %s", e.Reason, strings.Join(e.Objects, "\n  "))
	}
	return fmt.Sprintf("the %s holds objects ptah does not manage yet; remove them from the managed schemas or manage them outside ptah:\n  %s",
		e.Where, strings.Join(e.Objects, "\n  "))
}

func (e *UnsupportedError) Unwrap() error { return ErrUnsupported }

// ObserveTimeoutError: reading the target's catalog waited past its bound.
type ObserveTimeoutError struct {
	Timeout time.Duration
	// Waiting is what it was last seen waiting for ("" when the wait was
	// shorter than the watcher's first look).
	Waiting string
}

func (e *ObserveTimeoutError) Error() string {
	msg := fmt.Sprintf("reading the target's catalog waited more than %s", e.Timeout)
	if e.Waiting != "" {
		msg += " for " + e.Waiting
	}
	return msg + "; nothing was planned"
}

func (e *ObserveTimeoutError) Unwrap() error { return ErrObserveTimeout }
