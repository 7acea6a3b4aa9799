package catalog_test

// The acceptance suite: each case under testdata/acceptance is a pair of
// schemas (old, new). The harness builds a database from old, plans against
// new, applies the plan as ptah does (Writer.Execute, in the transactions
// the plan was cut into), and proves convergence: the model
// Inspect reads from the migrated database has nothing left to change
// (Diff against the plan's desired model is empty), and the migrated
// database equals a fresh one built from new, compared three ways:
//
//   - ptah's inspected models are equal, every field, not only those the
//     diff compares (the fresh database's model is the plan's desired one,
//     read from the dev database, which new.sql built the same way: what
//     setup.sql adds lies outside the managed scope);
//   - describeQuery, the suite's own reading of the catalog, which does not
//     share the catalog package's queries, finds the same objects;
//   - pg_dump --schema-only prints the same, when a pg_dump that reads the
//     server's major is installed (pg_dump refuses servers newer than
//     itself; the one on PATH or in /usr/lib/postgresql/<major>/bin with
//     the smallest major not below the server's is used).
//
// The hazards of each plan are asserted too, and so are the locks each of
// its statements declares: PostgreSQL's own, read from pg_locks while the
// statement runs alone on a probe database (acceptance_locks_test.go).
//
// Case format (txtar): the comment is a one-line description, then
//
//	setup.sql    optional: run on the target and on the fresh database before
//	             old.sql / new.sql; it is NOT part of the declared files (for
//	             objects outside the managed scope)
//	old.sql      the target database before the plan (may be empty)
//	new.sql      the declared schema (required, may be empty)
//	hazards      optional: the set of hazards over the whole plan, one a line;
//	             no file means the plan must carry no hazard at all
//	schemas      optional: the managed schemas, one a line (default public)
//	error        optional: PlanSchema must fail, and its error must contain
//	             every line of this file; nothing is applied
//	destructive  optional marker: the plan must be flagged destructive
//	offline      optional marker: plan with spec.policy.online false (every
//	             case else plans online, the default)
//	privileges   optional marker: plan with spec.privileges Managed (every
//	             case else ignores privileges, the default); the models
//	             compared then hold the grants
//	minversion   optional: the oldest PostgreSQL major the case runs on
//	             (e.g. 18 for a feature 18 added); on older servers it is
//	             skipped
//	statements   optional: the plan's statements exactly, one a line
//	             (white space in a statement folded to single spaces); a
//	             line "18+ SQL" is a statement from that major on only
//	hints        optional: the plan's hints, one a line, each line a part
//	             of its hint; the plan must have as many hints as lines
//	check.sql    optional: a query run on the migrated database, which
//	             must return true (that data survived, say)
//	icu          optional marker: the case uses ICU collations, and is
//	             skipped on a server built without ICU
//
// A case named noop_* must plan nothing (and its old and new schemas must
// compare equal); any other case must plan at least one statement.
//
// Run it with
//
//	go test ./internal/postgres/catalog/ -run 'Acceptance' -parallel 8
//	go test ./internal/postgres/catalog/ -run 'TestAcceptance/enum_' -v
//	PTAH_TEST_PG_BINDIR=$PWD/.cache/pg/18/bin go test ./internal/postgres/catalog/ -run 'Acceptance' -parallel 8
//
// PTAH_TEST_PG_DUMP=off leaves pg_dump out of the comparison even where
// one reads the server (make test-versions does, for time).
//
// A change that moves many cases' hazards on purpose rewrites their hazards
// files with -args -update-hazards; review the diff before committing it.

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime/debug"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/rogpeppe/go-internal/txtar"

	"github.com/ptah-run/ptah/internal/pgserver"
	"github.com/ptah-run/ptah/internal/pgtest"
	"github.com/ptah-run/ptah/internal/postgres"
	"github.com/ptah-run/ptah/internal/postgres/catalog"
)

const (
	acceptanceDir      = "testdata/acceptance"
	minAcceptanceCases = 120
	caseTimeout        = 3 * time.Minute
)

var knownHazards = map[postgres.Hazard]bool{
	postgres.HazardBlocksReads:   true,
	postgres.HazardDeletesData:   true,
	postgres.HazardRewritesTable: true,
	postgres.HazardBlocksWrites:  true,
	postgres.HazardBuildsIndex:   true,
	postgres.HazardMayFail:       true,
	postgres.HazardScansTable:    true,
}

