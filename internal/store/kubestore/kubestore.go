// Package kubestore is the store.Store of ptah serve: every object is a
// custom resource of group ptah.run (deploy/crds), read and written through
// the API server. It passes the same contract suite as the local stores.
//
// How the store's fields map onto a custom resource:
//
//   - Kind, Namespace, Name, UID, Generation and Labels are the resource's
//     own. ResourceVersion is the API server's, an etcd revision: a number
//     that increases across every object of the cluster.
//   - Spec and Status are the resource's spec and status; status is written
//     through the status subresource only (UpdateStatus), which RBAC and an
//     admission policy keep for the manager.
//   - ContractVersion is the annotation ptah.run/contract-version, written
//     with the spec, and status.contractVersion, written with the status (a
//     status write cannot touch metadata); the object's is the higher.
//   - Immutable is the label ptah.run/immutable. The kinds ptah creates
//     immutable (plans, decisions) are also immutable in the API server
//     itself (CEL on their spec), whoever writes.
//   - CreatedAt is the creation timestamp; UpdatedAt the latest time the
//     API server records for a write (managed fields), both to the second.
//
// The preconditions of Update and UpdateStatus (contract version, UID,
// immutability) are checked against the object as read, and the write is
// made conditional on that read's resourceVersion: if anything changed in
// between, the API server refuses it (ErrConflict), so the check and the
// write are as good as atomic.
package kubestore

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ptah-run/ptah/internal/store"
	api "github.com/ptah-run/ptah/pkg/api/v1alpha1"
)

const (
	// AnnotationContractVersion records the contract version of the ptah
	// that last wrote an object's metadata or spec.
	AnnotationContractVersion = "ptah.run/contract-version"
	// LabelImmutable marks an object whose spec never changes again.
	LabelImmutable = "ptah.run/immutable"
	// statusContractVersion is where a status write records its contract
	// version (RunState.StoreContractVersion, DecisionStatus's).
	statusContractVersion = "contractVersion"
)

// Store keeps objects as custom resources.
type Store struct {
	c client.Client
	// kinds are what List and GetByUID look through: every kind of the API.
	kinds []string
	// namespace, when set, is the one namespace List and GetByUID look in
	// when not told otherwise: a person's view, whose RBAC may stop there.
	namespace string
}

// InNamespace returns a store that lists and looks up UIDs in namespace
// only (unless a List names another), as a person whose permissions end
// at a namespace needs.
func (s *Store) InNamespace(namespace string) *Store {
	c := *s
	c.namespace = namespace
	return &c
}

var _ store.Store = (*Store)(nil)

// New returns a store writing through c, a client of the cluster (its
// RESTMapper must know ptah's CRDs once they are installed).
func New(c client.Client) *Store {
	return &Store{c: c, kinds: slices.Clone(api.Kinds)}
}

func newObject(kind string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	u.SetAPIVersion(api.APIVersion)
	u.SetKind(kind)
	return u
}

// Get implements store.Store.
func (s *Store) Get(ctx context.Context, kind, namespace, name string) (store.Object, error) {
	u, err := s.get(ctx, kind, namespace, name)
	if err != nil {
		return store.Object{}, fmt.Errorf("reading %s: %w", store.Ref(kind, namespace, name), err)
	}
	return toObject(u, true)
}

func (s *Store) get(ctx context.Context, kind, namespace, name string) (*unstructured.Unstructured, error) {
	if namespace == "" || name == "" {
		return nil, store.ErrNotFound
	}
	u := newObject(kind)
	if err := s.c.Get(ctx, types.NamespacedName{Namespace: namespace, Name: name}, u); err != nil {
		return nil, classify(err)
	}
	return u, nil
}

// GetByUID implements store.Store. The API cannot select by UID, so it
// lists every kind: fine for the occasional lookup it serves, not for a
// loop.
func (s *Store) GetByUID(ctx context.Context, uid string) (store.Object, error) {
	if uid == "" {
		return store.Object{}, fmt.Errorf("reading the object with UID %q: %w", uid, store.ErrNotFound)
	}
	all, err := s.List(ctx, store.ListOptions{})
	if err != nil {
		return store.Object{}, fmt.Errorf("reading the object with UID %s: %w", uid, err)
	}
	for _, o := range all {
		if o.UID == uid {
			return o, nil
		}
	}
	return store.Object{}, fmt.Errorf("reading the object with UID %s: %w", uid, store.ErrNotFound)
}

