package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ptah-run/ptah/internal/engine"
	"github.com/ptah-run/ptah/internal/kubetest"
	api "github.com/ptah-run/ptah/pkg/api/v1alpha1"
)

// publishInCluster does what ptah serve does when it publishes a plan: a
// PtahSchema whose status names its current plan, and the plan.
func publishInCluster(t *testing.T, e *kubetest.Env, ns string) (*api.PtahSchema, *api.PtahSchemaPlan) {
	t.Helper()
	ctx := context.Background()
	s := &api.PtahSchema{ObjectMeta: metav1.ObjectMeta{Name: "app", Namespace: ns},
		Spec: api.PtahSchemaSpec{Target: api.Target{URLFrom: &api.URLSource{Env: "DATABASE_URL"}}, Source: api.Source{Path: "schema"},
			Policy: api.Policy{Apply: api.ApplyOnApproval, LockTimeout: "5s"}}}
	if err := e.Client.Create(ctx, s); err != nil {
		t.Fatal(err)
	}
	spec := api.PtahSchemaPlanSpec{Schema: api.ObjectReference{Name: s.Name, UID: string(s.UID)},
		Statements: []api.PlanStatement{{SQL: "CREATE TABLE t (id bigint)"}}, LockTimeout: "5s",
		Bindings: api.Bindings{TargetIdentityDigest: "sha256:t", ActualStateFingerprint: "sha256:a", DesiredStateFingerprint: "sha256:d",
			PolicyFingerprint: "sha256:p", ExecutionBinding: api.ExecutionBinding{PtahVersion: "test", ContractVersion: api.ContractVersion, Engine: api.EnginePostgres}}}
	spec.Fingerprint = engine.PlanFingerprint(spec)
	p := &api.PtahSchemaPlan{ObjectMeta: metav1.ObjectMeta{Name: "app-1", Namespace: ns}, Spec: spec}
	if err := e.Client.Create(ctx, p); err != nil {
		t.Fatal(err)
	}
	s.Status.Phase, s.Status.Reason = api.PhaseAwaitingApproval, api.ReasonAwaitingApproval
	s.Status.Plan = &api.PlanReference{ObjectReference: api.ObjectReference{Name: p.Name, UID: string(p.UID)}, Fingerprint: spec.Fingerprint}
	if err := e.Client.Status().Update(ctx, s); err != nil {
		t.Fatal(err)
	}
	return s, p
}

