package cli

import (
	"errors"
	"fmt"
)

// errPlanHasChanges is how a command asks for exit code 2: it is an outcome
// rather than a failure, but routing it through the error path keeps the
// mapping to exit codes in one place (exitCode).
var errPlanHasChanges = errors.New("the plan has changes")

// Where a governed command stopped short of its goal. Each has its own exit
// code; the message says which resources and why.
var (
	errAwaitingApproval = errors.New("awaiting approval")
	errBlocked          = errors.New("blocked")
	errApplyFailed      = errors.New("apply failed")
)

// stopError is where a governed command stopped short of its goal: its
// class (errAwaitingApproval, errBlocked, errApplyFailed) gives the exit
// code, and the reasons of the resources that stopped (api.Reason*) choose
// the hint.
type stopError struct {
	class   error
	reasons []string
	// names are the resources' names, one per reason, for hints that
	// give the command to run next.
	names  []string
	detail string
}

func (e *stopError) Error() string { return e.class.Error() + ": " + e.detail }
func (e *stopError) Unwrap() error { return e.class }

// hasReason reports whether some resource stopped for reason.
func (e *stopError) hasReason(reason string) bool {
	for _, r := range e.reasons {
		if r == reason {
			return true
		}
	}
	return false
}

// usageError is a problem with how ptah was invoked: flags, arguments,
// PTAH_* variables or the --config file. It is found before any I/O.
type usageError struct{ err error }

func (e *usageError) Error() string { return e.err.Error() }
func (e *usageError) Unwrap() error { return e.err }

func usageErrorf(format string, args ...any) error {
	return &usageError{fmt.Errorf(format, args...)}
}

// namesWith are the names of the resources that stopped for reason.
func (e *stopError) namesWith(reason string) []string {
	var out []string
	for i, r := range e.reasons {
		if r == reason && i < len(e.names) {
			out = append(out, e.names[i])
		}
	}
	return out
}
