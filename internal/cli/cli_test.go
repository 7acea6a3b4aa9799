package cli

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/muesli/termenv"

	"github.com/ptah-run/ptah/internal/config"
	"github.com/ptah-run/ptah/internal/failpoint"
	"github.com/ptah-run/ptah/internal/postgres"
	"github.com/ptah-run/ptah/internal/postgres/catalog"
)

// These tests run ptah in-process with the engine replaced by a fake, to pin
// down rendering, settings and error reporting without a database. The
// testscripts cover the same paths end to end.

const testYAML = `apiVersion: ptah.run/v1alpha1
kind: PtahSchema
metadata:
  name: app
spec:
  target:
    urlFrom: {env: PTAHTEST_APP_URL}
  source:
    path: schema
  schemas: [public, app]
  policy:
    lockTimeout: 1500ms
`

const testURL = "postgres://app:hunter2-secret@db.example:5432/app"

// workspace writes ptah.yaml and two declared files into a temp dir and
// makes it the working directory.
func workspace(t *testing.T) {
	t.Helper()
	dir := t.TempDir()
	files := map[string]string{
		"ptah.yaml":         testYAML,
		"schema/b_two.sql":  "CREATE TABLE b ();",
		"schema/a_one.sql":  "CREATE TABLE a ();",
		"schema/notes.txt":  "ignored",
		"settings.yaml":     "output: json\n",
		"settings-sql.yaml": "output: sql\ndev-url: postgres://dev@devhost/postgres\n",
	}
	writeFiles(t, dir, files)
	t.Chdir(dir)
	t.Setenv("PTAHTEST_APP_URL", testURL)
	for _, k := range []string{"PTAH_FILE", "PTAH_OUTPUT", "PTAH_DEV_URL", "PTAH_DETAILED_EXITCODE", "PTAH_CONFIG", "NO_COLOR"} {
		t.Setenv(k, "")
	}
}

// fakePlan is a plan with a destructive statement, a hazard-free one and a
// multi-line one.
func fakePlan() *postgres.Plan {
	return &postgres.Plan{
		Statements: []postgres.Statement{
			{SQL: "CREATE TABLE app.a (\n    id integer\n)"},
			{SQL: "ALTER TABLE public.users DROP COLUMN legacy", Hazards: []postgres.Hazard{postgres.HazardDeletesData},
				Locks: []postgres.Lock{{Relation: "public.users", Mode: postgres.AccessExclusive}}},
		},
		LocksKnown:   true,
		Phases:       []postgres.Phase{{Statements: 2, Locks: 19}},
		LockCapacity: postgres.LockCapacity{MaxLocksPerTransaction: 64, MaxConnections: 100},
		Destructive:  true,
		LockTimeout:  1500 * time.Millisecond,
	}
}

type result struct {
	code           int
	stdout, stderr string
	reqs           []catalog.PlanRequest
}

func runPtah(t *testing.T, plan func(context.Context, catalog.PlanRequest) (*postgres.Plan, error), args ...string) result {
	t.Helper()
	var stdout, stderr bytes.Buffer
	a := newApp(&stdout, &stderr)
	var res result
	a.planSchema = func(ctx context.Context, req catalog.PlanRequest) (*postgres.Plan, error) {
		res.reqs = append(res.reqs, req)
		if plan == nil {
			return fakePlan(), nil
		}
		return plan(ctx, req)
	}
	// The fake stands in for the read-only engine entry point, which is
	// what --no-publish calls; publishing is proved against a real server
	// (testscripts, governed_test.go).
	if len(args) > 0 && args[0] == "plan" {
		args = append([]string{"plan", "--no-publish"}, args[1:]...)
	}
	res.code = a.run(context.Background(), args)
	res.stdout, res.stderr = stdout.String(), stderr.String()
	return res
}

func TestPlanText(t *testing.T) {
	workspace(t)
	res := runPtah(t, nil, "plan")
	want := `PtahSchema "app" (ptah.yaml:1; schemas: public, app; lock timeout 1.5s)

  1  CREATE TABLE app.a (
         id integer
     );

  2  ALTER TABLE public.users DROP COLUMN legacy;
     [deletes-data]
     locks ACCESS EXCLUSIVE on public.users

Destructive: this plan deletes data; spec.policy.allowDestructive is false, so it would be refused at apply.
Plan: 2 statements, 1 with hazards, destructive.

Note: privileges and ownership are not managed: grants and owners are neither compared nor planned.
`
	if res.code != 0 || res.stdout != want || res.stderr != "" {
		t.Fatalf("exit %d\nstdout:\n%s\nwant:\n%s\nstderr:\n%s", res.code, res.stdout, want, res.stderr)
	}
}

