package catalog_test

// The acceptance suite: each case under testdata/acceptance is a pair of
// schemas (old, new). The harness builds a database from old, plans against
// new, applies the plan as ptah does (Writer.Execute, in the transactions
// the plan was cut into), and proves convergence two ways: a
// second plan is empty, and pg_dump --schema-only of the migrated database
// equals that of a fresh database built from new. The hazards of each plan
// are asserted too.
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
//
// A case named noop_* must plan nothing (and its old and new schemas must
// dump the same); any other case must plan at least one statement.
//
// Run it with
//
//	go test ./internal/postgres/catalog/ -run 'Acceptance' -parallel 8
//	go test ./internal/postgres/catalog/ -run 'TestAcceptance/enum_' -v

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"sort"
	"strings"
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
	postgres.HazardDeletesData:   true,
	postgres.HazardRewritesTable: true,
	postgres.HazardBlocksWrites:  true,
	postgres.HazardBuildsIndex:   true,
	postgres.HazardMayFail:       true,
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

// TestAcceptanceCasesLoad checks that every case's SQL is valid PostgreSQL:
// old.sql and new.sql (each after setup.sql) load into a fresh database, each
// in a transaction that is rolled back, so one database serves both. The old
// and new schemas of a noop_* case must also dump the same.
func TestAcceptanceCasesLoad(t *testing.T) {
	for _, c := range loadCases(t) {
		t.Run(c.Name, func(t *testing.T) {
			t.Parallel()
			if strings.HasPrefix(c.Name, "noop_") {
				var dbs []string
				for _, file := range []struct{ name, sql string }{{"old.sql", c.Old}, {"new.sql", c.New}} {
					db := pgtest.NewDB(t)
					execFile(t, db, "setup.sql", c.Setup)
					execFile(t, db, file.name, file.sql)
					dbs = append(dbs, db)
				}
				ctx, cancel := context.WithTimeout(context.Background(), caseTimeout)
				defer cancel()
				if o, n := schemaDump(ctx, t, dbs[0]), schemaDump(ctx, t, dbs[1]); o != n {
					t.Errorf("a no-op case whose schemas differ, old (-) vs new (+):\n%s", lineDiff(o, n))
				}
				return
			}
			db := pgtest.NewDB(t)
			for _, file := range []struct{ name, sql string }{{"old.sql", c.Old}, {"new.sql", c.New}} {
				execFile(t, db, "setup.sql then "+file.name,
					"BEGIN;\n"+c.Setup+"\n;\n"+file.sql+"\n;\nROLLBACK;")
			}
		})
	}
}

func TestAcceptance(t *testing.T) {
	for _, c := range loadCases(t) {
		t.Run(c.Name, func(t *testing.T) {
			t.Parallel()
			runCase(t, c)
		})
	}
}

func runCase(t *testing.T, c acceptanceCase) {
	ctx, cancel := context.WithTimeout(context.Background(), caseTimeout)
	defer cancel()

	// 1. The target, as it is before the plan.
	target := pgtest.NewDB(t)
	execFile(t, target, "setup.sql", c.Setup)
	execFile(t, target, "old.sql", c.Old)

	// 2. Plan.
	req := catalog.PlanRequest{
		TargetURL:   target,
		Files:       []catalog.SourceFile{{Name: "new.sql", SQL: c.New}},
		Schemas:     c.Schemas,
		LockTimeout: 5 * time.Second,
	}
	plan, err := planSchema(ctx, req)

	// 3. Refusals, hazards, destructive.
	if len(c.Errors) > 0 {
		if err == nil {
			t.Fatalf("PlanSchema succeeded, want an error containing %q; plan:\n%s", c.Errors, plan.Script())
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
	if got := planHazards(plan); !equalStrings(got, c.Hazards) {
		t.Errorf("plan hazards = %s, want %s\nplan:\n%s", fmtSet(got), fmtSet(c.Hazards), plan.Script())
	}
	if plan.Destructive != c.Destructive {
		t.Errorf("plan.Destructive = %v, want %v", plan.Destructive, c.Destructive)
	}
	// Every case but the noop_ ones declares a change: an empty plan would
	// pass the convergence checks below without proving anything.
	if noop := strings.HasPrefix(c.Name, "noop_"); noop && len(plan.Statements) > 0 {
		t.Errorf("a no-op case planned %d statements:\n%s", len(plan.Statements), plan.Script())
	} else if !noop && len(plan.Statements) == 0 {
		t.Errorf("the plan is empty, but old.sql and new.sql differ")
	}

	// 4. Apply, as ptah does.
	apply(ctx, t, target, plan)

	// 5. Re-plan: nothing left to do.
	again, err := planSchema(ctx, req)
	if err != nil {
		t.Fatalf("re-plan after apply: %v", err)
	}
	if len(again.Statements) > 0 {
		t.Errorf("re-plan after apply is not empty (%d statements):\n%s\nfirst plan was:\n%s",
			len(again.Statements), again.Script(), plan.Script())
	}

	// 6. The migrated database dumps like one built from the declaration.
	fresh := pgtest.NewDB(t)
	execFile(t, fresh, "setup.sql", c.Setup)
	execFile(t, fresh, "new.sql", c.New)
	got, want := schemaDump(ctx, t, target), schemaDump(ctx, t, fresh)
	if got != want {
		t.Errorf("pg_dump of the migrated database (-) differs from a fresh one built from new.sql (+):\n%s\nplan was:\n%s",
			lineDiff(got, want), plan.Script())
	}
}

type panicError struct{ msg string }

func (e *panicError) Error() string { return e.msg }

// planSchema calls PlanSchema, turning a panic into an error so that one
// broken case does not take the whole suite down.
func planSchema(ctx context.Context, req catalog.PlanRequest) (p *postgres.Plan, err error) {
	defer func() {
		if r := recover(); r != nil {
			p, err = nil, &panicError{fmt.Sprintf("PlanSchema panicked: %v\n%s", r, debug.Stack())}
		}
	}()
	return catalog.PlanSchema(ctx, req)
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
// are no part of the comparison.
func apply(ctx context.Context, t *testing.T, url string, plan *postgres.Plan) {
	t.Helper()
	const op = "acceptance"
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatalf("connecting: %v", err)
	}
	defer conn.Close(context.Background())
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
		drop = "DROP TABLE ptah.run_steps, ptah.runs, ptah.leases, ptah.target_instance"
	}
	if _, err := conn.Exec(ctx, drop); err != nil {
		t.Fatalf("dropping the runtime tables: %v", err)
	}
}

func execFile(t *testing.T, url, name, sql string) {
	t.Helper()
	if strings.TrimSpace(sql) == "" {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatalf("connecting: %v", err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, sql); err != nil {
		t.Fatalf("loading %s: %v", name, err)
	}
}

// schemaDump is pg_dump --schema-only of the database, normalised: no
// comment lines, no blank lines, no \restrict / \unrestrict lines (their key
// is random).
func schemaDump(ctx context.Context, t *testing.T, url string) string {
	t.Helper()
	bin, err := pgserver.FindBinDir()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(ctx, filepath.Join(bin, "pg_dump"),
		"--schema-only", "--no-owner", "--no-privileges", "-d", url)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	cmd.Env = append(os.Environ(), "PGCONNECT_TIMEOUT=30")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("pg_dump: %v\n%s", err, stderr.String())
	}
	return normaliseDump(string(out))
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
