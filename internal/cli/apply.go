package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/ptah-run/ptah/internal/config"
	"github.com/ptah-run/ptah/internal/postgres"
	"github.com/ptah-run/ptah/internal/postgres/catalog"
	"github.com/ptah-run/ptah/internal/runner"
	api "github.com/ptah-run/ptah/pkg/api/v1alpha1"
)

var statusOutputs = []string{outputText, outputJSON}

type applyOptions struct {
	File    string
	Names   []string
	Output  string
	DevURL  string
	Timeout time.Duration
	// ObserveTimeout bounds the catalog reading's waits for locks.
	ObserveTimeout time.Duration
	// Cache keeps the desired state the declared files load to (nil: none).
	Cache catalog.DesiredCache
}

const applyLong = `Run each resource's pass until it settles: observe the database (a
PtahSchema's catalog, a PtahMigration's history), publish the plan, and
execute it if it is authorized, exactly once.

A plan is authorized by spec.policy.apply:
  OnApproval  (default) an approval of exactly this plan, recorded by
              ptah approve, is needed
  Always      a plan that deletes no data runs without one; a destructive
              plan still needs an approval (and spec.policy.allowDestructive)
  Never       nothing is applied; the plan is only published

What runs is the published plan, never a fresh computation: before it
runs, the database and the declared files are read again, and if anything
moved since the plan was made it is discarded and a new plan published
instead (which needs its own approval). The plan runs in the transactions
it was published with (one, unless the plan says why it needs more: enum
labels that later statements use, or more locks than one transaction may
hold on the server), on a session that holds the database's lease; its
statements and the session are recorded in the run journal (schema ptah).
If a later transaction fails, the earlier ones stay committed; the database
is then observed again, and never re-run from the old plan.

A PtahMigration's plan runs its files in order, each in a transaction of
its own with its history row, or, marked -- ptah:no-transaction, statement
by statement. If a statement fails, its file rolls back and the files
before it stay applied (exit 12, naming the version, the statement's place
in its file and PostgreSQL's error). A run whose outcome cannot be
established (the process died, the connection was lost mid-file) is never
run again: the migration is Blocked (UnresolvedRun, exit 11) until ptah
resolve-run NAME settles it.

Ends InSync (exit 0) when the database matches the declaration; otherwise
stops with the exit code of where it stopped: awaiting approval (10),
blocked (11) or failed (12).

Each statement is shown on stderr as it runs: on a terminal with its
elapsed time while it runs; elsewhere (a CI log) one line per statement
once it ran, with the time it took:

  app [2/7] 35ms  CREATE INDEX posts_author ON public.posts (author_id)
  app [3/5] version 2 (no transaction) 1.2s  CREATE INDEX CONCURRENTLY users_email ON users (email)

`

const applyExample = `  # Review, approve, apply
  ptah plan
  ptah approve 3f6c0c8e-... --fingerprint sha256:...
  ptah apply

  # In CI, with policy.apply: Always in ptah.yaml: non-destructive plans
  # apply without an approval
  ptah apply -o json`

func (a *app) newApplyCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:               "apply [NAME...] [flags]",
		Short:             "Execute the authorized plan of each resource, exactly once",
		Long:              applyLong + exitCodeHelp("apply"),
		Example:           applyExample,
		Args:              cobra.ArbitraryArgs,
		ValidArgsFunction: a.completeDeclared,
		RunE: func(cmd *cobra.Command, args []string) error {
			o, err := a.applyOptions(args)
			if err != nil {
				return err
			}
			return a.runApply(cmd.Context(), o)
		},
	}
	f := cmd.Flags()
	f.StringP("file", "f", "ptah.yaml", "the file of resource documents")
	f.StringP("output", "o", outputText, "output format: "+strings.Join(statusOutputs, ", "))
	f.String("dev-url", "", "a server (any database on it) where the temporary dev database is created; default: the target's server")
	f.Duration("timeout", 30*time.Minute, "the run's execution deadline: the server stops the writer's session then, and the plan rolls back")
	addObserveTimeout(f)
	addCacheDir(f)
	return cmd
}

func (a *app) applyOptions(args []string) (applyOptions, error) {
	s := a.settings
	o := applyOptions{File: s.String("file"), Names: args, Output: s.String("output"), DevURL: s.String("dev-url")}
	a.secrets.addURL(o.DevURL)
	var err error
	if o.Timeout, err = s.Duration("timeout"); err != nil {
		return o, err
	}
	if o.Timeout <= 0 {
		return o, usageErrorf("%s: must be positive", s.origin("timeout"))
	}
	if o.ObserveTimeout, err = observeTimeout(s); err != nil {
		return o, err
	}
	o.Cache = desiredCache(s)
	if err := validateCommon(s, o.File, o.Output, statusOutputs, o.Names, o.DevURL); err != nil {
		return o, err
	}
	return o, nil
}

