package bench

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/ptah-run/ptah/internal/postgres"
	"github.com/ptah-run/ptah/internal/postgres/catalog"
)

// Catalog measures reading a database's catalog into ptah's model: the
// number of queries (which must not grow with the schema) and the time a
// reading takes on a new session, as a process of ptah pays it, against
// pg_dump --schema-only of the same database, alternately.
func Catalog(ctx context.Context, env *Env) ([]Row, error) {
	var rows []Row
	sizes := append([]int{10}, env.Tables...)
	queries := map[int]int{}
	for _, n := range sizes {
		s, err := env.Schema(ctx, n)
		if err != nil {
			return nil, err
		}
		if queries[n], err = countQueries(ctx, env.Server.URL(s.DB)); err != nil {
			return nil, err
		}
	}
	same := true
	for _, n := range sizes {
		same = same && queries[n] == queries[sizes[0]]
		rows = append(rows, Row{Section: "catalog", What: fmt.Sprintf("queries per inspection, %s tables", Count(n)),
			Value: fmt.Sprintf("%d", queries[n]), Target: "the same at every size"})
	}
	rows[len(rows)-1].Met = Met(same)

	for _, n := range env.Tables {
		s, _ := env.Schema(ctx, n)
		url := env.Server.URL(s.DB)
		env.Logf("catalog: inspecting %s tables against pg_dump, %d runs each", Count(n), env.Runs)
		samples, err := Alternate(env.Runs,
			func() (Sample, error) { return inspectOnce(ctx, url) },
			func() (Sample, error) {
				cmd, err := env.PgDump(ctx, s.DB)
				if err != nil {
					return Sample{}, err
				}
				return Run(ctx, cmd)
			})
		if err != nil {
			return nil, err
		}
		ratio := Ratio(samples[0], samples[1])
		rows = append(rows, Row{Section: "catalog", What: fmt.Sprintf("inspection, %s tables (new session)", Count(n)),
			Value: Seconds(Median(samples[0])), Ratio: ratio, Versus: "pg_dump --schema-only (" + Seconds(Median(samples[1])) + ")",
			Target: "<= 0.25x pg_dump", Met: Met(ratio <= 0.25)})
		slowest, err := slowestQueries(ctx, url, env.Runs, 5)
		if err != nil {
			return nil, err
		}
		for _, q := range slowest {
			rows = append(rows, Row{Section: "catalog", What: fmt.Sprintf("  query %q, %s tables (new session)", q.name, Count(n)),
				Value: fmt.Sprintf("%.0f ms", q.median.Seconds()*1000)})
		}
	}
	return rows, nil
}

// queryTimer times each query a session sends, by the name its first line
// gives it (catalog.QueryNamePrefix).
type queryTimer struct {
	began time.Time
	name  string
	took  map[string][]time.Duration
}

func (q *queryTimer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	q.name = "other"
	if rest, ok := strings.CutPrefix(data.SQL, catalog.QueryNamePrefix); ok {
		q.name, _, _ = strings.Cut(rest, "\n")
	}
	q.began = time.Now()
	return ctx
}

func (q *queryTimer) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {
	q.took[q.name] = append(q.took[q.name], time.Since(q.began))
}

type queryTime struct {
	name   string
	median time.Duration
}

// slowestQueries inspects the database at url runs times, each on a new
// session, and returns the top queries by their median time (from sending
// to the last row read).
func slowestQueries(ctx context.Context, url string, runs, top int) ([]queryTime, error) {
	timer := &queryTimer{took: map[string][]time.Duration{}}
	for range runs {
		cfg, err := pgx.ParseConfig(url)
		if err != nil {
			return nil, err
		}
		cfg.Tracer = timer
		conn, err := postgres.ConnectConfig(ctx, cfg)
		if err != nil {
			return nil, err
		}
		_, err = catalog.Inspect(ctx, conn, []string{"public"})
		conn.Close(context.Background())
		if err != nil {
			return nil, err
		}
	}
	var out []queryTime
	for name, ds := range timer.took {
		if name == "other" {
			continue // connecting, the snapshot, the server's version
		}
		samples := make([]Sample, len(ds))
		for i, d := range ds {
			samples[i] = Sample{Wall: d}
		}
		out = append(out, queryTime{name, Median(samples)})
	}
	slices.SortFunc(out, func(a, b queryTime) int { return cmp.Compare(b.median, a.median) })
	return out[:min(top, len(out))], nil
}

// queryCounter counts the queries a session sends.
type queryCounter struct{ n int }

func (c *queryCounter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	c.n++
	return ctx
}
func (c *queryCounter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// countQueries is the number of queries one inspection sends.
func countQueries(ctx context.Context, url string) (int, error) {
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		return 0, err
	}
	counter := &queryCounter{}
	cfg.Tracer = counter
	conn, err := postgres.ConnectConfig(ctx, cfg)
	if err != nil {
		return 0, err
	}
	defer conn.Close(context.Background())
	counter.n = 0
	if _, err := catalog.Inspect(ctx, conn, []string{"public"}); err != nil {
		return 0, err
	}
	return counter.n, nil
}

// inspectOnce connects and reads the catalog, as a ptah process does.
func inspectOnce(ctx context.Context, url string) (Sample, error) {
	began := time.Now()
	conn, err := postgres.Connect(ctx, url)
	if err != nil {
		return Sample{}, err
	}
	defer conn.Close(context.Background())
	if _, err := catalog.Inspect(ctx, conn, []string{"public"}); err != nil {
		return Sample{}, err
	}
	return Sample{Wall: time.Since(began)}, nil
}
