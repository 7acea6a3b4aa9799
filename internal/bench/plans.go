package bench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
)

// Plans times ptah plan end to end, as whole processes of the ptah binary:
// no changes and 1% of the tables changed, printed only (--no-publish)
// and published, beside pg_dump --schema-only of the same database. The
// desired-state cache is warm (an earlier plan of the same files); one
// plan without it (--cache-dir off) shows what loading the files costs.
func Plans(ctx context.Context, env *Env) ([]Row, error) {
	var rows []Row
	cache := filepath.Join(env.Work, "cache")
	for _, n := range env.Tables {
		s, err := env.Schema(ctx, n)
		if err != nil {
			return nil, err
		}
		// Each plan variant against one database of its own, copied from
		// the declared state: publishing writes ptah's schema into it.
		db := fmt.Sprintf("plans_%d", n)
		if err := env.CreateDB(ctx, db, s.DB); err != nil {
			return nil, err
		}
		plan := func(yaml string, args ...string) func() (Sample, error) {
			return func() (Sample, error) {
				cmd := env.PtahCmd(ctx, db, append([]string{"plan", "-f", yaml, "-o", "sql", "--cache-dir", cache}, args...)...)
				return Run(ctx, cmd)
			}
		}
		dump := func() (Sample, error) {
			cmd, err := env.PgDump(ctx, db)
			if err != nil {
				return Sample{}, err
			}
			return Run(ctx, cmd)
		}

		env.Logf("plans: %s tables, one plan without the cache", Count(n))
		cold, err := plan(s.Same, "--no-publish", "--cache-dir", "off")()
		if err != nil {
			return nil, err
		}
		// Warm the cache for both declarations, and publish both plans once.
		for _, warm := range []func() (Sample, error){plan(s.Same, "--no-publish"), plan(s.Changed, "--no-publish"), plan(s.Same), plan(s.Changed)} {
			if _, err := warm(); err != nil {
				return nil, err
			}
		}
		env.Logf("plans: %s tables, %d runs of each plan and of pg_dump", Count(n), env.Runs)
		got, err := Alternate(env.Runs, plan(s.Same, "--no-publish"), plan(s.Same), plan(s.Changed, "--no-publish"), plan(s.Changed), dump)
		if err != nil {
			return nil, err
		}
		noop, noopPub, changed, changedPub, pgdump := got[0], got[1], got[2], got[3], got[4]
		limit := 0.5
		if n >= 10000 {
			limit = 3
		}
		vsDump := "pg_dump --schema-only (" + Seconds(Median(pgdump)) + ")"
		target := fmt.Sprintf("<= %.1f s", limit)
		if n != 1000 && n != 10000 {
			target = ""
		}
		row := func(what string, s []Sample) Row {
			r := Row{Section: "plans", What: fmt.Sprintf(what, Count(n)), Value: Seconds(Median(s)), Ratio: Ratio(s, pgdump), Versus: vsDump}
			if target != "" {
				r.Target, r.Met = target, Met(Median(s).Seconds() <= limit)
			}
			return r
		}
		rows = append(rows,
			Row{Section: "plans", What: fmt.Sprintf("no-op plan, %s tables, --no-publish, no cache (1 run)", Count(n)),
				Value: Seconds(cold.Wall), Ratio: cold.Wall.Seconds() / Median(pgdump).Seconds(), Versus: vsDump},
			row("no-op plan, %s tables, --no-publish", noop),
			row("no-op plan, %s tables, published", noopPub))
		for _, c := range []struct {
			what      string
			got, base []Sample
		}{{"1%% changed plan, %s tables, --no-publish", changed, noop}, {"1%% changed plan, %s tables, published", changedPub, noopPub}} {
			ratio := Ratio(c.got, c.base)
			rows = append(rows, Row{Section: "plans", What: fmt.Sprintf(c.what, Count(n)), Value: Seconds(Median(c.got)),
				Ratio: ratio, Versus: "the no-op plan", Target: "<= 1.5x the no-op", Met: Met(ratio <= 1.5)})
		}
		peak := max(PeakRSS(noop), PeakRSS(noopPub), PeakRSS(changed), PeakRSS(changedPub), cold.MaxRSS)
		r := Row{Section: "plans", What: fmt.Sprintf("peak RSS of a plan, %s tables", Count(n)), Value: MiB(peak)}
		if n >= 10000 {
			r.Target, r.Met = "< 256 MiB", Met(peak < 256<<20)
		}
		rows = append(rows, r)
		if err := env.DropDB(ctx, db); err != nil {
			return nil, err
		}
	}
	return rows, os.RemoveAll(cache)
}
