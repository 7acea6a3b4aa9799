package kubestore_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ptah-run/ptah/deploy"
	"github.com/ptah-run/ptah/internal/kubetest"
	"github.com/ptah-run/ptah/internal/store"
	"github.com/ptah-run/ptah/internal/store/kubestore"
	"github.com/ptah-run/ptah/internal/store/storetest"
	api "github.com/ptah-run/ptah/pkg/api/v1alpha1"
)

// The contract suite writes specs and statuses of its own shape ({"v": 1})
// under ptah's kinds, so this package's control plane serves those kinds
// with ptah's CRDs but schemas that keep any JSON: the suite tests the
// store, TestRealResources the store on the real schemas.
func TestMain(m *testing.M) {
	crds, err := permissiveCRDs()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	kubetest.Main(m, kubetest.WithCRDs(crds...))
}

func permissiveCRDs() ([]*apiextensionsv1.CustomResourceDefinition, error) {
	crds, err := deploy.ReadCRDs()
	if err != nil {
		return nil, err
	}
	keep := true
	anything := apiextensionsv1.JSONSchemaProps{Type: "object", XPreserveUnknownFields: &keep}
	for _, crd := range crds {
		for i := range crd.Spec.Versions {
			crd.Spec.Versions[i].Schema = &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{
				Type: "object",
				Properties: map[string]apiextensionsv1.JSONSchemaProps{
					"apiVersion": {Type: "string"}, "kind": {Type: "string"}, "metadata": {Type: "object"},
					"spec": anything, "status": anything,
				},
			}}
			// The suite's objects have statuses under every kind.
			crd.Spec.Versions[i].Subresources = &apiextensionsv1.CustomResourceSubresources{Status: &apiextensionsv1.CustomResourceSubresourceStatus{}}
		}
	}
	return crds, nil
}

// empty deletes every object of every kind, so that each subtest starts
// from an empty store; the suite's namespaces are kept (with no namespace
// controller, a deleted namespace would never go away).
func empty(t *testing.T, c client.Client) {
	t.Helper()
	ctx := context.Background()
	for _, ns := range []string{"other"} {
		err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}
	for _, kind := range api.Kinds {
		for _, ns := range []string{"default", "other"} {
			u := &unstructured.Unstructured{}
			u.SetAPIVersion(api.APIVersion)
			u.SetKind(kind)
			if err := c.DeleteAllOf(ctx, u, client.InNamespace(ns)); err != nil {
				t.Fatalf("emptying %s in %s: %v", kind, ns, err)
			}
		}
	}
}

func TestContract(t *testing.T) {
	e := kubetest.Shared(t)
	storetest.Run(t, func(t *testing.T) store.Store {
		empty(t, e.Client)
		return kubestore.New(e.Client)
	}, storetest.Sequential(), storetest.NamespaceRequired())
}

// TestRealResources: on ptah's real CRDs, the store keeps typed resources
// and statuses whole (nothing pruned by the schemas), records the contract
// version of a status write where the schema has room for it, and the API
// server refuses a change to a plan's spec even past the store.
func TestRealResources(t *testing.T) {
	e, err := kubetest.Start()
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = e.Stop() }()
	ns := e.Namespace(t)
	s := kubestore.New(e.Client)
	ctx := context.Background()

	spec := api.PtahSchemaSpec{Target: api.Target{Engine: api.EnginePostgres, URLFrom: &api.URLSource{Env: "DATABASE_URL"}},
		Source: api.Source{Path: "schema"}, Schemas: []string{"public"}, Policy: api.Policy{Apply: api.ApplyOnApproval, LockTimeout: "5s"}}
	specJSON, _ := json.Marshal(spec)
	created, err := s.Create(ctx, store.Object{Kind: api.KindPtahSchema, Namespace: ns, Name: "app",
		ContractVersion: api.ContractVersion, Labels: map[string]string{"ptah.run/target": "t1"}, Spec: specJSON})
	if err != nil {
		t.Fatal(err)
	}
	status := api.PtahSchemaStatus{RunState: api.RunState{Phase: api.PhaseAwaitingApproval, Reason: api.ReasonAwaitingApproval,
		Plan:             &api.PlanReference{ObjectReference: api.ObjectReference{Name: "app-1", UID: "u1"}, Fingerprint: "sha256:1"},
		ExecutionBinding: &api.ExecutionBinding{PtahVersion: "v1", ContractVersion: api.ContractVersion, Engine: api.EnginePostgres}},
		PendingObservation: &api.PendingObservation{OperationID: "op1", Plan: api.PlanReference{ObjectReference: api.ObjectReference{Name: "app-1", UID: "u1"}, Fingerprint: "sha256:1"},
			Since: api.NewTime(time.Date(2026, 1, 2, 3, 4, 5, 123456789, time.UTC)), CoordinationDigest: "c1"}}
	statusJSON, _ := json.Marshal(status)
	created.Status = statusJSON
	created.ContractVersion = api.ContractVersion + 1 // a newer ptah wrote the status
	written, err := s.UpdateStatus(ctx, created)
	if err != nil {
		t.Fatal(err)
	}
	got, err := s.Get(ctx, api.KindPtahSchema, ns, "app")
	if err != nil {
		t.Fatal(err)
	}
	var gotSpec api.PtahSchemaSpec
	var gotStatus api.PtahSchemaStatus
	if err := json.Unmarshal(got.Spec, &gotSpec); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(got.Status, &gotStatus); err != nil {
		t.Fatal(err)
	}
	wantSpec, _ := json.Marshal(spec)
	haveSpec, _ := json.Marshal(gotSpec)
	haveStatus, _ := json.Marshal(gotStatus)
	if string(haveSpec) != string(wantSpec) || string(haveStatus) != string(statusJSON) {
		t.Errorf("read back\n%s\n%s\nwant\n%s\n%s", haveSpec, haveStatus, wantSpec, statusJSON)
	}
	if got.ContractVersion != api.ContractVersion+1 || got.ResourceVersion != written.ResourceVersion {
		t.Errorf("contract version %d (resourceVersion %d), want %d: the status write's contract version was lost",
			got.ContractVersion, got.ResourceVersion, api.ContractVersion+1)
	}

	plan := api.PtahSchemaPlanSpec{Schema: api.ObjectReference{Name: "app", UID: created.UID},
		Statements: []api.PlanStatement{}, LockTimeout: "5s", Fingerprint: "sha256:1"}
	planJSON, _ := json.Marshal(plan)
	p, err := s.Create(ctx, store.Object{Kind: api.KindPtahSchemaPlan, Namespace: ns, Name: "app-1",
		ContractVersion: api.ContractVersion, Immutable: true, Spec: planJSON})
	if err != nil {
		t.Fatal(err)
	}
	// Past the store (a person with kubectl): the API server refuses it.
	u := &unstructured.Unstructured{}
	u.SetAPIVersion(api.APIVersion)
	u.SetKind(api.KindPtahSchemaPlan)
	if err := e.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: p.Name}, u); err != nil {
		t.Fatal(err)
	}
	if err := unstructured.SetNestedField(u.Object, "sha256:forged", "spec", "fingerprint"); err != nil {
		t.Fatal(err)
	}
	if err := e.Client.Update(ctx, u); !apierrors.IsInvalid(err) {
		t.Errorf("changing a plan's spec past the store: %v; want the API server to refuse it", err)
	}
}
