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

// usageError is a problem with how ptah was invoked: flags, arguments,
// PTAH_* variables or the --config file. It is found before any I/O.
type usageError struct{ err error }

func (e *usageError) Error() string { return e.err.Error() }
func (e *usageError) Unwrap() error { return e.err }

func usageErrorf(format string, args ...any) error {
	return &usageError{fmt.Errorf(format, args...)}
}