// List implements store.Store. A kind the API server does not serve (its
// CRD not installed) lists nothing.
func (s *Store) List(ctx context.Context, opts store.ListOptions) ([]store.Object, error) {
	kinds := s.kinds
	if opts.Kind != "" {
		kinds = []string{opts.Kind}
	}
	if opts.Namespace == "" {
		opts.Namespace = s.namespace
	}
	var out []store.Object
	for _, kind := range kinds {
		l := &unstructured.UnstructuredList{}
		l.SetAPIVersion(api.APIVersion)
		l.SetKind(kind + "List")
		listOpts := []client.ListOption{client.InNamespace(opts.Namespace)}
		if len(opts.Labels) > 0 {
			listOpts = append(listOpts, client.MatchingLabels(opts.Labels))
		}
		if err := s.c.List(ctx, l, listOpts...); err != nil {
			if meta.IsNoMatchError(err) || apierrors.IsNotFound(err) {
				continue
			}
			return nil, fmt.Errorf("listing %s: %w", kind, classify(err))
		}
		for i := range l.Items {
			o, err := toObject(&l.Items[i], !opts.MetadataOnly)
			if err != nil {
				return nil, err
			}
			out = append(out, o)
		}
	}
	slices.SortFunc(out, func(a, b store.Object) int {
		if c := compare(a.Kind, b.Kind); c != 0 {
			return c
		}
		if c := compare(a.Namespace, b.Namespace); c != 0 {
			return c
		}
		return compare(a.Name, b.Name)
	})
	return out, nil
}

func compare(a, b string) int { return bytes.Compare([]byte(a), []byte(b)) }

// Create implements store.Store.
func (s *Store) Create(ctx context.Context, obj store.Object) (store.Object, error) {
	ref := store.Ref(obj.Kind, obj.Namespace, obj.Name)
	if err := check(obj, store.CheckCreate); err != nil {
		return store.Object{}, fmt.Errorf("creating %s: %w", ref, err)
	}
	u := newObject(obj.Kind)
	u.SetNamespace(obj.Namespace)
	u.SetName(obj.Name)
	if err := setMetadataAndSpec(u, obj); err != nil {
		return store.Object{}, fmt.Errorf("creating %s: %w", ref, err)
	}
	if err := s.c.Create(ctx, u); err != nil {
		return store.Object{}, fmt.Errorf("creating %s: %w", ref, classify(err))
	}
	return toObject(u, true)
}

// Update implements store.Store.
func (s *Store) Update(ctx context.Context, obj store.Object) (store.Object, error) {
	ref := store.Ref(obj.Kind, obj.Namespace, obj.Name)
	if err := check(obj, store.Check); err != nil {
		return store.Object{}, fmt.Errorf("updating %s: %w", ref, err)
	}
	u, cur, err := s.current(ctx, obj)
	if err == nil && cur.Immutable && (!obj.Immutable || !jsonEqual(cur.Spec, obj.Spec)) {
		err = store.ErrImmutable
	}
	if err == nil {
		err = setMetadataAndSpec(u, obj)
	}
	if err == nil {
		err = classify(s.c.Update(ctx, u))
	}
	if err != nil {
		return store.Object{}, fmt.Errorf("updating %s: %w", ref, err)
	}
	return toObject(u, true)
}

// UpdateStatus implements store.Store.
func (s *Store) UpdateStatus(ctx context.Context, obj store.Object) (store.Object, error) {
	ref := store.Ref(obj.Kind, obj.Namespace, obj.Name)
	if err := check(obj, store.Check); err != nil {
		return store.Object{}, fmt.Errorf("updating the status of %s: %w", ref, err)
	}
	u, _, err := s.current(ctx, obj)
	if err == nil {
		err = setStatus(u, obj)
	}
	if err == nil {
		err = classify(s.c.Status().Update(ctx, u))
	}
	if err != nil {
		return store.Object{}, fmt.Errorf("updating the status of %s: %w", ref, err)
	}
	return toObject(u, true)
}

