package cli

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/ptah-run/ptah/internal/config"
	"github.com/ptah-run/ptah/internal/postgres"
	"github.com/ptah-run/ptah/internal/postgres/catalog"
	"github.com/ptah-run/ptah/internal/runner"
	api "github.com/ptah-run/ptah/pkg/api/v1alpha1"
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
	NoPublish        bool
	ObserveTimeout   time.Duration
	// Cache keeps the desired state the declared files load to (nil: none).
	Cache catalog.DesiredCache
	// Baseline asks, for the one PtahMigration named, for a baseline plan
	// up to this version.
	Baseline string
}

const planLong = `Compute the plan for each resource, publish it, and print it. A PtahSchema's
plan is the ordered statements that take the target database to the
declared schema; a PtahMigration's is its files that the database's
migration history lacks, in version order, each with its checksum and how
it runs (in a transaction of its own, or, marked -- ptah:no-transaction,
statement by statement), selected against one reading of the history
(the plan shows its fingerprint; the approval binds it).

A migration whose files the history no longer accounts for (an applied
file edited or gone, a new file older than the newest applied, a run only
a person can settle) is Blocked, exit 11, naming the versions; a source
directory that does not read as a sequence is exit 18, before any
connection.

--baseline VERSION adopts an existing database for the one PtahMigration
named: the files up to VERSION are replayed into a temporary dev database
and compared with the target by the schema engine; only if they match is a
plan published that records those versions as already applied (approved
like any other; ptah apply runs none of their statements). A target that
differs is Blocked (BaselineMismatch, exit 11) with the differences; a
history that records anything refuses a baseline.

For a PtahSchema, plan never changes the managed schemas. It inspects the
target's catalog, loads the declared SQL files (spec.source.path, *.sql in
lexical order) into a temporary dev database created on the target's
server (or on the server --dev-url names) and dropped afterwards, inspects
that the same way, and compares the two within spec.schemas. What the dev
database made of the files is kept in --cache-dir (default ptah/ in the
user's cache directory; "off": nothing kept): a later plan whose files, dev
server and ptah are unchanged reads it instead of loading the files again.
Its key covers everything the result could depend on, so a change to any
of them loads the files again; a rename directive or a type change always
loads them.

Publishing records the plan in the target's ptah schema as an immutable
object with a UID and a fingerprint over its statements and every input it
was computed from; ptah approve names that UID, and ptah apply runs only an
authorized plan. An unchanged plan keeps its UID; any change in the
statements or the inputs publishes a new one. --no-publish only prints: it
writes nothing, needs no write access, and its plan cannot be approved.

NAME arguments pick resources by metadata.name (PtahMigration/NAME to pick
one kind); without any, every resource in the file is planned.

Output (-o):
  text  statements in order, hazards tagged, a summary per resource (default)
  sql   a script to run as-is with psql -v ON_ERROR_STOP=1 -f - (a migration's
        pending files, to read: run that way they are not recorded in its history)
  json  {"items":[{"resource":{"apiVersion":"ptah.run/v1alpha1","kind":"PtahSchema","name":"app"},
          "changes":true,"plan":{"metadata":{"name":"app-1f2e3d4c5b6a","uid":"..."},
          "spec":{"statements":[{"sql":"...","hazards":["deletes-data"]}],
          "phases":[{"statements":1,"locks":17}],"lockCapacity":{...},"destructive":true,
          "lockTimeout":"5s","fingerprint":"sha256:..."}},"phase":"AwaitingApproval",...}]}
        a PtahMigration's plan.spec: {"versions":[{"version":"2","name":"users_email",
          "file":"2_users_email.sql","checksum":"sha256:...","noTransaction":true}],
          "lockTimeout":"5s","historyFingerprint":"sha256:...","fingerprint":"sha256:..."},
          beside the item's "history":{"applied":1,"lastApplied":"1","fingerprint":"sha256:..."}

A plan runs in one transaction unless it says otherwise: labels added to
existing enums commit first, on their own, and a plan that would lock more
objects than one transaction may hold on the target's server (half its lock
table) is cut into several transactions. The plan lists each, and its
fingerprint covers them.

Hazards: deletes-data, rewrites-table, blocks-writes,
builds-index-on-existing-table, may-fail-on-existing-data. A plan with a
deletes-data statement is destructive.

Privileges and ownership are not managed: GRANTs and owners are neither
compared nor planned, and never make a plan fail or differ. With
spec.privileges: Managed, the grants on the managed objects are compared
and planned (GRANT, REVOKE); roles and owners never are.

Environment: PTAH_FILE, PTAH_OUTPUT, PTAH_DEV_URL, PTAH_DETAILED_EXITCODE,
PTAH_NO_PUBLISH stand for the flags. The target's URL comes from the resource
(spec.target.urlFrom), never from a flag.

With --cluster, plan computes nothing: it shows the plan ptah serve
published for each of the namespace's resources (-n, else the kubeconfig
context's), checked against its fingerprint, in the same output shapes.

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
  PTAH_DEV_URL='postgres://dev@localhost:5432/postgres' ptah plan

  # Drift check with a read-only role: record nothing
  ptah plan --no-publish --detailed-exitcode

  # Adopt a database migrated by another tool up to version 20240301120000
  ptah plan PtahMigration/app --baseline 20240301120000`

