package cli

import (
	"context"
	"os"
	"slices"
	"time"

	"github.com/spf13/cobra"

	"github.com/ptah-run/ptah/internal/config"
)

// Dynamic shell completion (ptah completion bash|zsh|fish|powershell prints
// the script): resource names from the file, plan UIDs and registered
// records from the databases it names. Completion never fails loudly: a
// file that does not load, or a database out of reach, completes nothing.

// completionTimeout bounds the database reads a completion makes.
const completionTimeout = 3 * time.Second

// completionFile is the file a completion reads: --file as typed on the
// command line, else PTAH_FILE, else ptah.yaml (settings are not loaded
// for completions).
func completionFile(cmd *cobra.Command) string {
	if f := cmd.Flags().Lookup("file"); f != nil && f.Changed {
		return f.Value.String()
	}
	if env := os.Getenv("PTAH_FILE"); env != "" {
		return env
	}
	return "ptah.yaml"
}

// completeDeclared completes the names of the resources the file declares
// that are not on the command line yet.
func (a *app) completeDeclared(cmd *cobra.Command, args []string, _ string) ([]string, cobra.ShellCompDirective) {
	f, err := config.Load(completionFile(cmd))
	if err != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	var names []string
	for _, r := range f.Documents {
		if !slices.Contains(args, r.Name()) && !slices.Contains(names, r.Name()) {
			names = append(names, r.Name())
		}
	}
	return names, cobra.ShellCompDirectiveNoFileComp
}

// completeRegistered completes the names of the records registered in the
// file's databases that the file does not declare (what ptah forget takes).
func (a *app) completeRegistered(cmd *cobra.Command, args []string, _ string) ([]string, cobra.ShellCompDirective) {
	if len(args) > 0 {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	var names []string
	a.withTargets(cmd, func(ctx context.Context, t *targets, sel *selection) {
		unlisted, err := t.unlisted(ctx, sel)
		if err != nil {
			return
		}
		for _, u := range unlisted {
			names = append(names, unlistedName(u))
		}
	})
	return names, cobra.ShellCompDirectiveNoFileComp
}

// completePlanUIDs completes the UIDs of the current plans of the file's
// resources, each described by its resource and plan name.
func (a *app) completePlanUIDs(cmd *cobra.Command, args []string, _ string) ([]string, cobra.ShellCompDirective) {
	if len(args) > 0 {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	var uids []string
	a.withTargets(cmd, func(ctx context.Context, t *targets, sel *selection) {
		for i, in := range sel.inputs {
			rep, err := t.runner(in).Inspect(ctx, in)
			if err != nil || rep.Status.Plan == nil {
				continue
			}
			uids = append(uids, rep.Status.Plan.UID+"\t"+sel.resources[i].Name()+": plan "+rep.Status.Plan.Name)
		}
	})
	return uids, cobra.ShellCompDirectiveNoFileComp
}

// withTargets opens the file's databases, read-only, for a completion.
func (a *app) withTargets(cmd *cobra.Command, fn func(context.Context, *targets, *selection)) {
	ctx, cancel := context.WithTimeout(context.Background(), completionTimeout)
	defer cancel()
	quiet := &app{stdout: a.stdout, stderr: discard{}, secrets: a.secrets}
	sel, err := quiet.selectResources(completionFile(cmd), nil, sourcesUnread)
	if err != nil {
		return
	}
	t, err := quiet.openTargets(ctx, sel, runnerOptions{ReadOnly: true})
	if err != nil {
		return
	}
	defer t.close()
	fn(ctx, t, sel)
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }

// unlistedName is the name in a "Kind namespace/name" registration.
func unlistedName(registration string) string {
	for i := len(registration) - 1; i >= 0; i-- {
		if registration[i] == '/' {
			return registration[i+1:]
		}
	}
	return registration
}
