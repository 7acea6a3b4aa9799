package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/user"
	"strings"

	"github.com/spf13/cobra"

	"github.com/ptah-run/ptah/internal/runner"
	"github.com/ptah-run/ptah/internal/store"
	api "github.com/ptah-run/ptah/pkg/api/v1alpha1"
)

const approveLong = `Record an approval of one published plan, named by its UID (ptah plan
prints it). The approval binds the plan's UID, its fingerprint and every
input the plan was computed from: the declared files, the database's
identity and observed state, the policy and the ptah version. ptah apply
runs the plan only while all of them still hold; a plan replaced by a new
one, even with the same name and content, is not authorized by it.

A PtahMigration's approval also binds the history its versions were
selected against (the history fingerprint), and authorizes one run: it is
spent when that run is dispatched, however the run ends.

approve refuses a UID that names no plan, a plan that is no longer its
resource's current plan, a stored plan whose statements no longer match its
fingerprint, a plan its resource's policy would not run even approved
(policy.apply Never, or a destructive plan without allowDestructive: changing
the policy publishes a new plan, so such an approval would be wasted), and,
with --fingerprint, a plan other than the one reviewed.
Pass the fingerprint ptah plan showed: it is what makes the approval mean
"what I read", not "whatever the plan is now".

The approver is --as, else the OS user. It is recorded for audit; local
mode does not authenticate it.

With --cluster, the plan is a PtahSchemaPlan or PtahMigrationPlan in the
namespace (-n, else the kubeconfig context's) that ptah serve published,
and the approval is created there as a custom resource. The approver is
the user the API server authenticates (--as is refused), and an admission
policy refuses an approval that names anyone else.

`

type approveOptions struct {
	File        string
	PlanUID     string
	Fingerprint string
	As          string
	Reason      string
	Output      string
}

func (a *app) newApproveCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "approve PLAN_UID [flags]",
		Short: "Approve one published plan, by UID",
		Long:  approveLong + exitCodeHelp("approve"),
		Example: `  ptah plan
  ptah approve 3f6c0c8e-1b7e-4c55-9d2a-6f1f1c9a0b11 --fingerprint sha256:5e1d... --reason "CHG-1234"`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) != 1 || args[0] == "" {
				return usageErrorf("approve takes exactly one argument, the plan's UID (ptah plan prints it)")
			}
			return nil
		},
		ValidArgsFunction: a.completePlanUIDs,
		RunE: func(cmd *cobra.Command, args []string) error {
			s := a.settings
			o := approveOptions{File: s.String("file"), PlanUID: args[0], Fingerprint: s.String("fingerprint"),
				As: s.String("as"), Reason: s.String("reason"), Output: s.String("output")}
			inCluster, err := a.clusterMode()
			if err != nil {
				return err
			}
			if inCluster {
				if o.As != "" {
					return usageErrorf("%s: with --cluster the approver is the user the API server authenticates; leave --as out", s.origin("as"))
				}
				if err := validateCommon(s, "-", o.Output, statusOutputs, nil, ""); err != nil {
					return err
				}
				return a.runApproveCluster(cmd.Context(), o)
			}
			if err := validateCommon(s, o.File, o.Output, statusOutputs, nil, ""); err != nil {
				return err
			}
			if o.As == "" {
				o.As = osUser()
			}
			if o.As == "" {
				return usageErrorf("cannot tell who is approving: pass --as NAME")
			}
			return a.runApprove(cmd.Context(), o)
		},
	}
	f := cmd.Flags()
	f.StringP("file", "f", "ptah.yaml", "the file of resource documents (it names the databases to look in)")
	f.String("fingerprint", "", "the plan fingerprint you reviewed; refused if the plan's differs")
	f.String("as", "", "who approves (default: the OS user)")
	f.String("reason", "", "why, for the record (a change ticket, a review link)")
	f.StringP("output", "o", outputText, "output format: "+strings.Join(statusOutputs, ", "))
	return cmd
}

