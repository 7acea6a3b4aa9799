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
	// flight, so the plan may or may not have committed; or while a
	// statement of a no-transaction phase was in flight (or before its
	// completion was journaled), so that statement may or may not have
	// taken effect. The run journal answers what it can once the writer
	// session is gone (see Run.Committed and Run.InFlight); a statement in
	// flight is a question for a person or a fresh observation. Never
	// retried.
	ErrOutcomeUnknown = errors.New("the plan's outcome is unknown")
	// ErrPartiallyApplied: the plan runs in several phases (see
	// Writer.Execute), and part of it committed before a later part
	// failed: a later transaction, rolled back, or a statement of a
	// no-transaction phase, after the statements before it committed one
	// by one. The database changed, to neither the state the plan was
	// made from nor the one it aims at. It is deliberately neither
	// ErrPlanFailed nor ErrOutcomeUnknown, and wraps neither: a caller
	// must not take it for "nothing happened". A schema run settles it as
	// an uncertain one, by a fresh observation (which plans only what is
	// still missing); the journal records it as RunPartiallyApplied.
	ErrPartiallyApplied = errors.New("the plan was partially applied: part of it committed, then a later part failed")
	// ErrHistoryMoved: the migration history the writer read, under the
	// lease, just before the plan's first statement, is not the one the
	// plan was selected against (Plan.History.Expect refused it). It comes
	// with ErrNotStarted: nothing ran.
	ErrHistoryMoved = errors.New("the migration history is not the one the plan was selected against")
	// ErrHistoryExists: a version is already recorded in the resource's
	// migration history; a version is recorded once.
	ErrHistoryExists = errors.New("the version is already recorded in the migration history")
)