type acceptanceCase struct {
	Name        string
	Description string
	Setup       string
	Old, New    string
	Hazards     []string // sorted; empty means none
	Schemas     []string
	Errors      []string // substrings the PlanSchema error must contain
	Destructive bool
	MinVersion  int // the oldest server major the case runs on; 0: any
	Offline     bool
	Statements  []string // when set, the plan's statements exactly
	Hints       []string // when set, parts of the plan's hints, one each
	Check       string   // a query that must return true after the apply
	Privileges  bool
	ICU         bool // the case needs a server built with ICU
}

// loadCases reads and validates every case; a malformed case fails the test.
func loadCases(t *testing.T) []acceptanceCase {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join(acceptanceDir, "*.txtar"))
	if err != nil {
		t.Fatal(err)
	}
	var cases []acceptanceCase
	for _, p := range paths {
		c, err := parseCase(p)
		if err != nil {
			t.Errorf("%s: %v", p, err)
			continue
		}
		cases = append(cases, c)
	}
	return cases
}

// updateHazards rewrites each case's hazards file to what its plan
// carries, for a change that moves many on purpose; review the diff.
var updateHazards = flag.Bool("update-hazards", false, "rewrite the acceptance cases' hazards files to what their plans carry")

// writeHazards sets case c's hazards file to hazards (none: no file).
func writeHazards(t *testing.T, c acceptanceCase, hazards []string) {
	t.Helper()
	path := filepath.Join(acceptanceDir, c.Name+".txtar")
	ar, err := txtar.ParseFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var files []txtar.File
	written := false
	for _, f := range ar.Files {
		if f.Name == "hazards" {
			if len(hazards) > 0 {
				f.Data = []byte(strings.Join(hazards, "\n") + "\n")
				files = append(files, f)
			}
			written = true
			continue
		}
		files = append(files, f)
	}
	if !written && len(hazards) > 0 {
		files = append(files, txtar.File{Name: "hazards", Data: []byte(strings.Join(hazards, "\n") + "\n")})
	}
	ar.Files = files
	if err := os.WriteFile(path, txtar.Format(ar), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("hazards of %s rewritten: %s", c.Name, fmtSet(hazards))
}

func parseCase(path string) (acceptanceCase, error) {
	c := acceptanceCase{Name: strings.TrimSuffix(filepath.Base(path), ".txtar")}
	ar, err := txtar.ParseFile(path)
	if err != nil {
		return c, err
	}
	c.Description = strings.TrimSpace(string(ar.Comment))
	if c.Description == "" {
		return c, errors.New("no description in the comment header")
	}
	seen := map[string]bool{}
	for _, f := range ar.Files {
		if seen[f.Name] {
			return c, fmt.Errorf("file %s appears twice", f.Name)
		}
		seen[f.Name] = true
		data := string(f.Data)
		switch f.Name {
		case "setup.sql":
			c.Setup = data
		case "old.sql":
			c.Old = data
		case "new.sql":
			c.New = data
		case "hazards":
			for _, h := range lines(data) {
				if !knownHazards[postgres.Hazard(h)] {
					return c, fmt.Errorf("unknown hazard %q", h)
				}
				c.Hazards = append(c.Hazards, h)
			}
			sort.Strings(c.Hazards)
			c.Hazards = dedup(c.Hazards)
		case "schemas":
			c.Schemas = lines(data)
		case "error":
			c.Errors = lines(data)
			if len(c.Errors) == 0 {
				return c, errors.New("empty error file")
			}
		case "destructive":
			c.Destructive = true
		case "offline":
			c.Offline = true
		case "statements":
			c.Statements = lines(data)
		case "hints":
			c.Hints = lines(data)
		case "check.sql":
			c.Check = data
		case "privileges":
			c.Privileges = true
		case "icu":
			c.ICU = true
		case "minversion":
			l := lines(data)
			v, err := strconv.Atoi(strings.Join(l, ""))
			if len(l) != 1 || err != nil || v < 10 {
				return c, fmt.Errorf("minversion must hold one PostgreSQL major, such as 18; have %q", data)
			}
			c.MinVersion = v
		default:
			return c, fmt.Errorf("unknown file %s", f.Name)
		}
	}
	if !seen["new.sql"] {
		return c, errors.New("no new.sql")
	}
	if len(c.Errors) > 0 && (seen["hazards"] || c.Destructive) {
		return c, errors.New("a refusal case has no hazards or destructive marker")
	}
	hasDeletes := false
	for _, h := range c.Hazards {
		hasDeletes = hasDeletes || h == string(postgres.HazardDeletesData)
	}
	if hasDeletes != c.Destructive {
		return c, errors.New("the destructive marker must be present exactly when the hazards include deletes-data")
	}
	if len(c.Schemas) == 0 {
		c.Schemas = []string{"public"}
	}
	return c, nil
}

func lines(s string) []string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
			out = append(out, l)
		}
	}
	return out
}

