package controller_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	batchv1 "k8s.io/api/batch/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/ptah-run/ptah/internal/cli"
	"github.com/ptah-run/ptah/internal/controller"
	"github.com/ptah-run/ptah/internal/failpoint"
	"github.com/ptah-run/ptah/internal/kubetest"
	"github.com/ptah-run/ptah/internal/pgtest"
	"github.com/ptah-run/ptah/internal/source/oci/ocitest"
	"github.com/ptah-run/ptah/internal/store/kubestore"
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

	mu  sync.Mutex
	ran map[string]int // operation ID -> Pods run for it
	// instead, when set and it returns true, replaces a container's run
	// (with the exit code it returns).
	instead func(ct kubetest.Container) (int, bool)
	// stall, when set and it returns true, leaves a Job's Pod running.
	stall   func(job *batchv1.Job) bool
	kubelet *kubetest.Kubelet
	// aliceBound: alice may approve in the namespace.
	aliceBound bool
}

func newCluster(t *testing.T) *cluster {
	t.Helper()
	return setupCluster(t)
}

// setupCluster is newCluster. (Cluster tests run one at a time: side by
// side on a busy two-core machine their readings took over a minute.)
func setupCluster(t *testing.T) *cluster {
	t.Helper()
	e := kubetest.Shared(t)
	ctx := context.Background()
	c := &cluster{t: t, e: e, ns: e.Namespace(t), url: pgtest.NewDB(t), ran: map[string]int{}}
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
	run := runPtah(t)
	c.kubelet = &kubetest.Kubelet{Env: e, Namespace: c.ns, Stall: func(job *batchv1.Job) bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.stall != nil && c.stall(job)
	}, Run: func(ctx context.Context, ct kubetest.Container) int {
		c.mu.Lock()
		c.ran[argAfter(ct.Args, "--operation")]++
		instead := c.instead
		c.mu.Unlock()
		if instead != nil {
			if code, ok := instead(ct); ok {
				return code
			}
		}
		return run(ctx, ct)
	}}
	c.kubelet.Start(t)
	return c
}

func argAfter(args []string, flag string) string {
	for i, a := range args {
		if a == flag && i+1 < len(args) {
			return args[i+1]
		}
	}
	return ""
}

// runs is how many Pods ran for operation id.
func (c *cluster) runs(id string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.ran[id]
}

// managerConfig is the manager's ServiceAccount, with deploy/rbac's least
// privilege: no permission on Secrets.
func (c *cluster) managerConfig() *rest.Config {
	return c.e.ServiceAccount(c.t, "ptah-system", "ptah-manager")
}

// approve approves the plan as alice, with ptah approve --cluster.
func (c *cluster) approve(plan *api.PlanReference) {
	c.t.Helper()
	if !c.aliceBound {
		c.e.Bind(c.t, c.ns, "alice", "ptah-approver", "ptah-viewer")
		c.aliceBound = true
	}
	var out, errs bytes.Buffer
	if code := cli.Run(context.Background(), []string{"approve", plan.UID, "--fingerprint", plan.Fingerprint, "--cluster",
		"--kubeconfig", c.e.Kubeconfig(c.t, "alice"), "-n", c.ns}, &out, &errs); code != 0 {
		c.t.Fatalf("ptah approve --cluster: exit %d: %s", code, errs.String())
	}
}

// status is the PtahSchema's status as stored.
func (c *cluster) status() api.PtahSchemaStatus {
	c.t.Helper()
	var s api.PtahSchema
	if err := c.e.Client.Get(context.Background(), client.ObjectKey{Namespace: c.ns, Name: "app"}, &s); err != nil {
		c.t.Fatal(err)
	}
	return s.Status
}

// crashAt runs a manager in a process of its own until it stops dead at
// the failpoint point.
func (c *cluster) crashAt(point string, meanwhile func()) {
	c.t.Helper()
	child := controller.ChildManager(c.t, c.managerConfig(), c.ns, point)
	meanwhile()
	err := child.Wait()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != failpoint.ExitCode {
		c.t.Fatalf("the manager did not stop at %s: %v", point, err)
	}
}

// jobExists reports whether the Job of operation id exists.
func (c *cluster) jobExists(uid, id string) bool {
	var job batchv1.Job
	err := c.e.Client.Get(context.Background(), client.ObjectKey{Namespace: c.ns, Name: controller.JobName(uid, id)}, &job)
	if err != nil && !apierrors.IsNotFound(err) {
		c.t.Fatal(err)
	}
	return err == nil
}

// declare writes the ConfigMap of declared files and the PtahSchema
// "app" reading it.
func (c *cluster) declare(files map[string]string, policy api.Policy) *api.PtahSchema {
	c.t.Helper()
	return c.declareNamed("app", files, api.Target{}, policy)
}