// applied is one resource's outcome of ptah apply.
type applied struct {
	Resource *config.Resource
	// Status is a PtahSchema's status; of a PtahMigration's, only its run
	// state (Migration has the rest).
	Status    api.PtahSchemaStatus
	Migration *api.PtahMigrationStatus
	// Executed: this invocation ran a plan (Status.Applied, or
	// Migration.LastRun or UnresolvedRun, is that run).
	Executed   bool
	Dispatched []string
	// FailedSQL is the statement a PtahSchema's failed run stopped at,
	// from the run journal (a status never carries SQL); "" when none.
	FailedSQL string
}

func (a *app) runApply(ctx context.Context, o applyOptions) error {
	sel, err := a.selectResources(o.File, o.Names, sourcesRequired)
	if err != nil {
		return err
	}
	t, err := a.openTargets(ctx, sel, runnerOptions{DevURL: o.DevURL, RunTimeout: o.Timeout, ObserveTimeout: o.ObserveTimeout, Cache: o.Cache})
	if err != nil {
		return err
	}
	defer t.close()
	if err := t.register(ctx, sel); err != nil {
		return err
	}
	var results []applied
	for i, in := range sel.inputs {
		res := sel.resources[i]
		r := t.runner(in)
		steps := newStepPrinter(a.stderr, res.Name(), a.stderrIsTerminal())
		r.Progress = steps.step
		out, err := r.Run(ctx, in, runner.Apply)
		steps.finish()
		if ctx.Err() != nil {
			// Interrupted: what ran before is reported, the rest is not
			// started, and the error says what became of this one.
			_ = a.renderApplied(o.Output, results)
			return interrupted(ctx.Err(), res, out)
		}
		if err != nil {
			_ = a.renderApplied(o.Output, results)
			return fmt.Errorf("applying %s: %w", res.Ref(), err)
		}
		ap := applied{Resource: res, Status: out.Status, Dispatched: out.Dispatched}
		if m := out.Migration; m != nil {
			ms := m.Status
			ap.Migration, ap.Executed = &ms, len(out.Dispatched) > 0
		} else {
			ap.Executed = len(out.Dispatched) > 0 && out.Status.Applied != nil
			if ap.Executed && out.Status.Applied.Outcome == api.OutcomeFailed {
				ap.FailedSQL = failedStatement(ctx, r, out.Status.Applied.OperationID)
			}
		}
		results = append(results, ap)
	}
	if err := a.renderApplied(o.Output, results); err != nil {
		return fmt.Errorf("writing the result: %w", err)
	}
	return phaseError(results)
}

// failedStatement is the SQL of the statement a failed run stopped at, as
// its journal records the failure (the error's lines after the first);
// "" when the journal does not say.
func failedStatement(ctx context.Context, r *runner.Runner, operationID string) string {
	run, err := postgres.ReadRun(ctx, r.Target, operationID)
	if err != nil {
		return ""
	}
	_, sql, _ := strings.Cut(run.Error, "\n")
	return strings.TrimSpace(sql)
}

// interrupted says what an interrupted apply did to res (from the status
// the pass left, which its accounting wrote even after the interrupt), and
// what comes next.
func interrupted(cause error, res *config.Resource, out runner.Result) error {
	if out.Migration != nil {
		return migrationInterrupted(cause, res, out)
	}
	st := out.Status
	var what, next string
	ap := st.Applied
	ran := ap != nil && slices.Contains(out.Dispatched, ap.OperationID)
	switch {
	case st.PendingObservation != nil && slices.Contains(out.Dispatched, st.PendingObservation.OperationID):
		po := st.PendingObservation
		what = fmt.Sprintf("the outcome of run %s of plan %s is not known yet (its session was cut off while committing)", po.OperationID, po.Plan.Name)
		next = "ptah status shows the run; the next ptah apply waits until its writer session has ended, settles it by observing the database, and plans again from there"
	case st.ActiveOperation != nil && st.ActiveOperation.DispatchedAt != nil:
		op := st.ActiveOperation
		what = fmt.Sprintf("run %s of plan %s was not accounted for", op.ID, op.Plan.Name)
		next = "ptah status shows the run; the next ptah apply settles it by observing the database once its writer session has ended"
	case ran && ap.Outcome == api.OutcomeFailed:
		what = fmt.Sprintf("plan %s rolled back: none of it was applied", ap.Plan.Name)
		next = afterSpentApproval(res)
	case ran && ap.Outcome == api.OutcomeObserved:
		what = fmt.Sprintf("plan %s stopped part way: the transactions that committed before the interrupt stay, and the database was observed again", ap.Plan.Name)
		next = afterSpentApproval(res)
	case ran:
		what = fmt.Sprintf("plan %s had already committed", ap.Plan.Name)
		next = "ptah status shows where it stands"
	default:
		what = "nothing ran"
		next = "ptah apply takes it up again (an approval given stands)"
	}
	return fmt.Errorf("interrupted (%w): %s: %s; %s", cause, res.Ref(), what, next)
}

