package cli

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/ptah-run/ptah/internal/config"
	"github.com/ptah-run/ptah/internal/controller"
	"github.com/ptah-run/ptah/internal/engine"
	"github.com/ptah-run/ptah/internal/migrate"
	"github.com/ptah-run/ptah/internal/postgres"
	"github.com/ptah-run/ptah/internal/postgres/catalog"
	"github.com/ptah-run/ptah/internal/runner"
	"github.com/ptah-run/ptah/internal/store"
	api "github.com/ptah-run/ptah/pkg/api/v1alpha1"
)

// Exit codes. Each kind of failure has its own code so a CI job can react to
// it without parsing messages; README.md and `ptah --help` list them.
const (
	ExitOK          = 0
	ExitInternal    = 1
	ExitChanges     = 2
	ExitUsage       = 3
	ExitConfig      = 4
	ExitConnect     = 5
	ExitLoad        = 6
	ExitUnsupported = 7
	ExitDevDatabase = 8
	ExitScope       = 9
	// The governed flow.
	ExitAwaitingApproval = 10
	ExitBlocked          = 11
	ExitApplyFailed      = 12
	ExitNoSuchPlan       = 13
	ExitPlanMismatch     = 14
	ExitFutureState      = 15
	ExitState            = 16
	ExitObserveTimeout   = 17
	// The migration family.
	ExitSource = 18
	// resolve-run's refusals, each its own code so that a script can tell
	// "someone settled it already" from "that was the wrong run".
	ExitNothingUnresolved = 19
	ExitWrongOperation    = 20
	ExitNotMarkable       = 21
	ExitUnaccounted       = 22
	// Cluster mode (--cluster).
	ExitCluster   = 23
	ExitForbidden = 24
	// ExitInterrupted is the shell's convention for SIGINT (128+2).
	ExitInterrupted = 130
)

// outcome is what one kind of error means to the person who ran ptah.
type outcome struct {
	code    int
	meaning string // for the exit code table
	hint    string // what to do next; empty: nothing useful to add
}

