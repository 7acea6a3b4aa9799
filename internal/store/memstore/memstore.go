// Package memstore is an in-memory store.Store: a map behind a mutex. It
// keeps the whole contract (it passes storetest), so the engine's shells and
// the runner can be tested without a database. Nothing survives the process.
package memstore

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/ptah-run/ptah/internal/store"
)

// Store is safe for concurrent use.
type Store struct {
	now func() time.Time

	mu    sync.Mutex
	rv    int64 // the last resourceVersion handed out, across all objects
	objs  map[key]store.Object
	byUID map[string]key
}

type key struct{ kind, namespace, name string }

var _ store.Store = (*Store)(nil)

// Option configures a Store.
type Option func(*Store)

// WithClock makes the store stamp CreatedAt and UpdatedAt from now, for
// tests that assert on times.
func WithClock(now func() time.Time) Option {
	return func(s *Store) { s.now = now }
}

// New returns an empty store.
func New(opts ...Option) *Store {
	s := &Store{now: time.Now, objs: map[key]store.Object{}, byUID: map[string]key{}}
	for _, o := range opts {
		o(s)
	}
	return s
}

// Get implements store.Store.
func (s *Store) Get(_ context.Context, kind, namespace, name string) (store.Object, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	obj, ok := s.objs[key{kind, namespace, name}]
	if !ok {
		return store.Object{}, fmt.Errorf("getting %s: %w", store.Ref(kind, namespace, name), store.ErrNotFound)
	}
	return clone(obj), nil
}

// GetByUID implements store.Store.
func (s *Store) GetByUID(_ context.Context, uid string) (store.Object, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	k, ok := s.byUID[uid]
	if !ok {
		return store.Object{}, fmt.Errorf("getting the object with UID %q: %w", uid, store.ErrNotFound)
	}
	return clone(s.objs[k]), nil
}

// List implements store.Store.
func (s *Store) List(_ context.Context, opts store.ListOptions) ([]store.Object, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []store.Object
	for k, obj := range s.objs {
		if selected(k, obj, opts) {
			c := clone(obj)
			if opts.MetadataOnly {
				c.Spec, c.Status = nil, nil
			}
			out = append(out, c)
		}
	}
	slices.SortFunc(out, func(a, b store.Object) int {
		if c := strings.Compare(a.Kind, b.Kind); c != 0 {
			return c
		}
		if c := strings.Compare(a.Namespace, b.Namespace); c != 0 {
			return c
		}
		return strings.Compare(a.Name, b.Name)
	})
	return out, nil
}

func selected(k key, obj store.Object, opts store.ListOptions) bool {
	if opts.Kind != "" && k.kind != opts.Kind {
		return false
	}
	if opts.Namespace != "" && k.namespace != opts.Namespace {
		return false
	}
	for l, v := range opts.Labels {
		if got, ok := obj.Labels[l]; !ok || got != v {
			return false
		}
	}
	return true
}

