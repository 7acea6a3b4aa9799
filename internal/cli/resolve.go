package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/ptah-run/ptah/internal/config"
	"github.com/ptah-run/ptah/internal/migrate"
	"github.com/ptah-run/ptah/internal/postgres"
	"github.com/ptah-run/ptah/internal/runner"
	api "github.com/ptah-run/ptah/pkg/api/v1alpha1"
)

const resolveLong = `Settle a PtahMigration's unresolved run: a run whose outcome ptah could not
establish (its process died, its connection was lost while a statement ran
without a transaction or while a file committed, or a file run without a
transaction stopped part way). ptah never runs such a run again, and runs
nothing else for the migration, until a person says what it did.

Without --operation, resolve-run runs nothing and records no decision: it
shows the unresolved run (its operation, outcome, plan, writer session and
deadline) and the evidence the database holds (a run whose process died
before any pass accounted for it is accounted for first, from the journal,
as ptah plan would): for each file of the run's plan, whether the
history records it, how many of its statements the run journal shows
started and committed, and the statement that was in flight when the run
stopped (its SQL: it is your file). Then the command that records what you
found. It exits 0, also when nothing is unresolved.

With --operation (the unresolved run's, exactly) and --reason, it records
your acknowledgment, bound to that operation and to this migration, and
then runs a plan pass that consumes it: the unresolved run is cleared
(status.resolvedRun says who settled it), the history is read again, and
the plan of the versions that remain is published for approval.

Every file the run stopped part way (the journal shows some of its
statements committed, the history does not record it) must be accounted
for, one way or the other:

  --mark-applied VERSION  you finished the file (ran its remaining
                          statements by hand), or it had in fact taken
                          effect in full: the history records the version
                          as marked (by --as), in the same transaction as
                          the acknowledgment, and it never runs
  --rerun VERSION         you undid what of the file committed: it runs
                          again, whole, in the next plan

Both repeat. A file of the plan that did not start needs neither: it is
pending, and runs on the next apply.

Refused, and nothing recorded: no run is unresolved (19); the operation is
not the unresolved run's (20); a version to mark that is not in the run's
plan, is in the history already, or is not in the source with the checksum
the run ran (21); a file stopped part way that is neither marked nor named
to run again, or --rerun of a file that did not stop part way (22); a run
whose writer session may still be writing (11: it is what blocks apply
too; wait until the session has ended or the deadline has passed, then
look at the evidence again).

The person is --as, else the OS user, recorded for audit (local mode does
not authenticate it).

With --cluster (and kubectl's --kubeconfig, --context, -n), NAME is a
PtahMigration custom resource that ptah serve converges: the record of the
run (status.unresolvedRun, its plan, the resource's UID) is read from the
cluster, and the acknowledgment is created there as a
PtahMigrationRunAcknowledgment, in the name of the user the API server
authenticates (--as is refused; an admission policy refuses any other
name). What the run did is in the database, so resolve-run connects to it
too, with the URL in the Secret key spec.target.urlFrom.secretKeyRef
names, read with your own permissions; if you may not read that Secret,
put the URL in an environment variable and pass its name with
--database-url-env VAR (never the URL itself). Differences from local
mode: a run ptah serve dispatched and has not yet accounted for is refused
(11: look again in a moment); the source is ptah serve's to read, so a
version marked applied is recorded with the checksum its plan ran, and the
pass that consumes the acknowledgment checks the history against the
source; the history rows of --mark-applied are committed first and the
acknowledgment created next (a failure between leaves the versions
recorded and the run unresolved: run the command again without marking
them); and no pass runs here: ptah serve consumes the acknowledgment and
publishes the plan of what remains.

`

const resolveExample = `  # What did the run do? (runs nothing)
  ptah resolve-run app

  # The journal shows version 3 (run without a transaction) stopped after
  # its first statement; you ran its second statement by hand. Record it:
  ptah resolve-run app --operation 2e679d1429fc2dcf91dab3bea5fa27a8 \
      --mark-applied 3 --reason "ran the index build of 0003 by hand; INC-42"

  # You dropped the table its first statement created instead: it runs
  # again, whole
  ptah resolve-run app --operation 2e679d1429fc2dcf91dab3bea5fa27a8 \
      --rerun 3 --reason "dropped what 0003 created; INC-42"

  # Then, as always
  ptah approve PLAN_UID --fingerprint FP && ptah apply

  # For a script
  ptah resolve-run app -o json | jq -r '.unresolved.operationID, .next.partial[]'

  # In a cluster: the record from namespace shop, the journal and the
  # history from the database the resource's Secret names
  ptah resolve-run app --cluster -n shop
  ptah resolve-run app --cluster -n shop --operation 2e679d1429fc2dcf91dab3bea5fa27a8 \
      --mark-applied 3 --reason "ran the index build of 0003 by hand; INC-42"

  # If you may not read that Secret: the URL from a variable, by its name
  read -rs APP_DB_URL && export APP_DB_URL
  ptah resolve-run app --cluster -n shop --database-url-env APP_DB_URL`

