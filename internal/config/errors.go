package config

import (
	"errors"
	"fmt"
)

// ErrInvalid is what every configuration problem unwraps to: the file, a
// document in it, or something a document points at (a missing environment
// variable, a source directory without SQL). Callers map it to one outcome.
var ErrInvalid = errors.New("invalid configuration")

// Error is a configuration problem located in a file: where it is, which
// resource it concerns, and what is wrong. It never holds a connection URL.
type Error struct {
	File     string // the configuration file, as given
	Line     int    // 1-based; 0 when the problem has no line
	Resource string // e.g. `PtahSchema "app"`; empty when unknown
	Err      error
}

func (e *Error) Error() string {
	where := e.File
	if e.Line > 0 {
		where = fmt.Sprintf("%s:%d", e.File, e.Line)
	}
	if e.Resource != "" {
		where += ": " + e.Resource
	}
	return where + ": " + e.Err.Error()
}

// Unwrap exposes both the sentinel and the cause, so errors.Is(err,
// ErrInvalid) holds and errors.As still reaches a FieldError underneath.
func (e *Error) Unwrap() []error { return []error{ErrInvalid, e.Err} }