// TestClusterPlanApproveAndStatus runs ptah plan, approve and status as a person
// would, against a real API server with ptah's CRDs, RBAC roles and
// admission policies: the approval records the authenticated user, and
// the refusals get their exit codes.
func TestClusterPlanApproveAndStatus(t *testing.T) {
	e, err := kubetest.Start()
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = e.Stop() }()
	root := kubetest.RepoRoot()
	e.Apply(t, filepath.Join(root, "deploy", "admission", "approver-identity.yaml"), filepath.Join(root, "deploy", "rbac", "people.yaml"))
	ns := e.Namespace(t)
	e.Bind(t, ns, "alice", "ptah-approver", "ptah-viewer")
	alice := e.Kubeconfig(t, "alice")
	eve := e.Kubeconfig(t, "eve") // no role here
	_, plan := publishInCluster(t, e, ns)
	// Not runPtah: it makes every plan --no-publish, for its fake engine.
	inCluster := func(kubeconfig string, args ...string) result {
		var stdout, stderr bytes.Buffer
		code := newApp(&stdout, &stderr).run(context.Background(), append(args, "--cluster", "--kubeconfig", kubeconfig, "-n", ns))
		return result{code: code, stdout: stdout.String(), stderr: stderr.String()}
	}

	if r := runPtah(t, nil, "serve", "--job-image", "ptah:dev", "--kubeconfig", filepath.Join(t.TempDir(), "missing")); r.code != ExitCluster {
		t.Errorf("serve with a missing kubeconfig: exit %d, %s; want %d", r.code, r.stderr, ExitCluster)
	}
	if r := runPtah(t, nil, "status", "-n", ns); r.code != ExitUsage || !strings.Contains(r.stderr, "--cluster") {
		t.Errorf("-n without --cluster: exit %d, %s; want a usage error naming --cluster", r.code, r.stderr)
	}
	if r := inCluster(alice, "approve", string(plan.UID), "--as", "bob"); r.code != ExitUsage {
		t.Errorf("--as in a cluster: exit %d, %s; want a usage error", r.code, r.stderr)
	}
	if r := inCluster(eve, "approve", string(plan.UID), "--fingerprint", plan.Spec.Fingerprint); r.code != ExitForbidden {
		t.Errorf("a user without the approver role: exit %d, %s; want %d", r.code, r.stderr, ExitForbidden)
	}
	if r := inCluster(alice, "approve", string(plan.UID), "--fingerprint", "sha256:other"); r.code != ExitPlanMismatch {
		t.Errorf("another fingerprint: exit %d, %s; want %d", r.code, r.stderr, ExitPlanMismatch)
	}
	if r := inCluster(alice, "approve", "3f6c0c8e-1b7e-4c55-9d2a-6f1f1c9a0b11"); r.code != ExitNoSuchPlan {
		t.Errorf("an unknown UID: exit %d, %s; want %d", r.code, r.stderr, ExitNoSuchPlan)
	}
	// The plan a reviewer approves, as ptah serve published it.
	r := inCluster(alice, "plan", "-o", "json", "--detailed-exitcode")
	if r.code != ExitChanges || !strings.Contains(r.stdout, string(plan.UID)) || !strings.Contains(r.stdout, plan.Spec.Fingerprint) ||
		!strings.Contains(r.stdout, "CREATE TABLE t (id bigint)") {
		t.Errorf("plan --cluster -o json: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if r := inCluster(alice, "plan", "app"); r.code != ExitOK || !strings.Contains(r.stdout, "CREATE TABLE t") || !strings.Contains(r.stdout, string(plan.UID)) {
		t.Errorf("plan --cluster: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if r := inCluster(alice, "plan", "--no-publish"); r.code != ExitUsage {
		t.Errorf("plan --cluster --no-publish: exit %d, %s; want a usage error", r.code, r.stderr)
	}
	// The admission policy takes a moment to load: until it does, nothing
	// above depended on it, and alice's own approval is admitted either way.
	r = inCluster(alice, "approve", string(plan.UID), "--fingerprint", plan.Spec.Fingerprint, "--reason", "CHG-1", "-o", "json")
	if r.code != ExitOK {
		t.Fatalf("approve: exit %d\n%s", r.code, r.stderr)
	}
	var out approvalOutput
	if err := json.Unmarshal([]byte(r.stdout), &out); err != nil {
		t.Fatalf("approve -o json: %v\n%s", err, r.stdout)
	}
	var approvals api.PtahSchemaApprovalList
	if err := e.Client.List(context.Background(), &approvals, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	if len(approvals.Items) != 1 {
		t.Fatalf("%d approvals in the cluster, want 1", len(approvals.Items))
	}
	a := approvals.Items[0]
	if a.Spec.Approver != "alice" || a.Spec.Plan.UID != string(plan.UID) || a.Spec.PlanFingerprint != plan.Spec.Fingerprint ||
		a.Spec.Reason != "CHG-1" || string(a.UID) != out.Approval.Metadata.UID || time.Since(a.Spec.ApprovedAt.Time) > time.Hour {
		t.Errorf("the approval records %+v (uid %s); want alice's, bound to plan %s", a.Spec, a.UID, plan.UID)
	}
	if got := a.Labels["ptah.run/schema"]; got != "app" {
		t.Errorf("approval labels %v", a.Labels)
	}

	r = inCluster(alice, "status", "-o", "json")
	if r.code != ExitOK {
		t.Fatalf("status: exit %d\n%s", r.code, r.stderr)
	}
	var st struct {
		Items []struct {
			Resource   ref                  `json:"resource"`
			Registered bool                 `json:"registered"`
			Status     api.PtahSchemaStatus `json:"status"`
			Approval   *jsonApproval        `json:"approval"`
		} `json:"items"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &st); err != nil {
		t.Fatalf("status -o json: %v\n%s", err, r.stdout)
	}
	if len(st.Items) != 1 || st.Items[0].Resource.Name != "app" || st.Items[0].Status.Phase != api.PhaseAwaitingApproval ||
		st.Items[0].Approval == nil || st.Items[0].Approval.Approver != "alice" {
		t.Errorf("status in the cluster: %s", r.stdout)
	}
	if r := inCluster(alice, "status"); r.code != ExitOK || !strings.Contains(r.stdout, "app-1") || !strings.Contains(r.stdout, "alice") {
		t.Errorf("status text: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if r := inCluster(alice, "status", "nothing"); r.code != ExitNoSuchPlan {
		t.Errorf("status of an unknown name: exit %d, %s", r.code, r.stderr)
	}
}
