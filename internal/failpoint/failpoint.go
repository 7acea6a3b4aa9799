// Package failpoint stops the process dead at a named point, for crash
// tests: the test runs ptah (or a test binary) with PTAH_FAILPOINT set to a
// point's name, and the process exits there with ExitCode, without running
// deferred functions, closing connections or flushing anything, as a killed
// process would. The next pass is then asserted against what was left.
//
// Unset (the normal case) it costs one environment lookup per point. It is
// not hidden behind a build tag so that the crash tests exercise the very
// binary that ships; the variable name is explicit enough not to be set by
// accident.
package failpoint

import (
	"fmt"
	"os"
)

// EnvVar names the variable that selects the failpoint to stop at.
const EnvVar = "PTAH_FAILPOINT"

// ExitCode is the status of a process stopped at a failpoint: distinct from
// ptah's own exit codes and from a signal's.
const ExitCode = 86

// The points the executor hits (the runner names its own). A process
// stops at the first point it reaches.
const (
	// MidPlan: the first statement of a transactional phase (the plan's
	// first such phase, in practice) ran in its transaction, the next (or
	// the COMMIT) did not.
	MidPlan = "mid-plan"
	// BetweenPhases: a phase of a plan of several committed, the next did
	// not begin.
	BetweenPhases = "between-phases"
	// MidNoTxPhase: in a no-transaction phase, the first statement
	// committed and its completion was journaled; the start of the second
	// is journaled (committed), and the second was not sent. The journal
	// shows the second in flight.
	MidNoTxPhase = "mid-no-tx-phase"
	// AfterDispatch: the dispatch marker and the run's journal row
	// committed (together), and no plan statement was sent.
	AfterDispatch = "after-dispatch-marker"
)

// Hit stops the process if PTAH_FAILPOINT names this point.
func Hit(name string) {
	if name == "" || os.Getenv(EnvVar) != name {
		return
	}
	fmt.Fprintf(os.Stderr, "failpoint %s\n", name)
	os.Exit(ExitCode)
}