// outcomes is the exit code table, in the order documentation shows it.
// ExitOK and ExitChanges are not failures; they are listed for the table.
var outcomes = []outcome{
	{ExitOK, "success (plan --detailed-exitcode: and no changes)", ""},
	{ExitInternal, "unexpected error (a bug, or an environment ptah did not foresee)",
		"this is unexpected; please report it with the command you ran and the message above"},
	{ExitChanges, "with --detailed-exitcode only: success, and the plan has changes", ""},
	{ExitUsage, "usage error: bad flags, arguments, PTAH_* variables or --config file",
		"see the command's --help"},
	{ExitConfig, "invalid configuration: ptah.yaml unreadable or invalid (YAML, kind, unknown field, value, duplicate or unknown resource name), URL variable or file missing (resolve-run --cluster: the URL's Secret or key, or the --database-url-env variable), source directory without .sql files",
		"fix what is named above: the file, or the environment variable, file or directory it points at; README.md describes ptah.yaml"},
	{ExitConnect, "cannot connect to a database: unreachable, or authentication failed",
		"check that the server is up and reachable from here, and the URL's host, port, user, password and database"},
	{ExitLoad, "a declared SQL file failed to load into the dev database",
		"fix the declared file at the position shown; the files must load, in lexical order, into an empty database"},
	{ExitUnsupported, "the target or the declared schema holds objects ptah does not manage, or the plan needs a change PostgreSQL would refuse",
		"ptah refuses to plan around objects it cannot manage, and changes PostgreSQL would refuse: for unmanaged objects, remove them from the managed schemas or leave those schemas out of spec.schemas; for a refused change, do what the message says"},
	{ExitDevDatabase, "no dev database could be created to load the declared files",
		"the target's role needs CREATEDB to create a temporary dev database; or pass --dev-url pointing at a server where it may"},
	{ExitScope, "declared objects lie outside the managed schemas (spec.schemas)",
		"declare objects only in the schemas listed in spec.schemas, or add their schema to it"},
	{ExitAwaitingApproval, "apply: a plan awaits approval; nothing was executed for it",
		"review the plan (ptah plan, or ptah status), then ptah approve PLAN_UID --fingerprint FP, and run ptah apply again"},
	{ExitBlocked, "apply or plan: a resource is Blocked (realm conflict, destructive plan not allowed, tampered plan, lease held, a run that may still write, a plan that does not converge, another ptah running its pass; a migration's history that does not match its files, or a run only a person can settle); nothing was executed for it. approve: the resource's policy would not run the plan even approved. forget: the record still owes an outcome or a release. resolve-run: the run's writer session may still be writing, or (--cluster) ptah serve has not yet accounted for a run it dispatched",
		"the message says what blocks it; ptah status shows the same"},
	{ExitApplyFailed, "apply: a plan's statement failed and the plan rolled back; the database is as it was before the plan (a migration: the versions before the failed file stay applied, the failed file rolled back)",
		"fix the cause PostgreSQL reports above (often data that violates a new constraint; after a lock timeout (55P03), the sessions it names held the lock the statement needed: apply again once they finish, or end them, or raise spec.policy.lockTimeout), then plan and apply again"},
	{ExitNoSuchPlan, "approve: no plan has that UID, or the plan is no longer its resource's current plan. forget: no resource of that name is registered. resolve-run --cluster: no PtahMigration of that name in the namespace",
		"run ptah plan to publish the current plan and approve the UID it shows"},
	{ExitPlanMismatch, "approve: the plan's fingerprint is not the one given, or the stored plan no longer matches its fingerprint",
		"approve only what you reviewed: run ptah plan again and review what it shows; a tampered plan is never approved or applied"},
	{ExitFutureState, "ptah's stored state was written by a newer ptah (a higher contract version); nothing was done",
		"upgrade ptah to the version that wrote it (ptah version shows this one's contract version)"},
	{ExitState, "ptah's own state (schema ptah in the target database) cannot be read or created",
		"the target's role needs CREATE on the database the first time ptah records state there; ptah plan --no-publish needs no write access"},
	{ExitObserveTimeout, "plan or apply: reading the target's catalog waited longer than --observe-timeout behind a lock another session holds; nothing was planned",
		"the message names the session holding the lock: retry once it is done, or raise --observe-timeout"},
	{ExitSource, "a PtahMigration's source directory is missing or cannot be read as a versioned sequence: file names that fit no layout or several, duplicate versions, a file with no statement or with transaction control, a ptah.sum that does not match",
		"fix what is named above; after a change to files that is meant, ptah migrate hash writes ptah.sum again"},
	{ExitNothingUnresolved, "resolve-run --operation: the migration has no unresolved run (settled already, or never uncertain); nothing was recorded",
		"ptah status NAME shows where it stands; ptah resolve-run NAME without --operation shows whether anything is unresolved"},
	{ExitWrongOperation, "resolve-run --operation: the operation named is not the unresolved run's (mistyped, or an older run's); nothing was recorded",
		"run ptah resolve-run NAME: it shows the unresolved run's operation and its evidence; settle that one"},
	{ExitNotMarkable, "resolve-run --mark-applied: a version is not in the run's plan, is in the history already, or is not in the source with the checksum the run ran; nothing was recorded",
		"mark only versions ptah resolve-run NAME lists as not recorded, and only those you established the run applied in full"},
	{ExitUnaccounted, "resolve-run --operation: a file the run stopped part way is neither marked applied (--mark-applied) nor named to run again (--rerun), or --rerun names a file that did not stop part way; nothing was recorded",
		"for each file the evidence shows committed in part: finish it by hand and pass --mark-applied VERSION, or undo what of it committed and pass --rerun VERSION"},
	{ExitCluster, "--cluster: the kubeconfig cannot be read, or the API server cannot be reached or refuses the credentials",
		"check the kubeconfig, --context and that the cluster is reachable from here (kubectl auth whoami asks what ptah asks first)"},
	{ExitForbidden, "--cluster: the API server refused the request: RBAC does not allow it, or an admission policy refused it (an approval records the authenticated user, and only the manager writes status)",
		"the message names the refusal; ask the cluster's administrator for the ptah-approver or ptah-viewer role in the namespace"},
	{ExitInterrupted, "interrupted",
		"what the interrupted command had done is said above; ptah status shows where each resource stands"},
}

// hintTampered is the remedy for a stored plan that no longer matches its
// fingerprint.
const hintTampered = "find out who changed the stored plan; then remove it (DELETE FROM ptah.objects WHERE uid = 'PLAN_UID') " +
	"and run ptah plan, which publishes the plan afresh under a new UID for a new review and approval"