// A plan that adds enum labels runs them in a transaction of their own
// first: the reviewer is told, since the plan is then not all-or-nothing.
func TestPlanTextTellsOfTheEnumTransaction(t *testing.T) {
	workspace(t)
	for _, tt := range []struct {
		labels int
		want   string
	}{
		{1, "Transactions: 2. Statement 1 adds an enum label and commits first, on its own: PostgreSQL cannot use a label in the transaction that adds it. If a transaction fails, it rolls back, and those before it stay committed.\n"},
		{2, "Transactions: 2. Statements 1-2 add enum labels and commit first, on their own"},
	} {
		res := runPtah(t, func(context.Context, catalog.PlanRequest) (*postgres.Plan, error) {
			p := &postgres.Plan{LockTimeout: time.Second}
			for i := range tt.labels {
				p.Statements = append(p.Statements, postgres.Statement{SQL: fmt.Sprintf("ALTER TYPE public.s ADD VALUE IF NOT EXISTS 'l%d'", i)})
			}
			p.Statements = append(p.Statements, postgres.Statement{SQL: "ALTER TABLE public.t ALTER COLUMN s SET DEFAULT 'l0'"})
			return p, nil
		}, "plan")
		if res.code != 0 || !strings.Contains(res.stdout, tt.want) {
			t.Errorf("%d labels: exit %d, stdout:\n%s\nwant %q", tt.labels, res.code, res.stdout, tt.want)
		}
	}
	res := runPtah(t, nil, "plan")
	if strings.Contains(res.stdout, "Transactions:") {
		t.Errorf("a plan without enum labels is one transaction:\n%s", res.stdout)
	}
}

// A plan too big for one transaction on its server says where each
// transaction starts, and why there are several.
func TestPlanTextTellsOfTheLockBudget(t *testing.T) {
	workspace(t)
	res := runPtah(t, func(context.Context, catalog.PlanRequest) (*postgres.Plan, error) {
		return &postgres.Plan{LockTimeout: time.Second,
			Statements:   []postgres.Statement{{SQL: "CREATE TABLE public.a (id integer)"}, {SQL: "CREATE TABLE public.b (id integer)"}, {SQL: "CREATE TABLE public.c (id integer)"}},
			Phases:       []postgres.Phase{{Statements: 1, Locks: 3100, Reason: postgres.PhaseLockBudget}, {Statements: 2, Locks: 2900, Reason: postgres.PhaseLockBudget}},
			LockCapacity: postgres.LockCapacity{MaxLocksPerTransaction: 64, MaxConnections: 100}}, nil
	}, "plan")
	want := `PtahSchema "app" (ptah.yaml:1; schemas: public, app; lock timeout 1s)

Transaction 1/2: statement 1 (lock-budget)

  1  CREATE TABLE public.a (id integer);

Transaction 2/2: statements 2-3 (lock-budget)

  2  CREATE TABLE public.b (id integer);

  3  CREATE TABLE public.c (id integer);

Transactions: 2. The plan locks about 6000 objects; one transaction may hold 3200 on this server (half its lock table: max_locks_per_transaction 64 x (max_connections 100 + max_prepared_transactions 0)), so it commits in 2 parts. If a transaction fails, it rolls back, and those before it stay committed.
Plan: 3 statements in 2 transactions, 0 with hazards.
`
	if res.code != 0 || !strings.HasPrefix(res.stdout, want) {
		t.Fatalf("exit %d\nstdout:\n%s\nwant:\n%s", res.code, res.stdout, want)
	}
}