type resolveOptions struct {
	File        string
	Name        string
	Operation   string
	Reason      string
	MarkApplied []string
	Rerun       []string
	As          string
	Output      string
	// Cluster: --cluster. DatabaseURLEnv names the environment variable
	// holding the database URL (never the URL itself).
	Cluster        bool
	DatabaseURLEnv string
}

func (a *app) newResolveRunCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:     "resolve-run NAME [flags]",
		Short:   "Show the evidence of a migration's unresolved run, and record what it did",
		Long:    resolveLong + exitCodeHelp("resolve-run"),
		Example: resolveExample,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) != 1 || args[0] == "" {
				return usageErrorf("resolve-run takes exactly one argument, the name of the PtahMigration whose run to settle")
			}
			return nil
		},
		ValidArgsFunction: a.completeDeclared,
		RunE: func(cmd *cobra.Command, args []string) error {
			inCluster, err := a.clusterMode()
			if err != nil {
				return err
			}
			o, err := a.resolveOptions(args[0], inCluster)
			if err != nil {
				return err
			}
			return a.runResolve(cmd.Context(), o)
		},
	}
	f := cmd.Flags()
	f.StringP("file", "f", "ptah.yaml", "the file of resource documents")
	f.String("operation", "", "the unresolved run's operation ID (resolve-run NAME shows it): record the acknowledgment")
	f.String("reason", "", "what established the run's outcome, for the record (required with --operation)")
	f.StringSlice("mark-applied", nil, "a version of the run's plan you established took effect in full: record it as applied (repeatable; with --operation)")
	f.StringSlice("rerun", nil, "a version the run stopped part way whose committed part you undid: run it again, whole (repeatable; with --operation)")
	f.String("as", "", "who resolves (default: the OS user; with --cluster, the user the API server authenticates)")
	f.String("database-url-env", "", "with --cluster: the NAME of an environment variable holding the database URL "+
		"(default: the Secret key spec.target.urlFrom.secretKeyRef names, read as you)")
	f.StringP("output", "o", outputText, "output format: "+strings.Join(statusOutputs, ", "))
	return cmd
}

// envVarName is what --database-url-env takes: a variable's name.
var envVarName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// resolveOptions resolves and validates the options; it does no I/O.
func (a *app) resolveOptions(name string, inCluster bool) (resolveOptions, error) {
	s := a.settings
	o := resolveOptions{File: s.String("file"), Name: name, Operation: strings.TrimSpace(s.String("operation")),
		Reason: strings.TrimSpace(s.String("reason")), MarkApplied: s.StringSlice("mark-applied"), Rerun: s.StringSlice("rerun"),
		As: s.String("as"), Output: s.String("output"), Cluster: inCluster, DatabaseURLEnv: s.String("database-url-env")}
	file := o.File
	if inCluster {
		file = "-" // the resource is the cluster's: ptah.yaml is not read
		if o.As != "" {
			return o, usageErrorf("%s: with --cluster the person who resolves is the user the API server authenticates; leave --as out", s.origin("as"))
		}
		if strings.Contains(name, "/") && !strings.HasPrefix(name, api.KindPtahMigration+"/") {
			return o, usageErrorf("with --cluster, NAME is the PtahMigration's name; -n names its namespace")
		}
		o.Name = strings.TrimPrefix(name, api.KindPtahMigration+"/")
	} else if o.DatabaseURLEnv != "" {
		return o, usageErrorf("%s is for cluster mode (local mode reads the URL as ptah.yaml says): pass --cluster too", s.origin("database-url-env"))
	}
	if o.DatabaseURLEnv != "" && !envVarName.MatchString(o.DatabaseURLEnv) {
		// Not echoed: a URL passed here by mistake would hold a password.
		return o, usageErrorf("%s takes the name of an environment variable holding the URL (letters, digits and _), never the URL itself",
			s.origin("database-url-env"))
	}
	if err := validateCommon(s, file, o.Output, statusOutputs, nil, ""); err != nil {
		return o, err
	}
	if o.Operation == "" {
		switch {
		case o.Reason != "":
			return o, usageErrorf("%s is recorded with an acknowledgment: pass --operation too (ptah resolve-run %s shows the run's)", s.origin("reason"), name)
		case len(o.MarkApplied) > 0:
			return o, usageErrorf("%s is recorded with an acknowledgment: pass --operation and --reason too (ptah resolve-run %s shows the run's operation)",
				s.origin("mark-applied"), name)
		case len(o.Rerun) > 0:
			return o, usageErrorf("%s is recorded with an acknowledgment: pass --operation and --reason too (ptah resolve-run %s shows the run's operation)",
				s.origin("rerun"), name)
		}
		return o, nil
	}
	if o.Reason == "" {
		return o, usageErrorf("--reason is required with --operation: say what established the run's outcome (it is recorded with your acknowledgment)")
	}
	for key, vs := range map[string][]string{"mark-applied": o.MarkApplied, "rerun": o.Rerun} {
		for _, v := range vs {
			if _, err := migrate.ParseVersion(v); err != nil {
				return o, usageErrorf("%s: %q is not a version (digits, separated by dots or underscores)", s.origin(key), v)
			}
		}
	}
	if inCluster {
		return o, nil
	}
	if o.As == "" {
		o.As = osUser()
	}
	if o.As == "" {
		return o, usageErrorf("cannot tell who is resolving: pass --as NAME")
	}
	return o, nil
}

