package runner

import (
	"context"
	"fmt"
	"strings"

	"github.com/ptah-run/ptah/internal/engine"
	"github.com/ptah-run/ptah/internal/fingerprint"
	"github.com/ptah-run/ptah/internal/migrate"
	"github.com/ptah-run/ptah/internal/postgres/catalog"
	api "github.com/ptah-run/ptah/pkg/api/v1alpha1"
)

// Adopting an existing database: a baseline plan records the versions up
// to one the person names as already applied, without running them. It is
// a plan like any other (published, approved, claimed, dispatched), and
// it is checked first: the files up to that version are replayed into a
// dev database and the result compared with the target by the schema
// engine. Only when they match is the plan published; else the resource
// is Blocked (BaselineMismatch) with the differences named.

// baselineShown bounds how many differences a mismatch lists.
const baselineShown = 10

// observeBaseline turns obs, a reading of res's history, into the reading
// of a baseline up to version: allowed only on an empty history, and only
// when the target matches what the source's files up to version build.
// The target's state and the desired model are bound into the plan
// (Bindings.ActualStateFingerprint, DesiredStateFingerprint), so that a
// target that moves between the check and the dispatch moves the claim's
// inputs.
func (r *Runner) observeBaseline(ctx context.Context, res Resource, version string, obs *engine.MigrationObservation) error {
	if obs.Blocked {
		return nil // the history's own verdict comes first
	}
	block := func(format string, args ...any) error {
		obs.Blocked, obs.Reason, obs.Pending = true, api.ReasonBaselineMismatch, nil
		obs.Message = fmt.Sprintf(format, args...)
		return nil
	}
	if obs.History.Applied > 0 {
		return block("a baseline adopts a database whose migration history is empty, and %d versions are recorded (the last %s); "+
			"plan without --baseline", obs.History.Applied, obs.History.LastApplied)
	}
	upTo, err := migrate.ParseVersion(version)
	if err != nil {
		return block("the baseline version %q is not a version: %v", version, err)
	}
	var files []*migrate.File
	found := false
	for _, f := range res.Source.Files {
		if f.Version.Compare(upTo) <= 0 {
			files = append(files, f)
			found = found || f.Version.Compare(upTo) == 0
		}
	}
	if !found {
		return block("the baseline version %s is not a version of the source (%d files, the last %s)", version, len(res.Source.Files),
			lastVersion(res.Source))
	}
	schemas, err := userSchemas(ctx, r, res)
	if err != nil {
		return err
	}
	req := catalog.PlanRequest{TargetURL: res.TargetURL, DevURL: r.DevURL, Schemas: schemas, ObserveTimeout: r.ObserveTimeout}
	for _, f := range files {
		req.Files = append(req.Files, catalog.SourceFile{Name: f.Path, SQL: f.SQL})
	}
	if r.OnWait != nil {
		req.OnWait = r.OnWait(res.Name())
	}
	checked, err := catalog.Observe(ctx, req)
	if err != nil {
		return fmt.Errorf("checking the baseline of %s up to version %s (the files replayed into a dev database, compared with the target): %w",
			res.Name(), version, err)
	}
	if n := len(checked.Plan.Statements); n > 0 {
		shown := make([]string, 0, baselineShown)
		for _, s := range checked.Plan.Statements[:min(n, baselineShown)] {
			shown = append(shown, "  "+strings.ReplaceAll(s.SQL, "\n", "\n  "))
		}
		more := ""
		if n > baselineShown {
			more = fmt.Sprintf("\n  ... and %d more", n-baselineShown)
		}
		return block("the target is not what the files up to version %s build (schemas %s): making it so would take %d statements:\n%s%s\n"+
			"nothing is recorded; baseline at the version the target is at, or bring the target there first",
			version, strings.Join(schemas, ", "), n, strings.Join(shown, "\n"), more)
	}
	obs.Baseline, obs.Pending = true, nil
	for _, f := range files {
		obs.Pending = append(obs.Pending, api.MigrationVersion{Version: f.Version.String(), Name: f.Name, Checksum: f.Checksum,
			NoTransaction: f.NoTransaction})
	}
	obs.Bindings.ActualStateFingerprint = ActualStateFingerprint(checked)
	obs.Bindings.DesiredStateFingerprint = fingerprint.New("ptah.run/model/v1").JSON("model", checked.Desired).Sum()
	obs.Message = fmt.Sprintf("the target matches the files up to version %s: %d versions to record as a baseline", version, len(files))
	return nil
}

// userSchemas are the schemas a baseline compares: every schema of the
// target but PostgreSQL's own and ptah's.
func userSchemas(ctx context.Context, r *Runner, res Resource) ([]string, error) {
	rows, err := r.Target.Query(ctx, `SELECT nspname FROM pg_catalog.pg_namespace
		WHERE nspname !~ '^pg_' AND nspname NOT IN ('information_schema', 'ptah') ORDER BY 1`)
	if err != nil {
		return nil, fmt.Errorf("listing the schemas of %s's target: %w", res.Name(), err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, rows.Err()
}

func lastVersion(src *migrate.Source) string {
	if len(src.Files) == 0 {
		return "none"
	}
	return src.Files[len(src.Files)-1].Version.String()
}