func (a *app) newPlanCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:               "plan [NAME...] [flags]",
		Short:             "Publish and show the changes that take each database to its declared schema",
		Long:              planLong + exitCodeHelp("plan"),
		Example:           planExample,
		Args:              cobra.ArbitraryArgs,
		ValidArgsFunction: a.completeDeclared,
		RunE: func(cmd *cobra.Command, args []string) error {
			opts, err := a.planOptions(args)
			if err != nil {
				return err
			}
			if inCluster, err := a.clusterMode(); err != nil {
				return err
			} else if inCluster {
				return a.runPlanCluster(cmd.Context(), opts)
			}
			return a.runPlan(cmd.Context(), opts)
		},
	}
	f := cmd.Flags()
	f.StringP("file", "f", "ptah.yaml", "the file of resource documents")
	f.StringP("output", "o", outputText, "output format: "+strings.Join(outputs, ", "))
	f.Bool("detailed-exitcode", false, "exit 2 when any plan has changes, 0 when none")
	f.String("dev-url", "", "a server (any database on it) where the temporary dev database is created; default: the target's server")
	f.Bool("no-publish", false, "only print the plan: record nothing in the target (needs no write access; the plan cannot be approved)")
	f.String("baseline", "", "adopt an existing database: plan to record the named PtahMigration's versions up to `VERSION` as already applied "+
		"(its history must be empty, and the target must match what those files build)")
	addObserveTimeout(f)
	addCacheDir(f)
	return cmd
}

// planOptions resolves and validates the options; it does no I/O.
func (a *app) planOptions(args []string) (planOptions, error) {
	s := a.settings
	o := planOptions{
		File:     s.String("file"),
		Names:    args,
		Output:   s.String("output"),
		DevURL:   s.String("dev-url"),
		Baseline: s.String("baseline"),
	}
	var err error
	if o.DetailedExitCode, err = s.Bool("detailed-exitcode"); err != nil {
		return o, err
	}
	if o.NoPublish, err = s.Bool("no-publish"); err != nil {
		return o, err
	}
	if o.ObserveTimeout, err = observeTimeout(s); err != nil {
		return o, err
	}
	o.Cache = desiredCache(s)
	a.secrets.addURL(o.DevURL)
	return o, o.validate(s)
}

func (o planOptions) validate(s *settings) error {
	if o.Baseline != "" {
		switch {
		case len(o.Names) != 1:
			return usageErrorf("%s: a baseline is planned for one PtahMigration: name it (ptah plan NAME --baseline VERSION)", s.origin("baseline"))
		case o.NoPublish:
			return usageErrorf("%s: a baseline plan is published to be approved; it cannot be combined with --no-publish", s.origin("baseline"))
		}
	}
	return validateCommon(s, o.File, o.Output, outputs, o.Names, o.DevURL)
}

