package deploy_test

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"

	"github.com/ptah-run/ptah/deploy"
	"github.com/ptah-run/ptah/internal/kubetest"
	api "github.com/ptah-run/ptah/pkg/api/v1alpha1"
)

func TestMain(m *testing.M) { kubetest.Main(m) }

// controllerGen is the generator make generate runs, pinned to the same
// version.
var controllerGen = []string{"run", "sigs.k8s.io/controller-tools/cmd/controller-gen@v0.23.0"}

// TestGeneratedFilesAreCurrent regenerates the CRDs and the deep copies
// into a temporary folder and compares: a type changed without make
// generate fails here, not in a cluster.
func TestGeneratedFilesAreCurrent(t *testing.T) {
	out := t.TempDir()
	root, _ := filepath.Abs("..")
	run := func(args ...string) {
		cmd := exec.Command("go", append(slices.Clone(controllerGen), args...)...)
		cmd.Dir = root
		if b, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("controller-gen %s: %v\n%s", strings.Join(args, " "), err, b)
		}
	}
	run("object", "paths=./pkg/api/...", "output:object:dir="+filepath.Join(out, "object"))
	run("crd", "paths=./pkg/api/...", "output:crd:dir="+filepath.Join(out, "crds"))
	same := func(generated, committed string) {
		want, err := os.ReadFile(generated)
		if err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(committed)
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("%s is not what make generate writes (%v): run make generate and commit the result", committed, err)
		}
	}
	same(filepath.Join(out, "object", "zz_generated.deepcopy.go"), filepath.Join(root, "pkg", "api", "v1alpha1", "zz_generated.deepcopy.go"))
	generated, _ := filepath.Glob(filepath.Join(out, "crds", "*.yaml"))
	committed, _ := filepath.Glob(filepath.Join(root, "deploy", "crds", "*.yaml"))
	if len(generated) != len(committed) {
		t.Errorf("make generate writes %d CRDs, deploy/crds holds %d", len(generated), len(committed))
	}
	for _, g := range generated {
		same(g, filepath.Join(root, "deploy", "crds", filepath.Base(g)))
	}
}

// crds reads the embedded CRDs by kind.
func crds(t *testing.T) map[string]*apiextensionsv1.CustomResourceDefinition {
	t.Helper()
	list, err := deploy.ReadCRDs()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*apiextensionsv1.CustomResourceDefinition{}
	for _, crd := range list {
		out[crd.Spec.Names.Kind] = crd
	}
	return out
}

// TestCRDsFollowTheAPI holds the generated CRDs to what ptah needs of them:
// one per kind (the stored kinds, and the cluster's realm object), stamped
// with the contract version, a status subresource where the kind has a
// status, short names, and printer columns.
func TestCRDsFollowTheAPI(t *testing.T) {
	byKind := crds(t)
	kinds := append(slices.Clone(api.Kinds), api.KindPtahRealm)
	if len(byKind) != len(kinds) {
		t.Errorf("%d CRDs for %d kinds", len(byKind), len(kinds))
	}
	if crd := byKind[api.KindPtahRealm]; crd == nil || crd.Spec.Scope != "Cluster" {
		t.Errorf("the realm object's CRD is not cluster-scoped")
	}
	for _, kind := range kinds {
		crd := byKind[kind]
		if crd == nil {
			t.Errorf("no CRD for %s", kind)
			continue
		}
		if got := crd.Annotations["ptah.run/contract-version"]; got != strconv.Itoa(api.ContractVersion) {
			t.Errorf("%s: contract version annotation %q, want %d", kind, got, api.ContractVersion)
		}
		if len(crd.Spec.Names.ShortNames) == 0 || !slices.Contains(crd.Spec.Names.Categories, "ptah") {
			t.Errorf("%s: short names %v, categories %v", kind, crd.Spec.Names.ShortNames, crd.Spec.Names.Categories)
		}
		if len(crd.Spec.Versions) != 1 || crd.Spec.Versions[0].Name != api.Version {
			t.Fatalf("%s: versions %v", kind, crd.Spec.Versions)
		}
		v := crd.Spec.Versions[0]
		_, hasStatus := v.Schema.OpenAPIV3Schema.Properties["status"]
		if hasStatus != (v.Subresources != nil && v.Subresources.Status != nil) {
			t.Errorf("%s: status in schema %v, status subresource %v", kind, hasStatus, v.Subresources)
		}
		var columns []string
		for _, c := range v.AdditionalPrinterColumns {
			columns = append(columns, c.Name)
		}
		if !slices.Contains(columns, "Age") {
			t.Errorf("%s: printer columns %v lack Age", kind, columns)
		}
		if kind == api.KindPtahSchema || kind == api.KindPtahMigration {
			if want := []string{"Phase", "Reason", "Plan", "Age"}; !reflect.DeepEqual(columns, want) {
				t.Errorf("%s: printer columns %v, want %v", kind, columns, want)
			}
			if !hasStatus {
				t.Errorf("%s has no status", kind)
			}
		}
	}
}