// declareNamed writes the ConfigMap NAME-schema and the PtahSchema NAME
// reading it, its target the test's database (target's other fields as
// given).
func (c *cluster) declareNamed(name string, files map[string]string, target api.Target, policy api.Policy, schemas ...string) *api.PtahSchema {
	c.t.Helper()
	ctx := context.Background()
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name + "-schema", Namespace: c.ns}, Data: files}
	if err := c.e.Client.Create(ctx, cm); err != nil {
		c.t.Fatal(err)
	}
	target.URLFrom = &api.URLSource{SecretKeyRef: &api.SecretKeyRef{Name: "app-db", Key: "url"}}
	s := &api.PtahSchema{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: c.ns}, Spec: api.PtahSchemaSpec{
		Target:  target,
		Source:  api.Source{ConfigMap: &api.ConfigMapSource{Name: name + "-schema"}},
		Schemas: schemas,
		Policy:  policy,
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
	stop := c.start()
	c.t.Cleanup(stop)
}

// start runs a manager until stop, which waits for it to return.
func (c *cluster) start() (stop func()) {
	c.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	cfg := c.managerConfig()
	go func() {
		done <- controller.Run(ctx, controller.Options{Config: cfg, MetricsAddr: "0", ProbeAddr: "0",
			Logger: slog.New(slog.NewTextHandler(testLog(c.t), &slog.HandlerOptions{Level: slog.Level(-1)})), Version: "test", Image: "ptah:test",
			Namespaces: []string{c.ns}})
	}()
	var once sync.Once
	return func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
				c.t.Errorf("the manager: %v", err)
			}
		})
	}
}

// settleWithin bounds the tests' waits for the manager: a loaded CI
// machine (the other packages' servers running beside these) takes
// seconds a step, and the bound only matters when something is wrong.
const settleWithin = 3 * time.Minute

// waitFor polls the PtahSchema "app" until ok accepts its status.
func (c *cluster) waitFor(what string, ok func(api.PtahSchemaStatus) bool) api.PtahSchemaStatus {
	c.t.Helper()
	return c.waitForNamed("app", what, ok)
}

