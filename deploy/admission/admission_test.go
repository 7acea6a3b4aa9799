// Package admission_test has a real API server enforce the admission
// policies in this folder, in a control plane of its own (the policies
// apply to every request once installed).
package admission_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ptah-run/ptah/internal/kubetest"
	api "github.com/ptah-run/ptah/pkg/api/v1alpha1"
)

func TestMain(m *testing.M) { kubetest.Main(m) }

// managerUser is the manager's ServiceAccount as the API server names it.
const managerUser = "system:serviceaccount:ptah-system:ptah-manager"

// userClient returns a client authenticated as name, granted the
// ClusterRoles in ns.
func userClient(t *testing.T, e *kubetest.Env, ns, name string, roles ...string) client.Client {
	t.Helper()
	e.Bind(t, ns, name, roles...)
	c, err := client.New(e.User(t, name), client.Options{Scheme: e.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func approval(ns, name, approver string) *api.PtahSchemaApproval {
	return &api.PtahSchemaApproval{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: api.PtahSchemaApprovalSpec{Plan: api.ObjectReference{Name: "app-1", UID: "p1"}, Schema: "app",
			PlanFingerprint: "sha256:1", Approver: approver, ApprovedAt: api.NewTime(time.Now())}}
}

// eventually retries fn until it returns true: a newly installed policy
// takes effect once the API server has loaded it, a moment later.
func eventually(t *testing.T, what string, fn func() (bool, error)) {
	t.Helper()
	var last error
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		ok, err := fn()
		if ok {
			return
		}
		last = err
	}
	t.Fatalf("%s: last answer %v", what, last)
}

// TestApprovalNamingAnotherUserIsRefused: a decision records its maker, and
// the API server admits it only when that is the authenticated user.
func TestApprovalNamingAnotherUserIsRefused(t *testing.T) {
	e := kubetest.Shared(t)
	ctx := context.Background()
	e.Apply(t, "approver-identity.yaml", "../rbac/people.yaml")
	ns := e.Namespace(t)
	alice := userClient(t, e, ns, "alice", "ptah-approver", "ptah-viewer")

	n := 0
	eventually(t, "an approval alice makes in bob's name must be refused", func() (bool, error) {
		n++ // until the policy is loaded, the forged approvals are admitted
		err := alice.Create(ctx, approval(ns, fmt.Sprintf("forged-%d", n), "bob"))
		if apierrors.IsForbidden(err) && strings.Contains(err.Error(), `names "bob" but was made by "alice"`) {
			return true, nil
		}
		return false, err
	})
	if err := alice.Create(ctx, approval(ns, "own", "alice")); err != nil {
		t.Fatalf("alice approving in her own name: %v", err)
	}
	ack := &api.PtahMigrationRunAcknowledgment{ObjectMeta: metav1.ObjectMeta{Name: "k1", Namespace: ns},
		Spec: api.PtahMigrationRunAcknowledgmentSpec{Migration: api.ObjectReference{Name: "m", UID: "u"},
			OperationID: "op1", By: "bob", At: api.NewTime(time.Now()), Reason: "checked"}}
	if err := alice.Create(ctx, ack); !apierrors.IsForbidden(err) {
		t.Errorf("an acknowledgment alice records in bob's name: %v; want it refused", err)
	}
	ack.Spec.By = "alice"
	if err := alice.Create(ctx, ack); err != nil {
		t.Errorf("alice acknowledging in her own name: %v", err)
	}
}

// TestOnlyTheManagerWritesStatus: status is the controller's record. Not
// even a cluster administrator may write it; the manager may.
func TestOnlyTheManagerWritesStatus(t *testing.T) {
	e := kubetest.Shared(t)
	ctx := context.Background()
	e.Apply(t, "status-writer.yaml", "../namespace.yaml", "../rbac/manager.yaml")
	ns := e.Namespace(t)
	manager := userClient(t, e, ns, managerUser) // its ClusterRoleBinding comes from manager.yaml
	a := approval(ns, "a1", "admin")             // envtest's administrator is "admin"
	if err := e.Client.Create(ctx, a); err != nil {
		t.Fatalf("creating the approval as the administrator: %v", err)
	}
	eventually(t, "the administrator writing an approval's status must be refused", func() (bool, error) {
		var cur api.PtahSchemaApproval
		if err := e.Client.Get(ctx, client.ObjectKeyFromObject(a), &cur); err != nil {
			return false, err
		}
		cur.Status.Stale, cur.Status.StaleReason = true, "by hand"
		err := e.Client.Status().Update(ctx, &cur)
		if apierrors.IsForbidden(err) && strings.Contains(err.Error(), "only the ptah manager writes the status") {
			return true, nil
		}
		return false, err
	})
	var cur api.PtahSchemaApproval
	if err := manager.Get(ctx, client.ObjectKeyFromObject(a), &cur); err != nil {
		t.Fatal(err)
	}
	cur.Status.Stale, cur.Status.StaleReason = true, "plan replaced"
	if err := manager.Status().Update(ctx, &cur); err != nil {
		t.Fatalf("the manager writing status: %v", err)
	}
}

// TestTheManagerChangesNoSpec: the manager may patch a resource to hold
// its deletion (a finalizer), and the API server refuses any change it
// would make to the spec, though its role allows the patch.
func TestTheManagerChangesNoSpec(t *testing.T) {
	e := kubetest.Shared(t)
	ctx := context.Background()
	e.Apply(t, "manager-spec.yaml", "../namespace.yaml", "../rbac/manager.yaml")
	ns := e.Namespace(t)
	manager := userClient(t, e, ns, managerUser)
	s := &api.PtahSchema{ObjectMeta: metav1.ObjectMeta{Name: "app", Namespace: ns}, Spec: api.PtahSchemaSpec{
		Target: api.Target{URLFrom: &api.URLSource{Env: "DATABASE_URL"}}, Source: api.Source{Path: "schema"}}}
	if err := e.Client.Create(ctx, s); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the manager changing a spec must be refused", func() (bool, error) {
		var cur api.PtahSchema
		if err := manager.Get(ctx, client.ObjectKeyFromObject(s), &cur); err != nil {
			return false, err
		}
		base := cur.DeepCopy()
		// Always a change: a patch that slipped in before the policy
		// loaded would make the same patch a no-op, which it admits.
		cur.Spec.Policy.Apply = api.ApplyAlways
		if base.Spec.Policy.Apply == api.ApplyAlways {
			cur.Spec.Policy.Apply = api.ApplyNever
		}
		err := manager.Patch(ctx, &cur, client.MergeFrom(base))
		if apierrors.IsForbidden(err) && strings.Contains(err.Error(), "the ptah manager changes no spec") {
			return true, nil
		}
		return false, fmt.Errorf("patching the spec: %v", err)
	})
	var cur api.PtahSchema
	if err := manager.Get(ctx, client.ObjectKeyFromObject(s), &cur); err != nil {
		t.Fatal(err)
	}
	base := cur.DeepCopy()
	cur.Finalizers = append(cur.Finalizers, "ptah.run/runs")
	if err := manager.Patch(ctx, &cur, client.MergeFrom(base)); err != nil {
		t.Fatalf("the manager holding a deletion: %v", err)
	}
	// A person still edits the spec.
	if err := e.Client.Get(ctx, client.ObjectKeyFromObject(s), &cur); err != nil {
		t.Fatal(err)
	}
	cur.Spec.Policy.Apply = api.ApplyNever
	if err := e.Client.Update(ctx, &cur); err != nil {
		t.Fatalf("the administrator editing the spec: %v", err)
	}
	base = cur.DeepCopy()
	cur.Finalizers = nil
	if err := e.Client.Patch(ctx, &cur, client.MergeFrom(base)); err != nil {
		t.Fatal(err)
	}
}