// selectMigration selects the one PtahMigration NAME names (a bare name, or
// PtahMigration/NAME, or namespace/NAME).
func (a *app) selectMigration(file, name string, how sources) (*selection, error) {
	f, err := config.Load(file)
	if err != nil {
		return nil, err
	}
	resources, err := f.SelectMigrations([]string{name})
	if err != nil {
		return nil, err
	}
	if len(resources) > 1 {
		return nil, usageErrorf("%q names %d PtahMigrations in %s; name one as namespace/name", name, len(resources), file)
	}
	return a.resolveAll(resources, how)
}

func (a *app) runResolve(ctx context.Context, o resolveOptions) error {
	if o.Cluster {
		return a.runResolveCluster(ctx, o)
	}
	if o.Operation == "" {
		return a.showEvidence(ctx, o)
	}
	return a.recordResolution(ctx, o)
}

// The JSON of resolve-run's evidence.
type (
	evidenceOutput struct {
		Resource ref `json:"resource"`
		// Unresolved is the record; null when nothing is unresolved (the
		// rest is then absent).
		Unresolved          *api.UnresolvedRun   `json:"unresolved"`
		Plan                *jsonMeta            `json:"plan,omitempty"`
		WriterMayStillWrite bool                 `json:"writerMayStillWrite"`
		Run                 *evidenceRun         `json:"run,omitempty"`
		Versions            []evidenceVersion    `json:"versions,omitempty"`
		History             []evidenceHistoryRow `json:"history,omitempty"`
		Next                *evidenceNextCommand `json:"next,omitempty"`
		ResolvedRun         *api.ResolvedRun     `json:"resolvedRun,omitempty"`
		// Unaccounted is a dispatched run no pass could account for yet:
		// its writer may still be running it.
		Unaccounted *api.Operation        `json:"unaccounted,omitempty"`
		Status      *evidenceStatusDigest `json:"status,omitempty"`
	}
	evidenceStatusDigest struct {
		Phase  api.Phase `json:"phase"`
		Reason string    `json:"reason,omitempty"`
	}
	evidenceRun struct {
		OperationID string         `json:"operationID"`
		Writer      *jsonSession   `json:"writer,omitempty"`
		Deadline    time.Time      `json:"deadline"`
		StartedAt   time.Time      `json:"startedAt"`
		FinishedAt  *time.Time     `json:"finishedAt,omitempty"`
		Outcome     string         `json:"outcome"`
		Error       string         `json:"error,omitempty"`
		Statements  int            `json:"statements"`
		Steps       []evidenceStep `json:"steps"`
	}
	jsonSession struct {
		PID          int32     `json:"pid"`
		BackendStart time.Time `json:"backendStart"`
	}
	evidenceVersion struct {
		Version       string `json:"version"`
		Name          string `json:"name"`
		File          string `json:"file,omitempty"`
		Checksum      string `json:"checksum"`
		NoTransaction bool   `json:"noTransaction"`
		// Statements is how many statements the file holds (0 when the
		// source no longer has it with that checksum).
		Statements int  `json:"statements"`
		Recorded   bool `json:"recorded"`
		Started    int  `json:"started"`
		Committed  int  `json:"committed"`
		// InFlight are the statements journaled as started and never as
		// finished in a run that never finished: each may or may not
		// have taken effect. Failed are those a finished run journaled
		// as refused.
		InFlight []evidenceStep `json:"inFlight,omitempty"`
		Failed   []evidenceStep `json:"failed,omitempty"`
		// Verdict is what the evidence says of the version, in a sentence.
		Verdict string `json:"verdict"`
	}
	evidenceStep struct {
		Step int `json:"step"`
		// InFile is the statement's position in its file, from 1.
		InFile      int        `json:"inFile"`
		Version     string     `json:"version,omitempty"`
		SQL         string     `json:"sql"`
		StartedAt   time.Time  `json:"startedAt"`
		CommittedAt *time.Time `json:"committedAt,omitempty"`
	}
	evidenceHistoryRow struct {
		Version     string    `json:"version"`
		Name        string    `json:"name"`
		Checksum    string    `json:"checksum"`
		How         string    `json:"how"`
		AppliedAt   time.Time `json:"appliedAt"`
		OperationID string    `json:"operationID,omitempty"`
		AppliedBy   string    `json:"appliedBy,omitempty"`
	}
	evidenceNextCommand struct {
		// Command records the acknowledgment; REASON stands for yours.
		Command string `json:"command"`
		// Partial are the files the run stopped part way: the history
		// lacks them and the journal shows statements of them committed.
		// The acknowledgment must name each, with --mark-applied (you
		// finished it) or --rerun (you undid what committed).
		Partial []string `json:"partial"`
	}
)