func dedup(s []string) []string {
	var out []string
	for i, v := range s {
		if i == 0 || v != s[i-1] {
			out = append(out, v)
		}
	}
	return out
}

func TestAcceptanceCaseCount(t *testing.T) {
	cases := loadCases(t)
	if len(cases) < minAcceptanceCases {
		t.Fatalf("%d acceptance cases, want at least %d", len(cases), minAcceptanceCases)
	}
}

// A minversion file holds one major; a case says nothing else with it.
func TestAcceptanceCaseMinVersion(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		minversion string
		want       int // 0: a parse error
	}{{"18\n", 18}, {"# temporal keys\n17\n", 17}, {"eighteen\n", 0}, {"17\n18\n", 0}, {"\n", 0}} {
		path := filepath.Join(dir, "case.txtar")
		data := "A case.\n-- minversion --\n" + tc.minversion + "-- new.sql --\nCREATE TABLE t (a int);\n"
		if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
		c, err := parseCase(path)
		switch {
		case tc.want == 0 && err == nil:
			t.Errorf("minversion %q parsed as %d, want an error", tc.minversion, c.MinVersion)
		case tc.want != 0 && (err != nil || c.MinVersion != tc.want):
			t.Errorf("minversion %q: %d, %v; want %d", tc.minversion, c.MinVersion, err, tc.want)
		}
	}
}

// TestAcceptanceCasesLoad checks that every case's SQL is valid PostgreSQL:
// old.sql and new.sql (each after setup.sql) load into a database, each in a
// transaction that is rolled back, so that one database serves case after
// case (one per case running at a time). The old and new schemas of a
// noop_* case must also compare equal, by what does not depend on ptah
// (describeQuery, pg_dump): a no-op case that is not one is the case's
// fault.
func TestAcceptanceCasesLoad(t *testing.T) {
	srv := suiteServer(t)
	scratch := newScratchPool(t)
	for _, c := range loadCases(t) {
		t.Run(c.Name, func(t *testing.T) {
			t.Parallel()
			srv.skipIfUnsupported(t, c)
			ctx, cancel := context.WithTimeout(context.Background(), caseTimeout)
			defer cancel()
			if strings.HasPrefix(c.Name, "noop_") {
				var states []schemaState
				for _, file := range []struct{ name, sql string }{{"old.sql", c.Old}, {"new.sql", c.New}} {
					db := pgtest.NewDB(t)
					conn := connect(ctx, t, db)
					defer conn.Close(context.Background())
					execFile(ctx, t, conn, "setup.sql", c.Setup)
					execFile(ctx, t, conn, file.name, file.sql)
					states = append(states, srv.readState(ctx, t, conn, db, nil, false))
				}
				compareStates(t, "a no-op case whose schemas differ, old (-) vs new (+)", states[0], states[1])
				return
			}
			conn := scratch.get(ctx, t)
			defer scratch.put(conn)
			for _, file := range []struct{ name, sql string }{{"old.sql", c.Old}, {"new.sql", c.New}} {
				if _, err := conn.Exec(ctx, "BEGIN;\n"+c.Setup+"\n;\n"+file.sql+"\n;\nROLLBACK;"); err != nil {
					// A failed statement leaves the transaction open, aborted.
					_, _ = conn.Exec(ctx, "ROLLBACK")
					t.Fatalf("loading setup.sql then %s: %v", file.name, err)
				}
			}
		})
	}
}

// scratchPool hands out sessions on scratch databases the parent test owns:
// a case that only runs SQL in a transaction it rolls back leaves its
// database as it found it, for the next case.
type scratchPool struct {
	parent *testing.T
	idle   chan *pgx.Conn
}

// newScratchPool creates one scratch database per case that may run at once.
func newScratchPool(t *testing.T) *scratchPool {
	t.Helper()
	n := 1
	if f := flag.Lookup("test.parallel"); f != nil {
		n, _ = strconv.Atoi(f.Value.String())
	}
	p := &scratchPool{parent: t, idle: make(chan *pgx.Conn, n)}
	ctx := context.Background()
	for range n {
		url := pgtest.NewDB(t)
		conn := connect(ctx, t, url)
		t.Cleanup(func() { conn.Close(context.Background()) })
		p.idle <- conn
	}
	return p
}

