package cli

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/ptah-run/ptah/internal/config"
	"github.com/ptah-run/ptah/internal/postgres"
	"github.com/ptah-run/ptah/pkg/api/v1alpha1"
)

// Output formats of ptah plan.
const (
	outputText = "text"
	outputJSON = "json"
	outputSQL  = "sql"
)

var outputs = []string{outputText, outputJSON, outputSQL}

// planOptions is everything ptah plan needs, resolved from flags,
// environment and config file, and validated before any I/O.
type planOptions struct {
	File             string
	Names            []string
	Output           string
	DetailedExitCode bool
	DevURL           string
}

const planLong = `Compute and print the plan for each PtahSchema resource: the ordered
statements that take the target database to the declared schema.

plan only reads. It inspects the target's catalog, loads the declared SQL
files (spec.source.path, *.sql in lexical order) into a temporary dev
database created on the target's server (or on the server --dev-url names)
and dropped afterwards, inspects that the same way, and compares the two
within spec.schemas. The target is never changed.

NAME arguments pick resources by metadata.name; without any, every resource
in the file is planned.

Output (-o):
  text  statements in order, hazards tagged, a summary per resource (default)
  sql   a script to run as-is with psql -v ON_ERROR_STOP=1 -f -
  json  {"items":[{"resource":{"apiVersion":"ptah.run/v1alpha1","kind":"PtahSchema","name":"app"},
          "changes":true,"plan":{"spec":{"statements":[{"sql":"...","hazards":["deletes-data"]}],
          "destructive":true,"lockTimeout":"5s"}}}]}

Hazards: deletes-data, rewrites-table, blocks-writes,
builds-index-on-existing-table, may-fail-on-existing-data. A plan with a
deletes-data statement is destructive.

Privileges and ownership are not managed: GRANTs and owners are neither
compared nor planned, and never make a plan fail or differ.

Environment: PTAH_FILE, PTAH_OUTPUT, PTAH_DEV_URL, PTAH_DETAILED_EXITCODE
stand for the flags. The target's URL comes from the resource
(spec.target.urlFrom), never from a flag.

`

const planExample = `  # Plan every resource of ./ptah.yaml; the URL comes from spec.target.urlFrom
  export APP_DATABASE_URL='postgres://app@db.internal:5432/app'
  ptah plan

  # One resource as a script, reviewed, then run by psql
  ptah plan app -o sql > plan.sql
  psql -v ON_ERROR_STOP=1 -f plan.sql "$APP_DATABASE_URL"

  # CI: exit 2 when the database has drifted from the declaration
  ptah plan -f deploy/ptah.yaml --detailed-exitcode -o json > plan.json

  # Load the declared files on another server (the target's role may not CREATEDB)
  PTAH_DEV_URL='postgres://dev@localhost:5432/postgres' ptah plan`

func (a *app) newPlanCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:     "plan [NAME...] [flags]",
		Short:   "Show the changes that take each target database to its declared schema",
		Long:    planLong + exitCodeHelp(),
		Example: planExample,
		Args:    cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			opts, err := a.planOptions(args)
			if err != nil {
				return err
			}
			return a.runPlan(cmd.Context(), opts)
		},
	}
	f := cmd.Flags()
	f.StringP("file", "f", "ptah.yaml", "the file of resource documents")
	f.StringP("output", "o", outputText, "output format: "+strings.Join(outputs, ", "))
	f.Bool("detailed-exitcode", false, "exit 2 when any plan has changes, 0 when none")
	f.String("dev-url", "", "a server (any database on it) where the temporary dev database is created; default: the target's server")
	return cmd
}

// planOptions resolves and validates the options; it does no I/O.
func (a *app) planOptions(args []string) (planOptions, error) {
	s := a.settings
	o := planOptions{
		File:   s.String("file"),
		Names:  args,
		Output: s.String("output"),
		DevURL: s.String("dev-url"),
	}
	var err error
	if o.DetailedExitCode, err = s.Bool("detailed-exitcode"); err != nil {
		return o, err
	}
	a.secrets.addURL(o.DevURL)
	return o, o.validate(s)
}

func (o planOptions) validate(s *settings) error {
	if o.File == "" {
		return usageErrorf("%s: empty; name the file of resource documents", s.origin("file"))
	}
	if !contains(outputs, o.Output) {
		return usageErrorf("%s: %q is not one of %s", s.origin("output"), o.Output, strings.Join(outputs, ", "))
	}
	for _, n := range o.Names {
		if n == "" {
			return usageErrorf("empty resource name")
		}
	}
	if o.DevURL != "" {
		// The value itself is never echoed: it may hold a password.
		u, err := url.Parse(o.DevURL)
		if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
			return usageErrorf("%s: not a postgres:// or postgresql:// URL", s.origin("dev-url"))
		}
	}
	return nil
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// planResult is one resource's plan, ready to render.
type planResult struct {
	Resource *config.Resource
	Plan     *postgres.Plan
}

func (r planResult) changes() bool { return len(r.Plan.Statements) > 0 }

// runPlan loads the resources, resolves everything they point at before
// touching any database (so every configuration problem is reported without
// a connection attempt), then plans each and renders all plans at once, so a
// failure leaves no half-printed output.
func (a *app) runPlan(ctx context.Context, o planOptions) error {
	file, err := config.Load(o.File)
	if err != nil {
		return err
	}
	resources, err := file.Select(o.Names)
	if err != nil {
		return err
	}
	reqs := make([]postgres.PlanRequest, len(resources))
	var errs []error
	for i, r := range resources {
		reqs[i], err = a.planRequest(r, o)
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}

	results := make([]planResult, len(resources))
	for i, r := range resources {
		p, err := a.planSchema(ctx, reqs[i])
		if err != nil {
			return fmt.Errorf("planning %s: %w", r.Ref(), err)
		}
		if p == nil {
			return fmt.Errorf("planning %s: the engine returned no plan", r.Ref())
		}
		results[i] = planResult{Resource: r, Plan: p}
	}

	if err := a.render(o.Output, results); err != nil {
		return fmt.Errorf("writing the plan: %w", err)
	}
	if o.DetailedExitCode {
		for _, r := range results {
			if r.changes() {
				return errPlanHasChanges
			}
		}
	}
	return nil
}

func (a *app) planRequest(r *config.Resource, o planOptions) (postgres.PlanRequest, error) {
	files, err := r.SQLFiles()
	if err != nil {
		return postgres.PlanRequest{}, err
	}
	target, warning, err := r.ResolveURL(os.Getenv)
	if err != nil {
		return postgres.PlanRequest{}, err
	}
	a.secrets.addURL(target)
	if warning != "" {
		a.warn(warning)
	}
	req := postgres.PlanRequest{
		TargetURL:   target,
		DevURL:      o.DevURL,
		Schemas:     append([]string(nil), r.Schema.Spec.Schemas...),
		LockTimeout: r.Schema.Spec.Policy.LockTimeoutDuration(),
	}
	for _, f := range files {
		req.Files = append(req.Files, postgres.SourceFile{Name: f.Name, SQL: f.SQL})
	}
	return req, nil
}

// ref is the JSON form of a resource reference.
type ref struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Namespace  string `json:"namespace,omitempty"`
	Name       string `json:"name"`
}

func refOf(s *v1alpha1.PtahSchema) ref {
	return ref{APIVersion: s.APIVersion, Kind: s.Kind, Namespace: s.Namespace, Name: s.Name}
}