func osUser() string {
	if u, err := user.Current(); err == nil && u.Username != "" {
		return u.Username
	}
	return os.Getenv("USER")
}

type approvalOutput struct {
	Approval approvalItem `json:"approval"`
}

type approvalItem struct {
	Metadata jsonMeta `json:"metadata"`
	Spec     any      `json:"spec"`
}

func (a *app) runApprove(ctx context.Context, o approveOptions) error {
	sel, err := a.selectResources(o.File, nil, sourcesUnread)
	if err != nil {
		return err
	}
	t, err := a.openTargets(ctx, sel, runnerOptions{ReadOnly: true})
	if err != nil {
		return err
	}
	defer t.close()
	// Every store is fenced before any is searched: a newer ptah's records
	// are refused, not read for a UID.
	for _, in := range sel.inputs {
		if err := t.runner(in).Fence(ctx); err != nil {
			return err
		}
	}
	// The UID says nothing of its database: look in each target's store.
	for _, in := range sel.inputs {
		r := t.runner(in)
		if _, err := r.Store.GetByUID(ctx, o.PlanUID); errors.Is(err, store.ErrNotFound) {
			continue
		} else if err != nil {
			return fmt.Errorf("looking for plan %s: %w", o.PlanUID, err)
		}
		ap, err := r.Approve(ctx, runner.ApproveRequest{PlanUID: o.PlanUID, Fingerprint: o.Fingerprint, Approver: o.As, Reason: o.Reason})
		if err != nil {
			return err
		}
		return a.showApproval(ap, o.Output, "ptah apply %s runs it.")
	}
	// The name ptah plan prints most prominently is not the UID: point a
	// person who passed it to the plan's UID.
	for _, in := range sel.inputs {
		uid, err := t.runner(in).PlanNamed(ctx, o.PlanUID)
		if err != nil {
			return err
		}
		if uid != "" {
			return fmt.Errorf("approving %s: %w: %s is a plan's name; approve a plan by its UID, %s, with the fingerprint you reviewed "+
				"(ptah plan shows both)", o.PlanUID, runner.ErrUnknownPlan, o.PlanUID, uid)
		}
	}
	return fmt.Errorf("approving %s: %w in the databases %s names", o.PlanUID, runner.ErrUnknownPlan, o.File)
}

// showApproval prints a recorded approval; next says what runs it, with
// the resource's name for %s.
func (a *app) showApproval(ap runner.Approved, output, next string) error {
	if output == outputJSON {
		return writeJSON(a.stdout, approvalOutput{Approval: approvalItem{Metadata: jsonMeta{Name: ap.Name, UID: ap.UID}, Spec: ap.Spec}})
	}
	of, apply := ap.Resource, ap.Resource
	if ap.ResourceKind == api.KindPtahMigration {
		of, apply = api.KindPtahMigration+" "+ap.Resource, api.KindPtahMigration+"/"+ap.Resource
	}
	_, err := fmt.Fprintf(a.stdout, "Approved plan %s (uid %s) of %s as %s.\n"+next+"\n", ap.Plan.Name, ap.Plan.UID, of, ap.Approver, apply)
	return err
}

// runApproveCluster records the approval as a custom resource, in the
// name of the user the API server authenticates.
func (a *app) runApproveCluster(ctx context.Context, o approveOptions) error {
	c, err := a.openCluster(ctx)
	if err != nil {
		return err
	}
	if err := runner.FenceStore(ctx, c.store); err != nil {
		return err
	}
	ap, err := runner.RecordApproval(ctx, c.store, clusterNow, newID,
		runner.ApproveRequest{PlanUID: o.PlanUID, Fingerprint: o.Fingerprint, Approver: c.user, Reason: o.Reason})
	if err != nil {
		return err
	}
	return a.showApproval(ap, o.Output, "ptah serve runs it (ptah status %s --cluster follows it).")
}