// hintFor is what to do next about err: the exit code's hint, unless the
// error calls for a more precise one.
func hintFor(err error, code int) string {
	var stop *stopError
	stopped := errors.As(err, &stop)
	switch {
	case errors.Is(err, engine.ErrPlanTampered), stopped && stop.hasReason(api.ReasonPlanTampered):
		return hintTampered
	case stopped && stop.hasReason(api.ReasonRunMayStillWrite):
		return "a run's writer session may still be writing; wait for it to end (ptah status shows its session and deadline), then run ptah apply again, which settles the run by observing the database"
	case stopped && stop.hasReason(api.ReasonDestructiveNotAllowed):
		return "review the statements marked deletes-data; to run them, set spec.policy.allowDestructive: true, run ptah plan and approve the plan it shows"
	case stopped && stop.hasReason(api.ReasonUnresolvedRun):
		return fmt.Sprintf("establish what the run did before anything runs again: ptah resolve-run %s shows the journal's evidence and the command that records what you found",
			strings.Join(stop.namesWith(api.ReasonUnresolvedRun), ", ptah resolve-run "))
	case stopped && stop.hasReason(api.ReasonHistoryDirty):
		return "the journal shows a run that never finished and no record stands for it; ptah status names it: find out what it did, and make the history say so, before anything runs again"
	case stopped && stop.hasReason(api.ReasonSourceInvalid):
		return lookupOutcome(ExitSource).hint
	case stopped && (stop.hasReason(api.ReasonHistoryModified) || stop.hasReason(api.ReasonHistoryAhead) || stop.hasReason(api.ReasonOutOfOrder)):
		return "the migration's files no longer match the history its database records (the message names the versions): restore the files as they were applied; a new change goes in a new file with a higher version"
	case errors.Is(err, errInitUnproved):
		return "nothing was written. If the message names an object in a schema --schemas leaves out, something of the managed schemas " +
			"depends on it: add its schema to --schemas. Otherwise this is a bug of ptah init; please report it with the message above"
	case errors.Is(err, errNoDatabaseURL), errors.Is(err, errSecretForbidden):
		return hintDatabaseURL
	case errors.Is(err, runner.ErrNotYetAccounted):
		return "ptah serve accounts for a dispatched run from its Job and the run journal on its next pass; run the command again in a moment " +
			"(ptah status NAME --cluster shows the run and its deadline)"
	case errors.Is(err, runner.ErrWriterMayStillWrite):
		return "wait until the run's writer session has ended or its deadline has passed (ptah resolve-run NAME shows both), then look at the evidence again; what it did is not settled while it may still write"
	case stopped && stop.hasReason(api.ReasonPlanDoesNotConverge):
		return "the plan that ran is planned again from the database it produced; please report it with ptah plan -o sql, and change the declaration or the database to move on"
	case errors.Is(err, runner.ErrFingerprintMismatch):
		return "review the plan again (ptah plan, or ptah plan -o json) and approve the fingerprint it shows only if it is what you mean to run"
	case errors.Is(err, runner.ErrNotRunnable):
		return "change spec.policy first, run ptah plan, and approve the plan it then shows"
	}
	return lookupOutcome(code).hint
}

func lookupOutcome(code int) outcome {
	for _, o := range outcomes {
		if o.code == code {
			return o
		}
	}
	return outcome{code: code}
}

// exitCode is the one place errors become exit codes.
func exitCode(err error) int {
	var usage *usageError
	switch {
	case err == nil:
		return ExitOK
	case errors.Is(err, errPlanHasChanges):
		return ExitChanges
	case errors.As(err, &usage):
		return ExitUsage
	case errors.Is(err, config.ErrInvalid), errors.Is(err, errClusterConfig), errors.Is(err, errNoDatabaseURL):
		return ExitConfig
	case errors.Is(err, postgres.ErrConnect):
		return ExitConnect
	case errors.Is(err, catalog.ErrLoad):
		return ExitLoad
	case errors.Is(err, catalog.ErrUnsupported):
		return ExitUnsupported
	case errors.Is(err, catalog.ErrDevDatabase):
		return ExitDevDatabase
	case errors.Is(err, catalog.ErrScope):
		return ExitScope
	case errors.Is(err, errAwaitingApproval):
		return ExitAwaitingApproval
	case errors.Is(err, errBlocked), errors.Is(err, postgres.ErrPassBusy), errors.Is(err, runner.ErrNotRunnable),
		errors.Is(err, runner.ErrNotForgettable), errors.Is(err, runner.ErrWriterMayStillWrite), errors.Is(err, runner.ErrNotYetAccounted):
		return ExitBlocked
	case errors.Is(err, errApplyFailed):
		return ExitApplyFailed
	case errors.Is(err, runner.ErrUnknownPlan), errors.Is(err, runner.ErrPlanNotCurrent), errors.Is(err, runner.ErrNotRegistered):
		return ExitNoSuchPlan
	case errors.Is(err, runner.ErrFingerprintMismatch), errors.Is(err, engine.ErrPlanTampered), errors.Is(err, controller.ErrPlanCorrupted):
		return ExitPlanMismatch
	case errors.As(err, new(*engine.FutureStateError)), errors.Is(err, store.ErrNewerContract):
		return ExitFutureState
	case errors.Is(err, catalog.ErrObserveTimeout):
		return ExitObserveTimeout
	case errors.Is(err, errState):
		return ExitState
	case errors.As(err, new(*migrate.SourceError)), errors.As(err, new(*sourceUnreadable)):
		return ExitSource
	case errors.Is(err, runner.ErrNothingUnresolved):
		return ExitNothingUnresolved
	case errors.Is(err, runner.ErrWrongOperation):
		return ExitWrongOperation
	case errors.Is(err, runner.ErrNotMarkable):
		return ExitNotMarkable
	case errors.Is(err, runner.ErrUnaccounted):
		return ExitUnaccounted
	case errors.Is(err, context.Canceled):
		return ExitInterrupted
	}
	if code, ok := clusterExitCode(err); ok {
		return code
	}
	switch {
	default:
		return ExitInternal
	}
}

