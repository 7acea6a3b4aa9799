package cli

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"
)

const historyLong = `Show what is recorded of each resource over time, oldest first: its stored
plans, every approval (who, when, why, and whether it went stale or, for a
PtahMigration, which run spent it), and every run in the journal
(operation, plan, outcome, how many statements it journaled). A
PtahMigration's versions are in its migration history (ptah status
summarizes it).

Plans do not pile up: when a plan is published, the resource's plans that
nothing needs any more (neither current, nor claimed, nor owed an
observation, nor the last applied) are removed. Approvals and the run
journal are kept: they are the record of what was decided and what ran.

history only reads.

`

type historyOptions struct {
	File   string
	Names  []string
	Output string
}

func (a *app) newHistoryCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:               "history [NAME...] [flags]",
		Short:             "Show each resource's plans, approvals and runs",
		Long:              historyLong + exitCodeHelp("history"),
		Example:           "  ptah history app\n  ptah history -o json | jq '.items[0].runs'",
		Args:              cobra.ArbitraryArgs,
		ValidArgsFunction: a.completeDeclared,
		RunE: func(cmd *cobra.Command, args []string) error {
			s := a.settings
			o := historyOptions{File: s.String("file"), Names: args, Output: s.String("output")}
			if err := validateCommon(s, o.File, o.Output, statusOutputs, o.Names, ""); err != nil {
				return err
			}
			return a.runHistory(cmd.Context(), o)
		},
	}
	f := cmd.Flags()
	f.StringP("file", "f", "ptah.yaml", "the file of resource documents")
	f.StringP("output", "o", outputText, "output format: "+strings.Join(statusOutputs, ", "))
	return cmd
}

type (
	historyOutput struct {
		Items []historyItem `json:"items"`
	}
	historyItem struct {
		Resource  ref               `json:"resource"`
		Plans     []historyPlan     `json:"plans"`
		Approvals []historyApproval `json:"approvals"`
		Runs      []historyRun      `json:"runs"`
	}
	historyPlan struct {
		Name        string    `json:"name"`
		UID         string    `json:"uid"`
		PublishedAt time.Time `json:"publishedAt"`
	}
	historyApproval struct {
		jsonApproval
		Plan  jsonMeta `json:"plan"`
		Stale bool     `json:"stale"`
		// ConsumedBy is the operation a PtahMigration's approval authorized
		// (it authorizes one run).
		ConsumedBy string `json:"consumedBy,omitempty"`
	}
	historyRun struct {
		OperationID string     `json:"operationID"`
		PlanUID     string     `json:"planUID"`
		StartedAt   time.Time  `json:"startedAt"`
		FinishedAt  *time.Time `json:"finishedAt,omitempty"`
		// Outcome is the journal's: succeeded, failed, partially-applied,
		// or "" for a run with no recorded end.
		Outcome    string `json:"outcome"`
		Error      string `json:"error,omitempty"`
		Statements int    `json:"statements"`
	}
)

func (a *app) runHistory(ctx context.Context, o historyOptions) error {
	sel, err := a.selectResources(o.File, o.Names, sourcesUnread)
	if err != nil {
		return err
	}
	t, err := a.openTargets(ctx, sel, runnerOptions{ReadOnly: true})
	if err != nil {
		return err
	}
	defer t.close()
	out := historyOutput{Items: []historyItem{}}
	for i, in := range sel.inputs {
		h, err := t.runner(in).History(ctx, in)
		if err != nil {
			return fmt.Errorf("reading the history of %s: %w", sel.resources[i].Ref(), err)
		}
		item := historyItem{Resource: refOf(sel.resources[i]), Plans: []historyPlan{}, Approvals: []historyApproval{}, Runs: []historyRun{}}
		for _, p := range h.Plans {
			item.Plans = append(item.Plans, historyPlan{Name: p.Name, UID: p.UID, PublishedAt: p.PublishedAt})
		}
		for _, ap := range h.Approvals {
			item.Approvals = append(item.Approvals, historyApproval{
				jsonApproval: jsonApproval{Name: ap.Name, UID: ap.UID, Approver: ap.Spec.Approver, ApprovedAt: ap.Spec.ApprovedAt.Time, Reason: ap.Spec.Reason},
				Plan:         jsonMeta{Name: ap.Spec.Plan.Name, UID: ap.Spec.Plan.UID}, Stale: ap.Status.Stale})
		}
		for _, ap := range h.MigrationApprovals {
			ha := historyApproval{
				jsonApproval: jsonApproval{Name: ap.Name, UID: ap.UID, Approver: ap.Spec.Approver, ApprovedAt: ap.Spec.ApprovedAt.Time, Reason: ap.Spec.Reason},
				Plan:         jsonMeta{Name: ap.Spec.Plan.Name, UID: ap.Spec.Plan.UID}, Stale: ap.Status.Stale}
			if c := ap.Status.Consumed; c != nil {
				ha.ConsumedBy = c.OperationID
			}
			item.Approvals = append(item.Approvals, ha)
		}
		for _, r := range h.Runs {
			item.Runs = append(item.Runs, historyRun{OperationID: r.OperationID, PlanUID: r.PlanUID, StartedAt: r.StartedAt,
				FinishedAt: r.FinishedAt, Outcome: r.Outcome, Error: r.Error, Statements: len(r.Steps)})
		}
		out.Items = append(out.Items, item)
	}
	if o.Output == outputJSON {
		return writeJSON(a.stdout, out)
	}
	return renderHistoryText(a.stdout, out)
}

func renderHistoryText(w io.Writer, out historyOutput) error {
	var b strings.Builder
	at := func(t time.Time) string { return t.UTC().Format(time.RFC3339) }
	for i, it := range out.Items {
		if i > 0 {
			b.WriteString("\n")
		}
		fmt.Fprintf(&b, "%s %q\n", it.Resource.Kind, it.Resource.Name)
		fmt.Fprintf(&b, "  plans (%d):\n", len(it.Plans))
		for _, p := range it.Plans {
			fmt.Fprintf(&b, "    %s  %s  uid %s\n", at(p.PublishedAt), p.Name, p.UID)
		}
		fmt.Fprintf(&b, "  approvals (%d):\n", len(it.Approvals))
		for _, ap := range it.Approvals {
			state := "live"
			switch {
			case ap.ConsumedBy != "":
				state = "spent by operation " + ap.ConsumedBy
			case ap.Stale:
				state = "stale"
			}
			reason := ""
			if ap.Reason != "" {
				reason = " (" + ap.Reason + ")"
			}
			fmt.Fprintf(&b, "    %s  %s approved %s%s, %s\n", at(ap.ApprovedAt), ap.Approver, ap.Plan.Name, reason, state)
		}
		fmt.Fprintf(&b, "  runs (%d):\n", len(it.Runs))
		for _, r := range it.Runs {
			outcome := r.Outcome
			if outcome == "" {
				outcome = "no recorded end"
			}
			fmt.Fprintf(&b, "    %s  operation %s, plan uid %s: %s, %s journaled\n", at(r.StartedAt), r.OperationID, r.PlanUID, outcome, count(r.Statements, "statement"))
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}