// showEvidence is resolve-run without --operation: it reads and shows.
func (a *app) showEvidence(ctx context.Context, o resolveOptions) error {
	sel, err := a.selectMigration(o.File, o.Name, sourcesTolerated)
	if err != nil {
		return err
	}
	t, err := a.openTargets(ctx, sel, runnerOptions{ReadOnly: true})
	if err != nil {
		return err
	}
	defer t.close()
	in, res := sel.inputs[0], sel.resources[0]
	r := t.runner(in)
	out := evidenceOutput{Resource: refOf(res)}
	ev, err := r.Evidence(ctx, in)
	switch {
	case errors.Is(err, runner.ErrNotRegistered):
		ev = &runner.Evidence{} // no pass ever ran: nothing to resolve
	case err != nil:
		return fmt.Errorf("reading the evidence of %s: %w", res.Ref(), err)
	}
	if ev.Unresolved == nil {
		st, err := storedMigrationStatus(ctx, r, in)
		if err != nil {
			return err
		}
		out.ResolvedRun = st.ResolvedRun
		if op := st.ActiveOperation; op != nil && op.DispatchedAt != nil {
			out.Unaccounted = op
		}
		if st.Phase != "" {
			out.Status = &evidenceStatusDigest{Phase: st.Phase, Reason: st.Reason}
		}
	} else {
		out = evidenceOf(res, in, ev)
	}
	if o.Output == outputJSON {
		return writeJSON(a.stdout, out)
	}
	return a.renderEvidence(out, in)
}