// An online plan says which statements run without a transaction, and
// counts phases, not transactions.
func TestPlanTextTellsOfStatementsRunWithoutATransaction(t *testing.T) {
	workspace(t)
	res := runPtah(t, func(context.Context, catalog.PlanRequest) (*postgres.Plan, error) {
		return &postgres.Plan{LockTimeout: time.Second,
			Statements: []postgres.Statement{{SQL: "ALTER TABLE public.a ADD COLUMN b integer"},
				{SQL: "CREATE INDEX CONCURRENTLY a_b_idx ON public.a USING btree (b)", Hazards: []postgres.Hazard{postgres.HazardBuildsIndex}, NoTransaction: true}},
			Phases: []postgres.Phase{{Statements: 1, Locks: 18}, {Statements: 1, Locks: 18, Reason: postgres.PhaseOnline, NoTransaction: true}}}, nil
	}, "plan")
	for _, want := range []string{
		"\nPhase 1/2: statement 1\n",
		"\nPhase 2/2: statement 2, without a transaction (online)\n",
		"Phases: 2. Statement 2 runs without a transaction, one at a time",
		"Plan: 2 statements in 2 phases, 1 with hazards.",
	} {
		if !strings.Contains(res.stdout, want) {
			t.Errorf("stdout lacks %q:\n%s", want, res.stdout)
		}
	}
	res = runPtah(t, func(context.Context, catalog.PlanRequest) (*postgres.Plan, error) {
		return &postgres.Plan{LockTimeout: time.Second,
			Statements: []postgres.Statement{{SQL: "CREATE INDEX CONCURRENTLY a_b_idx ON public.a USING btree (b)", NoTransaction: true}},
			Phases:     []postgres.Phase{{Statements: 1, Locks: 17, Reason: postgres.PhaseOnline, NoTransaction: true}}}, nil
	}, "plan", "-o", "json")
	if !strings.Contains(res.stdout, `"reason": "online",`) || !strings.Contains(res.stdout, `"noTransaction": true`) {
		t.Errorf("the JSON plan does not mark its phase run without a transaction:\n%s", res.stdout)
	}
}

// spec.policy.online reaches the planner: plans are online unless it is
// false.
func TestPolicyOnlineReachesThePlanner(t *testing.T) {
	workspace(t)
	if res := runPtah(t, nil, "plan"); len(res.reqs) != 1 || !res.reqs[0].Online {
		t.Errorf("without policy.online, the plan request is %+v; want an online plan", res.reqs)
	}
	writeFiles(t, ".", map[string]string{"ptah.yaml": testYAML + "    online: false\n"})
	if res := runPtah(t, nil, "plan"); len(res.reqs) != 1 || res.reqs[0].Online {
		t.Errorf("with policy.online false, the plan request is %+v (exit %d: %s); want an offline plan", res.reqs, res.code, res.stderr)
	}
}

func TestPlanTextNoChanges(t *testing.T) {
	workspace(t)
	res := runPtah(t, func(context.Context, catalog.PlanRequest) (*postgres.Plan, error) {
		return &postgres.Plan{LockTimeout: time.Second}, nil
	}, "plan")
	if !strings.Contains(res.stdout, "\nNo changes. The database matches the declared schema.\n") || !strings.Contains(res.stdout, "privileges and ownership are not managed") {
		t.Fatalf("stdout:\n%s", res.stdout)
	}
}

func TestPlanTextColor(t *testing.T) {
	results := []planResult{{Resource: testResource(t), Plan: fakePlan()}}
	var plain, color bytes.Buffer
	if err := renderText(&plain, results, termenv.Ascii); err != nil {
		t.Fatal(err)
	}
	if err := renderText(&color, results, termenv.ANSI); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(plain.String(), "\x1b[") {
		t.Errorf("plain output has escape sequences:\n%q", plain.String())
	}
	if !strings.Contains(color.String(), "\x1b[") || !strings.Contains(color.String(), "[deletes-data]") {
		t.Errorf("color output has no escape sequences or lost the tag:\n%q", color.String())
	}
	if colorProfile(&plain) != termenv.Ascii {
		t.Error("a buffer is not a terminal, yet it gets color")
	}
}

func testResource(t *testing.T) *config.Resource {
	t.Helper()
	f, err := config.Parse("ptah.yaml", []byte(testYAML))
	if err != nil {
		t.Fatal(err)
	}
	return f.Resources[0]
}

