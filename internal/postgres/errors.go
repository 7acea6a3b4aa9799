package postgres

import "errors"

// Sentinels callers classify with errors.Is; the concrete errors below carry
// the detail and unwrap to them.
var (
	// ErrConnect: the database could not be reached or refused the login.
	ErrConnect = errors.New("cannot connect to the database")

	// ErrLeaseHeld: another operation's writer holds the database's lease
	// (see LeaseHeldError for who).
	ErrLeaseHeld = errors.New("the database is held by another writer")
	// ErrDeadlinePassed: the run's absolute execution deadline has passed;
	// nothing more is executed under it.
	ErrDeadlinePassed = errors.New("the execution deadline has passed")
	// ErrLeaseLost: the lease no longer names this writer; nothing is executed.
	ErrLeaseLost = errors.New("the lease no longer names this writer")
	// ErrWriterClosed: the writer was released or its session is gone.
	ErrWriterClosed = errors.New("the writer session is closed")
	// ErrRunNotFound: the run journal holds no run with that operation ID.
	ErrRunNotFound = errors.New("no such run in the journal")
	// ErrAlreadyRun: the journal already records a run for this operation
	// ID. An operation executes at most once; nothing was executed.
	ErrAlreadyRun = errors.New("the operation has already been run")
	// ErrNotStarted: the plan was not started (its run could not be
	// recorded, or the deadline had passed); none of it ran.
	ErrNotStarted = errors.New("the plan did not start")
	// ErrPlanFailed: the plan failed and was rolled back; none of it is
	// visible.
	ErrPlanFailed = errors.New("the plan failed and was rolled back")
	// ErrOutcomeUnknown: the connection was lost while COMMIT was in
	// flight, so the plan may or may not have committed. The run journal
	// answers once the writer session is gone (see Run.Committed).
	ErrOutcomeUnknown = errors.New("the plan's outcome is unknown")
	// ErrPartiallyApplied: the plan runs in several transactions (its
	// phases, see Writer.Execute), and one or more of them committed
	// before a later one failed and was rolled back. The database changed,
	// to neither the state the plan was made from nor the one it aims at.
	// It is deliberately neither ErrPlanFailed nor ErrOutcomeUnknown, and
	// wraps neither: a caller must not take it for "nothing happened". A
	// schema run settles it as an uncertain one, by a fresh observation
	// (which plans only what is still missing); the journal records it as
	// RunPartiallyApplied.
	ErrPartiallyApplied = errors.New("the plan was partially applied: its first transactions committed, a later one failed and was rolled back")
)