// validateCommon checks the options the commands share.
func validateCommon(s *settings, file, output string, allowed, names []string, devURL string) error {
	if file == "" {
		return usageErrorf("%s: empty; name the file of resource documents", s.origin("file"))
	}
	if !contains(allowed, output) {
		return usageErrorf("%s: %q is not one of %s", s.origin("output"), output, strings.Join(allowed, ", "))
	}
	for _, n := range names {
		if n == "" {
			return usageErrorf("empty resource name")
		}
	}
	if devURL != "" {
		// The value itself is never echoed: it may hold a password.
		if err := postgres.CheckURL(devURL); err != nil {
			return usageErrorf("%s: not a PostgreSQL connection URL: %v", s.origin("dev-url"), err)
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
	// Plan is a PtahSchema's statements; nil for a PtahMigration.
	Plan *postgres.Plan
	// Published and Status are nil with --no-publish. Published is nil
	// too when there is no plan (in sync, or blocked before planning).
	Published *publishedPlan
	Status    *api.PtahSchemaStatus
	// Migration is a PtahMigration's plan; nil for a PtahSchema.
	Migration *migrationPlan
}

// publishedPlan names the stored plan object a reviewer approves.
type publishedPlan struct{ Name, UID, Fingerprint string }

// state is the resource's run state after the pass; nil with --no-publish.
func (r planResult) state() *api.RunState {
	switch {
	case r.Migration != nil:
		if r.Migration.Status == nil {
			return nil
		}
		return &r.Migration.Status.RunState
	case r.Status != nil:
		return &r.Status.RunState
	}
	return nil
}

func (r planResult) changes() bool {
	if r.Migration != nil {
		return len(r.Migration.Versions) > 0
	}
	return len(r.Plan.Statements) > 0
}

// blocked: the resource cannot proceed; the pass may have stopped before it
// could plan (a realm conflict, a migration's history that does not match
// its files), or after (a destructive plan not allowed, a tampered plan).
func (r planResult) blocked() bool {
	st := r.state()
	return st != nil && st.Phase == api.PhaseBlocked
}

// runPlan loads the resources, resolves everything they point at before
// touching any database (so every configuration problem is reported without
// a connection attempt), then plans each and renders all plans at once, so a
// failure leaves no half-printed output.
func (a *app) runPlan(ctx context.Context, o planOptions) error {
	sel, err := a.selectResources(o.File, o.Names, sourcesRequired)
	if err != nil {
		return err
	}
	if o.Baseline != "" {
		if len(sel.inputs) != 1 || sel.inputs[0].Migration == nil {
			return usageErrorf("--baseline: %s does not name one PtahMigration of %s (PtahMigration/%s names it, if a PtahSchema has the name too)",
				o.Names[0], o.File, o.Names[0])
		}
		sel.inputs[0].Baseline = o.Baseline
	}
	var results []planResult
	if o.NoPublish {
		results, err = a.computePlans(ctx, sel, o)
	} else {
		results, err = a.publishPlans(ctx, sel, o)
	}
	if err != nil {
		return err
	}

	return a.showPlans(results, o)
}

// showPlans renders the plans, then says how the command ends: blocked
// resources, and with --detailed-exitcode, changes.
func (a *app) showPlans(results []planResult, o planOptions) error {
	if err := a.render(o.Output, results); err != nil {
		return fmt.Errorf("writing the plan: %w", err)
	}
	var blocked, reasons, names []string
	for _, r := range results {
		if r.blocked() {
			st := r.state()
			blocked = append(blocked, fmt.Sprintf("%s: %s", r.Resource.Ref(), st.Message))
			reasons, names = append(reasons, st.Reason), append(names, r.Resource.Name())
		}
	}
	if len(blocked) > 0 {
		return &stopError{class: errBlocked, reasons: reasons, names: names, detail: strings.Join(blocked, "\n")}
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

// computePlans only reads: the plans are printed and not recorded.
func (a *app) computePlans(ctx context.Context, sel *selection, o planOptions) ([]planResult, error) {
	results := make([]planResult, len(sel.inputs))
	var t *targets // opened for the first migration: a schema's plan connects by itself
	defer func() {
		if t != nil {
			t.close()
		}
	}()
	for i, in := range sel.inputs {
		r := sel.resources[i]
		if in.Migration != nil {
			if t == nil {
				var err error
				if t, err = a.openTargets(ctx, sel, runnerOptions{ReadOnly: true}); err != nil {
					return nil, err
				}
			}
			mp, err := previewMigration(ctx, t.runner(in), in)
			if err != nil {
				return nil, fmt.Errorf("planning %s: %w", r.Ref(), err)
			}
			results[i] = planResult{Resource: r, Migration: mp}
			continue
		}
		p, err := a.planSchema(ctx, a.planRequest(in, o))
		if err != nil {
			return nil, fmt.Errorf("planning %s: %w", r.Ref(), err)
		}
		if p == nil {
			return nil, fmt.Errorf("planning %s: the engine returned no plan", r.Ref())
		}
		results[i] = planResult{Resource: r, Plan: p}
	}
	return results, nil
}

// publishPlans runs each resource's pass as far as publishing its plan.
func (a *app) publishPlans(ctx context.Context, sel *selection, o planOptions) ([]planResult, error) {
	t, err := a.openTargets(ctx, sel, runnerOptions{DevURL: o.DevURL, ObserveTimeout: o.ObserveTimeout, Cache: o.Cache})
	if err != nil {
		return nil, err
	}
	defer t.close()
	if err := t.register(ctx, sel); err != nil {
		return nil, err
	}
	results := make([]planResult, len(sel.inputs))
	for i, in := range sel.inputs {
		r := sel.resources[i]
		out, err := t.runner(in).Run(ctx, in, runner.PlanOnly)
		if err != nil {
			return nil, fmt.Errorf("planning %s: %w", r.Ref(), err)
		}
		results[i] = publishedResult(r, in, out)
	}
	return results, nil
}

func publishedResult(r *config.Resource, in runner.Resource, out runner.Result) planResult {
	if m := out.Migration; m != nil {
		st := m.Status
		res := planResult{Resource: r, Migration: &migrationPlan{Status: &st, Source: in.Source, LockTimeout: r.Migration.Spec.Policy.LockTimeout}}
		// A blocked migration has nothing to show as pending: the plan its
		// status still names is the one of a run it cannot account for,
		// or one its history no longer supports.
		if p := m.Plan; p != nil && st.Phase != api.PhaseBlocked {
			res.Migration.Versions = p.Spec.Versions
			res.Migration.HistoryFingerprint = p.Spec.HistoryFingerprint
			res.Migration.LockTimeout = p.Spec.LockTimeout
			res.Migration.Baseline = p.Spec.Baseline
			res.Published = &publishedPlan{Name: p.Name, UID: p.UID, Fingerprint: p.Spec.Fingerprint}
		}
		return res
	}
	st := out.Status
	res := planResult{Resource: r, Status: &st,
		Plan: &postgres.Plan{LockTimeout: r.Schema.Spec.Policy.LockTimeoutDuration()}}
	if out.Plan != nil {
		res.Plan = runner.ToPlan(out.Plan.Spec)
		res.Published = &publishedPlan{Name: out.Plan.Name, UID: out.Plan.UID, Fingerprint: out.Plan.Spec.Fingerprint}
	}
	return res
}

func (a *app) planRequest(in runner.Resource, o planOptions) catalog.PlanRequest {
	req := runner.SchemaPlanRequest(in, o.DevURL, o.ObserveTimeout)
	req.OnWait = a.onWait(in.Schema.Name)
	req.Cache = o.Cache
	req.OnCacheError = a.onCacheError
	return req
}

// addCacheDir is the flag plan and apply share.
func addCacheDir(f *pflag.FlagSet) {
	f.String("cache-dir", "", "where the desired state the declared files load to is kept between plans, so an unchanged "+
		"declaration is not loaded into a dev database again (default: ptah/ in the user's cache directory; \"off\": no cache)")
}

// desiredCache is the cache --cache-dir names; none when it is "off", or
// when it is unset and the user has no cache directory.
func desiredCache(s *settings) catalog.DesiredCache {
	dir := s.String("cache-dir")
	switch dir {
	case "off":
		return nil
	case "":
		base, err := os.UserCacheDir()
		if err != nil {
			return nil
		}
		dir = filepath.Join(base, "ptah")
	}
	return catalog.DirCache{Dir: dir}
}

// onCacheError warns that the desired-state cache could not be used: the
// plan is made without it, as correct and slower.
func (a *app) onCacheError(err error) {
	fmt.Fprintf(a.stderr, "Warning: the desired-state cache (--cache-dir) could not be used, the declared files were loaded instead: %v\n", a.secrets.redact(err.Error()))
}

// addObserveTimeout is the flag plan and apply share.
func addObserveTimeout(f *pflag.FlagSet) {
	f.Duration("observe-timeout", catalog.DefaultObserveTimeout,
		"how long reading the target's catalog may wait for a lock another session holds (ptah says what it waits for after a second)")
}

func observeTimeout(s *settings) (time.Duration, error) {
	d, err := s.Duration("observe-timeout")
	if err == nil && d <= 0 {
		err = usageErrorf("%s: must be positive", s.origin("observe-timeout"))
	}
	return d, err
}

// onWait tells the person, on stderr, what reading a resource's database
// waits for.
func (a *app) onWait(resource string) func(string) {
	var mu sync.Mutex
	return func(waiting string) {
		mu.Lock()
		defer mu.Unlock()
		a.warn(fmt.Sprintf("%s: reading the target's catalog waits for %s", resource, waiting))
	}
}

// ref is the JSON form of a resource reference.
type ref struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Namespace  string `json:"namespace,omitempty"`
	Name       string `json:"name"`
}

func refOf(r *config.Resource) ref {
	if m := r.Migration; m != nil {
		return ref{APIVersion: m.APIVersion, Kind: m.Kind, Namespace: m.Namespace, Name: m.Name}
	}
	s := r.Schema
	return ref{APIVersion: s.APIVersion, Kind: s.Kind, Namespace: s.Namespace, Name: s.Name}
}