// evidenceOf turns the runner's evidence into what resolve-run shows.
func evidenceOf(res *config.Resource, in runner.Resource, ev *runner.Evidence) evidenceOutput {
	u := ev.Unresolved
	out := evidenceOutput{Resource: refOf(res), Unresolved: u, WriterMayStillWrite: ev.WriterMayStillWrite,
		Plan: &jsonMeta{Name: u.Plan.Name, UID: u.Plan.UID}}
	// Each step's position in its file: the plan ran the files in order,
	// so a file's steps follow those of the files before it.
	offsets := map[string]int{}
	next := 0
	for _, v := range ev.Versions {
		offsets[v.Version] = next
		if f := sourceFile(in.Source, v.Version); f != nil && f.Checksum == v.Checksum {
			next += len(f.Statements)
		} else if first := firstStep(ev.Run, v.Version); first > 0 {
			// Without the file (cluster mode reads no source), the
			// journal places its statements: a run journals a file's
			// statements in order from its first, none when its
			// transaction did not commit.
			offsets[v.Version] = first - 1
		}
	}
	step := func(s postgres.RunStep) evidenceStep {
		e := evidenceStep{Step: s.Step, Version: s.Version, SQL: s.Statement, StartedAt: s.StartedAt, CommittedAt: s.CommittedAt, InFile: s.Step}
		if off, ok := offsets[s.Version]; ok && s.Step > off {
			e.InFile = s.Step - off
		}
		return e
	}
	if run := ev.Run; run != nil {
		er := &evidenceRun{OperationID: run.OperationID, Deadline: run.Deadline, StartedAt: run.StartedAt, FinishedAt: run.FinishedAt,
			Outcome: run.Outcome, Error: run.Error, Statements: len(run.Steps), Steps: []evidenceStep{}}
		if run.Writer.PID != 0 {
			er.Writer = &jsonSession{PID: run.Writer.PID, BackendStart: run.Writer.BackendStart}
		}
		for _, s := range run.Steps {
			er.Steps = append(er.Steps, step(s))
		}
		out.Run = er
	}
	nextCmd := &evidenceNextCommand{Partial: []string{}}
	for _, v := range ev.Versions {
		ev := evidenceVersion{Version: v.Version, Name: v.Name, Checksum: v.Checksum, NoTransaction: v.NoTransaction,
			Recorded: v.Recorded, Started: v.Started, Committed: v.Committed}
		if f := sourceFile(in.Source, v.Version); f != nil && f.Checksum == v.Checksum {
			ev.File, ev.Statements = f.Path, len(f.Statements)
		}
		for _, s := range v.InFlight {
			ev.InFlight = append(ev.InFlight, step(s))
		}
		if out.Run != nil && out.Run.FinishedAt != nil {
			for _, s := range out.Run.Steps {
				if s.Version == v.Version && s.CommittedAt == nil {
					ev.Failed = append(ev.Failed, s)
				}
			}
		}
		ev.Verdict = versionVerdict(ev)
		if partial(ev) {
			nextCmd.Partial = append(nextCmd.Partial, v.Version)
		}
		out.Versions = append(out.Versions, ev)
	}
	for _, h := range ev.History {
		out.History = append(out.History, evidenceHistoryRow{Version: h.Version, Name: h.Name, Checksum: h.Checksum, How: h.How,
			AppliedAt: h.AppliedAt, OperationID: h.OperationID, AppliedBy: h.AppliedBy})
	}
	nextCmd.Command = fmt.Sprintf("ptah resolve-run %s --operation %s --reason REASON", res.Name(), u.OperationID)
	if res.File != "ptah.yaml" {
		nextCmd.Command = fmt.Sprintf("ptah resolve-run %s -f %s --operation %s --reason REASON", res.Name(), res.File, u.OperationID)
	}
	out.Next = nextCmd
	return out
}

// firstStep is the step at which run journaled version's first statement,
// 0 when it journaled none.
func firstStep(run *postgres.Run, version string) int {
	if run == nil {
		return 0
	}
	for _, s := range run.Steps {
		if s.Version == version {
			return s.Step
		}
	}
	return 0
}

// partial: a file the run stopped part way, which the acknowledgment must
// account for (runner.ErrUnaccounted). The history lacks it and the
// journal shows statements of it committed: a file run without a
// transaction that stopped part way, or completed without its history
// row. A transactional file commits with its history row, so one the
// history lacks did not commit.
func partial(v evidenceVersion) bool {
	return !v.Recorded && v.Committed > 0
}

// versionVerdict says, in a sentence, what the evidence shows of one file.
func versionVerdict(v evidenceVersion) string {
	total := "of its" // the source is not read here (cluster mode), or lacks the file
	if v.Statements > 0 {
		total = fmt.Sprintf("of its %d", v.Statements)
	}
	switch {
	case v.Recorded:
		return "the history records it: it applied (nothing to settle)"
	case v.Started == 0:
		return "the journal shows none of its statements started: it did not run, and runs on the next apply"
	case !v.NoTransaction && v.Committed == 0:
		return "its transaction did not commit (its history row would have committed with it): none of it applied, and it runs again in full on the next apply"
	case !v.NoTransaction:
		return fmt.Sprintf("the journal shows %d %s statements committed but the history lacks it: look at the database before you decide", v.Committed, total)
	}
	s := fmt.Sprintf("it runs without a transaction: %d %s statements committed", v.Committed, total)
	if v.Statements > 0 && v.Committed == v.Statements {
		s += " (all of them; only its history row is missing)"
	}
	for _, f := range v.InFlight {
		s += fmt.Sprintf("; statement %d was in flight when the run stopped: it may or may not have taken effect", f.InFile)
	}
	for _, f := range v.Failed {
		s += fmt.Sprintf("; statement %d failed", f.InFile)
	}
	switch {
	case v.Statements > 0 && v.Started+1 == v.Statements:
		s += fmt.Sprintf("; statement %d did not start", v.Statements)
	case v.Statements > 0 && v.Started < v.Statements:
		s += fmt.Sprintf("; statements %d to %d did not start", v.Started+1, v.Statements)
	}
	return s
}

