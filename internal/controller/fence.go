// Package controller is ptah serve: a controller-runtime manager over
// ptah's custom resources, running the same engine as the CLI's local mode
// (DESIGN.md sections 2 to 4).
package controller

import (
	"context"
	"fmt"
	"strconv"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ptah-run/ptah/internal/engine"
	"github.com/ptah-run/ptah/internal/runner"
	"github.com/ptah-run/ptah/internal/store/kubestore"
	api "github.com/ptah-run/ptah/pkg/api/v1alpha1"
)

// VerifyStoredControllerState is the stored-state fence of ptah serve, run
// before the manager starts: every ptah resource in the cluster, of every
// kind, must be of a contract version this binary reads, and so must the
// CRDs of group ptah.run (a newer ptah installs its CRDs first, and may
// add a kind this one does not know). It refuses, naming what is newer,
// rather than reconcile over state it would misread.
func VerifyStoredControllerState(ctx context.Context, c client.Client) error {
	var crds apiextensionsv1.CustomResourceDefinitionList
	if err := c.List(ctx, &crds); err != nil {
		return fmt.Errorf("listing the CRDs: %w", err)
	}
	var installed []engine.StoredObject
	for _, crd := range crds.Items {
		if crd.Spec.Group != api.Group {
			continue
		}
		version := 0
		if v, ok := crd.Annotations[kubestore.AnnotationContractVersion]; ok {
			n, err := strconv.Atoi(v)
			if err != nil {
				return fmt.Errorf("CRD %s: annotation %s=%q is not a number", crd.Name, kubestore.AnnotationContractVersion, v)
			}
			version = n
		}
		installed = append(installed, engine.StoredObject{Kind: crd.Spec.Names.Kind, Name: crd.Name, ContractVersion: version})
	}
	return runner.FenceStore(ctx, kubestore.New(c), installed...)
}

// A pass's fence reads the manager's caches rather than the API server:
// each pass listing every stored object of every kind made the manager's
// reads, and its memory, grow with the square of the cluster. The fence's
// caches hold of each object only its identity and the highest contract
// version it records, computed as it enters the cache (fenceTransform).
// A cache lags the API server by the time a watch event takes: an object
// a newer ptah wrote a moment before a pass is seen by the next pass. The
// writes of a pass are refused over an object a newer ptah wrote whatever
// the cache says (store.ErrNewerContract), and the manager's start scans
// the API server itself (VerifyStoredControllerState).

// annotationFenceVersion holds, in the fence's caches only, the highest
// contract version an object records (kubestore.StoredVersion), or why it
// could not be read. It is never written to the API server.
const annotationFenceVersion = "ptah.run/fence-contract-version"

// StoredState is what a pass's fence reads: every stored object of ptah's
// kinds, with the contract version it records.
type StoredState interface {
	Stored(ctx context.Context) ([]engine.StoredObject, error)
}

// fenceObject is an object of kind as the fence's cache holds it: an
// unstructured object, cached apart from the typed ones the watches use.
func fenceObject(kind string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	u.SetAPIVersion(api.APIVersion)
	u.SetKind(kind)
	return u
}

// fenceTransform reduces an object entering the fence's cache to what the
// fence reads; the typed objects of the same kinds, which the watches
// cache, go through then (managed fields stripped, as everywhere).
func fenceTransform(then toolscache.TransformFunc) toolscache.TransformFunc {
	return func(in any) (any, error) {
		u, ok := in.(*unstructured.Unstructured)
		if !ok {
			return then(in)
		}
		version := "unreadable"
		if v, err := kubestore.StoredVersion(u); err == nil {
			version = strconv.Itoa(v)
		} else {
			version += ": " + err.Error()
		}
		out := fenceObject(u.GetKind())
		out.SetAPIVersion(u.GetAPIVersion())
		out.SetNamespace(u.GetNamespace())
		out.SetName(u.GetName())
		out.SetUID(u.GetUID())
		out.SetResourceVersion(u.GetResourceVersion())
		out.SetAnnotations(map[string]string{annotationFenceVersion: version})
		return out, nil
	}
}

// cachedFence reads the stored state from the manager's caches.
type cachedFence struct{ cache client.Reader }

func (f cachedFence) Stored(ctx context.Context) ([]engine.StoredObject, error) {
	var out []engine.StoredObject
	for _, kind := range api.Kinds {
		l := &unstructured.UnstructuredList{}
		l.SetAPIVersion(api.APIVersion)
		l.SetKind(kind + "List")
		if err := f.cache.List(ctx, l); err != nil {
			if meta.IsNoMatchError(err) {
				continue // its CRD is not installed: nothing of it is stored
			}
			return nil, fmt.Errorf("reading the stored %s objects for the fence: %w", kind, err)
		}
		for _, u := range l.Items {
			raw := u.GetAnnotations()[annotationFenceVersion]
			v, err := strconv.Atoi(raw)
			if err != nil {
				return nil, fmt.Errorf("reading %s %s/%s for the fence: %s", kind, u.GetNamespace(), u.GetName(), raw)
			}
			out = append(out, engine.StoredObject{Kind: kind, Namespace: u.GetNamespace(), Name: u.GetName(), ContractVersion: v})
		}
	}
	return out, nil
}