func (c *cluster) waitForNamed(name, what string, ok func(api.PtahSchemaStatus) bool) api.PtahSchemaStatus {
	c.t.Helper()
	var s api.PtahSchema
	deadline := time.Now().Add(settleWithin)
	for {
		if err := c.e.Client.Get(context.Background(), client.ObjectKey{Namespace: c.ns, Name: name}, &s); err != nil {
			c.t.Fatal(err)
		}
		if ok(s.Status) {
			return s.Status
		}
		if time.Now().After(deadline) {
			c.dump()
			c.t.Fatalf("waiting for %s of %s: the status is %s/%s: %s", what, name, s.Status.Phase, s.Status.Reason, s.Status.Message)
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

	c.approve(st.Plan)

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

	// The phases it went through are Events on the resource.
	var reasons []string
	deadline := time.Now().Add(settleWithin)
	for !slices.Contains(reasons, api.ReasonInSync) && time.Now().Before(deadline) {
		var events eventsv1.EventList
		if err := c.e.Client.List(ctx, &events, client.InNamespace(c.ns)); err != nil {
			t.Fatal(err)
		}
		reasons = nil
		for _, ev := range events.Items {
			if ev.Regarding.Kind == api.KindPtahSchema && ev.Regarding.Name == "app" {
				reasons = append(reasons, ev.Reason)
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
	for _, want := range []string{api.ReasonAwaitingApproval, api.ReasonApplying, api.ReasonInSync} {
		if !slices.Contains(reasons, want) {
			t.Errorf("no %s Event on the resource; its Events: %v", want, reasons)
		}
	}
	// And ptah's metrics counted the plan and the apply.
	if n := metricReaches(t, "ptah_applies_total", map[string]string{"kind": api.KindPtahSchema, "outcome": controller.OutcomeSucceeded}, 1); n < 1 {
		t.Errorf("ptah_applies_total{outcome=Succeeded} = %v, want at least 1", n)
	}
	if n := metricReaches(t, "ptah_plans_published_total", map[string]string{"kind": api.KindPtahSchema}, 1); n < 1 {
		t.Errorf("ptah_plans_published_total = %v, want at least 1", n)
	}
}

// metricReaches waits, within settleWithin, for a metric to reach at least
// min, and returns the last value read. The manager brings its metrics up
// to date after the status write a test waits for, so a single read right
// after seeing the status can come a moment early.
func metricReaches(t *testing.T, name string, labels map[string]string, min float64) float64 {
	t.Helper()
	deadline := time.Now().Add(settleWithin)
	for {
		n := metricValue(t, name, labels)
		if n >= min || time.Now().After(deadline) {
			return n
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// metricValue reads a counter or gauge with the labels from the manager's
// registry (the one /metrics serves).
func metricValue(t *testing.T, name string, labels map[string]string) float64 {
	t.Helper()
	families, err := metrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
	next:
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if v, ok := labels[l.GetName()]; ok && v != l.GetValue() {
					continue next
				}
			}
			if m.GetCounter() != nil {
				return m.GetCounter().GetValue()
			}
			return m.GetGauge().GetValue()
		}
	}
	return 0
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

const accountsSQL = "CREATE TABLE public.accounts (id bigint PRIMARY KEY, email text NOT NULL);\n"

// TestMissingDispatchedApplyJobForcesObservationWithoutRecreationInCluster:
// the manager stops dead once the dispatch marker is durable and before
// the apply Job exists. The next manager never creates that Job: the run
// may have happened as far as the record says, so its outcome is a
// question for the database, settled by a fresh reading (pendingObservation),
// and planning starts over from what the database holds.
func TestMissingDispatchedApplyJobForcesObservationWithoutRecreationInCluster(t *testing.T) {
	c := newCluster(t)
	s := c.declare(map[string]string{"01_accounts.sql": accountsSQL}, api.Policy{})
	uid := string(s.UID)
	c.crashAt(controller.FailAfterDispatchMarker, func() {
		st := c.waitFor("the plan", func(s api.PtahSchemaStatus) bool { return s.Phase == api.PhaseAwaitingApproval && s.Plan != nil })
		c.approve(st.Plan)
	})
	st := c.status()
	op := st.ActiveOperation
	if op == nil || op.DispatchedAt == nil {
		t.Fatalf("after the crash the status holds no dispatched claim: %+v", st)
	}
	if c.jobExists(uid, op.ID) {
		t.Fatal("the apply Job exists: the failpoint is after its creation")
	}

	c.serve()
	st = c.waitFor("the run settled by a reading", func(s api.PtahSchemaStatus) bool {
		return s.Applied != nil && s.Applied.OperationID == op.ID && s.Phase == api.PhaseAwaitingApproval && s.Plan != nil
	})
	if st.Applied.Outcome != api.OutcomeObserved || st.PendingObservation != nil || st.ActiveOperation != nil {
		t.Errorf("the uncertain run was settled as %+v (pending %+v, active %+v); want it observed", st.Applied, st.PendingObservation, st.ActiveOperation)
	}
	if st.Plan.UID == op.Plan.UID {
		t.Errorf("the settled resource still points at the dispatched plan %s", op.Plan.UID)
	}
	if n := c.runs(op.ID); n != 0 || c.jobExists(uid, op.ID) {
		t.Errorf("the dispatched operation was run %d times after the crash (Job exists: %v); want never", n, c.jobExists(uid, op.ID))
	}
	if c.tableExists("public.accounts") {
		t.Error("the table exists, yet no apply ever ran")
	}
}

// TestPersistedTargetLockReleaseRecoversAfterManagerCrashInCluster: the
// manager stops dead after recording the run and owing the Lease's release,
// before releasing it. The database stays held until the next manager
// completes the owed release, and the run is never repeated.
func TestPersistedTargetLockReleaseRecoversAfterManagerCrashInCluster(t *testing.T) {
	c := newCluster(t)
	c.declare(map[string]string{"01_accounts.sql": accountsSQL}, api.Policy{})
	c.crashAt(controller.FailBeforeRelease, func() {
		st := c.waitFor("the plan", func(s api.PtahSchemaStatus) bool { return s.Phase == api.PhaseAwaitingApproval && s.Plan != nil })
		c.approve(st.Plan)
	})
	st := c.status()
	owed := st.OwedRelease
	if owed == nil || st.Applied == nil || st.Applied.Outcome != api.OutcomeSucceeded || st.Applied.OperationID != owed.OperationID {
		t.Fatalf("after the crash: owed %+v, applied %+v; want the run recorded and its release owed", owed, st.Applied)
	}
	var lease coordinationv1.Lease
	if err := c.e.Client.Get(context.Background(), client.ObjectKey{Namespace: c.ns, Name: controller.LeaseName(owed.CoordinationDigest)}, &lease); err != nil ||
		lease.Spec.HolderIdentity == nil || *lease.Spec.HolderIdentity != owed.OperationID {
		t.Fatalf("the Lease after the crash: %+v, %v; want it held by %s", lease.Spec, err, owed.OperationID)
	}

	c.serve()
	st = c.waitFor("InSync", func(s api.PtahSchemaStatus) bool { return s.Phase == api.PhaseInSync })
	if st.OwedRelease != nil {
		t.Errorf("InSync with a release still owed: %+v", st.OwedRelease)
	}
	err := c.e.Client.Get(context.Background(), client.ObjectKey{Namespace: c.ns, Name: lease.Name}, &lease)
	if !apierrors.IsNotFound(err) {
		t.Errorf("the Lease is still there after the owed release: %v", err)
	}
	if n := c.runs(owed.OperationID); n != 1 || !c.tableExists("public.accounts") {
		t.Errorf("the apply ran %d times; want once, and its table", n)
	}
}

// TestAResultNotBoundToTheDispatchedPlanIsNotBelievedInCluster: an apply
// Pod that reports success for another plan digest (or another operation)
// is not believed: the outcome is unknown, and a fresh reading settles it
// (the plan never ran here, so the next plan creates the table again).
func TestAResultNotBoundToTheDispatchedPlanIsNotBelievedInCluster(t *testing.T) {
	c := newCluster(t)
	c.declare(map[string]string{"01_accounts.sql": accountsSQL}, api.Policy{})
	var claimed string
	c.serve()
	st := c.waitFor("the plan", func(s api.PtahSchemaStatus) bool { return s.Phase == api.PhaseAwaitingApproval && s.Plan != nil })
	c.mu.Lock()
	c.instead = func(ct kubetest.Container) (int, bool) {
		// The apply is the one Pod whose operation is the claim's: the
		// status names it once the manager claims.
		if op := c.status().ActiveOperation; op != nil && argAfter(ct.Args, "--operation") == op.ID {
			claimed = op.ID
			forged := controller.Result{OperationID: op.ID, PlanDigest: "sha256:" + strings.Repeat("0", 64), Outcome: controller.OutcomeSucceeded}
			if err := os.WriteFile(ct.TerminationLog, forged.Encode(), 0o644); err != nil {
				t.Error(err)
			}
			return 0, true
		}
		return 0, false
	}
	c.mu.Unlock()
	c.approve(st.Plan)
	st = c.waitFor("the forged result settled", func(s api.PtahSchemaStatus) bool {
		return s.Applied != nil && s.Phase == api.PhaseAwaitingApproval && s.Plan != nil
	})
	if st.Applied.Outcome != api.OutcomeObserved || st.Applied.OperationID != claimed {
		t.Errorf("applied %+v; want operation %s's outcome unknown, then observed (a result for another plan is not believed)", st.Applied, claimed)
	}
	if c.tableExists("public.accounts") {
		t.Error("the table exists: the forged Pod ran nothing")
	}
}

// TestSchemaBlocksOnAContestedRealmWithoutDispatchingAJobInCluster: a
// second PtahSchema on a database another resource of the cluster already
// claims is Blocked (RealmConflict) before anything is dispatched, even
// with policy Always; once both declare the sharing, it converges.
func TestSchemaBlocksOnAContestedRealmWithoutDispatchingAJobInCluster(t *testing.T) {
	c := newCluster(t)
	c.serve()
	c.declareNamed("first", map[string]string{"01_a.sql": "CREATE SCHEMA shared_a;\nCREATE TABLE shared_a.a (id bigint);\n"},
		api.Target{}, api.Policy{Apply: api.ApplyNever}, "shared_a")
	c.waitForNamed("first", "its reading", func(s api.PtahSchemaStatus) bool { return s.Target != nil && s.Plan != nil })

	c.declareNamed("second", map[string]string{"01_b.sql": "CREATE SCHEMA shared_b;\nCREATE TABLE shared_b.b (id bigint);\n"},
		api.Target{}, api.Policy{Apply: api.ApplyAlways}, "shared_b")
	st := c.waitForNamed("second", "the census", func(s api.PtahSchemaStatus) bool { return s.Reason == api.ReasonRealmConflict })
	if !strings.Contains(st.Message, "PtahSchema "+c.ns+"/first") && !strings.Contains(st.Message, "first") {
		t.Errorf("the conflict does not name the rival: %s", st.Message)
	}
	if n := metricReaches(t, "ptah_blocked_resources", map[string]string{"kind": api.KindPtahSchema, "reason": api.ReasonRealmConflict}, 1); n < 1 {
		t.Errorf("ptah_blocked_resources{reason=RealmConflict} = %v while a resource is blocked by the census", n)
	}
	if st.ActiveOperation != nil || st.Applied != nil || c.tableExists("shared_b.b") {
		t.Errorf("a contested resource claimed or ran: active %+v, applied %+v", st.ActiveOperation, st.Applied)
	}
	var jobs batchv1.JobList
	if err := c.e.Client.List(context.Background(), &jobs, client.InNamespace(c.ns), client.MatchingLabels{"app.kubernetes.io/component": controller.TaskApply}); err != nil || len(jobs.Items) != 0 {
		t.Errorf("%d apply Jobs exist, want none: %v", len(jobs.Items), err)
	}

	// Both declare the sharing: the second converges on its own schema.
	for _, name := range []string{"first", "second"} {
		var s api.PtahSchema
		if err := c.e.Client.Get(context.Background(), client.ObjectKey{Namespace: c.ns, Name: name}, &s); err != nil {
			t.Fatal(err)
		}
		s.Spec.Target.SharedRealm = true
		if err := c.e.Client.Update(context.Background(), &s); err != nil {
			t.Fatal(err)
		}
	}
	c.waitForNamed("second", "InSync once shared", func(s api.PtahSchemaStatus) bool { return s.Phase == api.PhaseInSync })
	if !c.tableExists("shared_b.b") || c.tableExists("shared_a.a") {
		t.Error("sharing the database, the second converged something else than its own schema")
	}
}

// TestStalePlanEvidenceForcesFreshObservationInCluster: the database
// changes between the claim and the dispatch (here, just before the
// re-derivation the manager takes under the Lease). The claim is dropped,
// its plan never runs, and the database is observed again: a new plan for
// what the database is now, which the old approval does not authorize.
func TestStalePlanEvidenceForcesFreshObservationInCluster(t *testing.T) {
	c := newCluster(t)
	c.declare(map[string]string{"01_accounts.sql": accountsSQL}, api.Policy{})
	c.instead = func(ct kubetest.Container) (int, bool) {
		if strings.HasSuffix(argAfter(ct.Args, "--operation"), "-rederive") {
			c.exec("CREATE TABLE public.accounts (id bigint PRIMARY KEY)") // someone got there first
		}
		return 0, false
	}
	c.serve()
	first := c.waitFor("the plan", func(s api.PtahSchemaStatus) bool { return s.Phase == api.PhaseAwaitingApproval && s.Plan != nil })
	c.approve(first.Plan)
	st := c.waitFor("a plan for the changed database", func(s api.PtahSchemaStatus) bool {
		return s.Phase == api.PhaseAwaitingApproval && s.Plan != nil && s.Plan.UID != first.Plan.UID
	})
	if st.Plan.Fingerprint == first.Plan.Fingerprint {
		t.Errorf("the new plan has the old one's fingerprint")
	}
	if st.Applied != nil {
		t.Errorf("a run is on record: %+v; want the claim dropped before dispatch", st.Applied)
	}
	var plan api.PtahSchemaPlan
	if err := c.e.Client.Get(context.Background(), client.ObjectKey{Namespace: c.ns, Name: st.Plan.Name}, &plan); err != nil {
		t.Fatal(err)
	}
	for _, stmt := range plan.Spec.Statements {
		if strings.Contains(stmt.SQL, "CREATE TABLE") {
			t.Errorf("the new plan still creates the table: %s", stmt.SQL)
		}
	}
	var jobs batchv1.JobList
	if err := c.e.Client.List(context.Background(), &jobs, client.InNamespace(c.ns), client.MatchingLabels{"app.kubernetes.io/component": controller.TaskApply}); err != nil || len(jobs.Items) != 0 {
		t.Errorf("%d apply Jobs exist, want none: %v", len(jobs.Items), err)
	}
}

// TestAPodThatMayStillRunKeepsTheDatabaseHeldInCluster: while the apply's
// Pod runs (a node that stopped reporting, a hung statement), the resource
// stays Applying under its claim and the database's Lease stays held,
// whatever the time since dispatch (until its deadline). When the Pod
// ends without a result the outcome is unknown: a fresh reading settles
// it, and only then is the Lease released.
func TestAPodThatMayStillRunKeepsTheDatabaseHeldInCluster(t *testing.T) {
	c := newCluster(t)
	_, op := c.stalledApply()
	leaseHolder := func() string {
		var l coordinationv1.Lease
		err := c.e.Client.Get(context.Background(), client.ObjectKey{Namespace: c.ns, Name: controller.LeaseName(op.CoordinationDigest)}, &l)
		if apierrors.IsNotFound(err) || err == nil && l.Spec.HolderIdentity == nil {
			return ""
		}
		if err != nil {
			t.Fatal(err)
		}
		return *l.Spec.HolderIdentity
	}
	time.Sleep(12 * time.Second) // passes at the manager's poll, while the Pod runs
	if st := c.status(); st.Phase != api.PhaseApplying || !strings.Contains(st.Message, "runs plan") || st.ActiveOperation == nil ||
		leaseHolder() != op.ID {
		t.Fatalf("while the Pod runs: %s/%s (%s), claim %+v, Lease held by %q; want Applying, the claim, the Lease held by %s",
			st.Phase, st.Reason, st.Message, st.ActiveOperation, leaseHolder(), op.ID)
	}

	if err := c.kubelet.End(context.Background(), controller.JobName(string(c.uid("app")), op.ID), 137, ""); err != nil {
		t.Fatal(err)
	}
	st := c.waitFor("the unknown outcome settled", func(s api.PtahSchemaStatus) bool {
		return s.Applied != nil && s.Applied.OperationID == op.ID && s.Phase == api.PhaseAwaitingApproval
	})
	if st.Applied.Outcome != api.OutcomeObserved {
		t.Errorf("the run ended without a result and was recorded as %s; want observed", st.Applied.Outcome)
	}
	if h := leaseHolder(); h != "" {
		t.Errorf("the Lease is still held by %q after the run settled", h)
	}
}

// exec runs SQL on the test's database.
func (c *cluster) exec(sql string) {
	c.t.Helper()
	conn, err := pgx.Connect(context.Background(), c.url)
	if err != nil {
		c.t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(context.Background(), sql); err != nil {
		c.t.Fatal(err)
	}
}

// uid is the UID of the PtahSchema name.
func (c *cluster) uid(name string) string {
	c.t.Helper()
	var s api.PtahSchema
	if err := c.e.Client.Get(context.Background(), client.ObjectKey{Namespace: c.ns, Name: name}, &s); err != nil {
		c.t.Fatal(err)
	}
	return string(s.UID)
}

// TestASuspendedPtahSchemaStartsNothingInCluster: spec.suspend stops ptah
// serve from starting anything (not even a reading), says so in the
// status, and clearing it resumes the work; a spec ptah cannot act on is
// refused by name in the status.
func TestASuspendedPtahSchemaStartsNothingInCluster(t *testing.T) {
	c := newCluster(t)
	s := c.declare(map[string]string{"01_accounts.sql": accountsSQL}, api.Policy{})
	s.Spec.Suspend = true
	if err := c.e.Client.Update(context.Background(), s); err != nil {
		t.Fatal(err)
	}
	c.serve()
	c.waitFor("Suspended", func(s api.PtahSchemaStatus) bool { return s.Reason == api.ReasonSuspended })
	time.Sleep(time.Second)
	var jobs batchv1.JobList
	if err := c.e.Client.List(context.Background(), &jobs, client.InNamespace(c.ns)); err != nil || len(jobs.Items) != 0 {
		t.Fatalf("%d Jobs for a suspended resource, want none: %v", len(jobs.Items), err)
	}

	if err := c.e.Client.Get(context.Background(), client.ObjectKeyFromObject(s), s); err != nil {
		t.Fatal(err)
	}
	s.Spec.Suspend = false
	if err := c.e.Client.Update(context.Background(), s); err != nil {
		t.Fatal(err)
	}
	c.waitFor("the plan once resumed", func(s api.PtahSchemaStatus) bool { return s.Phase == api.PhaseAwaitingApproval && s.Plan != nil })

	// A spec the CRD's schema admits and ptah does not (an interval under
	// the minimum) is refused by name, in the status.
	if err := c.e.Client.Get(context.Background(), client.ObjectKeyFromObject(s), s); err != nil {
		t.Fatal(err)
	}
	s.Spec.Interval = "1s"
	if err := c.e.Client.Update(context.Background(), s); err != nil {
		t.Fatal(err)
	}
	st := c.waitFor("the invalid spec refused", func(s api.PtahSchemaStatus) bool { return s.Reason == api.ReasonInvalidSpec })
	if !strings.Contains(st.Message, "spec.interval: 1s is shorter than the minimum 30s") {
		t.Errorf("the refusal does not name the field: %s", st.Message)
	}
}

// TestACoordinationKeyIsItsNamespacesUnlessARealmJoinsThemInCluster: two
// PtahSchemas in two namespaces, on two databases, name the same
// coordination key. Each key is its namespace's: neither holds up the
// other. Once an administrator's PtahRealm joins the key across both
// namespaces, they are one realm, and the census blocks the newcomer.
func TestACoordinationKeyIsItsNamespacesUnlessARealmJoinsThemInCluster(t *testing.T) {
	a, b := newCluster(t), setupCluster(t)
	a.serve()
	b.serve()
	key := api.Target{CoordinationKey: "billing-" + strings.ToLower(a.ns[:8])}
	files := map[string]string{"01_accounts.sql": accountsSQL}
	a.declareNamed("app", files, key, api.Policy{Apply: api.ApplyNever})
	b.declareNamed("app", files, key, api.Policy{Apply: api.ApplyNever})
	for _, c := range []*cluster{a, b} {
		st := c.waitFor("its plan, unblocked", func(s api.PtahSchemaStatus) bool { return s.Target != nil && s.Plan != nil })
		if st.Phase == api.PhaseBlocked {
			t.Errorf("%s: %s/%s with a key of its own namespace: %s", c.ns, st.Phase, st.Reason, st.Message)
		}
	}

	realm := &api.PtahRealm{ObjectMeta: metav1.ObjectMeta{Name: "billing-" + a.ns[:8]}, Spec: api.PtahRealmSpec{
		CoordinationKey: key.CoordinationKey, Namespaces: []string{a.ns, b.ns}}}
	if err := a.e.Client.Create(context.Background(), realm); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.e.Client.Delete(context.Background(), realm) })
	// A spec change wakes each; the census then counts both as one realm.
	for _, c := range []*cluster{a, b} {
		var s api.PtahSchema
		if err := c.e.Client.Get(context.Background(), client.ObjectKey{Namespace: c.ns, Name: "app"}, &s); err != nil {
			t.Fatal(err)
		}
		s.Spec.Interval = "1m"
		if err := c.e.Client.Update(context.Background(), &s); err != nil {
			t.Fatal(err)
		}
	}
	st := b.waitFor("the realm's census", func(s api.PtahSchemaStatus) bool { return s.Reason == api.ReasonRealmConflict })
	if !strings.Contains(st.Message, a.ns) {
		t.Errorf("the conflict does not name the other namespace's resource: %s", st.Message)
	}
}

// TestServeReadsAnOCIArtifactPinnedByDigestInCluster: the declared files
// come from an OCI artifact pinned by digest, in a registry that wants the
// credentials of the resource's pull Secret; the plan binds the artifact,
// and a new digest in the spec is a new plan.
func TestServeReadsAnOCIArtifactPinnedByDigestInCluster(t *testing.T) {
	c := newCluster(t)
	// A registry that wants credentials: the pull Secret's reach the
	// reading's Pod (and only it).
	reg := ocitest.StartWithAuth(t, "ci", "s3cret-token")
	pull := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "registry-creds", Namespace: c.ns}, Type: corev1.SecretTypeDockerConfigJson,
		Data: map[string][]byte{corev1.DockerConfigJsonKey: reg.DockerConfig("ci", "s3cret-token")}}
	if err := c.e.Client.Create(context.Background(), pull); err != nil {
		t.Fatal(err)
	}
	v1 := reg.Push(t, "acme/app-schema", map[string]string{"01_accounts.sql": accountsSQL})
	s := &api.PtahSchema{ObjectMeta: metav1.ObjectMeta{Name: "app", Namespace: c.ns}, Spec: api.PtahSchemaSpec{
		Target: api.Target{URLFrom: &api.URLSource{SecretKeyRef: &api.SecretKeyRef{Name: "app-db", Key: "url"}}},
		Source: api.Source{OCI: &api.OCISource{Ref: v1, PullSecret: "registry-creds"}},
	}}
	if err := c.e.Client.Create(context.Background(), s); err != nil {
		t.Fatal(err)
	}
	c.serve()
	first := c.waitFor("the plan of v1", func(s api.PtahSchemaStatus) bool { return s.Phase == api.PhaseAwaitingApproval && s.Plan != nil })
	plan := c.plan(first.Plan.Name)
	if len(plan.Spec.Statements) == 0 || !strings.Contains(plan.Spec.Statements[0].SQL, "CREATE TABLE public.accounts") {
		t.Fatalf("the plan of v1: %+v", plan.Spec.Statements)
	}

	v2 := reg.Push(t, "acme/app-schema", map[string]string{"01_accounts.sql": accountsSQL, "02_orders.sql": "CREATE TABLE public.orders (id bigint);\n"})
	if err := c.e.Client.Get(context.Background(), client.ObjectKeyFromObject(s), s); err != nil {
		t.Fatal(err)
	}
	s.Spec.Source.OCI.Ref = v2
	if err := c.e.Client.Update(context.Background(), s); err != nil {
		t.Fatal(err)
	}
	second := c.waitFor("the plan of v2", func(s api.PtahSchemaStatus) bool {
		return s.Phase == api.PhaseAwaitingApproval && s.Plan != nil && s.Plan.UID != first.Plan.UID
	})
	p2 := c.plan(second.Plan.Name)
	if p2.Spec.Bindings.ArtifactDigest == plan.Spec.Bindings.ArtifactDigest {
		t.Error("two artifacts, one artifact digest")
	}
	var sqls []string
	for _, st := range p2.Spec.Statements {
		sqls = append(sqls, st.SQL)
	}
	if !strings.Contains(strings.Join(sqls, "\n"), "public.orders") {
		t.Errorf("the plan of v2 does not create orders: %v", sqls)
	}
}

// plan reads the plan object name.
func (c *cluster) plan(name string) api.PtahSchemaPlan {
	c.t.Helper()
	var p api.PtahSchemaPlan
	if err := c.e.Client.Get(context.Background(), client.ObjectKey{Namespace: c.ns, Name: name}, &p); err != nil {
		c.t.Fatal(err)
	}
	return p
}

// TestDeletingAPtahSchemaWaitsForItsRunInCluster: a PtahSchema deleted
// while its apply's Pod runs stays (its finalizer) with the database's
// Lease held until the Pod can no longer write; then its Lease is
// released, its Jobs removed, and it goes.
func TestDeletingAPtahSchemaWaitsForItsRunInCluster(t *testing.T) {
	c := newCluster(t)
	s, op := c.stalledApply()
	ctx := context.Background()
	if err := c.e.Client.Delete(ctx, s); err != nil {
		t.Fatal(err)
	}
	time.Sleep(6 * time.Second) // a poll of the manager's
	if err := c.e.Client.Get(ctx, client.ObjectKeyFromObject(s), s); err != nil || s.DeletionTimestamp == nil {
		t.Fatalf("the resource went while its run may still write: %v", err)
	}
	leaseKey := client.ObjectKey{Namespace: c.ns, Name: controller.LeaseName(op.CoordinationDigest)}
	var lease coordinationv1.Lease
	if err := c.e.Client.Get(ctx, leaseKey, &lease); err != nil {
		t.Fatalf("the Lease is gone while the run may still write: %v", err)
	}

	if err := c.kubelet.End(ctx, controller.JobName(string(s.UID), op.ID), 137, ""); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(settleWithin)
	for {
		err := c.e.Client.Get(ctx, client.ObjectKeyFromObject(s), s)
		if apierrors.IsNotFound(err) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the resource is still there after its run ended: %v, finalizers %v", err, s.Finalizers)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if err := c.e.Client.Get(ctx, leaseKey, &lease); !apierrors.IsNotFound(err) {
		t.Errorf("the Lease outlived the deleted resource: %v", err)
	}
	if c.jobExists(string(s.UID), op.ID) {
		t.Error("the apply Job outlived the deleted resource")
	}
}

// stalledApply declares "app", serves it, approves its plan and returns
// once its apply is dispatched, with the apply's Pod left running.
func (c *cluster) stalledApply() (*api.PtahSchema, *api.Operation) {
	c.t.Helper()
	s := c.declare(map[string]string{"01_accounts.sql": accountsSQL}, api.Policy{})
	c.stall = func(job *batchv1.Job) bool { return job.Labels["app.kubernetes.io/component"] == controller.TaskApply }
	c.serve()
	first := c.waitFor("the plan", func(s api.PtahSchemaStatus) bool { return s.Phase == api.PhaseAwaitingApproval && s.Plan != nil })
	c.approve(first.Plan)
	st := c.waitFor("the dispatch", func(s api.PtahSchemaStatus) bool {
		return s.ActiveOperation != nil && s.ActiveOperation.DispatchedAt != nil
	})
	return s, st.ActiveOperation
}

// TestServeRefusesNewerStoredStateWhileItRuns: the stored-state fence is
// part of every pass, not only of the manager's start. Once a newer ptah
// has written an object, the next pass of a resource refuses: a Warning
// Event names the object, and nothing is written or started (no status, no
// Job). Once the object is gone, the resource's next change runs.
func TestServeRefusesNewerStoredStateWhileItRuns(t *testing.T) {
	c := newCluster(t)
	ctx := context.Background()
	c.serve()
	s := c.declare(map[string]string{"01_a.sql": "CREATE TABLE public.a (id bigint);\n"}, api.Policy{Apply: api.ApplyAlways})
	c.waitFor("InSync", func(s api.PtahSchemaStatus) bool { return s.Reason == api.ReasonInSync })

	newer := &api.PtahMigrationApproval{ObjectMeta: metav1.ObjectMeta{Name: "from-a-newer-ptah", Namespace: c.ns,
		Annotations: map[string]string{kubestore.AnnotationContractVersion: fmt.Sprint(api.ContractVersion + 1)}},
		Spec: api.PtahMigrationApprovalSpec{Plan: api.ObjectReference{Name: "m-1", UID: "u"}, Migration: "m", PlanFingerprint: "f",
			Approver: "ana", ApprovedAt: api.NewTime(time.Now())}}
	if err := c.e.Client.Create(ctx, newer); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.e.Client.Delete(ctx, newer) }()
	generation := c.respecify(s, "5m")
	note := c.waitForEvent("app", controller.ReasonNewerStoredState)
	if !strings.Contains(note, "PtahMigrationApproval "+c.ns+"/from-a-newer-ptah") {
		t.Errorf("the refusal's Event: %q; want it to name the newer object", note)
	}
	time.Sleep(2 * time.Second) // anything the pass might wrongly do next
	if st := c.status(); st.ObservedGeneration == generation {
		t.Errorf("the refused pass wrote the status (observed generation %d)", st.ObservedGeneration)
	}
	var jobs batchv1.JobList
	if err := c.e.Client.List(ctx, &jobs, client.InNamespace(c.ns), client.MatchingLabels{controller.LabelResourceUID: string(s.UID)}); err != nil {
		t.Fatal(err)
	}
	for _, j := range jobs.Items {
		t.Errorf("the refused pass started Job %s (%s)", j.Name, j.Labels["app.kubernetes.io/component"])
	}

	if err := c.e.Client.Delete(ctx, newer); err != nil {
		t.Fatal(err)
	}
	generation = c.respecify(s, "6m")
	c.waitFor("InSync at the new generation", func(st api.PtahSchemaStatus) bool {
		return st.Reason == api.ReasonInSync && st.ObservedGeneration == generation
	})
}

// respecify sets the resource's schedule interval, a change of spec that
// wakes its reconcile, and returns its new generation.
func (c *cluster) respecify(s *api.PtahSchema, interval string) int64 {
	c.t.Helper()
	ctx := context.Background()
	var live api.PtahSchema
	if err := c.e.Client.Get(ctx, client.ObjectKeyFromObject(s), &live); err != nil {
		c.t.Fatal(err)
	}
	live.Spec.Schedule.Interval = interval
	if err := c.e.Client.Update(ctx, &live); err != nil {
		c.t.Fatal(err)
	}
	return live.Generation
}

// waitForEvent waits for an Event of reason on the PtahSchema name, and
// returns its note.
func (c *cluster) waitForEvent(name, reason string) string {
	c.t.Helper()
	deadline := time.Now().Add(settleWithin)
	for {
		var events eventsv1.EventList
		if err := c.e.Client.List(context.Background(), &events, client.InNamespace(c.ns)); err != nil {
			c.t.Fatal(err)
		}
		for _, ev := range events.Items {
			if ev.Regarding.Kind == api.KindPtahSchema && ev.Regarding.Name == name && ev.Reason == reason {
				return ev.Note
			}
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("no %s Event on %s", reason, name)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