func (a *app) renderEvidence(out evidenceOutput, in runner.Resource) error {
	st := newStyles(a.stdout, colorProfile(a.stdout))
	var b strings.Builder
	name := fmt.Sprintf("%s %q", out.Resource.Kind, out.Resource.Name)
	u := out.Unresolved
	if op := out.Unaccounted; u == nil && op != nil {
		fmt.Fprintf(&b, "%s: run %s of plan %s is dispatched and not accounted for: its writer session may still be running it.\n"+
			"  Nothing can be settled until it ends or its deadline (%s) passes; ptah status shows the session.\n"+
			"  Then ptah resolve-run %s again: the journal settles the run, or it shows its evidence.\n",
			st.header.Render(name), op.ID, op.Plan.Name, at(op.Deadline.Time), out.Resource.Name)
		_, err := io.WriteString(a.stdout, b.String())
		return err
	}
	inCluster := errors.Is(in.SourceErr, runner.ErrSourceElsewhere)
	if u == nil {
		fmt.Fprintf(&b, "%s: %s No run is unresolved; there is nothing to settle.\n", st.header.Render(name), st.ok.Render("Nothing to resolve."))
		switch s := out.Status; {
		case s != nil:
			fmt.Fprintf(&b, "  phase: %s\n", phaseWithReason(s.Phase, s.Reason))
		case inCluster:
			b.WriteString("  no status yet: ptah serve has not recorded a pass for it\n")
		default:
			b.WriteString("  no record yet: no pass has run for it in this database\n")
		}
		if rr := out.ResolvedRun; rr != nil {
			fmt.Fprintf(&b, "  last resolved: operation %s, by %s at %s (acknowledgment %s)\n", rr.OperationID, rr.By, at(rr.At.Time), rr.Acknowledgment.Name)
		}
		_, err := io.WriteString(a.stdout, b.String())
		return err
	}
	row := func(label, value string) { fmt.Fprintf(&b, "  %-14s %s\n", label+":", value) }
	fmt.Fprintf(&b, "%s: %s run %s (outcome %s).\n", st.header.Render(name), st.danger.Render("Unresolved"), u.OperationID, u.Outcome)
	row("plan", fmt.Sprintf("%s (uid %s)", u.Plan.Name, u.Plan.UID))
	reported := "the run itself"
	if u.ReportedBy == api.ReportedByDispatch {
		reported = "its dispatch marker (the run never reported its end)"
	}
	row("recorded", fmt.Sprintf("at %s, from %s", at(u.RecordedAt.Time), reported))
	writer := "none journaled (the run stopped before it began)"
	if r := out.Run; r != nil && r.Writer != nil {
		writer = fmt.Sprintf("session pid %d started %s", r.Writer.PID, at(r.Writer.BackendStart))
	}
	may := "it can no longer write (its session is gone, or its deadline has passed)"
	if out.WriterMayStillWrite {
		may = st.danger.Render("it may still be writing") + ": nothing can be settled until its session ends or its deadline passes"
	}
	row("writer", fmt.Sprintf("%s, deadline %s; %s", writer, at(u.Deadline.Time), may))
	if r := out.Run; r != nil {
		end := "never finished"
		if r.FinishedAt != nil {
			end = fmt.Sprintf("ended %s (%s)", at(*r.FinishedAt), r.Outcome)
		}
		row("journal", fmt.Sprintf("run started %s, %s journaled, %s", at(r.StartedAt), plural(r.Statements, "statement"), end))
		if r.Error != "" {
			row("its error", messageHead(r.Error))
		}
	} else {
		row("journal", "no run journaled under this operation: it stopped before its first statement")
	}

	b.WriteString("\n" + st.header.Render("The files of the run's plan, in order:") + "\n")
	if inCluster && len(out.Versions) > 0 {
		b.WriteString("  (the source is ptah serve's to read: cluster mode does not read it, so files are named by their\n" +
			"  plan's checksum, and statements by their place in the journal)\n")
	}
	for _, v := range out.Versions {
		file := v.File
		switch {
		case file == "" && inCluster:
			file = "checksum " + shortSum(v.Checksum)
		case file == "":
			file = "not in the source with checksum " + shortSum(v.Checksum)
		}
		recorded := "not in the history"
		if v.Recorded {
			recorded = "in the history"
		}
		fmt.Fprintf(&b, "\n  version %s (%s, %s): %s; journal: %d started, %d committed\n", v.Version, file, txMode(v.NoTransaction),
			recorded, v.Started, v.Committed)
		fmt.Fprintf(&b, "    %s\n", wrap(v.Verdict, 76, "    "))
		for _, s := range v.InFlight {
			fmt.Fprintf(&b, "    in flight, statement %d (started %s):\n%s", s.InFile, at(s.StartedAt), indentSQL(s.SQL, "      "))
		}
		for _, s := range v.Failed {
			fmt.Fprintf(&b, "    failed, statement %d (started %s):\n%s", s.InFile, at(s.StartedAt), indentSQL(s.SQL, "      "))
		}
	}
	if out.Plan != nil && len(out.Versions) == 0 {
		b.WriteString("  (the plan is no longer stored: look at the journal and the history below)\n")
	}
	if len(out.History) > 0 {
		b.WriteString("\n" + st.header.Render("The history now:") + "\n")
		verW, nameW := 0, 0
		for _, h := range out.History {
			verW, nameW = max(verW, len(h.Version)), max(nameW, len(h.Name))
		}
		for _, h := range out.History {
			by := ""
			if h.AppliedBy != "" {
				by = " by " + h.AppliedBy
			}
			fmt.Fprintf(&b, "  %-*s  %-*s  %s%s at %s\n", verW, h.Version, nameW, h.Name, h.How, by, at(h.AppliedAt))
		}
	}

	b.WriteString("\n" + st.header.Render("What to do next:") + "\n")
	if out.WriterMayStillWrite {
		b.WriteString("  Wait: the run's writer may still be writing. Once its session has ended (or you ended it, pg_terminate_backend)\n" +
			"  or its deadline has passed, run this command again.\n")
	}
	n := out.Next
	b.WriteString("  1. Establish what the run did: look at the database (the objects each statement above creates or\n" +
		"     changes). A statement in flight may or may not have taken effect.\n")
	b.WriteString("  2. Make each file of the plan all or nothing: for a file that stopped part way, run its remaining\n" +
		"     statements by hand, or undo what of it took effect.\n")
	b.WriteString("  3. Record what you established, which clears the run and plans what remains:\n")
	fmt.Fprintf(&b, "       %s", n.Command)
	for _, v := range n.Partial {
		fmt.Fprintf(&b, " --mark-applied %s", v)
	}
	b.WriteString("\n")
	for _, v := range n.Partial {
		fmt.Fprintf(&b, "     Version %s stopped part way: --mark-applied %s if you finished it (it never runs again), or\n"+
			"     --rerun %s if you undid what of it committed (it runs again, whole). One of the two is required.\n", v, v, v)
	}
	if len(n.Partial) == 0 {
		b.WriteString("     (a file of the plan that did not start is pending and runs on the next apply; --mark-applied VERSION\n" +
			"     records one you established took effect after all)\n")
	}
	if inCluster {
		fmt.Fprintf(&b, "  4. ptah serve consumes it and publishes the plan of what remains: review and approve it\n"+
			"     (ptah plan %s --cluster -n %s), and ptah serve runs it.\n", out.Resource.Name, out.Resource.Namespace)
	} else {
		b.WriteString("  4. Review and approve the plan it publishes, then ptah apply.\n")
	}
	_, err := io.WriteString(a.stdout, b.String())
	return err
}