func (p *scratchPool) get(ctx context.Context, t *testing.T) *pgx.Conn {
	t.Helper()
	select {
	case conn := <-p.idle:
		return conn
	case <-ctx.Done():
		t.Fatal("no scratch database came free")
		return nil
	}
}

// put gives a session back; one that broke (a timeout closes it) is
// replaced by a new session on the same database.
func (p *scratchPool) put(conn *pgx.Conn) {
	if conn.IsClosed() {
		url := conn.Config().ConnString()
		if fresh, err := pgx.Connect(context.Background(), url); err == nil {
			conn = fresh
			p.parent.Cleanup(func() { fresh.Close(context.Background()) })
		}
	}
	p.idle <- conn
}

func TestAcceptance(t *testing.T) {
	srv := suiteServer(t)
	shard, shards := acceptanceShard(t)
	t.Logf("PostgreSQL %d; %s; shard %d of %d", srv.major, srv.comparisons(), shard+1, shards)
	for i, c := range loadCases(t) {
		t.Run(c.Name, func(t *testing.T) {
			if i%shards != shard {
				t.Skipf("case %d is in shard %d of %d (%s)", i, i%shards+1, shards, envShard)
			}
			t.Parallel()
			srv.skipIfUnsupported(t, c)
			srv.runCase(t, c)
		})
	}
}

// envShard runs one part of the suite: "i/n" runs the cases whose index
// (in name order) is i-1 modulo n. CI spreads the suite this way over the
// majors other than the default one (see .ci/run); unset, every case runs.
const envShard = "PTAH_TEST_ACCEPTANCE_SHARD"

func acceptanceShard(t *testing.T) (shard, shards int) {
	v := os.Getenv(envShard)
	if v == "" {
		return 0, 1
	}
	i, n, ok := strings.Cut(v, "/")
	a, err1 := strconv.Atoi(i)
	b, err2 := strconv.Atoi(n)
	if !ok || err1 != nil || err2 != nil || b < 1 || a < 1 || a > b {
		t.Fatalf("%s=%q: want i/n with 1 <= i <= n", envShard, v)
	}
	return a - 1, b
}