func TestPlanJSON(t *testing.T) {
	workspace(t)
	res := runPtah(t, nil, "plan", "-o", "json")
	want := `{
  "items": [
    {
      "resource": {
        "apiVersion": "ptah.run/v1alpha1",
        "kind": "PtahSchema",
        "name": "app"
      },
      "changes": true,
      "plan": {
        "spec": {
          "statements": [
            {
              "sql": "CREATE TABLE app.a (\n    id integer\n)",
              "hazards": [],
              "locks": []
            },
            {
              "sql": "ALTER TABLE public.users DROP COLUMN legacy",
              "hazards": [
                "deletes-data"
              ],
              "locks": [
                {
                  "relation": "public.users",
                  "mode": "ACCESS EXCLUSIVE"
                }
              ]
            }
          ],
          "phases": [
            {
              "statements": 2,
              "locks": 19
            }
          ],
          "lockCapacity": {
            "maxLocksPerTransaction": 64,
            "maxConnections": 100,
            "maxPreparedTransactions": 0
          },
          "destructive": true,
          "lockTimeout": "1.5s",
          "hints": []
        }
      }
    }
  ]
}
`
	if res.code != 0 || res.stdout != want {
		t.Fatalf("exit %d\nstdout:\n%s\nwant:\n%s\nstderr:\n%s", res.code, res.stdout, want, res.stderr)
	}
}

func TestPlanSQL(t *testing.T) {
	workspace(t)
	res := runPtah(t, nil, "plan", "-o", "sql")
	want := "-- PtahSchema \"app\" (ptah.yaml)\n" + fakePlan().Script()
	if res.code != 0 || res.stdout != want {
		t.Fatalf("exit %d\nstdout:\n%s\nwant:\n%s", res.code, res.stdout, want)
	}
}

func TestPlanRequest(t *testing.T) {
	workspace(t)
	cache := t.TempDir()
	t.Setenv("PTAH_CACHE_DIR", cache)
	res := runPtah(t, nil, "plan", "--dev-url", "postgres://dev:devpw@devhost/postgres")
	if res.code != 0 || len(res.reqs) != 1 {
		t.Fatalf("exit %d, %d requests; stderr: %s", res.code, len(res.reqs), res.stderr)
	}
	want := catalog.PlanRequest{
		TargetURL: testURL,
		DevURL:    "postgres://dev:devpw@devhost/postgres",
		Files: []catalog.SourceFile{
			{Name: "schema/a_one.sql", SQL: "CREATE TABLE a ();"},
			{Name: "schema/b_two.sql", SQL: "CREATE TABLE b ();"},
		},
		Schemas:        []string{"public", "app"},
		LockTimeout:    1500 * time.Millisecond,
		Online:         true,
		ObserveTimeout: 30 * time.Second,
		Cache:          catalog.DirCache{Dir: cache},
	}
	got := res.reqs[0]
	if got.OnWait == nil || got.OnCacheError == nil {
		t.Fatalf("the request carries no OnWait or OnCacheError: a plan waiting on a lock, or without its cache, would say nothing")
	}
	got.OnWait, got.OnCacheError = nil, nil
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("request = %+v\nwant      %+v", got, want)
	}
	// off keeps nothing; unset is the user's cache directory.
	if res := runPtah(t, nil, "plan", "--cache-dir", "off"); len(res.reqs) != 1 || res.reqs[0].Cache != nil {
		t.Fatalf("--cache-dir off: %+v", res.reqs)
	}
	t.Setenv("PTAH_CACHE_DIR", "")
	t.Setenv("XDG_CACHE_HOME", cache)
	if res := runPtah(t, nil, "plan"); len(res.reqs) != 1 || res.reqs[0].Cache != (catalog.DirCache{Dir: filepath.Join(cache, "ptah")}) {
		t.Fatalf("the default cache: %+v", res.reqs)
	}
}

func TestDetailedExitCode(t *testing.T) {
	workspace(t)
	empty := func(context.Context, catalog.PlanRequest) (*postgres.Plan, error) {
		return &postgres.Plan{LockTimeout: time.Second}, nil
	}
	tests := []struct {
		args []string
		plan func(context.Context, catalog.PlanRequest) (*postgres.Plan, error)
		want int
	}{
		{[]string{"plan"}, nil, 0},
		{[]string{"plan", "--detailed-exitcode"}, nil, 2},
		{[]string{"plan", "--detailed-exitcode", "-o", "json"}, nil, 2},
		{[]string{"plan", "--detailed-exitcode"}, empty, 0},
		{[]string{"plan", "--detailed-exitcode=false"}, nil, 0},
	}
	for _, tt := range tests {
		res := runPtah(t, tt.plan, tt.args...)
		if res.code != tt.want {
			t.Errorf("%v: exit %d, want %d; stderr: %s", tt.args, res.code, tt.want, res.stderr)
		}
		if res.code == 2 && (res.stderr != "" || res.stdout == "") {
			t.Errorf("%v: exit 2 must print the plan and no error; stdout %q stderr %q", tt.args, res.stdout, res.stderr)
		}
	}
}