// afterSpentApproval is what comes after a run that did not complete: its
// approval authorized that one run.
func afterSpentApproval(res *config.Resource) string {
	if res.Migration != nil {
		if res.Migration.Spec.Policy.Apply == api.ApplyAlways {
			return "the next ptah apply plans the versions that remain and runs them"
		}
		return "an approval authorizes one run: ptah plan publishes the plan of the versions that remain, which needs its own ptah approve"
	}
	if res.Schema.Spec.Policy.Apply == api.ApplyAlways {
		return "the next ptah apply plans again from the database as it is and runs that plan (a destructive one waits for an approval)"
	}
	return "an approval authorizes one run: ptah plan publishes a new plan from the database as it is, which needs its own ptah approve"
}

// phaseError turns where the resources stopped into the command's outcome:
// the worst of them decides the exit code, and every one short of InSync is
// named.
func phaseError(results []applied) error {
	worst, rank := error(nil), 0
	var lines, reasons, names []string
	for _, r := range results {
		n, err := phaseOutcome(r.Status.Phase)
		if err == nil {
			continue
		}
		// The message was printed with the result; name the stop only.
		lines = append(lines, fmt.Sprintf("%s is %s", r.Resource.Ref(), phaseWithReason(r.Status.Phase, r.Status.Reason)))
		reasons, names = append(reasons, r.Status.Reason), append(names, r.Resource.Name())
		if n > rank {
			worst, rank = err, n
		}
	}
	if worst == nil {
		return nil
	}
	return &stopError{class: worst, reasons: reasons, names: names, detail: strings.Join(lines, "; ")}
}

// phaseWithReason is "Phase (Reason)", or "Phase" when the reason only
// repeats it.
func phaseWithReason(phase api.Phase, reason string) string {
	if reason == "" || reason == string(phase) {
		return string(phase)
	}
	return fmt.Sprintf("%s (%s)", phase, reason)
}

// phaseOutcome ranks where a resource stopped (0: InSync, higher: worse)
// and gives the error that carries its exit code.
func phaseOutcome(p api.Phase) (int, error) {
	switch p {
	case api.PhaseInSync:
		return 0, nil
	case api.PhaseAwaitingApproval:
		return 1, errAwaitingApproval
	case api.PhasePlanned, api.PhaseBlocked:
		return 2, errBlocked
	case api.PhaseFailed:
		return 3, errApplyFailed
	}
	return 4, fmt.Errorf("the pass ended in phase %s", p)
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

func (a *app) renderApplied(output string, results []applied) error {
	if output == outputJSON {
		items := make([]statusItem, len(results))
		for i, r := range results {
			st := r.Status
			items[i] = statusItem{Resource: refOf(r.Resource), Registered: true, Executed: &r.Executed}
			if r.Migration != nil {
				items[i].Migration = r.Migration
			} else {
				items[i].Status = &st
			}
		}
		return writeJSON(a.stdout, statusOutput{Items: items})
	}
	st := newStyles(a.stdout, colorProfile(a.stdout))
	var b strings.Builder
	for _, r := range results {
		if r.Migration != nil {
			writeMigrationApplied(&b, st, r)
			continue
		}
		fmt.Fprintf(&b, "%s: %s", st.header.Render(r.Resource.Ref()), phaseText(st, r.Status.Phase))
		if r.Executed {
			ap := r.Status.Applied
			fmt.Fprintf(&b, " Applied plan %s (operation %s, %s).", ap.Plan.Name, ap.OperationID, ap.Outcome)
		}
		if r.Status.Message != "" && r.Status.Phase != api.PhaseInSync {
			b.WriteString(" " + r.Status.Message)
		}
		b.WriteString("\n")
		if r.FailedSQL != "" {
			b.WriteString("  the statement: " + strings.ReplaceAll(r.FailedSQL, "\n", "\n  ") + "\n")
		}
	}
	_, err := io.WriteString(a.stdout, b.String())
	return err
}

func phaseText(st styles, p api.Phase) string {
	switch p {
	case api.PhaseInSync:
		return st.ok.Render("InSync.")
	case api.PhaseBlocked, api.PhaseFailed:
		return st.danger.Render(string(p) + ".")
	}
	return st.header.Render(string(p) + ".")
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	return enc.Encode(v)
}
