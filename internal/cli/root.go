package cli

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"
)

const rootLong = `ptah changes PostgreSQL databases safely.

A PtahSchema resource declares a database's schema as a directory of SQL
files; ptah compares it with the live database and computes the ordered DDL
that closes the gap (a plan), each statement tagged with its hazards. The
plan is published under a UID; a person approves that UID; ptah apply runs
exactly what was approved, once, and only against the database it was
computed for.

A PtahMigration resource is a directory of versioned, hand-written SQL
files; ptah runs those not yet in the database's migration history, in
version order, each once, through the same plan, approve and apply. A run
whose outcome ptah cannot establish stops everything for that migration
until a person settles it with ptah resolve-run.

Resources are YAML documents in a file, ptah.yaml by default, of either
kind:

  apiVersion: ptah.run/v1alpha1
  kind: PtahSchema
  metadata:
    name: app
  spec:
    target:
      urlFrom: {env: APP_DATABASE_URL}
    source:
      path: ./schema
  ---
  apiVersion: ptah.run/v1alpha1
  kind: PtahMigration
  metadata:
    name: app
  spec:
    target:
      urlFrom: {env: APP_DATABASE_URL}
      sharedRealm: true          # with sharedRealm on the PtahSchema too
    source:
      path: ./migrations

A bare NAME selects the resources of every kind with that name;
PtahMigration/app names one.

Settings: a flag wins over its PTAH_* environment variable (--dev-url is
PTAH_DEV_URL), which wins over the --config file (YAML, keys named like the
flags, e.g. "output: json"). --config itself may come from PTAH_CONFIG.

`

func (a *app) newRootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:   "ptah",
		Short: "Change PostgreSQL databases safely",
		Long:  rootLong + exitCodeHelp(""),
		Example: `  # What would change? (the URL comes from spec.target.urlFrom in ptah.yaml)
  ptah plan

  # Approve the plan it printed, run it, and look
  ptah approve 3f6c0c8e-... --fingerprint sha256:...
  ptah apply
  ptah status

  # A CI drift check: JSON, and exit 2 when anything would change
  ptah plan -o json --detailed-exitcode`,
		Version:       versionString(),
		SilenceUsage:  true,
		SilenceErrors: true, // report() prints errors, after redacting them
		// Suggest "plan" for "pln"; cobra's default of 0 suggests nothing here.
		SuggestionsMinimumDistance: 2,
		// With Args set, cobra hands unknown commands to RunE rather than
		// failing in its own words, so they become usage errors like any other.
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return nil
			}
			msg := fmt.Sprintf("unknown command %q", args[0])
			if s := cmd.SuggestionsFor(args[0]); len(s) > 0 {
				msg += fmt.Sprintf("; did you mean %s?", strings.Join(s, " or "))
			}
			return &usageError{fmt.Errorf("%s", msg)}
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			return cmd.Help()
		},
		PersistentPreRunE: func(cmd *cobra.Command, args []string) error {
			s, err := loadSettings(cmd)
			if err != nil {
				return err
			}
			a.settings = s
			return nil
		},
	}
	root.SetVersionTemplate("{{.Version}}\n")
	root.PersistentFlags().String("config", "", "read settings from this YAML file (keys named like the flags)")
	clusterFlags(root)
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return &usageError{err} })
	root.AddCommand(a.newInitCmd(), a.newPlanCmd(), a.newApproveCmd(), a.newApplyCmd(), a.newStatusCmd(), a.newHistoryCmd(), a.newForgetCmd(), a.newResolveRunCmd(), a.newMigrateCmd(), a.newServeCmd(), a.newExecCmd(), a.newVersionCmd())
	return root
}

// noArgs is cobra.NoArgs as a usage error.
func noArgs(cmd *cobra.Command, args []string) error {
	if len(args) > 0 {
		return usageErrorf("%s takes no arguments, got %q", cmd.CommandPath(), args[0])
	}
	return nil
}