func TestSettingsPrecedence(t *testing.T) {
	workspace(t)
	tests := []struct {
		name    string
		env     map[string]string
		args    []string
		prefix  string // of stdout, telling the format
		wantDev string
	}{
		{"default", nil, []string{"plan"}, `PtahSchema "app"`, ""},
		{"config file", nil, []string{"plan", "--config", "settings.yaml"}, "{", ""},
		{"config from env", map[string]string{"PTAH_CONFIG": "settings-sql.yaml"}, []string{"plan"}, "--", "postgres://dev@devhost/postgres"},
		{"env over config", map[string]string{"PTAH_OUTPUT": "sql"}, []string{"plan", "--config", "settings.yaml"}, "--", ""},
		{"flag over env", map[string]string{"PTAH_OUTPUT": "sql"}, []string{"plan", "--config", "settings.yaml", "-o", "text"}, `PtahSchema "app"`, ""},
		{"dev url from env", map[string]string{"PTAH_DEV_URL": "postgres://x@y/z"}, []string{"plan", "--config", "settings-sql.yaml"}, "--", "postgres://x@y/z"},
		{"detailed exit code from env", map[string]string{"PTAH_DETAILED_EXITCODE": "1"}, []string{"plan"}, `PtahSchema "app"`, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			res := runPtah(t, nil, tt.args...)
			if res.code != 0 && res.code != 2 {
				t.Fatalf("exit %d: %s", res.code, res.stderr)
			}
			if !strings.HasPrefix(res.stdout, tt.prefix) {
				t.Errorf("stdout starts %q, want %q", firstLine(res.stdout), tt.prefix)
			}
			if got := res.reqs[0].DevURL; got != tt.wantDev {
				t.Errorf("DevURL = %q, want %q", got, tt.wantDev)
			}
		})
	}
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}

func TestUsageErrorsComeBeforeIO(t *testing.T) {
	workspace(t)
	for _, args := range [][]string{
		{"plan", "-o", "yaml", "-f", "missing.yaml"},
		{"plan", "--dev-url", "not a url", "-f", "missing.yaml"},
		{"plan", "--bogus"},
		{"bogus"},
		{"version", "extra"},
	} {
		res := runPtah(t, nil, args...)
		if res.code != ExitUsage || len(res.reqs) != 0 || res.stdout != "" {
			t.Errorf("%v: exit %d, %d engine calls, stdout %q; want 3, none, empty", args, res.code, len(res.reqs), res.stdout)
		}
		if !strings.HasPrefix(res.stderr, "ptah: ") || !strings.Contains(res.stderr, "\nhint: run 'ptah") {
			t.Errorf("%v: stderr %q", args, res.stderr)
		}
	}
}

func TestEngineErrors(t *testing.T) {
	workspace(t)
	tests := []struct {
		err  error
		code int
		hint string
	}{
		{fmt.Errorf("%w: dial tcp: refused", postgres.ErrConnect), ExitConnect, "check that the server is up"},
		{&catalog.LoadError{File: "schema/a_one.sql", Line: 3, Column: 7, Message: `syntax error at or near "TABEL" (SQLSTATE 42601)`}, ExitLoad, "fix the declared file"},
		{&catalog.UnsupportedError{Where: "target database", Objects: []string{`rule "r" on table public.t`, `policy "p" on table public.t`}}, ExitUnsupported, "refuses to plan around"},
		{fmt.Errorf("%w: permission denied to create database", catalog.ErrDevDatabase), ExitDevDatabase, "--dev-url"},
		{fmt.Errorf("%w: table other.t", catalog.ErrScope), ExitScope, "spec.schemas"},
		{context.Canceled, ExitInterrupted, ""},
		{errors.New("something odd"), ExitInternal, "please report it"},
	}
	for _, tt := range tests {
		res := runPtah(t, func(context.Context, catalog.PlanRequest) (*postgres.Plan, error) { return nil, tt.err }, "plan")
		if res.code != tt.code {
			t.Errorf("%v: exit %d, want %d", tt.err, res.code, tt.code)
		}
		if res.stdout != "" {
			t.Errorf("%v: stdout %q, want nothing", tt.err, res.stdout)
		}
		wantMsg := `ptah: planning PtahSchema "app": ` + firstLine(tt.err.Error())
		if !strings.HasPrefix(res.stderr, wantMsg) {
			t.Errorf("stderr %q, want it to start with %q", res.stderr, wantMsg)
		}
		if !strings.Contains(res.stderr, tt.hint) {
			t.Errorf("stderr %q, want hint %q", res.stderr, tt.hint)
		}
	}
}

