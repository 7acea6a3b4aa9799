package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/ptah-run/ptah/internal/postgres"
	"github.com/ptah-run/ptah/internal/runner"
	api "github.com/ptah-run/ptah/pkg/api/v1alpha1"
)

const statusLong = `Show what is recorded for each resource in its target database: its phase
and the reason, the current plan, an operation in flight, and who holds the
database's lease. For a PtahSchema also the last applied plan and a run
whose outcome still owes an observation; for a PtahMigration the history
(how many versions applied, the last one, its fingerprint), the last run
(the versions it applied; where a failed one stopped), an unresolved run
(its operation, outcome, plan, writer session, deadline: nothing runs until
ptah resolve-run settles it), and the last run a person resolved.

status reads only ptah's records; it does not inspect the schema or the
migration files (ptah plan does), and shows no SQL. Phases: InSync, Planned
(policy Never), AwaitingApproval, Approved, Applying, Blocked (with a
reason), Failed.

With --cluster, status reads what ptah serve records on the cluster's
PtahSchema and PtahMigration resources in the namespace (-n, else the
kubeconfig context's): those named, else all of them. -f is not read.

`

type statusOptions struct {
	File   string
	Names  []string
	Output string
}

func (a *app) newStatusCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "status [NAME...] [flags]",
		Short: "Show each resource's phase, plans and lease",
		Long:  statusLong + exitCodeHelp("status"),
		Example: `  ptah status
  ptah status app -o json | jq -r '.items[0].status.phase'

  # What ptah serve records in the cluster, for the namespace billing
  ptah status --cluster -n billing`,
		Args:              cobra.ArbitraryArgs,
		ValidArgsFunction: a.completeDeclared,
		RunE: func(cmd *cobra.Command, args []string) error {
			s := a.settings
			o := statusOptions{File: s.String("file"), Names: args, Output: s.String("output")}
			if err := validateCommon(s, o.File, o.Output, statusOutputs, o.Names, ""); err != nil {
				return err
			}
			if inCluster, err := a.clusterMode(); err != nil {
				return err
			} else if inCluster {
				return a.runStatusCluster(cmd.Context(), o)
			}
			return a.runStatus(cmd.Context(), o)
		},
	}
	f := cmd.Flags()
	f.StringP("file", "f", "ptah.yaml", "the file of resource documents")
	f.StringP("output", "o", outputText, "output format: "+strings.Join(statusOutputs, ", "))
	return cmd
}

type (
	statusOutput struct {
		Items []statusItem `json:"items"`
		// Unlisted are resources registered in the targets' databases that
		// the file does not declare (status without NAMEs only): they still
		// count in the realm census.
		Unlisted []string `json:"unlisted,omitempty"`
	}
	statusItem struct {
		Resource ref `json:"resource"`
		// Registered is false when no pass has run for the resource in its
		// database yet: there is no status to show.
		Registered bool                  `json:"registered"`
		Executed   *bool                 `json:"executed,omitempty"` // ptah apply only
		Status     *api.PtahSchemaStatus `json:"status,omitempty"`
		// Migration is a PtahMigration's status, which the JSON shows as
		// "status" too (see MarshalJSON).
		Migration *api.PtahMigrationStatus `json:"-"`
		// WriterMayStillWrite answers, for a PtahMigration's unresolved
		// run, whether its writer session may still be writing.
		WriterMayStillWrite *bool `json:"writerMayStillWrite,omitempty"`
		// Approval is the live approval of the current plan.
		Approval *jsonApproval `json:"approval,omitempty"`
		Lease    *jsonLease    `json:"lease,omitempty"`
	}
	jsonApproval struct {
		Name       string    `json:"name"`
		UID        string    `json:"uid"`
		Approver   string    `json:"approver"`
		ApprovedAt time.Time `json:"approvedAt"`
		Reason     string    `json:"reason,omitempty"`
	}
	jsonLease struct {
		Operation   string    `json:"operation"`
		Resource    string    `json:"resource"`
		WriterPID   int32     `json:"writerPID"`
		WriterAlive bool      `json:"writerAlive"`
		Deadline    time.Time `json:"deadline"`
		AcquiredAt  time.Time `json:"acquiredAt"`
		// Writer is what the writer session is doing, while it is connected.
		Writer *jsonWriter `json:"writer,omitempty"`
	}
	jsonWriter struct {
		State string `json:"state"`
		// Statement is the plan statement it runs, and StatementSeconds how
		// long it has been at it.
		Statement        string  `json:"statement"`
		StatementSeconds float64 `json:"statementSeconds"`
		// WaitsFor is the lock it waits for ("" when none), held by BlockedBy.
		WaitsFor  string             `json:"waitsFor,omitempty"`
		BlockedBy []postgres.Blocker `json:"blockedBy,omitempty"`
		Run       *jsonRunProgress   `json:"run,omitempty"`
	}
	jsonRunProgress struct {
		StartedAt      time.Time `json:"startedAt"`
		ElapsedSeconds float64   `json:"elapsedSeconds"`
		// StepsStarted counts the plan's statements journaled as started
		// and visible (committed phases; the running one's are not yet).
		StepsStarted int `json:"stepsStarted"`
	}
)

