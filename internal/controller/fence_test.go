package controller

import (
	"fmt"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/cache"

	"github.com/ptah-run/ptah/internal/store/kubestore"
	api "github.com/ptah-run/ptah/pkg/api/v1alpha1"
)

// The fence's cache keeps of an object its identity and the highest
// contract version it records anywhere (its annotation, its status, a
// record embedded in either); the typed objects of the watches' caches
// pass whole, without managed fields.
func TestFenceTransformKeepsTheHighestContractVersion(t *testing.T) {
	transform := fenceTransform(cache.TransformStripManagedFields())
	object := func(annotation string, status map[string]any) *unstructured.Unstructured {
		u := fenceObject(api.KindPtahMigrationApproval)
		u.SetNamespace("ns")
		u.SetName("a1")
		u.SetUID("u-1")
		u.SetResourceVersion("7")
		u.SetAnnotations(map[string]string{kubestore.AnnotationContractVersion: annotation})
		u.Object["spec"] = map[string]any{"plan": map[string]any{"name": "m-1"}, "approver": "ana"}
		if status != nil {
			u.Object["status"] = status
		}
		return u
	}
	for _, tc := range []struct {
		name string
		in   *unstructured.Unstructured
		want string
	}{
		{"its annotation", object("2", nil), "2"},
		{"its status, written by a newer ptah", object("1", map[string]any{"contractVersion": int64(4)}), "4"},
		{"a record embedded in its status", object("1", map[string]any{"contractVersion": int64(1),
			"spent": map[string]any{"binding": map[string]any{"contractVersion": int64(3)}}}), "3"},
		{"an annotation that is not a number", object("two", nil), "unreadable: "},
	} {
		out, err := transform(tc.in)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		u := out.(*unstructured.Unstructured)
		got := u.GetAnnotations()[annotationFenceVersion]
		if got != tc.want && !(strings.HasSuffix(tc.want, ": ") && strings.HasPrefix(got, tc.want)) {
			t.Errorf("%s: the cache holds version %q, want %q", tc.name, got, tc.want)
		}
		if u.GetName() != "a1" || u.GetNamespace() != "ns" || u.GetUID() != "u-1" || u.GetKind() != api.KindPtahMigrationApproval {
			t.Errorf("%s: the cache lost the object's identity: %v", tc.name, u.Object["metadata"])
		}
		if u.Object["spec"] != nil || u.Object["status"] != nil || len(u.GetAnnotations()) != 1 {
			t.Errorf("%s: the cache holds more than the fence reads: %v", tc.name, u.Object)
		}
	}

	typed := &api.PtahSchema{ObjectMeta: metav1.ObjectMeta{Name: "app", ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubectl"}}},
		Spec: api.PtahSchemaSpec{Source: api.Source{Path: "schema"}}}
	out, err := transform(typed)
	if s, ok := out.(*api.PtahSchema); err != nil || !ok || s != typed || s.Spec.Source.Path != "schema" || s.ManagedFields != nil {
		t.Errorf("a typed object: %s, %v; want it whole, without managed fields", fmt.Sprint(out), err)
	}
}