func planObject(ns string) *api.PtahSchemaPlan {
	return &api.PtahSchemaPlan{
		ObjectMeta: metav1.ObjectMeta{Name: "app-1234", Namespace: ns},
		Spec: api.PtahSchemaPlanSpec{Schema: api.ObjectReference{Name: "app", UID: "u1"},
			Statements: []api.PlanStatement{}, LockTimeout: "5s", Fingerprint: "sha256:1"},
	}
}

// TestRecordsAreImmutableInTheAPIServer: plans, approvals and
// acknowledgments keep the spec they were created with; the API server
// itself refuses a change (CEL self == oldSelf), whoever asks. A resource's
// spec stays editable.
func TestRecordsAreImmutableInTheAPIServer(t *testing.T) {
	e := kubetest.Shared(t)
	ctx := context.Background()
	ns := e.Namespace(t)
	at := api.NewTime(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	objects := []client.Object{
		planObject(ns),
		&api.PtahSchemaApproval{ObjectMeta: metav1.ObjectMeta{Name: "a1", Namespace: ns},
			Spec: api.PtahSchemaApprovalSpec{Plan: api.ObjectReference{Name: "app-1234", UID: "p1"}, Schema: "app",
				PlanFingerprint: "sha256:1", Approver: "ana", ApprovedAt: at}},
		&api.PtahMigrationPlan{ObjectMeta: metav1.ObjectMeta{Name: "m-1", Namespace: ns},
			Spec: api.PtahMigrationPlanSpec{Migration: api.ObjectReference{Name: "m", UID: "u2"},
				Versions: []api.MigrationVersion{{Version: "1", Name: "init", Checksum: "sha256:2"}}, LockTimeout: "5s", Fingerprint: "sha256:3"}},
		&api.PtahMigrationApproval{ObjectMeta: metav1.ObjectMeta{Name: "a2", Namespace: ns},
			Spec: api.PtahMigrationApprovalSpec{Plan: api.ObjectReference{Name: "m-1", UID: "p2"}, Migration: "m",
				PlanFingerprint: "sha256:3", Approver: "ana", ApprovedAt: at}},
		&api.PtahMigrationRunAcknowledgment{ObjectMeta: metav1.ObjectMeta{Name: "k1", Namespace: ns},
			Spec: api.PtahMigrationRunAcknowledgmentSpec{Migration: api.ObjectReference{Name: "m", UID: "u2"},
				OperationID: "op1", By: "ana", At: at, Reason: "checked the journal"}},
	}
	for _, o := range objects {
		kind := reflect.TypeOf(o).Elem().Name()
		if err := e.Client.Create(ctx, o); err != nil {
			t.Fatalf("creating %s: %v", kind, err)
		}
		// A change to anything in the spec: the fingerprint for plans, the
		// reason or the named plan for decisions.
		switch o := o.(type) {
		case *api.PtahSchemaPlan:
			o.Spec.Fingerprint = "sha256:changed"
		case *api.PtahMigrationPlan:
			o.Spec.Versions[0].Checksum = "sha256:changed"
		case *api.PtahSchemaApproval:
			o.Spec.Plan.UID = "p-other"
		case *api.PtahMigrationApproval:
			o.Spec.Plan.UID = "p-other"
		case *api.PtahMigrationRunAcknowledgment:
			o.Spec.OperationID = "op-other"
		}
		err := e.Client.Update(ctx, o)
		if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "immutable") {
			t.Errorf("changing the spec of a %s: %v; want the API server to refuse it as immutable", kind, err)
		}
	}
	s := &api.PtahSchema{ObjectMeta: metav1.ObjectMeta{Name: "app", Namespace: ns},
		Spec: api.PtahSchemaSpec{Target: api.Target{CoordinationKey: "k"}, Source: api.Source{Path: "schema"}}}
	if err := e.Client.Create(ctx, s); err != nil {
		t.Fatal(err)
	}
	s.Spec.Source.Path = "schema-v2"
	if err := e.Client.Update(ctx, s); err != nil {
		t.Errorf("a PtahSchema's spec must stay editable: %v", err)
	}
}

