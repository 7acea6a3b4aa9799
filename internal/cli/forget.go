package cli

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/ptah-run/ptah/internal/runner"
	api "github.com/ptah-run/ptah/pkg/api/v1alpha1"
)

const forgetLong = `Remove the record of a resource registered in the databases the file names,
one the file no longer declares: a resource that was renamed, mistyped, or
moved elsewhere. Every registered resource counts in the realm census, so a
stray record keeps the resources you do manage Blocked (RealmConflict);
ptah status lists such records under "registered here but not in the file".

forget removes the resource's record and its plans. It keeps its approvals
(the record of who decided what; they authorize nothing else) and the run
journal. It refuses while the record still owes something: an operation
claimed or dispatched, an outcome to observe, a lease to release. Declare
the resource again and run ptah apply NAME to settle those first.

A resource the file declares cannot be forgotten: its next pass would
register it again. Remove it from the file first.

`

type forgetOptions struct {
	File   string
	Name   string
	Output string
}

func (a *app) newForgetCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "forget NAME [flags]",
		Short: "Remove the record of a resource the file no longer declares",
		Long:  forgetLong + exitCodeHelp("forget"),
		Example: `  ptah status            # lists records registered here but not in the file
  ptah forget old-name`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) != 1 || args[0] == "" {
				return usageErrorf("forget takes exactly one argument, the name of the resource to forget")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			s := a.settings
			o := forgetOptions{File: s.String("file"), Name: args[0], Output: s.String("output")}
			if err := validateCommon(s, o.File, o.Output, statusOutputs, nil, ""); err != nil {
				return err
			}
			return a.runForget(cmd.Context(), o)
		},
		ValidArgsFunction: a.completeRegistered,
	}
	f := cmd.Flags()
	f.StringP("file", "f", "ptah.yaml", "the file of resource documents (it names the databases to look in)")
	f.StringP("output", "o", outputText, "output format: "+strings.Join(statusOutputs, ", "))
	return cmd
}

type forgetOutput struct {
	Forgotten []forgottenItem `json:"forgotten"`
}

type forgottenItem struct {
	Resource      string   `json:"resource"`
	Plans         []string `json:"plans"`
	KeptApprovals int      `json:"keptApprovals"`
}

func (a *app) runForget(ctx context.Context, o forgetOptions) error {
	sel, err := a.selectResources(o.File, nil, sourcesUnread)
	if err != nil {
		return err
	}
	// NAME may be qualified by its kind (PtahMigration/app); unqualified,
	// a record of either family by that name is forgotten.
	kinds, name := []string{api.KindPtahSchema, api.KindPtahMigration}, o.Name
	if k, n, ok := strings.Cut(o.Name, "/"); ok && (k == api.KindPtahSchema || k == api.KindPtahMigration) {
		kinds, name = []string{k}, n
	}
	for _, r := range sel.resources {
		if slices.Contains(kinds, r.Kind()) && r.Name() == name {
			return usageErrorf("%s declares %s: its next pass would register it again; remove it from the file first", o.File, r.Ref())
		}
	}
	t, err := a.openTargets(ctx, sel, runnerOptions{ReadOnly: true})
	if err != nil {
		return err
	}
	defer t.close()
	out := forgetOutput{Forgotten: []forgottenItem{}}
	for url, r := range t.byURL {
		for _, kind := range kinds {
			f, err := r.Forget(ctx, kind, "default", name)
			if errors.Is(err, runner.ErrNotRegistered) {
				continue
			}
			if err != nil {
				return fmt.Errorf("in the target of %s: %w", t.describe(sel, url), err)
			}
			out.Forgotten = append(out.Forgotten, forgottenItem{Resource: f.Resource, Plans: append([]string{}, f.Plans...), KeptApprovals: f.KeptApprovals})
		}
	}
	if len(out.Forgotten) == 0 {
		return fmt.Errorf("forgetting %s: %w of the databases %s names (ptah status lists what is registered)", o.Name, runner.ErrNotRegistered, o.File)
	}
	if o.Output == outputJSON {
		return writeJSON(a.stdout, out)
	}
	for _, f := range out.Forgotten {
		fmt.Fprintf(a.stdout, "Forgot %s: removed its record and %s; kept %s and the run journal.\n",
			f.Resource, count(len(f.Plans), "plan"), count(f.KeptApprovals, "approval"))
	}
	return nil
}

// describe names a target database by the first resource of sel on it.
func (t *targets) describe(sel *selection, url string) string {
	for i, in := range sel.inputs {
		if in.TargetURL == url {
			return sel.resources[i].Ref()
		}
	}
	return "a resource"
}

func count(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}