// indentSQL indents each line of a statement, ending with a newline.
func indentSQL(sql, indent string) string {
	lines := strings.Split(strings.TrimRight(strings.TrimSpace(sql), ";"), "\n")
	for i, l := range lines {
		lines[i] = strings.TrimRight(indent+l, " ")
	}
	return strings.Join(lines, "\n") + ";\n"
}

// The JSON of a recorded resolution.
type resolvedOutput struct {
	Acknowledgment approvalItem `json:"acknowledgment"`
	// ResolvedRun is status.resolvedRun after the pass that consumed it;
	// absent when that pass did not run (the acknowledgment is recorded,
	// and the next plan or apply consumes it).
	ResolvedRun *api.ResolvedRun `json:"resolvedRun,omitempty"`
	// Plan is the plan of what remains, as ptah plan -o json shows it.
	Plan *jsonItem `json:"plan,omitempty"`
}

// recordResolution is resolve-run --operation: it records the
// acknowledgment, then runs a plan pass that consumes it and publishes the
// plan of what remains.
func (a *app) recordResolution(ctx context.Context, o resolveOptions) error {
	sel, err := a.selectMigration(o.File, o.Name, sourcesRequired)
	if err != nil {
		return err
	}
	t, err := a.openTargets(ctx, sel, runnerOptions{})
	if err != nil {
		return err
	}
	defer t.close()
	in, res := sel.inputs[0], sel.resources[0]
	r := t.runner(in)
	ack, err := r.Acknowledge(ctx, in, runner.AcknowledgeRequest{OperationID: o.Operation, By: o.As, Reason: o.Reason,
		MarkApplied: o.MarkApplied, Rerun: o.Rerun})
	if errors.Is(err, runner.ErrNotRegistered) {
		return fmt.Errorf("resolving operation %s of %s: %w: no pass has run for it in this database", o.Operation, res.Ref(), runner.ErrNothingUnresolved)
	}
	if errors.Is(err, runner.ErrNotMarkable) || errors.Is(err, runner.ErrUnaccounted) {
		return fmt.Errorf("resolving operation %s of %s: %w", o.Operation, res.Ref(), err)
	}
	if err != nil {
		return err
	}
	out := resolvedOutput{Acknowledgment: approvalItem{Metadata: jsonMeta{Name: ack.Name, UID: ack.UID}, Spec: ack.Spec}}
	result, passErr := r.Run(ctx, in, runner.PlanOnly)
	var plan planResult
	if passErr == nil && result.Migration != nil {
		out.ResolvedRun = result.Migration.Status.ResolvedRun
		plan = publishedResult(res, in, result)
		item := migrationJSONItem(plan)
		out.Plan = &item
	}
	if o.Output == outputJSON {
		if err := writeJSON(a.stdout, out); err != nil {
			return err
		}
	} else if err := a.renderResolved(ack, o.Rerun, out, plan, passErr == nil); err != nil {
		return err
	}
	if passErr != nil {
		return fmt.Errorf("the acknowledgment %s is recorded, and the next ptah plan or apply of %s consumes it; planning now failed: %w",
			ack.Name, res.Name(), passErr)
	}
	if plan.blocked() {
		s := plan.state()
		return &stopError{class: errBlocked, reasons: []string{s.Reason}, names: []string{res.Name()},
			detail: fmt.Sprintf("%s: %s", res.Ref(), s.Message)}
	}
	return nil
}