func TestLoadErrorShowsPosition(t *testing.T) {
	workspace(t)
	res := runPtah(t, func(context.Context, catalog.PlanRequest) (*postgres.Plan, error) {
		return nil, &catalog.LoadError{File: "schema/a_one.sql", Line: 3, Column: 7, Message: `syntax error at or near "TABEL" (SQLSTATE 42601)`}
	}, "plan")
	want := `ptah: planning PtahSchema "app": loading schema/a_one.sql:3:7: syntax error at or near "TABEL" (SQLSTATE 42601)`
	if firstLine(res.stderr) != want {
		t.Fatalf("stderr %q\nwant %q", res.stderr, want)
	}
}

func TestUnsupportedListsObjectsIndented(t *testing.T) {
	workspace(t)
	res := runPtah(t, func(context.Context, catalog.PlanRequest) (*postgres.Plan, error) {
		return nil, &catalog.UnsupportedError{Where: "target database", Objects: []string{`rule "r_x" on table public.t`}}
	}, "plan")
	if !strings.Contains(res.stderr, "\n    rule \"r_x\" on table public.t\n") {
		t.Fatalf("stderr %q", res.stderr)
	}
}

func TestSecretsAreNeverPrinted(t *testing.T) {
	workspace(t)
	leaky := []error{
		fmt.Errorf("%w: failed to connect to %s", postgres.ErrConnect, testURL),
		fmt.Errorf("%w: password=hunter2-secret host=db", postgres.ErrConnect),
		fmt.Errorf("%w: %s", catalog.ErrDevDatabase, "postgres://dev:devpw@devhost/postgres"),
		errors.New("escaped: hunter2%2Dsecret? no: " + "hunter2-secret"),
	}
	for _, e := range leaky {
		res := runPtah(t, func(context.Context, catalog.PlanRequest) (*postgres.Plan, error) { return nil, e },
			"plan", "--dev-url", "postgres://dev:devpw@devhost/postgres")
		for _, secret := range []string{"hunter2-secret", "devpw"} {
			if strings.Contains(res.stderr, secret) || strings.Contains(res.stdout, secret) {
				t.Errorf("output leaks %q:\n%s", secret, res.stderr)
			}
		}
		if !strings.Contains(res.stderr, redacted) {
			t.Errorf("stderr %q does not show where the secret was", res.stderr)
		}
	}
}

func TestPanicIsAnInternalErrorNotExitTwo(t *testing.T) {
	workspace(t)
	res := runPtah(t, func(context.Context, catalog.PlanRequest) (*postgres.Plan, error) {
		panic("boom at " + testURL)
	}, "plan", "--detailed-exitcode")
	if res.code != ExitInternal {
		t.Fatalf("exit %d, want %d", res.code, ExitInternal)
	}
	if !strings.HasPrefix(res.stderr, "ptah: internal error: boom") || strings.Contains(res.stderr, "hunter2") {
		t.Fatalf("stderr %q", res.stderr)
	}
}

