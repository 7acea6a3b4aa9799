package controller_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	batchv1 "k8s.io/api/batch/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ptah-run/ptah/internal/cli"
	"github.com/ptah-run/ptah/internal/controller"
	"github.com/ptah-run/ptah/internal/kubetest"
	"github.com/ptah-run/ptah/internal/pgtest"
	api "github.com/ptah-run/ptah/pkg/api/v1alpha1"
)

// cluster is one test's namespace with what ptah serve needs in it: the
// planner's account, the database URL in a Secret, the declared files in
// a ConfigMap, the test kubelet running Jobs, and a manager.
type cluster struct {
	t   *testing.T
	e   *kubetest.Env
	ns  string
	url string
}

func newCluster(t *testing.T) *cluster {
	t.Helper()
	e := kubetest.Shared(t)
	ctx := context.Background()
	c := &cluster{t: t, e: e, ns: e.Namespace(t), url: pgtest.NewDB(t)}
	root := kubetest.RepoRoot()
	e.Apply(t, filepath.Join(root, "deploy", "namespace.yaml"), filepath.Join(root, "deploy", "rbac", "manager.yaml"),
		filepath.Join(root, "deploy", "rbac", "planner.yaml"), filepath.Join(root, "deploy", "rbac", "people.yaml"))
	for _, o := range []client.Object{
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: controller.PlannerServiceAccount, Namespace: c.ns}},
		&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "ptah-planner", Namespace: c.ns},
			RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "ptah-planner"},
			Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: controller.PlannerServiceAccount, Namespace: c.ns}}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "app-db", Namespace: c.ns}, Data: map[string][]byte{"url": []byte(c.url)}},
	} {
		if err := e.Client.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	(&kubetest.Kubelet{Env: e, Namespace: c.ns, Run: runPtah(t)}).Start(t)
	return c
}

// declare writes the ConfigMap of declared files and the PtahSchema
// reading it.
func (c *cluster) declare(files map[string]string, policy api.Policy) *api.PtahSchema {
	c.t.Helper()
	ctx := context.Background()
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "app-schema", Namespace: c.ns}, Data: files}
	if err := c.e.Client.Create(ctx, cm); err != nil {
		c.t.Fatal(err)
	}
	s := &api.PtahSchema{ObjectMeta: metav1.ObjectMeta{Name: "app", Namespace: c.ns}, Spec: api.PtahSchemaSpec{
		Target: api.Target{URLFrom: &api.URLSource{SecretKeyRef: &api.SecretKeyRef{Name: "app-db", Key: "url"}}},
		Source: api.Source{ConfigMap: &api.ConfigMapSource{Name: "app-schema"}},
		Policy: policy,
	}}
	if err := c.e.Client.Create(ctx, s); err != nil {
		c.t.Fatal(err)
	}
	return s
}

// serve runs ptah serve's manager until the test ends, as the manager's
// ServiceAccount with the least privilege deploy/rbac grants it: no
// permission on Secrets.
func (c *cluster) serve() {
	c.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	cfg := c.e.ServiceAccount(c.t, "ptah-system", "ptah-manager")
	go func() {
		done <- controller.Run(ctx, controller.Options{Config: cfg, MetricsAddr: "0", ProbeAddr: "0",
			Logger: slog.New(slog.NewTextHandler(testLog(c.t), &slog.HandlerOptions{Level: slog.Level(-1)})), Version: "test", Image: "ptah:test"})
	}()
	c.t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
			c.t.Errorf("the manager: %v", err)
		}
	})
}