// Delete implements store.Store.
func (s *Store) Delete(ctx context.Context, kind, namespace, name, uid string) error {
	ref := store.Ref(kind, namespace, name)
	if namespace == "" {
		return fmt.Errorf("deleting %s: %w", ref, store.ErrNotFound)
	}
	u := newObject(kind)
	u.SetNamespace(namespace)
	u.SetName(name)
	var opts []client.DeleteOption
	if uid != "" {
		id := types.UID(uid)
		opts = append(opts, client.Preconditions{UID: &id})
	}
	if err := s.c.Delete(ctx, u, opts...); err != nil {
		return fmt.Errorf("deleting %s: %w", ref, classify(err))
	}
	return nil
}

// check is store's validation, and a namespace: every ptah resource lives
// in one.
func check(obj store.Object, base func(store.Object) error) error {
	if err := base(obj); err != nil {
		return err
	}
	if obj.Namespace == "" {
		return fmt.Errorf("%w: no namespace (every object in a cluster has one)", store.ErrInvalid)
	}
	return nil
}

// current reads the object obj's write would replace and checks the
// preconditions against it: the contract version first, then the UID and
// the resourceVersion. The write itself is then conditional on that
// resourceVersion.
func (s *Store) current(ctx context.Context, obj store.Object) (*unstructured.Unstructured, store.Object, error) {
	u, err := s.get(ctx, obj.Kind, obj.Namespace, obj.Name)
	if err != nil {
		return nil, store.Object{}, err
	}
	cur, err := toObject(u, true)
	switch {
	case err != nil:
		return nil, store.Object{}, err
	case cur.ContractVersion > obj.ContractVersion:
		return nil, store.Object{}, fmt.Errorf("stored under contract version %d, written under %d: %w",
			cur.ContractVersion, obj.ContractVersion, store.ErrNewerContract)
	case obj.UID != "" && obj.UID != cur.UID:
		return nil, store.Object{}, fmt.Errorf("UID %s, not %s: %w", cur.UID, obj.UID, store.ErrConflict)
	case obj.ResourceVersion != cur.ResourceVersion:
		return nil, store.Object{}, fmt.Errorf("resourceVersion %d, not %d: %w", cur.ResourceVersion, obj.ResourceVersion, store.ErrConflict)
	}
	return u, cur, nil
}

// setMetadataAndSpec writes obj's labels, contract version, immutability
// and spec into u, leaving u's status and other metadata alone.
func setMetadataAndSpec(u *unstructured.Unstructured, obj store.Object) error {
	labels := maps.Clone(obj.Labels)
	if _, ok := labels[LabelImmutable]; ok {
		return fmt.Errorf("%w: label %s is the store's own", store.ErrInvalid, LabelImmutable)
	}
	if obj.Immutable {
		if labels == nil {
			labels = map[string]string{}
		}
		labels[LabelImmutable] = "true"
	}
	u.SetLabels(labels)
	annotations := u.GetAnnotations()
	if annotations == nil {
		annotations = map[string]string{}
	}
	annotations[AnnotationContractVersion] = strconv.Itoa(obj.ContractVersion)
	u.SetAnnotations(annotations)
	spec := store.NormalizeJSON(obj.Spec)
	if spec == nil {
		unstructured.RemoveNestedField(u.Object, "spec")
		return nil
	}
	var v any
	if err := json.Unmarshal(spec, &v); err != nil {
		return fmt.Errorf("%w: spec: %v", store.ErrInvalid, err)
	}
	u.Object["spec"] = v
	return nil
}

// setStatus writes obj's status into u, with the contract version it is
// written under.
func setStatus(u *unstructured.Unstructured, obj store.Object) error {
	status := map[string]any{}
	if raw := store.NormalizeJSON(obj.Status); raw != nil {
		if err := json.Unmarshal(raw, &status); err != nil {
			return fmt.Errorf("%w: a status must be a JSON object: %v", store.ErrInvalid, err)
		}
		if _, ok := status[statusContractVersion]; ok {
			return fmt.Errorf("%w: status.%s is the store's own", store.ErrInvalid, statusContractVersion)
		}
	}
	status[statusContractVersion] = int64(obj.ContractVersion)
	u.Object["status"] = status
	return nil
}

