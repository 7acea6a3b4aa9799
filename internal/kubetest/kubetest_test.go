package kubetest

import (
	"context"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"

	api "github.com/ptah-run/ptah/pkg/api/v1alpha1"
)

func TestMain(m *testing.M) { Main(m) }

func TestControlPlaneServesPtahsCRDs(t *testing.T) {
	e := Shared(t)
	var crds apiextensionsv1.CustomResourceDefinitionList
	if err := e.Client.List(context.Background(), &crds); err != nil {
		t.Fatal(err)
	}
	served := map[string]bool{}
	for _, c := range crds.Items {
		if c.Spec.Group == api.Group {
			served[c.Spec.Names.Kind] = true
		}
	}
	for _, kind := range api.Kinds {
		if !served[kind] {
			t.Errorf("the API server serves no CRD for %s", kind)
		}
	}
	ns := e.Namespace(t)
	if ns == "" {
		t.Fatal("no namespace")
	}
}