func (a *app) renderResolved(ack runner.Acknowledged, rerun []string, out resolvedOutput, plan planResult, planned bool) error {
	st := newStyles(a.stdout, colorProfile(a.stdout))
	var b strings.Builder
	spec := ack.Spec
	fmt.Fprintf(&b, "%s run %s of PtahMigration %q as %s: %s\n", st.ok.Render("Resolved"), spec.OperationID, spec.Migration.Name, spec.By, spec.Reason)
	if len(spec.MarkedApplied) > 0 {
		vs := make([]string, len(spec.MarkedApplied))
		for i, m := range spec.MarkedApplied {
			vs[i] = m.Version
		}
		fmt.Fprintf(&b, "Marked applied in the history: %s (as marked by %s; never run again).\n", versionList(vs), spec.By)
	}
	if len(rerun) > 0 {
		fmt.Fprintf(&b, "To run again, whole: %s.\n", versionList(rerun))
	}
	fmt.Fprintf(&b, "Acknowledgment %s (uid %s).\n", ack.Name, ack.UID)
	if planned {
		if rr := out.ResolvedRun; rr == nil || rr.OperationID != spec.OperationID {
			b.WriteString("The pass did not consume it yet; the next ptah plan or apply does.\n")
		}
		b.WriteString("\n")
		writeTextMigrationPlan(&b, st, plan)
	}
	_, err := io.WriteString(a.stdout, b.String())
	return err
}