func (a *app) runStatus(ctx context.Context, o statusOptions) error {
	sel, err := a.selectResources(o.File, o.Names, sourcesUnread)
	if err != nil {
		return err
	}
	t, err := a.openTargets(ctx, sel, runnerOptions{ReadOnly: true})
	if err != nil {
		return err
	}
	defer t.close()
	items := make([]statusItem, len(sel.inputs))
	for i, in := range sel.inputs {
		if in.Migration != nil {
			item, err := inspectMigration(ctx, t.runner(in), in)
			if err != nil {
				return fmt.Errorf("reading the status of %s: %w", sel.resources[i].Ref(), err)
			}
			item.Resource = refOf(sel.resources[i])
			items[i] = item
			continue
		}
		rep, err := t.runner(in).Inspect(ctx, in)
		if err != nil {
			return fmt.Errorf("reading the status of %s: %w", sel.resources[i].Ref(), err)
		}
		item := storedItem(rep)
		item.Resource = refOf(sel.resources[i])
		item.Lease = leaseItem(rep.Lease, rep.LeaseWriterAlive, rep.Writer, rep.Run)
		items[i] = item
	}
	out := statusOutput{Items: items}
	if len(o.Names) == 0 {
		if out.Unlisted, err = t.unlisted(ctx, sel); err != nil {
			return err
		}
	}
	if o.Output == outputJSON {
		return writeJSON(a.stdout, out)
	}
	return a.renderStatusText(out)
}

// storedItem is what the store records of a resource: its status and the
// live approval of its current plan (all there is in a cluster).
func storedItem(rep runner.Report) statusItem {
	item := statusItem{Registered: rep.Registered}
	if !rep.Registered {
		return item
	}
	if m := rep.Migration; m != nil {
		st := m.Status
		item.Migration = &st
		if ap := m.Approval; ap != nil {
			item.Approval = &jsonApproval{Name: ap.Name, UID: ap.UID, Approver: ap.Spec.Approver, ApprovedAt: ap.Spec.ApprovedAt.Time, Reason: ap.Spec.Reason}
		}
		return item
	}
	st := rep.Status
	item.Status = &st
	if ap := rep.Approval; ap != nil {
		item.Approval = &jsonApproval{Name: ap.Name, UID: ap.UID, Approver: ap.Spec.Approver, ApprovedAt: ap.Spec.ApprovedAt.Time, Reason: ap.Spec.Reason}
	}
	return item
}