// runCase runs one case. It holds one session on the target and one on the
// fresh database, and plans once: every server process and database costs
// the server more than what the case does with it.
func (srv *server) runCase(t *testing.T, c acceptanceCase) {
	ctx, cancel := context.WithTimeout(context.Background(), caseTimeout)
	defer cancel()

	// 1. The target, as it is before the plan.
	target := pgtest.NewDB(t)
	conn := connect(ctx, t, target)
	defer conn.Close(context.Background())
	execFile(ctx, t, conn, "setup.sql", c.Setup)
	execFile(ctx, t, conn, "old.sql", c.Old)

	// 2. Plan.
	req := catalog.PlanRequest{
		TargetURL:   target,
		Files:       []catalog.SourceFile{{Name: "new.sql", SQL: c.New}},
		Schemas:     c.Schemas,
		LockTimeout: 5 * time.Second,
		Online:      !c.Offline,
		Privileges:  c.Privileges,
	}
	obs, err := observe(ctx, req)

	// 3. Refusals, hazards, destructive.
	if len(c.Errors) > 0 {
		if err == nil {
			t.Fatalf("PlanSchema succeeded, want an error containing %q; plan:\n%s", c.Errors, obs.Plan.Script())
		}
		var pe *panicError
		if errors.As(err, &pe) {
			t.Fatal(err)
		}
		for _, want := range c.Errors {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("PlanSchema error does not contain %q:\n%v", want, err)
			}
		}
		return
	}
	if err != nil {
		t.Fatalf("PlanSchema: %v", err)
	}
	plan := obs.Plan
	if got := planHazards(plan); !equalStrings(got, c.Hazards) {
		if *updateHazards {
			writeHazards(t, c, got)
		} else {
			t.Errorf("plan hazards = %s, want %s\nplan:\n%s", fmtSet(got), fmtSet(c.Hazards), plan.Script())
		}
	}
	if plan.Destructive != c.Destructive {
		t.Errorf("plan.Destructive = %v, want %v", plan.Destructive, c.Destructive)
	}
	if c.Statements != nil {
		var got []string
		for _, s := range plan.Statements {
			got = append(got, strings.Join(strings.Fields(s.SQL), " "))
		}
		want := forMajor(c.Statements, obs.Live.ServerVersion/10000)
		if !equalStrings(got, want) {
			t.Errorf("plan statements:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
	}
	if c.Hints != nil {
		checkHints(t, plan.Hints, c.Hints)
	}
	// Every case but the noop_ ones declares a change: an empty plan would
	// pass the convergence checks below without proving anything.
	if noop := strings.HasPrefix(c.Name, "noop_"); noop && len(plan.Statements) > 0 {
		t.Errorf("a no-op case planned %d statements:\n%s", len(plan.Statements), plan.Script())
	} else if !noop && len(plan.Statements) == 0 {
		t.Errorf("the plan is empty, but old.sql and new.sql differ")
	}

	// 4. Each statement locks what it says it locks (acceptance_locks_test.go).
	if len(plan.Statements) > 0 {
		checkLocks(t, plan, probeLocks(ctx, t, c, plan))
	}

	// 5. Apply, as ptah does.
	apply(ctx, t, conn, target, plan)

	// 6. Nothing left to do: the migrated database, inspected again, has
	// nothing to change to reach the desired model this plan was made from.
	// (Planning again would only read the same declared files into another
	// dev database.)
	migrated := srv.readState(ctx, t, conn, target, c.Schemas, c.Privileges)
	again, err := diff(migrated.model, obs.Desired)
	if err != nil {
		t.Fatalf("re-plan after apply: %v", err)
	}
	if len(again) > 0 {
		t.Errorf("re-plan after apply is not empty (%d statements):\n%s\nfirst plan was:\n%s",
			len(again), (&postgres.Plan{Statements: again}).Script(), plan.Script())
	}

	if c.Check != "" {
		var ok bool
		if err := conn.QueryRow(ctx, c.Check).Scan(&ok); err != nil || !ok {
			t.Errorf("check.sql on the migrated database: %v, %v; want true", ok, err)
		}
	}

	// 7. The migrated database is the one a fresh build from the declaration gives.
	fresh := pgtest.NewDB(t)
	freshConn := connect(ctx, t, fresh)
	defer freshConn.Close(context.Background())
	execFile(ctx, t, freshConn, "setup.sql", c.Setup)
	execFile(ctx, t, freshConn, "new.sql", c.New)
	built := srv.readState(ctx, t, freshConn, fresh, nil, false)
	built.model = obs.Desired
	keepIndexColumnNames(plan, migrated.model, built.model)
	if compareStates(t, "the migrated database (-) differs from a fresh one built from new.sql (+)", migrated, built) {
		t.Logf("plan was:\n%s", plan.Script())
	}
}

// keepIndexColumnNames: PostgreSQL renames a column, not the columns of
// its indexes (pg_attribute of the index, which \d shows and nothing
// else reads), so after a plan that renames columns the indexes over
// them keep the old names where a fresh build has the new. The model
// records them, to name partitions' copies as PostgreSQL will; the
// comparison leaves them out when the plan renamed a column.
func keepIndexColumnNames(plan *postgres.Plan, migrated, built *catalog.Model) {
	renamed := false
	for _, s := range plan.Statements {
		renamed = renamed || strings.Contains(s.SQL, " RENAME COLUMN ")
	}
	if !renamed {
		return
	}
	names := map[string][]string{}
	for _, ix := range built.Indexes {
		names[ix.Schema+"."+ix.Name] = ix.Columns
	}
	for i, ix := range migrated.Indexes {
		if cols, ok := names[ix.Schema+"."+ix.Name]; ok {
			migrated.Indexes[i].Columns = cols
		}
	}
}

type panicError struct{ msg string }

func (e *panicError) Error() string { return e.msg }

// observe calls Observe (PlanSchema, keeping the models), turning a panic
// into an error so that one broken case does not take the whole suite down.
func observe(ctx context.Context, req catalog.PlanRequest) (o *catalog.Observation, err error) {
	defer func() {
		if r := recover(); r != nil {
			o, err = nil, &panicError{fmt.Sprintf("PlanSchema panicked: %v\n%s", r, debug.Stack())}
		}
	}()
	return catalog.Observe(ctx, req)
}

// diff is catalog.Diff, with observe's treatment of a panic.
func diff(live, desired *catalog.Model) (stmts []postgres.Statement, err error) {
	defer func() {
		if r := recover(); r != nil {
			stmts, err = nil, &panicError{fmt.Sprintf("Diff panicked: %v\n%s", r, debug.Stack())}
		}
	}()
	return catalog.Diff(live, desired)
}

// forMajor keeps the lines meant for a server of major: all but those
// marked "N+ " for a later major, without the mark.
func forMajor(lines []string, major int) []string {
	var out []string
	for _, l := range lines {
		if mark, rest, ok := strings.Cut(l, "+ "); ok {
			if from, err := strconv.Atoi(mark); err == nil {
				if major < from {
					continue
				}
				l = rest
			}
		}
		out = append(out, l)
	}
	return out
}

// checkHints: each wanted part is in its own hint, and there are no
// others.
func checkHints(t *testing.T, got, want []string) {
	t.Helper()
	if len(got) != len(want) {
		t.Errorf("plan hints:\n%s\nwant %d, containing:\n%s", strings.Join(got, "\n"), len(want), strings.Join(want, "\n"))
		return
	}
	for i, w := range want {
		if !strings.Contains(got[i], w) {
			t.Errorf("plan hint %d = %q, want it to contain %q", i+1, got[i], w)
		}
	}
}

func planHazards(p *postgres.Plan) []string {
	set := map[string]bool{}
	for _, s := range p.Statements {
		for _, h := range s.Hazards {
			set[string(h)] = true
		}
	}
	out := make([]string, 0, len(set))
	for h := range set {
		out = append(out, h)
	}
	sort.Strings(out)
	return out
}

func equalStrings(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func fmtSet(s []string) string {
	if len(s) == 0 {
		return "{}"
	}
	return "{" + strings.Join(s, ", ") + "}"
}

// apply executes the plan through a Writer, as ptah does, checks that the
// journal records every statement committed, then drops the runtime tables
// the writer created (and the ptah schema, unless the case had one), which
// are no part of the comparison. conn is a session on the target.
func apply(ctx context.Context, t *testing.T, conn *pgx.Conn, url string, plan *postgres.Plan) {
	t.Helper()
	const op = "acceptance"
	var hadSchema bool
	if err := conn.QueryRow(ctx, "SELECT to_regnamespace('ptah') IS NOT NULL").Scan(&hadSchema); err != nil {
		t.Fatal(err)
	}
	w, err := postgres.OpenWriter(ctx, url, "acceptance-digest", op, "", time.Now().Add(caseTimeout))
	if err != nil {
		t.Fatalf("opening a writer: %v", err)
	}
	defer w.Release(context.Background())
	if err := w.Execute(ctx, "acceptance-plan", plan, nil); err != nil {
		t.Fatalf("applying the plan (%d transactions): %v\nplan:\n%s", len(plan.Transactions()), err, plan.Script())
	}
	if err := w.Release(ctx); err != nil {
		t.Fatal(err)
	}
	run, err := postgres.ReadRun(ctx, conn, op)
	if err != nil {
		t.Fatal(err)
	}
	committed := 0
	for _, s := range run.Steps {
		if s.CommittedAt != nil {
			committed++
		}
	}
	if !run.Committed() || len(run.Steps) != len(plan.Statements) || committed != len(run.Steps) {
		t.Errorf("the journal of the applied plan: outcome %q, %d steps of which %d committed; want succeeded, %d committed",
			run.Outcome, len(run.Steps), committed, len(plan.Statements))
	}
	drop := "DROP SCHEMA ptah CASCADE"
	if hadSchema {
		drop = "DROP TABLE " + strings.Join(postgres.RuntimeTables, ", ")
	}
	if _, err := conn.Exec(ctx, drop); err != nil {
		t.Fatalf("dropping the runtime tables: %v", err)
	}
}

func connect(ctx context.Context, t *testing.T, url string) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatalf("connecting: %v", err)
	}
	return conn
}