func TestLiteralURLWarns(t *testing.T) {
	workspace(t)
	yaml := strings.Replace(testYAML, "urlFrom: {env: PTAHTEST_APP_URL}", "url: "+testURL, 1)
	if err := os.WriteFile("ptah.yaml", []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	res := runPtah(t, nil, "plan", "-o", "json")
	if res.code != 0 || res.reqs[0].TargetURL != testURL {
		t.Fatalf("exit %d, request %+v", res.code, res.reqs)
	}
	if !strings.HasPrefix(res.stderr, "ptah: warning: ptah.yaml:7: PtahSchema \"app\": spec.target.url is a literal URL") || strings.Contains(res.stderr, "hunter2") {
		t.Fatalf("stderr %q", res.stderr)
	}
}

func TestConfigErrorsAreAllReportedBeforeAnyConnection(t *testing.T) {
	workspace(t)
	two := testYAML + "---\n" + strings.ReplaceAll(strings.ReplaceAll(testYAML, "name: app", "name: other"), "PTAHTEST_APP_URL", "PTAHTEST_UNSET_URL")
	if err := os.WriteFile("ptah.yaml", []byte(two), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove("schema/a_one.sql"); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove("schema/b_two.sql"); err != nil {
		t.Fatal(err)
	}
	res := runPtah(t, nil, "plan")
	if res.code != ExitConfig || len(res.reqs) != 0 {
		t.Fatalf("exit %d, %d engine calls", res.code, len(res.reqs))
	}
	for _, want := range []string{`PtahSchema "app": spec.source.path: directory schema has no .sql files`, `PtahSchema "other": spec.source.path`} {
		if !strings.Contains(res.stderr, want) {
			t.Errorf("stderr %q\nlacks %q", res.stderr, want)
		}
	}
}

func TestExitCodesAreDistinctAndDocumented(t *testing.T) {
	readme, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	seen := map[int]bool{}
	for _, o := range outcomes {
		if seen[o.code] {
			t.Errorf("exit code %d listed twice", o.code)
		}
		seen[o.code] = true
		if !strings.Contains(string(readme), fmt.Sprintf("| %d |", o.code)) {
			t.Errorf("README.md's exit code table lacks %d (%s)", o.code, o.meaning)
		}
	}
}

func BenchmarkRenderText(b *testing.B) {
	f, err := config.Parse("ptah.yaml", []byte(testYAML))
	if err != nil {
		b.Fatal(err)
	}
	p := &postgres.Plan{LockTimeout: time.Second}
	for i := range 200 {
		p.Statements = append(p.Statements, postgres.Statement{
			SQL:     fmt.Sprintf("ALTER TABLE public.t%d ADD COLUMN c text", i),
			Hazards: []postgres.Hazard{postgres.HazardBlocksWrites},
		})
	}
	results := []planResult{{Resource: f.Resources[0], Plan: p}}
	var buf bytes.Buffer
	for b.Loop() {
		buf.Reset()
		if err := renderText(&buf, results, termenv.ANSI); err != nil {
			b.Fatal(err)
		}
	}
}

// Each command's --help lists the exit codes it can return, and every exit
// code an end-to-end script sees a command return is on its list.
func TestEachCommandsHelpListsTheExitCodesItReturns(t *testing.T) {
	scripts, err := filepath.Glob(filepath.Join("..", "..", "testscripts", "*.txtar"))
	if err != nil || len(scripts) == 0 {
		t.Fatalf("no testscripts: %v", err)
	}
	exits := regexp.MustCompile(`(?m)^exits (\d+) ptah ([a-z-]+)`)
	seen := 0
	for _, path := range scripts {
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range exits.FindAllStringSubmatch(string(data), -1) {
			code, _ := strconv.Atoi(m[1])
			command := m[2]
			if _, known := commandCodes[command]; !known {
				continue // a flag or an unknown command: ptah's own codes
			}
			if code == failpoint.ExitCode {
				continue // a crash test's process stopped dead: not an outcome of the command
			}
			seen++
			if !slices.Contains(commandCodes[command], code) {
				t.Errorf("%s: ptah %s exits %d, which its --help does not list", filepath.Base(path), command, code)
			}
		}
	}
	if seen == 0 {
		t.Fatal("no 'exits N ptah COMMAND' line found in the testscripts")
	}
	for command, codes := range commandCodes {
		var stdout, stderr bytes.Buffer
		if code := newApp(&stdout, &stderr).run(context.Background(), []string{command, "--help"}); code != 0 {
			t.Fatalf("ptah %s --help: exit %d: %s", command, code, stderr.String())
		}
		help := stdout.String()
		listed := regexp.MustCompile(`(?m)^ +(\d+)  `).FindAllStringSubmatch(help[strings.Index(help, "Exit codes:"):], -1)
		var got []int
		for _, m := range listed {
			n, _ := strconv.Atoi(m[1])
			got = append(got, n)
		}
		if !slices.Equal(got, codes) {
			t.Errorf("ptah %s --help lists exit codes %v, want %v", command, got, codes)
		}
	}
}
