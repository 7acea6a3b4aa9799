package bench

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"

	"github.com/ptah-run/ptah/internal/schemagen"
)

// Applies times ptah apply (spec.policy.apply: Always, so one command
// observes, publishes, executes and verifies) against psql -f of the very
// statements the plan holds (ptah plan -o sql), each on a fresh copy of
// the same database, alternately: the whole schema into an empty
// database, and 1% of its tables changed.
func Applies(ctx context.Context, env *Env) ([]Row, error) {
	psql, err := env.Tool("psql")
	if err != nil {
		return nil, err
	}
	var rows []Row
	cache := filepath.Join(env.Work, "cache-applies")
	defer os.RemoveAll(cache)
	for _, n := range env.Tables {
		s, err := env.Schema(ctx, n)
		if err != nil {
			return nil, err
		}
		shape := schemagen.Default(n)
		all, err := env.declare(fmt.Sprintf("always_%d", n), shape, "Always")
		if err != nil {
			return nil, err
		}
		shape.ExtraColumnEvery = 100
		changed, err := env.declare(fmt.Sprintf("always_changed_%d", n), shape, "Always")
		if err != nil {
			return nil, err
		}
		runs := env.Runs
		if n >= 10000 {
			runs = min(runs, 3)
		}
		for _, c := range []struct {
			what, yaml, from string
		}{
			{fmt.Sprintf("apply creating %s tables", Count(n)), all, "template0"},
			{fmt.Sprintf("apply changing 1%% of %s tables", Count(n)), changed, s.DB},
		} {
			db := fmt.Sprintf("apply_%d", n)
			// The script psql runs: the plan's statements, as ptah prints
			// them, computed on a copy of the starting database (which
			// also warms the desired-state cache for ptah's runs).
			if err := env.CreateDB(ctx, db, c.from); err != nil {
				return nil, err
			}
			script := filepath.Join(env.Work, db+".sql")
			out, err := os.Create(script)
			if err != nil {
				return nil, err
			}
			cmd := env.PtahCmd(ctx, db, "plan", "--no-publish", "-o", "sql", "-f", c.yaml, "--cache-dir", cache)
			cmd.Stdout = out
			_, err = Run(ctx, cmd)
			out.Close()
			if err != nil {
				return nil, err
			}
			env.Logf("applies: %s, %d runs of ptah apply and of psql -f", c.what, runs)
			got, err := Alternate(runs,
				func() (Sample, error) {
					if err := env.CreateDB(ctx, db, c.from); err != nil {
						return Sample{}, err
					}
					return Run(ctx, env.PtahCmd(ctx, db, "apply", "-f", c.yaml, "--cache-dir", cache))
				},
				func() (Sample, error) {
					if err := env.CreateDB(ctx, db, c.from); err != nil {
						return Sample{}, err
					}
					return Run(ctx, exec.CommandContext(ctx, psql, "-X", "-q", "-v", "ON_ERROR_STOP=1", "-f", script, "-d", env.Server.URL(db)))
				})
			if err != nil {
				return nil, err
			}
			rows = append(rows, Row{Section: "applies", What: c.what, Value: Seconds(Median(got[0])),
				Ratio: Ratio(got[0], got[1]), Versus: "psql -f of its statements (" + Seconds(Median(got[1])) + ")"})
			if err := env.DropDB(ctx, db); err != nil {
				return nil, err
			}
		}
	}
	return rows, nil
}