// runStatusCluster shows the status ptah serve records on the cluster's
// resources: those named, else every PtahSchema and PtahMigration of the
// namespace. A cluster has no lease rows or writer sessions to show: its
// runs are Jobs.
func (a *app) runStatusCluster(ctx context.Context, o statusOptions) error {
	c, resources, err := a.clusterSelection(ctx, o.Names)
	if err != nil {
		return err
	}
	out := statusOutput{Items: []statusItem{}}
	for _, res := range resources {
		rep, err := runner.InspectStored(ctx, c.store, res)
		if err != nil {
			return fmt.Errorf("reading the status of %s %s: %w", res.Kind(), res.Name(), err)
		}
		item := storedItem(rep)
		item.Resource = ref{APIVersion: api.APIVersion, Kind: res.Kind(), Namespace: c.namespace, Name: res.Name()}
		out.Items = append(out.Items, item)
	}
	if o.Output == outputJSON {
		return writeJSON(a.stdout, out)
	}
	if len(out.Items) == 0 {
		_, err := fmt.Fprintf(a.stdout, "No PtahSchema or PtahMigration in namespace %s.\n", c.namespace)
		return err
	}
	return a.renderStatusText(out)
}

// leaseItem is the JSON of a database's lease, nil when it is free.
func leaseItem(l *postgres.Lease, alive bool, w *postgres.Activity, run *postgres.Run) *jsonLease {
	if l == nil {
		return nil
	}
	out := &jsonLease{Operation: l.Holder, Resource: l.Resource, WriterPID: l.Writer.PID,
		WriterAlive: alive, Deadline: l.Deadline, AcquiredAt: l.AcquiredAt}
	if w != nil {
		out.Writer = &jsonWriter{State: w.State, Statement: w.Query, StatementSeconds: seconds(w.Now.Sub(w.QueryStart)),
			WaitsFor: w.WaitsFor, BlockedBy: w.BlockedBy}
		if run != nil {
			out.Writer.Run = &jsonRunProgress{StartedAt: run.StartedAt, ElapsedSeconds: seconds(w.Now.Sub(run.StartedAt)),
				StepsStarted: len(run.Steps)}
		}
	}
	return out
}

// MarshalJSON shows either family's status under "status".
func (it statusItem) MarshalJSON() ([]byte, error) {
	type plain statusItem // without this method
	if it.Migration == nil {
		return json.Marshal(plain(it))
	}
	return json.Marshal(struct {
		plain
		Status *api.PtahMigrationStatus `json:"status,omitempty"`
	}{plain(it), it.Migration})
}

// unlisted are the resources of either kind registered in the selection's
// databases that the selection does not hold, as "Kind namespace/name":
// every one of them counts in the realm census.
func (t *targets) unlisted(ctx context.Context, sel *selection) ([]string, error) {
	declared := map[string]bool{}
	for _, in := range sel.inputs {
		declared[in.TargetURL+"\x00"+in.Registration()] = true
	}
	var out []string
	for url, r := range t.byURL {
		names, err := r.Registered(ctx)
		if err != nil {
			return nil, err
		}
		for _, n := range names {
			if !declared[url+"\x00"+n] {
				out = append(out, n)
			}
		}
	}
	sort.Strings(out)
	return out, nil
}