// waitFor polls the PtahSchema until ok accepts it.
func (c *cluster) waitFor(what string, ok func(api.PtahSchemaStatus) bool) api.PtahSchemaStatus {
	c.t.Helper()
	var s api.PtahSchema
	deadline := time.Now().Add(time.Minute)
	for {
		if err := c.e.Client.Get(context.Background(), client.ObjectKey{Namespace: c.ns, Name: "app"}, &s); err != nil {
			c.t.Fatal(err)
		}
		if ok(s.Status) {
			return s.Status
		}
		if time.Now().After(deadline) {
			c.dump()
			c.t.Fatalf("waiting for %s: the status is %s/%s: %s", what, s.Status.Phase, s.Status.Reason, s.Status.Message)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func (c *cluster) tableExists(name string) bool {
	c.t.Helper()
	conn, err := pgx.Connect(context.Background(), c.url)
	if err != nil {
		c.t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var exists bool
	if err := conn.QueryRow(context.Background(), "SELECT to_regclass($1) IS NOT NULL", name).Scan(&exists); err != nil {
		c.t.Fatal(err)
	}
	return exists
}

// TestServeConvergesAPtahSchemaThroughJobs is ptah serve's whole job for
// one PtahSchema, through a real API server and a real PostgreSQL: a
// reading Job publishes the plan, a person approves its UID with ptah
// approve --cluster, the manager claims it, takes the database's Lease,
// re-derives the inputs in another reading, dispatches the apply Job,
// accounts for its result, releases the Lease and verifies: InSync. The
// manager never reads the Secret, and nothing of the work is left behind.
func TestServeConvergesAPtahSchemaThroughJobs(t *testing.T) {
	c := newCluster(t)
	ctx := context.Background()
	c.declare(map[string]string{"01_accounts.sql": "CREATE TABLE public.accounts (id bigint PRIMARY KEY, email text NOT NULL);\n"}, api.Policy{})
	c.serve()

	st := c.waitFor("the plan", func(s api.PtahSchemaStatus) bool { return s.Phase == api.PhaseAwaitingApproval && s.Plan != nil })
	var plan api.PtahSchemaPlan
	if err := c.e.Client.Get(ctx, client.ObjectKey{Namespace: c.ns, Name: st.Plan.Name}, &plan); err != nil {
		t.Fatal(err)
	}
	if string(plan.UID) != st.Plan.UID || plan.Spec.Fingerprint != st.Plan.Fingerprint || len(plan.Spec.Statements) == 0 ||
		!strings.Contains(plan.Spec.Statements[0].SQL, "CREATE TABLE public.accounts") {
		t.Fatalf("the published plan %s: %+v", plan.Name, plan.Spec.Statements)
	}
	if plan.Spec.Bindings.ArtifactDigest == "" || plan.Spec.Bindings.TargetIdentityDigest == "" {
		t.Errorf("the plan's bindings are incomplete: %+v", plan.Spec.Bindings)
	}
	var plans api.PtahSchemaPlanList
	if err := c.e.Client.List(ctx, &plans, client.InNamespace(c.ns)); err != nil || len(plans.Items) != 1 {
		t.Errorf("%d plan objects, want the published one alone (the reading's transport removed): %v", len(plans.Items), err)
	}
	if c.tableExists("public.accounts") {
		t.Fatal("the table exists before anyone approved the plan")
	}

	c.e.Bind(t, c.ns, "alice", "ptah-approver", "ptah-viewer")
	var out, errs bytes.Buffer
	if code := cli.Run(ctx, []string{"approve", st.Plan.UID, "--fingerprint", st.Plan.Fingerprint, "--cluster",
		"--kubeconfig", c.e.Kubeconfig(t, "alice"), "-n", c.ns}, &out, &errs); code != 0 {
		t.Fatalf("ptah approve --cluster: exit %d: %s", code, errs.String())
	}

	st = c.waitFor("InSync", func(s api.PtahSchemaStatus) bool { return s.Phase == api.PhaseInSync })
	if !c.tableExists("public.accounts") {
		t.Fatal("InSync, and the table does not exist")
	}
	if a := st.Applied; a == nil || a.Outcome != api.OutcomeSucceeded || a.Plan.UID != string(plan.UID) {
		t.Errorf("applied: %+v; want plan %s succeeded", st.Applied, plan.UID)
	}
	if st.ActiveOperation != nil || st.OwedRelease != nil || st.PendingObservation != nil {
		t.Errorf("InSync with work on record: %+v", st)
	}
	var leases coordinationv1.LeaseList
	if err := c.e.Client.List(ctx, &leases, client.InNamespace(c.ns)); err != nil || len(leases.Items) != 0 {
		t.Errorf("%d Leases left after the run, want none: %v", len(leases.Items), err)
	}
	var jobs batchv1.JobList
	if err := c.e.Client.List(ctx, &jobs, client.InNamespace(c.ns)); err != nil {
		t.Fatal(err)
	}
	for _, j := range jobs.Items {
		t.Errorf("Job %s (%s) left after the run", j.Name, j.Labels["app.kubernetes.io/component"])
	}
	var approval api.PtahSchemaApprovalList
	if err := c.e.Client.List(ctx, &approval, client.InNamespace(c.ns)); err != nil || len(approval.Items) != 1 {
		t.Fatalf("approvals: %d, %v", len(approval.Items), err)
	}
}

// testLog is an io.Writer into the test's log.
type testLogWriter struct{ t *testing.T }

func (w testLogWriter) Write(b []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(b), "\n"))
	return len(b), nil
}

func testLog(t *testing.T) io.Writer { return testLogWriter{t} }

// dump logs the namespace's Jobs and Pods, for a test that failed waiting.
func (c *cluster) dump() {
	ctx := context.Background()
	var jobs batchv1.JobList
	_ = c.e.Client.List(ctx, &jobs, client.InNamespace(c.ns))
	for _, j := range jobs.Items {
		c.t.Logf("Job %s %s: active %d succeeded %d failed %d", j.Name, j.Labels["app.kubernetes.io/component"], j.Status.Active, j.Status.Succeeded, j.Status.Failed)
	}
	var pods corev1.PodList
	_ = c.e.Client.List(ctx, &pods, client.InNamespace(c.ns))
	for _, p := range pods.Items {
		msg := ""
		for _, cs := range p.Status.ContainerStatuses {
			if cs.State.Terminated != nil {
				msg = cs.State.Terminated.Message
			}
		}
		c.t.Logf("Pod %s %s: %s", p.Name, p.Status.Phase, msg)
	}
}