// StoredVersion is the highest contract version u records: its
// annotation's, its status's, and any embedded in its spec or status, as
// the stored-state fence reads a store object (store.Object's
// ContractVersion and EmbeddedContractVersion).
func StoredVersion(u *unstructured.Unstructured) (int, error) {
	o, err := toObject(u, false)
	if err != nil {
		return 0, err
	}
	return max(o.ContractVersion, o.EmbeddedContractVersion), nil
}

// toObject reads a custom resource as a store object.
func toObject(u *unstructured.Unstructured, bodies bool) (store.Object, error) {
	ref := store.Ref(u.GetKind(), u.GetNamespace(), u.GetName())
	rv, err := strconv.ParseInt(u.GetResourceVersion(), 10, 64)
	if err != nil {
		return store.Object{}, fmt.Errorf("reading %s: resourceVersion %q is not a number", ref, u.GetResourceVersion())
	}
	o := store.Object{
		Kind: u.GetKind(), Namespace: u.GetNamespace(), Name: u.GetName(), UID: string(u.GetUID()),
		ResourceVersion: rv, Generation: u.GetGeneration(),
		CreatedAt: u.GetCreationTimestamp().UTC(),
	}
	o.UpdatedAt = o.CreatedAt
	for _, mf := range u.GetManagedFields() {
		if mf.Time != nil && mf.Time.UTC().After(o.UpdatedAt) {
			o.UpdatedAt = mf.Time.UTC()
		}
	}
	labels := maps.Clone(u.GetLabels())
	o.Immutable = labels[LabelImmutable] == "true"
	delete(labels, LabelImmutable)
	if len(labels) > 0 {
		o.Labels = labels
	}
	if v := u.GetAnnotations()[AnnotationContractVersion]; v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			return store.Object{}, fmt.Errorf("reading %s: annotation %s=%q is not a number", ref, AnnotationContractVersion, v)
		}
		o.ContractVersion = n
	}
	// The bodies are encoded for the caller only when it wants them; the
	// contract versions they embed are read from them as decoded.
	spec := u.Object["spec"]
	if spec != nil && bodies {
		if o.Spec, err = json.Marshal(spec); err != nil {
			return store.Object{}, fmt.Errorf("reading %s: %w", ref, err)
		}
	}
	var status map[string]any
	if s, ok := u.Object["status"].(map[string]any); ok {
		status = maps.Clone(s)
		if n, ok := number(status[statusContractVersion]); ok && n > o.ContractVersion {
			o.ContractVersion = n
		}
		delete(status, statusContractVersion)
		if len(status) > 0 && bodies {
			if o.Status, err = json.Marshal(status); err != nil {
				return store.Object{}, fmt.Errorf("reading %s: %w", ref, err)
			}
		}
	}
	o.EmbeddedContractVersion = store.EmbeddedContractVersionIn(spec, status)
	return o, nil
}

// number reads a JSON number as decoded into an unstructured object.
func number(v any) (int, bool) {
	switch n := v.(type) {
	case int64:
		return int(n), true
	case float64:
		return int(n), true
	case json.Number:
		i, err := n.Int64()
		return int(i), err == nil
	}
	return 0, false
}

// jsonEqual compares two JSON documents semantically; absent equals null.
func jsonEqual(a, b json.RawMessage) bool {
	a, b = store.NormalizeJSON(a), store.NormalizeJSON(b)
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return false
	}
	return equalJSON(x, y)
}

func equalJSON(x, y any) bool {
	xb, _ := json.Marshal(x) // maps marshal with sorted keys
	yb, _ := json.Marshal(y)
	return bytes.Equal(xb, yb)
}

// classify maps the API server's answers onto the store's sentinels.
func classify(err error) error {
	switch {
	case err == nil:
		return nil
	case apierrors.IsNotFound(err), meta.IsNoMatchError(err):
		return fmt.Errorf("%w: %v", store.ErrNotFound, err)
	case apierrors.IsAlreadyExists(err):
		return fmt.Errorf("%w: %v", store.ErrAlreadyExists, err)
	case apierrors.IsConflict(err):
		return fmt.Errorf("%w: %v", store.ErrConflict, err)
	case apierrors.IsInvalid(err), apierrors.IsBadRequest(err):
		return fmt.Errorf("%w: %v", store.ErrInvalid, err)
	}
	return err
}
