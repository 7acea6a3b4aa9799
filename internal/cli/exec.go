package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/ptah-run/ptah/internal/controller"
	"github.com/ptah-run/ptah/internal/postgres"
)

const execLong = `Run one dispatched operation: what the Pod of a ptah serve Job runs. Not
for people: the manager writes its arguments.

The plan comes as parts in --plan-dir (ConfigMaps the manager created),
which must hash to --plan-digest and name --operation, and the plan must
match its fingerprint; otherwise nothing runs. The database URL comes from
the environment variable ` + controller.EnvDatabaseURL + `, never from an
argument. The writer's session is stopped on the database server's clock
at --deadline. The result (operation, plan digest, outcome, the first line
of any error; never SQL) is written to --termination-log, at most 4 KiB,
for the manager to read; the run's journal in the database holds the rest.

The request is one of three tasks. An apply runs a claimed plan. A reading
(observe, rederive) reads the database and the declared files (mounted from
the resource's ConfigMap in --source-dir, or pulled from its OCI artifact
with the credentials in ` + controller.EnvRegistryConfig + `) and returns the bindings; an
observe with statements to run hands them back in a plan object it creates
with the ServiceAccount token in --api-credentials, which the manager checks,
reads and deletes. So far ptah exec serves the PtahSchema family.

`

type execOptions struct {
	Operation, PlanDigest, PlanDir, TerminationLog string
	SourceDir, APICredentials                      string
	Deadline                                       time.Time
}

func (a *app) newExecCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:    "exec --operation ID --plan-digest DIGEST --plan-dir DIR --deadline TIME",
		Short:  "Run one dispatched operation (in a ptah serve Job's Pod)",
		Long:   execLong + exitCodeHelp("exec"),
		Args:   noArgs,
		Hidden: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			s := a.settings
			o := execOptions{Operation: s.String("operation"), PlanDigest: s.String("plan-digest"), PlanDir: s.String("plan-dir"),
				TerminationLog: s.String("termination-log"), SourceDir: s.String("source-dir"), APICredentials: s.String("api-credentials")}
			for _, k := range []string{"operation", "plan-digest", "plan-dir", "deadline"} {
				if s.String(k) == "" {
					return usageErrorf("--%s is required", k)
				}
			}
			d, err := time.Parse(time.RFC3339Nano, s.String("deadline"))
			if err != nil {
				return usageErrorf("%s: not an RFC 3339 time: %v", s.origin("deadline"), err)
			}
			o.Deadline = d
			return a.runExec(cmd.Context(), o)
		},
	}
	f := cmd.Flags()
	f.String("operation", "", "the operation the manager dispatched")
	f.String("plan-digest", "", "sha256 of the whole plan, as the manager split it")
	f.String("plan-dir", "", "the folder holding the plan's parts")
	f.String("deadline", "", "the run's absolute deadline (RFC 3339)")
	f.String("termination-log", controller.TerminationMessagePath, "where to write the result")
	f.String("source-dir", "", "the folder holding the declared files (a reading)")
	f.String("api-credentials", "", "the folder holding the ServiceAccount token a reading hands its statements back with")
	return cmd
}

func (a *app) runExec(ctx context.Context, o execOptions) error {
	url := os.Getenv(controller.EnvDatabaseURL)
	if url == "" {
		return fmt.Errorf("%w: %s is not set: the Job's Pod gets the URL from the resource's Secret key", errClusterConfig, controller.EnvDatabaseURL)
	}
	run := controller.ExecRun{OperationID: o.Operation, PlanDigest: o.PlanDigest,
		Parts: os.DirFS(o.PlanDir), Deadline: o.Deadline, DatabaseURL: url, SourceDir: o.SourceDir, Version: versionString(),
		RegistryConfig: []byte(os.Getenv(controller.EnvRegistryConfig))}
	if o.APICredentials != "" {
		st, err := controller.RecordsFromCredentials(o.APICredentials)
		if err != nil {
			return fmt.Errorf("%w: %w", errClusterConfig, err)
		}
		run.Records = st
	}
	res, err := controller.Exec(ctx, run)
	if werr := os.WriteFile(o.TerminationLog, res.Encode(), 0o644); werr != nil && err == nil {
		err = fmt.Errorf("writing the result to %s: %w", o.TerminationLog, werr)
	}
	switch {
	case err == nil:
		_, err = fmt.Fprintf(a.stdout, "Operation %s: %s.\n", o.Operation, res.Outcome)
		return err
	case res.Task != "":
		return fmt.Errorf("reading %s failed: %s", o.Operation, res.Message)
	case res.Outcome == controller.OutcomeFailed, res.Outcome == controller.OutcomeUnknown:
		return fmt.Errorf("%w: operation %s: %s", errApplyFailed, o.Operation, res.Message)
	case errors.Is(err, postgres.ErrLeaseHeld):
		return fmt.Errorf("%w: %w", errBlocked, err)
	}
	return err
}