// execFile runs a case file on conn, then resets what it set for the
// session, so that the session reads the catalog as a new one would.
func execFile(ctx context.Context, t *testing.T, conn *pgx.Conn, name, sql string) {
	t.Helper()
	if strings.TrimSpace(sql) == "" {
		return
	}
	if _, err := conn.Exec(ctx, sql); err != nil {
		t.Fatalf("loading %s: %v", name, err)
	}
	if _, err := conn.Exec(ctx, "RESET ALL"); err != nil {
		t.Fatalf("after loading %s: %v", name, err)
	}
}

// server is what the suite needs to know about the server it runs on.
type server struct {
	major  int    // of server_version_num
	pgDump string // a pg_dump that reads this server; "" when none does
	lz4    bool   // the server was built with lz4 (COMPRESSION lz4)
	icu    bool   // the server was built with ICU (it has ICU collations)
}

var (
	serverOnce sync.Once
	theServer  server
	serverErr  error
)

// suiteServer asks the server its version once, and looks for a pg_dump.
func suiteServer(t *testing.T) *server {
	t.Helper()
	base := pgtest.BaseURL(t)
	serverOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		conn, err := pgx.Connect(ctx, base)
		if err != nil {
			serverErr = err
			return
		}
		defer conn.Close(context.Background())
		var num int
		if serverErr = conn.QueryRow(ctx, "SELECT current_setting('server_version_num')::int").Scan(&num); serverErr != nil {
			return
		}
		theServer.major = num / 10000
		if serverErr = conn.QueryRow(ctx, `SELECT 'lz4' = ANY(enumvals) FROM pg_settings
			WHERE name = 'default_toast_compression'`).Scan(&theServer.lz4); serverErr != nil {
			return
		}
		if serverErr = conn.QueryRow(ctx, `SELECT EXISTS (SELECT FROM pg_collation WHERE collprovider = 'i')`).
			Scan(&theServer.icu); serverErr != nil {
			return
		}
		if os.Getenv("PTAH_TEST_PG_DUMP") != "off" {
			theServer.pgDump = findPgDump(theServer.major)
		}
	})
	if serverErr != nil {
		t.Fatalf("asking the server its version: %v", serverErr)
	}
	return &theServer
}