// Create implements store.Store.
func (s *Store) Create(_ context.Context, obj store.Object) (store.Object, error) {
	k := key{obj.Kind, obj.Namespace, obj.Name}
	if err := store.CheckCreate(obj); err != nil {
		return store.Object{}, fmt.Errorf("creating %s: %w", ref(k), err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.objs[k]; ok {
		return store.Object{}, fmt.Errorf("creating %s: %w", ref(k), store.ErrAlreadyExists)
	}
	now := s.stamp()
	obj = clone(obj)
	obj.UID = store.NewUID()
	obj.Generation = 1
	obj.CreatedAt, obj.UpdatedAt = now, now
	return s.put(k, obj), nil
}

// Update implements store.Store.
func (s *Store) Update(_ context.Context, obj store.Object) (store.Object, error) {
	k := key{obj.Kind, obj.Namespace, obj.Name}
	if err := store.Check(obj); err != nil {
		return store.Object{}, fmt.Errorf("updating %s: %w", ref(k), err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	cur, err := s.current(k, obj)
	if err != nil {
		return store.Object{}, fmt.Errorf("updating %s: %w", ref(k), err)
	}
	specChanged := !jsonEqual(cur.Spec, obj.Spec)
	if cur.Immutable && (specChanged || !obj.Immutable) {
		return store.Object{}, fmt.Errorf("updating %s: %w", ref(k), store.ErrImmutable)
	}
	next := clone(obj)
	next.UID, next.CreatedAt, next.Generation, next.Status = cur.UID, cur.CreatedAt, cur.Generation, cloneJSON(cur.Status)
	if specChanged {
		next.Generation++
	}
	next.UpdatedAt = s.stamp()
	return s.put(k, next), nil
}

// UpdateStatus implements store.Store.
func (s *Store) UpdateStatus(_ context.Context, obj store.Object) (store.Object, error) {
	k := key{obj.Kind, obj.Namespace, obj.Name}
	if err := store.Check(obj); err != nil {
		return store.Object{}, fmt.Errorf("updating the status of %s: %w", ref(k), err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	cur, err := s.current(k, obj)
	if err != nil {
		return store.Object{}, fmt.Errorf("updating the status of %s: %w", ref(k), err)
	}
	next := clone(cur)
	next.Status = clone(obj).Status
	next.ContractVersion = obj.ContractVersion
	next.UpdatedAt = s.stamp()
	return s.put(k, next), nil
}

// Delete implements store.Store.
func (s *Store) Delete(_ context.Context, kind, namespace, name, uid string) error {
	k := key{kind, namespace, name}
	s.mu.Lock()
	defer s.mu.Unlock()
	cur, ok := s.objs[k]
	switch {
	case !ok:
		return fmt.Errorf("deleting %s: %w", ref(k), store.ErrNotFound)
	case uid != "" && uid != cur.UID:
		return fmt.Errorf("deleting %s: UID %s, not %s: %w", ref(k), cur.UID, uid, store.ErrConflict)
	}
	delete(s.objs, k)
	delete(s.byUID, cur.UID)
	return nil
}

// current returns the stored object that obj's preconditions name.
func (s *Store) current(k key, obj store.Object) (store.Object, error) {
	cur, ok := s.objs[k]
	switch {
	case !ok:
		return store.Object{}, store.ErrNotFound
	case cur.ContractVersion > obj.ContractVersion:
		return store.Object{}, fmt.Errorf("contract version %d, the write carries %d: %w", cur.ContractVersion, obj.ContractVersion, store.ErrNewerContract)
	case obj.UID != "" && obj.UID != cur.UID:
		return store.Object{}, fmt.Errorf("UID %s, not %s: %w", cur.UID, obj.UID, store.ErrConflict)
	case obj.ResourceVersion != cur.ResourceVersion:
		return store.Object{}, fmt.Errorf("resourceVersion %d, not %d: %w", cur.ResourceVersion, obj.ResourceVersion, store.ErrConflict)
	}
	return cur, nil
}

// put stores obj under a fresh resourceVersion and returns the caller's copy.
func (s *Store) put(k key, obj store.Object) store.Object {
	s.rv++
	obj.ResourceVersion = s.rv
	s.objs[k] = obj
	s.byUID[obj.UID] = k
	return clone(obj)
}

// stamp returns the time to record, at PostgreSQL's precision, so that times
// compare the same way in both backends.
func (s *Store) stamp() time.Time {
	return s.now().UTC().Truncate(time.Microsecond)
}

// clone gives obj its own labels and JSON, in the representation the
// contract promises (no empty labels, no null JSON).
func clone(obj store.Object) store.Object {
	obj.EmbeddedContractVersion = store.EmbeddedContractVersion(obj.Spec, obj.Status)
	if len(obj.Labels) == 0 {
		obj.Labels = nil
	} else {
		obj.Labels = maps.Clone(obj.Labels)
	}
	obj.Spec = cloneJSON(obj.Spec)
	obj.Status = cloneJSON(obj.Status)
	return obj
}

func cloneJSON(raw json.RawMessage) json.RawMessage {
	raw = store.NormalizeJSON(raw)
	if raw == nil {
		return nil
	}
	return slices.Clone(raw)
}

func ref(k key) string { return store.Ref(k.kind, k.namespace, k.name) }