// commandCodes are the exit codes each command can return, which its --help
// lists; a test holds them to every exit code the end-to-end scripts see.
var commandCodes = map[string][]int{
	"plan": {ExitOK, ExitInternal, ExitChanges, ExitUsage, ExitConfig, ExitConnect, ExitLoad, ExitUnsupported,
		ExitDevDatabase, ExitScope, ExitBlocked, ExitNoSuchPlan, ExitPlanMismatch, ExitFutureState, ExitState, ExitObserveTimeout, ExitSource,
		ExitCluster, ExitForbidden, ExitInterrupted},
	"apply": {ExitOK, ExitInternal, ExitUsage, ExitConfig, ExitConnect, ExitLoad, ExitUnsupported, ExitDevDatabase,
		ExitScope, ExitAwaitingApproval, ExitBlocked, ExitApplyFailed, ExitFutureState, ExitState, ExitObserveTimeout, ExitSource,
		ExitInterrupted},
	"approve": {ExitOK, ExitInternal, ExitUsage, ExitConfig, ExitConnect, ExitBlocked, ExitNoSuchPlan, ExitPlanMismatch,
		ExitFutureState, ExitState, ExitCluster, ExitForbidden, ExitInterrupted},
	"status":  {ExitOK, ExitInternal, ExitUsage, ExitConfig, ExitConnect, ExitNoSuchPlan, ExitFutureState, ExitState, ExitCluster, ExitForbidden, ExitInterrupted},
	"history": {ExitOK, ExitInternal, ExitUsage, ExitConfig, ExitConnect, ExitFutureState, ExitState, ExitInterrupted},
	"forget":  {ExitOK, ExitInternal, ExitUsage, ExitConfig, ExitConnect, ExitBlocked, ExitNoSuchPlan, ExitFutureState, ExitState, ExitInterrupted},
	"version": {ExitOK, ExitInternal, ExitUsage},
	"init": {ExitOK, ExitInternal, ExitUsage, ExitConfig, ExitConnect, ExitLoad, ExitUnsupported, ExitDevDatabase, ExitScope,
		ExitInterrupted},
	"exec":    {ExitOK, ExitInternal, ExitUsage, ExitConfig, ExitConnect, ExitBlocked, ExitApplyFailed, ExitPlanMismatch, ExitInterrupted},
	"serve":   {ExitOK, ExitInternal, ExitUsage, ExitFutureState, ExitCluster, ExitForbidden, ExitInterrupted},
	"migrate": {ExitOK, ExitInternal, ExitUsage, ExitConfig, ExitSource},
	"resolve-run": {ExitOK, ExitInternal, ExitUsage, ExitConfig, ExitConnect, ExitBlocked, ExitNoSuchPlan, ExitFutureState, ExitState, ExitSource,
		ExitNothingUnresolved, ExitWrongOperation, ExitNotMarkable, ExitUnaccounted, ExitCluster, ExitForbidden, ExitInterrupted},
}

// exitCodeHelp renders the exit code table for --help: the codes command
// can return, or every code for "" (ptah --help).
func exitCodeHelp(command string) string {
	codes := commandCodes[command]
	var b strings.Builder
	b.WriteString("Exit codes:\n")
	for _, o := range outcomes {
		if command != "" && !slices.Contains(codes, o.code) {
			continue
		}
		fmt.Fprintf(&b, "  %3d  %s\n", o.code, wrap(o.meaning, 70, strings.Repeat(" ", 7)))
	}
	return b.String()
}

// wrap breaks text into lines of at most width bytes, indenting every line
// after the first.
func wrap(text string, width int, indent string) string {
	var b strings.Builder
	n := 0
	for i, w := range strings.Fields(text) {
		if i > 0 && n+1+len(w) > width {
			b.WriteString("\n" + indent)
			n = 0
		} else if i > 0 {
			b.WriteString(" ")
			n++
		}
		b.WriteString(w)
		n += len(w)
	}
	return b.String()
}