// skipIfUnsupported skips a case the server cannot run: one for a newer
// major (minversion), or one using lz4 compression or ICU collations on a
// server built without them (the builds of other majors the tests install
// have both).
func (srv *server) skipIfUnsupported(t *testing.T, c acceptanceCase) {
	t.Helper()
	if srv.major < c.MinVersion {
		t.Skipf("needs PostgreSQL %d or later (minversion); the server is %d", c.MinVersion, srv.major)
	}
	if !srv.lz4 && strings.Contains(c.Setup+c.Old+c.New, "lz4") {
		t.Skip("uses lz4 compression, which this server was built without")
	}
	if !srv.icu && c.ICU {
		t.Skip("uses ICU collations (icu), which this server was built without")
	}
}

func (srv *server) comparisons() string {
	if srv.pgDump == "" {
		return "no pg_dump reads this server: the migrated and fresh databases are compared by their inspected models and describeQuery"
	}
	return "the migrated and fresh databases are compared by their inspected models, describeQuery and " + srv.pgDump
}

// findPgDump returns the pg_dump whose major is the smallest not below
// major, among the one beside the server binaries, Debian's in
// /usr/lib/postgresql/<major>/bin and the one on PATH (in that order of
// preference: Debian's on PATH is a Perl wrapper that costs every call a
// Perl start); "" when there is none.
func findPgDump(major int) string {
	var candidates []string
	if bin, err := pgserver.FindBinDir(); err == nil {
		candidates = append(candidates, filepath.Join(bin, "pg_dump"))
	}
	debian, _ := filepath.Glob("/usr/lib/postgresql/*/bin/pg_dump")
	candidates = append(candidates, debian...)
	if p, err := exec.LookPath("pg_dump"); err == nil {
		candidates = append(candidates, p)
	}
	best, bestMajor := "", 0
	for _, p := range candidates {
		out, err := exec.Command(p, "--version").Output()
		if err != nil {
			continue
		}
		m := versionMajor.FindStringSubmatch(string(out))
		if m == nil {
			continue
		}
		v, _ := strconv.Atoi(m[1])
		if v >= major && (best == "" || v < bestMajor) {
			best, bestMajor = p, v
		}
	}
	return best
}

var versionMajor = regexp.MustCompile(`\(PostgreSQL\) (\d+)`)

// schemaState is what the suite compares between two databases.
type schemaState struct {
	model    *catalog.Model
	describe string // describeQuery's lines
	dump     string // pg_dump --schema-only, normalised; "" without a pg_dump
}

// readState reads the database conn is connected to (url names it, for
// pg_dump); its model only when schemas names the managed schemas, with
// the grants when privileges.
func (srv *server) readState(ctx context.Context, t *testing.T, conn *pgx.Conn, url string, schemas []string, privileges bool) schemaState {
	t.Helper()
	var s schemaState
	var err error
	if schemas != nil {
		if s.model, err = catalog.InspectWith(ctx, conn, schemas, catalog.InspectOptions{Privileges: privileges}); err != nil {
			t.Fatalf("inspecting: %v", err)
		}
	}
	if s.describe, err = describe(ctx, conn); err != nil {
		t.Fatal(err)
	}
	if srv.pgDump != "" {
		s.dump = schemaDump(ctx, t, srv.pgDump, url)
	}
	return s
}