func (a *app) renderStatusText(out statusOutput) error {
	items := out.Items
	st := newStyles(a.stdout, colorProfile(a.stdout))
	var b strings.Builder

	row := func(label, value string) { fmt.Fprintf(&b, "  %-20s %s\n", label+":", value) }
	for i, it := range items {
		if i > 0 {
			b.WriteString("\n")
		}
		name := fmt.Sprintf("%s %q", it.Resource.Kind, it.Resource.Name)
		if !it.Registered {
			fmt.Fprintf(&b, "%s  %s\n", st.header.Render(name), st.dim.Render("no record yet: run ptah plan or ptah apply"))
			continue
		}
		if it.Migration != nil {
			writeMigrationStatus(&b, st, it, row)
			continue
		}
		s := it.Status
		fmt.Fprintf(&b, "%s  %s", st.header.Render(name), phaseText(st, s.Phase))
		if s.Reason != "" && s.Reason != string(s.Phase) {
			fmt.Fprintf(&b, " (%s)", s.Reason)
		}
		b.WriteString("\n")
		if s.Message != "" {
			b.WriteString("  " + s.Message + "\n")
		}
		if s.Plan != nil {
			row("current plan", fmt.Sprintf("%s (uid %s)", s.Plan.Name, s.Plan.UID))
		} else {
			row("current plan", "none")
		}
		if ap := s.Applied; ap != nil {
			v := fmt.Sprintf("%s (uid %s): %s at %s, operation %s", ap.Plan.Name, ap.Plan.UID, ap.Outcome,
				ap.FinishedAt.UTC().Format(time.RFC3339), ap.OperationID)
			if ap.Message != "" {
				v += ": " + ap.Message
			}
			row("last applied", v)
		} else {
			row("last applied", "none")
		}
		if p := s.PendingObservation; p != nil {
			row("pending observation", fmt.Sprintf("operation %s (plan %s) since %s: the next pass observes the database first",
				p.OperationID, p.Plan.Name, p.Since.UTC().Format(time.RFC3339)))
		}
		writeRunStateRows(s.RunState, it, row)
	}
	if len(out.Unlisted) > 0 {
		fmt.Fprintf(&b, "\nAlso registered in these databases, not declared in this file (each counts in the realm census):\n  %s\n",
			strings.Join(out.Unlisted, "\n  "))
	}
	_, err := io.WriteString(a.stdout, b.String())
	return err
}

// writeRunStateRows shows what both families record the same way: the
// operation in flight, a release owed, the live approval and the lease.
func writeRunStateRows(s api.RunState, it statusItem, row func(label, value string)) {
	if op := s.ActiveOperation; op != nil {
		state := "claimed"
		if op.DispatchedAt != nil {
			state = "dispatched"
		}
		row("operation", fmt.Sprintf("%s %s plan %s, deadline %s", op.ID, state, op.Plan.Name, op.Deadline.UTC().Format(time.RFC3339)))
	}
	if s.OwedRelease != nil {
		row("owed release", "the lease of operation "+s.OwedRelease.OperationID+" (the next pass releases it first)")
	}
	if ap := it.Approval; ap != nil {
		v := fmt.Sprintf("by %s at %s", ap.Approver, ap.ApprovedAt.UTC().Format(time.RFC3339))
		if ap.Reason != "" {
			v += " (" + ap.Reason + ")"
		}
		row("approved", v)
	}
	if l := it.Lease; l != nil {
		alive := "gone"
		if l.WriterAlive {
			alive = "connected"
		}
		row("lease", fmt.Sprintf("held by operation %s of %s; writer session pid %d (%s), deadline %s",
			l.Operation, l.Resource, l.WriterPID, alive, l.Deadline.UTC().Format(time.RFC3339)))
		if w := l.Writer; w != nil {
			row("writer", writerText(w))
		}
	} else {
		row("lease", "free")
	}
}

// writerText says what a run's writer is doing, for a person watching.
func writerText(w *jsonWriter) string {
	stmt, _, _ := strings.Cut(strings.TrimSpace(w.Statement), "\n")
	if len(stmt) > 80 {
		stmt = stmt[:77] + "..."
	}
	var b strings.Builder
	if w.Run != nil {
		fmt.Fprintf(&b, "run started %s ago; ", formatSeconds(w.Run.ElapsedSeconds))
	}
	if w.WaitsFor != "" {
		waiting := (&postgres.Activity{WaitsFor: w.WaitsFor, BlockedBy: w.BlockedBy}).Waiting()
		fmt.Fprintf(&b, "waiting %s for %s: %s", formatSeconds(w.StatementSeconds), waiting, stmt)
		return b.String()
	}
	fmt.Fprintf(&b, "%s %s: %s", w.State, formatSeconds(w.StatementSeconds), stmt)
	return b.String()
}

func seconds(d time.Duration) float64 {
	return float64(d.Round(time.Millisecond)) / float64(time.Second)
}

func formatSeconds(s float64) string {
	return (time.Duration(s * float64(time.Second))).Round(100 * time.Millisecond).String()
}
