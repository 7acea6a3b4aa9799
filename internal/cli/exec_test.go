package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/ptah-run/ptah/internal/controller"
	"github.com/ptah-run/ptah/internal/engine"
	"github.com/ptah-run/ptah/internal/pgtest"
	api "github.com/ptah-run/ptah/pkg/api/v1alpha1"
)

// dispatch does what the manager does for a Job: the payload, split into
// parts in a folder (the Pod's ConfigMap volume).
func dispatch(t *testing.T, op string, statements ...string) (dir, digest string) {
	t.Helper()
	spec := api.PtahSchemaPlanSpec{Schema: api.ObjectReference{Name: "app", UID: "s1"}, LockTimeout: "5s"}
	for _, s := range statements {
		spec.Statements = append(spec.Statements, api.PlanStatement{SQL: s})
	}
	spec.Phases = []api.PlanPhase{{Statements: len(statements)}}
	spec.Fingerprint = engine.PlanFingerprint(spec)
	raw, err := json.Marshal(controller.Payload{OperationID: op, Resource: "app", CoordinationDigest: "sha256:c-" + op,
		Plan: api.ObjectReference{Name: "app-1", UID: "p-" + op}, Schema: &spec})
	if err != nil {
		t.Fatal(err)
	}
	parts, err := controller.SplitPlan(raw)
	if err != nil {
		t.Fatal(err)
	}
	dir = t.TempDir()
	for i, p := range parts.Parts {
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("part-%02d", i)), p, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir, parts.Digest
}

// TestExecRunsTheDispatchedPlanOnce: ptah exec, as a Job's Pod runs it,
// runs a plan whose parts hash to the digest it was given, reports a
// result bound to the operation and the digest in at most 4 KiB, with no
// SQL, and refuses parts that were changed, before running anything.
func TestExecRunsTheDispatchedPlanOnce(t *testing.T) {
	url := pgtest.NewDB(t)
	t.Setenv(controller.EnvDatabaseURL, url)
	deadline := time.Now().Add(time.Hour).UTC().Format(time.RFC3339Nano)
	term := filepath.Join(t.TempDir(), "termination-log")
	exec := func(op, dir, digest string) (result, controller.Result) {
		r := runPtah(t, nil, "exec", "--operation", op, "--plan-digest", digest, "--plan-dir", dir,
			"--deadline", deadline, "--termination-log", term)
		b, err := os.ReadFile(term)
		if err != nil {
			t.Fatalf("no result written: %v (exit %d, %s)", err, r.code, r.stderr)
		}
		if len(b) > controller.MaxResultBytes {
			t.Errorf("result of %d bytes", len(b))
		}
		var res controller.Result
		if err := json.Unmarshal(b, &res); err != nil {
			t.Fatalf("result %s: %v", b, err)
		}
		if strings.Contains(string(b), "CREATE") || strings.Contains(string(b), "INSERT") {
			t.Errorf("the result carries SQL: %s", b)
		}
		return r, res
	}

	dir, digest := dispatch(t, "op-1", "CREATE TABLE public.t (id bigint)", "INSERT INTO public.t VALUES (1)")
	// A part changed on its way: nothing runs.
	tampered := t.TempDir()
	b, _ := os.ReadFile(filepath.Join(dir, "part-00"))
	_ = os.WriteFile(filepath.Join(tampered, "part-00"), []byte(strings.Replace(string(b), "VALUES (1)", "VALUES (2)", 1)), 0o644)
	if r, res := exec("op-1", tampered, digest); r.code != ExitPlanMismatch || res.Outcome != controller.OutcomeRefused || res.OperationID != "op-1" {
		t.Fatalf("tampered parts: exit %d, result %+v; want %d and Refused", r.code, res, ExitPlanMismatch)
	}
	// Another operation's parts: nothing runs.
	if r, res := exec("op-2", dir, digest); r.code == ExitOK || res.Outcome != controller.OutcomeRefused {
		t.Fatalf("parts of another operation: exit %d, result %+v", r.code, res)
	}
	conn, err := pgx.Connect(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var exists bool
	if err := conn.QueryRow(context.Background(), "SELECT to_regclass('public.t') IS NOT NULL").Scan(&exists); err != nil || exists {
		t.Fatalf("a refused exec ran something: table t exists %v (%v)", exists, err)
	}

	r, res := exec("op-1", dir, digest)
	if r.code != ExitOK || res.Outcome != controller.OutcomeSucceeded || res.OperationID != "op-1" || res.PlanDigest != digest {
		t.Fatalf("exec: exit %d, result %+v\n%s", r.code, res, r.stderr)
	}
	var n int
	if err := conn.QueryRow(context.Background(), "SELECT count(*) FROM public.t").Scan(&n); err != nil || n != 1 {
		t.Fatalf("rows in t: %d, %v", n, err)
	}
	var journaled string
	if err := conn.QueryRow(context.Background(), "SELECT operation_id FROM ptah.runs WHERE operation_id = 'op-1'").Scan(&journaled); err != nil {
		t.Errorf("the run is not in the journal: %v", err)
	}

	// A failing plan: rolled back, reported without its SQL.
	dir, digest = dispatch(t, "op-3", "CREATE TABLE public.u (id bigint)", "INSERT INTO public.u VALUES ('not a number')")
	if r, res := exec("op-3", dir, digest); r.code != ExitApplyFailed || res.Outcome != controller.OutcomeFailed || res.Message == "" {
		t.Fatalf("a failing plan: exit %d, result %+v", r.code, res)
	}
}