// compareStates reports every way got and want differ, under the title
// what, and whether they do.
func compareStates(t *testing.T, what string, got, want schemaState) bool {
	t.Helper()
	differ := false
	// The models' JSON holds every schema field and leaves out the data
	// (a sequence's last value), which a fresh database does not share.
	if g, w := modelText(t, got.model), modelText(t, want.model); g != w {
		differ = true
		t.Errorf("%s: the inspected models differ:\n%s", what, lineDiff(g, w))
	}
	if got.describe != want.describe {
		differ = true
		t.Errorf("%s: describeQuery differs:\n%s", what, lineDiff(got.describe, want.describe))
	}
	if got.dump != want.dump {
		differ = true
		t.Errorf("%s: pg_dump differs:\n%s", what, lineDiff(got.dump, want.dump))
	}
	return differ
}

func modelText(t *testing.T, m *catalog.Model) string {
	t.Helper()
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// schemaDump is pg_dump --schema-only of the database, normalised: no
// comment lines, no blank lines, no \restrict / \unrestrict lines (their key
// is random); followed by what the schema holds that pg_dump --schema-only
// does not show (see notDumped).
func schemaDump(ctx context.Context, t *testing.T, pgDump, url string) string {
	t.Helper()
	cmd := exec.CommandContext(ctx, pgDump, "--schema-only", "--no-owner", "--no-privileges", "-d", url)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	cmd.Env = append(os.Environ(), "PGCONNECT_TIMEOUT=30")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("pg_dump: %v\n%s", err, stderr.String())
	}
	return normaliseDump(string(out)) + notDumped(ctx, t, url)
}

// notDumped lists the materialized views that are not populated: pg_dump
// --schema-only prints every one WITH NO DATA, and the REFRESH that tells
// them apart belongs to the data.
func notDumped(ctx context.Context, t *testing.T, url string) string {
	t.Helper()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatalf("connecting: %v", err)
	}
	defer conn.Close(context.Background())
	rows, err := conn.Query(ctx, `SELECT format('materialized view %I.%I is not populated', n.nspname, c.relname)
		FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE c.relkind = 'm' AND NOT c.relispopulated ORDER BY 1`)
	if err != nil {
		t.Fatal(err)
	}
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, l := range lines {
		b.WriteString(l + "\n")
	}
	return b.String()
}

func normaliseDump(s string) string {
	var b strings.Builder
	for _, l := range strings.Split(s, "\n") {
		l = strings.TrimRight(l, " \t\r")
		switch {
		case l == "", strings.HasPrefix(l, "--"),
			strings.HasPrefix(l, `\restrict`), strings.HasPrefix(l, `\unrestrict`):
			continue
		}
		b.WriteString(l + "\n")
	}
	return b.String()
}

// lineDiff renders a line diff of a and b (- only in a, + only in b) with
// three lines of context around each change.
func lineDiff(a, b string) string {
	x, y := strings.Split(strings.TrimSuffix(a, "\n"), "\n"), strings.Split(strings.TrimSuffix(b, "\n"), "\n")
	// lcs[i][j]: length of the longest common subsequence of x[i:] and y[j:].
	lcs := make([][]int, len(x)+1)
	for i := range lcs {
		lcs[i] = make([]int, len(y)+1)
	}
	for i := len(x) - 1; i >= 0; i-- {
		for j := len(y) - 1; j >= 0; j-- {
			if x[i] == y[j] {
				lcs[i][j] = lcs[i+1][j+1] + 1
			} else {
				lcs[i][j] = max(lcs[i+1][j], lcs[i][j+1])
			}
		}
	}
	type op struct {
		kind byte
		text string
	}
	var ops []op
	i, j := 0, 0
	for i < len(x) || j < len(y) {
		switch {
		case i < len(x) && j < len(y) && x[i] == y[j]:
			ops = append(ops, op{' ', x[i]})
			i++
			j++
		case i < len(x) && (j == len(y) || lcs[i+1][j] >= lcs[i][j+1]):
			ops = append(ops, op{'-', x[i]})
			i++
		default:
			ops = append(ops, op{'+', y[j]})
			j++
		}
	}
	const context = 3
	show := make([]bool, len(ops))
	for k, o := range ops {
		if o.kind != ' ' {
			for d := max(0, k-context); d <= min(len(ops)-1, k+context); d++ {
				show[d] = true
			}
		}
	}
	var out strings.Builder
	skipped := false
	for k, o := range ops {
		if !show[k] {
			skipped = true
			continue
		}
		if skipped {
			out.WriteString("@@\n")
			skipped = false
		}
		fmt.Fprintf(&out, "%c %s\n", o.kind, o.text)
	}
	return out.String()
}
