package controller_test

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ptah-run/ptah/internal/cli"
	"github.com/ptah-run/ptah/internal/controller"
	"github.com/ptah-run/ptah/internal/engine"
	"github.com/ptah-run/ptah/internal/kubetest"
	"github.com/ptah-run/ptah/internal/pgtest"
	api "github.com/ptah-run/ptah/pkg/api/v1alpha1"
)

// runPtah is the test kubelet's container runtime: ptah itself, in
// process, with the container's environment. (A Pod's own process, this
// test binary run again, would let cluster tests run side by side; on a
// busy two-core machine they were slower so.)
func runPtah(t *testing.T) func(ctx context.Context, c kubetest.Container) int {
	return func(ctx context.Context, c kubetest.Container) int {
		for k, v := range c.Env {
			t.Setenv(k, v)
		}
		var out, errs bytes.Buffer
		code := cli.Run(ctx, append(c.Args, "--termination-log", c.TerminationLog), &out, &errs)
		if code != 0 {
			t.Logf("ptah exec exited %d: %s", code, errs.String())
		}
		return code
	}
}

// TestAJobRunsItsPlanOnceThroughTheAPIServer dispatches one operation the
// way the manager does (the plan carried in the Job, or in immutable
// ConfigMaps when it is larger than a Job carries; the URL in a Secret),
// and the test kubelet runs its Pod's ptah exec against a real
// PostgreSQL: the Job completes, the database holds the change, and the
// Pod's termination message is the result, bound to the operation and
// the plan's digest.
func TestAJobRunsItsPlanOnceThroughTheAPIServer(t *testing.T) {
	for _, tc := range []struct {
		name string
		pad  int // bytes of comment in the plan's statement
	}{{"carried in the Job", 0}, {"in ConfigMaps", controller.InlinePlanBytes}} {
		t.Run(tc.name, func(t *testing.T) { runOneJob(t, tc.pad) })
	}
}

func runOneJob(t *testing.T, pad int) {
	e := kubetest.Shared(t)
	ctx := context.Background()
	ns := e.Namespace(t)
	url := pgtest.NewDB(t)
	(&kubetest.Kubelet{Env: e, Namespace: ns, Run: runPtah(t)}).Start(t)

	owner := &api.PtahSchema{ObjectMeta: metav1.ObjectMeta{Name: "app", Namespace: ns},
		Spec: api.PtahSchemaSpec{Source: api.Source{Path: "schema"}}}
	if err := e.Client.Create(ctx, owner); err != nil {
		t.Fatal(err)
	}
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "app-db", Namespace: ns}, Data: map[string][]byte{"url": []byte(url)}}
	if err := e.Client.Create(ctx, secret); err != nil {
		t.Fatal(err)
	}
	spec := api.PtahSchemaPlanSpec{Schema: api.ObjectReference{Name: "app", UID: string(owner.UID)}, LockTimeout: "5s",
		Statements: []api.PlanStatement{{SQL: "CREATE TABLE public.accounts (id bigint PRIMARY KEY)" + comment(pad)}},
		Phases:     []api.PlanPhase{{Statements: 1}}}
	spec.Fingerprint = engine.PlanFingerprint(spec)
	payload, _ := json.Marshal(controller.Payload{OperationID: "op-1", Resource: "app", CoordinationDigest: "sha256:c1",
		Plan: api.ObjectReference{Name: "app-1", UID: "p1"}, Schema: &spec})
	parts, err := controller.SplitPlan(payload)
	if err != nil {
		t.Fatal(err)
	}
	if parts.Inline() != (pad == 0) {
		t.Fatalf("a plan of %d bytes: carried in its Job %v", len(payload), parts.Inline())
	}
	now := time.Now()
	r := controller.ExecRequest{Namespace: ns, ResourceKind: api.KindPtahSchema, ResourceName: "app", ResourceUID: string(owner.UID),
		OperationID: "op-1", Image: "ptah:test", URLSecret: "app-db", URLKey: "url", Now: now, Deadline: now.Add(10 * time.Minute), Plan: parts}
	for _, cm := range controller.PlanConfigMaps(r) {
		if err := e.Client.Create(ctx, cm); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.Client.Create(ctx, controller.BuildJob(r)); err != nil {
		t.Fatal(err)
	}

	var job batchv1.Job
	deadline := time.Now().Add(settleWithin)
	for {
		if err := e.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: controller.JobName(r.ResourceUID, r.OperationID)}, &job); err != nil {
			t.Fatal(err)
		}
		if job.Status.Succeeded == 1 || job.Status.Failed == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the Job did not finish: %+v", job.Status)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if job.Status.Succeeded != 1 {
		t.Fatalf("the Job failed: %+v", job.Status)
	}
	var pods corev1.PodList
	if err := e.Client.List(ctx, &pods, client.InNamespace(ns), client.MatchingLabels{"batch.kubernetes.io/job-name": job.Name}); err != nil || len(pods.Items) != 1 {
		t.Fatalf("pods of the Job: %d, %v", len(pods.Items), err)
	}
	term := pods.Items[0].Status.ContainerStatuses[0].State.Terminated
	var res controller.Result
	if err := json.Unmarshal([]byte(term.Message), &res); err != nil {
		t.Fatalf("termination message %q: %v", term.Message, err)
	}
	if res.OperationID != "op-1" || res.PlanDigest != parts.Digest || res.Outcome != controller.OutcomeSucceeded {
		t.Errorf("result %+v; want op-1's, for digest %s, succeeded", res, parts.Digest)
	}
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var exists bool
	if err := conn.QueryRow(ctx, "SELECT to_regclass('public.accounts') IS NOT NULL").Scan(&exists); err != nil || !exists {
		t.Errorf("the plan did not run: %v %v", exists, err)
	}
}

// comment is an SQL comment of about n bytes ("" for 0).
func comment(n int) string {
	if n == 0 {
		return ""
	}
	return "\n-- " + strings.Repeat("x", n)
}