// render builds the kustomize base as kubectl apply -k would.
func render(t *testing.T) []*unstructured.Unstructured {
	t.Helper()
	k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
	m, err := k.Run(filesys.MakeFsOnDisk(), ".")
	if err != nil {
		t.Fatalf("kustomize build deploy: %v", err)
	}
	var out []*unstructured.Unstructured
	for _, r := range m.Resources() {
		mp, err := r.Map()
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, &unstructured.Unstructured{Object: mp})
	}
	return out
}

// TestKustomizeBaseIsAcceptedByTheAPIServer renders deploy/ and has the API
// server validate every object by a server-side dry run (the namespace is
// created for real first, as kubectl apply -k would).
func TestKustomizeBaseIsAcceptedByTheAPIServer(t *testing.T) {
	e := kubetest.Shared(t)
	ctx := context.Background()
	objs := render(t)
	kinds := map[string]int{}
	for _, o := range objs {
		kinds[o.GetKind()]++
	}
	for kind, want := range map[string]int{"CustomResourceDefinition": len(api.Kinds) + 1 /* PtahRealm */, "Namespace": 1, "Deployment": 1,
		"ValidatingAdmissionPolicy": 3, "ValidatingAdmissionPolicyBinding": 3, "ServiceAccount": 1} {
		if kinds[kind] != want {
			t.Errorf("the base renders %d %s, want %d", kinds[kind], kind, want)
		}
	}
	for _, o := range objs {
		if o.GetKind() == "Namespace" {
			if err := e.Client.Create(ctx, o.DeepCopy()); err != nil && !apierrors.IsAlreadyExists(err) {
				t.Fatal(err)
			}
		}
	}
	for _, o := range objs {
		o.SetManagedFields(nil)
		err := e.Client.Apply(ctx, client.ApplyConfigurationFromUnstructured(o), client.DryRunAll, client.FieldOwner("kubetest"), client.ForceOwnership)
		if err != nil {
			t.Errorf("the API server refuses %s %s: %v", o.GetKind(), o.GetName(), err)
		}
	}
	var dep unstructured.Unstructured
	for _, o := range objs {
		if o.GetKind() == "Deployment" {
			dep = *o
		}
	}
	containers, _, _ := unstructured.NestedSlice(dep.Object, "spec", "template", "spec", "containers")
	if len(containers) != 1 {
		t.Fatalf("manager containers: %v", containers)
	}
	c := containers[0].(map[string]any)
	if ro, _, _ := unstructured.NestedBool(c, "securityContext", "readOnlyRootFilesystem"); !ro {
		t.Error("the manager's root filesystem is writable")
	}
	if args, _, _ := unstructured.NestedStringSlice(c, "args"); len(args) == 0 || args[0] != "serve" {
		t.Errorf("the manager runs %v, want ptah serve", args)
	}
}
