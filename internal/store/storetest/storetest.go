// Package storetest is the contract every store.Store implementation keeps,
// as tests. An implementation's test calls Run with a constructor that
// returns a fresh, empty store for each subtest.
package storetest

import (
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"regexp"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/ptah-run/ptah/internal/store"
)

// Option adapts the suite to what a backend is, never to what it keeps.
type Option func(*options)

type options struct {
	sequential        bool
	namespaceRequired bool
}

// Sequential runs the subtests one after another: for a backend whose
// stores share one server (a cluster), where newStore empties it.
func Sequential() Option { return func(o *options) { o.sequential = true } }

// NamespaceRequired: every object lives in a namespace (Kubernetes), and
// an object without one is invalid.
func NamespaceRequired() Option { return func(o *options) { o.namespaceRequired = true } }

// Run runs the contract suite. Subtests run in parallel, each on its own
// store from newStore, unless Sequential says otherwise.
func Run(t *testing.T, newStore func(t *testing.T) store.Store, opts ...Option) {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	tests := []struct {
		name string
		fn   func(t *testing.T, s store.Store)
	}{
		{"CreateAssignsIdentity", testCreateAssignsIdentity},
		{"GetAndGetByUIDReturnTheCreatedObject", testGetAndGetByUID},
		{"MissingObjectsAreNotFound", testMissingObjectsAreNotFound},
		{"DuplicateCreateAlreadyExists", testDuplicateCreate},
		{"InvalidObjectsAreRefused", testInvalidObjectsAreRefused},
		{"EmptyNamespace", func(t *testing.T, s store.Store) { testEmptyNamespace(t, s, o.namespaceRequired) }},
		{"CreateRefusesAStatus", testCreateRefusesAStatus},
		{"EmptyValuesReadBackAsNil", testEmptyValuesReadBackAsNil},
		{"ListSelectsAndSorts", testListSelectsAndSorts},
		{"ListMetadataOnlyOmitsSpecAndStatus", testListMetadataOnly},
		{"UpdateWithStaleResourceVersionConflicts", testUpdateStaleResourceVersion},
		{"UpdateWithAnotherUIDConflicts", testUpdateWithAnotherUID},
		{"UpdateOfMissingObjectIsNotFound", testUpdateMissing},
		{"UpdateReplacesSpecAndLabelsNotStatus", testUpdateReplaces},
		{"GenerationBumpsOnlyWhenSpecChanges", testGenerationBumpsOnlyOnSpecChange},
		{"UpdateStatusChangesOnlyStatus", testUpdateStatusChangesOnlyStatus},
		{"UpdateStatusChecksPreconditions", testUpdateStatusPreconditions},
		{"DeleteChecksUID", testDeleteChecksUID},
		{"ImmutableSpecCannotChange", testImmutableSpec},
		{"ImmutableCanBeTurnedOnButNotOff", testImmutableOnNotOff},
		{"ConcurrentUpdatesHaveExactlyOneWinner", testConcurrentUpdates},
		{"ConcurrentStatusUpdatesHaveExactlyOneWinner", testConcurrentStatusUpdates},
		{"ConcurrentCreatesHaveExactlyOneWinner", testConcurrentCreates},
		{"RecreatedObjectGetsANewUID", testRecreatedObjectGetsNewUID},
		{"ResourceVersionIncreasesAcrossObjects", testResourceVersionIncreasesAcrossObjects},
		{"ContractVersionRoundTrips", testContractVersionRoundTrips},
		{"ContractVersionNeverGoesBack", testContractVersionNeverGoesBack},
		{"EmbeddedContractVersionIsReadBack", testEmbeddedContractVersion},
		{"TimestampsAreKept", testTimestamps},
		{"ReturnedObjectsAreCopies", testReturnedObjectsAreCopies},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if !o.sequential {
				t.Parallel()
			}
			tc.fn(t, newStore(t))
		})
	}
}

const (
	kindA = "PtahSchema"
	kindB = "PtahSchemaPlan"
	ns    = "default"
)

var uuidV4 = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)

func obj(kind, name, spec string) store.Object {
	return store.Object{Kind: kind, Namespace: ns, Name: name, ContractVersion: 1, Spec: json.RawMessage(spec)}
}

func mustCreate(t *testing.T, s store.Store, o store.Object) store.Object {
	t.Helper()
	got, err := s.Create(context.Background(), o)
	if err != nil {
		t.Fatalf("Create(%s %s): %v", o.Kind, o.Name, err)
	}
	return got
}

func mustGet(t *testing.T, s store.Store, kind, namespace, name string) store.Object {
	t.Helper()
	got, err := s.Get(context.Background(), kind, namespace, name)
	if err != nil {
		t.Fatalf("Get(%s %s/%s): %v", kind, namespace, name, err)
	}
	return got
}

func mustUpdate(t *testing.T, s store.Store, o store.Object) store.Object {
	t.Helper()
	got, err := s.Update(context.Background(), o)
	if err != nil {
		t.Fatalf("Update(%s %s): %v", o.Kind, o.Name, err)
	}
	return got
}

func mustUpdateStatus(t *testing.T, s store.Store, o store.Object) store.Object {
	t.Helper()
	got, err := s.UpdateStatus(context.Background(), o)
	if err != nil {
		t.Fatalf("UpdateStatus(%s %s): %v", o.Kind, o.Name, err)
	}
	return got
}

func wantErr(t *testing.T, what string, err, target error) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Fatalf("%s: error %v, want %v", what, err, target)
	}
}

// jsonEq compares JSON semantically: stores may reformat what they keep.
func jsonEq(t *testing.T, what string, got json.RawMessage, want string) {
	t.Helper()
	if want == "" {
		if got != nil {
			t.Fatalf("%s = %s, want nil", what, got)
		}
		return
	}
	var g, w any
	if err := json.Unmarshal(got, &g); err != nil {
		t.Fatalf("%s = %q: %v", what, got, err)
	}
	if err := json.Unmarshal([]byte(want), &w); err != nil {
		t.Fatalf("bad test JSON %q: %v", want, err)
	}
	if !reflect.DeepEqual(g, w) {
		t.Fatalf("%s = %s, want %s", what, got, want)
	}
}

// sameObject compares everything the store keeps, JSON semantically.
func sameObject(t *testing.T, what string, got, want store.Object) {
	t.Helper()
	jsonEq(t, what+" spec", got.Spec, string(want.Spec))
	jsonEq(t, what+" status", got.Status, string(want.Status))
	got.Spec, got.Status, want.Spec, want.Status = nil, nil, nil, nil
	if !got.CreatedAt.Equal(want.CreatedAt) || !got.UpdatedAt.Equal(want.UpdatedAt) {
		t.Fatalf("%s: times %v/%v, want %v/%v", what, got.CreatedAt, got.UpdatedAt, want.CreatedAt, want.UpdatedAt)
	}
	got.CreatedAt, got.UpdatedAt, want.CreatedAt, want.UpdatedAt = time.Time{}, time.Time{}, time.Time{}, time.Time{}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("%s:\n got %+v\nwant %+v", what, got, want)
	}
}

func testCreateAssignsIdentity(t *testing.T, s store.Store) {
	in := obj(kindA, "a", `{"x": 1}`)
	in.UID, in.ResourceVersion, in.Generation = "caller-chosen", 42, 7 // ignored
	in.Labels = map[string]string{"schema": "a"}
	got := mustCreate(t, s, in)
	if !uuidV4.MatchString(got.UID) {
		t.Errorf("UID %q is not a UUID v4", got.UID)
	}
	if got.ResourceVersion <= 0 || got.ResourceVersion == 42 {
		t.Errorf("ResourceVersion %d, want one the store assigned", got.ResourceVersion)
	}
	if got.Generation != 1 {
		t.Errorf("Generation %d, want 1", got.Generation)
	}
	if got.Kind != kindA || got.Namespace != ns || got.Name != "a" || got.ContractVersion != 1 || got.Immutable {
		t.Errorf("identity not kept: %+v", got)
	}
	if !reflect.DeepEqual(got.Labels, in.Labels) {
		t.Errorf("Labels %v, want %v", got.Labels, in.Labels)
	}
	jsonEq(t, "spec", got.Spec, `{"x": 1}`)
	other := mustCreate(t, s, obj(kindA, "b", `{}`))
	if other.UID == got.UID {
		t.Errorf("two objects share UID %s", got.UID)
	}
}

func testGetAndGetByUID(t *testing.T, s store.Store) {
	in := obj(kindA, "a", `{"x": [1, 2], "y": {"z": "w"}}`)
	in.Labels = map[string]string{"k": "v"}
	created := mustCreate(t, s, in)
	created.Status = json.RawMessage(`{"phase": "Pending"}`)
	created = mustUpdateStatus(t, s, created)
	sameObject(t, "Get", mustGet(t, s, kindA, ns, "a"), created)
	byUID, err := s.GetByUID(context.Background(), created.UID)
	if err != nil {
		t.Fatalf("GetByUID: %v", err)
	}
	sameObject(t, "GetByUID", byUID, created)
}

func testMissingObjectsAreNotFound(t *testing.T, s store.Store) {
	ctx := context.Background()
	mustCreate(t, s, obj(kindA, "a", `{}`))
	_, err := s.Get(ctx, kindA, ns, "missing")
	wantErr(t, "Get of another name", err, store.ErrNotFound)
	_, err = s.Get(ctx, kindB, ns, "a")
	wantErr(t, "Get of another kind", err, store.ErrNotFound)
	_, err = s.Get(ctx, kindA, "other", "a")
	wantErr(t, "Get in another namespace", err, store.ErrNotFound)
	for _, uid := range []string{store.NewUID(), "not-a-uid", ""} {
		_, err = s.GetByUID(ctx, uid)
		wantErr(t, "GetByUID("+uid+")", err, store.ErrNotFound)
	}
}

func testDuplicateCreate(t *testing.T, s store.Store) {
	first := mustCreate(t, s, obj(kindA, "a", `{"v": 1}`))
	_, err := s.Create(context.Background(), obj(kindA, "a", `{"v": 2}`))
	wantErr(t, "second Create", err, store.ErrAlreadyExists)
	sameObject(t, "after the refused Create", mustGet(t, s, kindA, ns, "a"), first)
	// The name is unique per kind and namespace only.
	mustCreate(t, s, obj(kindB, "a", `{}`))
	other := obj(kindA, "a", `{}`)
	other.Namespace = "other"
	mustCreate(t, s, other)
}

func testInvalidObjectsAreRefused(t *testing.T, s store.Store) {
	ctx := context.Background()
	cases := map[string]func(o *store.Object){
		"no kind":             func(o *store.Object) { o.Kind = "" },
		"no name":             func(o *store.Object) { o.Name = "" },
		"no contract version": func(o *store.Object) { o.ContractVersion = 0 },
		"spec not JSON":       func(o *store.Object) { o.Spec = json.RawMessage(`{"x":`) },
		"status not JSON":     func(o *store.Object) { o.Status = json.RawMessage(`nope`) },
		"empty label key":     func(o *store.Object) { o.Labels = map[string]string{"": "v"} },
	}
	existing := mustCreate(t, s, obj(kindA, "existing", `{}`))
	for name, mutate := range cases {
		o := obj(kindA, "new", `{}`)
		mutate(&o)
		_, err := s.Create(ctx, o)
		wantErr(t, "Create with "+name, err, store.ErrInvalid)

		u := existing
		mutate(&u)
		if u.Kind == "" || u.Name == "" {
			continue // would address no object
		}
		_, err = s.Update(ctx, u)
		wantErr(t, "Update with "+name, err, store.ErrInvalid)
	}
	list, err := s.List(ctx, store.ListOptions{})
	if err != nil || len(list) != 1 {
		t.Fatalf("after refused writes: List = %d objects, %v; want only the existing one", len(list), err)
	}
	sameObject(t, "existing", list[0], existing)
}

func testEmptyNamespace(t *testing.T, s store.Store, required bool) {
	o := obj(kindA, "a", `{}`)
	o.Namespace = ""
	if required {
		_, err := s.Create(context.Background(), o)
		wantErr(t, "Create without a namespace", err, store.ErrInvalid)
		return
	}
	created := mustCreate(t, s, o)
	sameObject(t, "Get", mustGet(t, s, kindA, "", "a"), created)
	if err := s.Delete(context.Background(), kindA, "", "a", created.UID); err != nil {
		t.Fatalf("Delete: %v", err)
	}
}

func testEmptyValuesReadBackAsNil(t *testing.T, s store.Store) {
	for i, spec := range []string{"", "null", " null "} {
		o := obj(kindA, string(rune('a'+i)), spec)
		o.Status = json.RawMessage(spec)
		o.Labels = map[string]string{}
		created := mustCreate(t, s, o)
		stored := mustGet(t, s, kindA, ns, o.Name)
		for _, got := range []store.Object{created, stored} {
			if got.Spec != nil || got.Status != nil || got.Labels != nil {
				t.Errorf("spec %q: read back spec %q status %q labels %#v, want all nil", spec, got.Spec, got.Status, got.Labels)
			}
		}
	}
}

func testListSelectsAndSorts(t *testing.T, s store.Store) {
	ctx := context.Background()
	add := func(kind, namespace, name string, labels map[string]string) {
		o := obj(kind, name, `{}`)
		o.Namespace, o.Labels = namespace, labels
		mustCreate(t, s, o)
	}
	// Created out of order. Byte order puts "a-c" before "ab" (a collation
	// that ignores punctuation would not); names are valid in Kubernetes.
	add(kindB, ns, "p2", map[string]string{"schema": "a", "current": "true"})
	add(kindA, ns, "ab", nil)
	add(kindB, ns, "p1", map[string]string{"schema": "a"})
	add(kindA, "other", "a", nil)
	add(kindA, ns, "a", nil)
	add(kindA, ns, "a-c", nil)
	add(kindB, ns, "p3", map[string]string{"schema": "b", "current": "true"})

	cases := []struct {
		opts store.ListOptions
		want []string
	}{
		{store.ListOptions{}, []string{
			kindA + " default/a", kindA + " default/a-c", kindA + " default/ab", kindA + " other/a",
			kindB + " default/p1", kindB + " default/p2", kindB + " default/p3",
		}},
		{store.ListOptions{Kind: kindA}, []string{kindA + " default/a", kindA + " default/a-c", kindA + " default/ab", kindA + " other/a"}},
		{store.ListOptions{Kind: kindA, Namespace: "other"}, []string{kindA + " other/a"}},
		{store.ListOptions{Namespace: "other"}, []string{kindA + " other/a"}},
		{store.ListOptions{Kind: kindB, Labels: map[string]string{"schema": "a"}}, []string{kindB + " default/p1", kindB + " default/p2"}},
		{store.ListOptions{Labels: map[string]string{"schema": "a", "current": "true"}}, []string{kindB + " default/p2"}},
		{store.ListOptions{Labels: map[string]string{"current": "true"}}, []string{kindB + " default/p2", kindB + " default/p3"}},
		{store.ListOptions{Labels: map[string]string{"schema": "c"}}, nil},
		{store.ListOptions{Kind: "Nothing"}, nil},
	}
	for _, tc := range cases {
		got, err := s.List(ctx, tc.opts)
		if err != nil {
			t.Fatalf("List(%+v): %v", tc.opts, err)
		}
		var names []string
		for _, o := range got {
			names = append(names, o.Kind+" "+o.Namespace+"/"+o.Name)
		}
		if !reflect.DeepEqual(names, tc.want) {
			t.Errorf("List(%+v) = %q, want %q", tc.opts, names, tc.want)
		}
	}
}

func testListMetadataOnly(t *testing.T, s store.Store) {
	ctx := context.Background()
	o := obj(kindA, "a", `{"big": "spec"}`)
	o.Labels = map[string]string{"schema": "a"}
	created := mustCreate(t, s, o)
	created.Status = json.RawMessage(`{"phase": "InSync"}`)
	created, err := s.UpdateStatus(ctx, created)
	if err != nil {
		t.Fatal(err)
	}
	got, err := s.List(ctx, store.ListOptions{Labels: map[string]string{"schema": "a"}, MetadataOnly: true})
	if err != nil || len(got) != 1 {
		t.Fatalf("List metadata only: %v, %d objects", err, len(got))
	}
	want := created
	want.Spec, want.Status = nil, nil
	if !reflect.DeepEqual(got[0], want) {
		t.Errorf("metadata only:\n got %+v\nwant %+v", got[0], want)
	}
	full, err := s.List(ctx, store.ListOptions{Kind: kindA})
	if err != nil || len(full) != 1 || !reflect.DeepEqual(full[0], created) {
		t.Errorf("a full list after a metadata-only one: %+v, %v", full, err)
	}
}

func testUpdateStaleResourceVersion(t *testing.T, s store.Store) {
	first := mustCreate(t, s, obj(kindA, "a", `{"v": 1}`))
	second := first
	second.Spec = json.RawMessage(`{"v": 2}`)
	second = mustUpdate(t, s, second)

	stale := first // read before the second write
	stale.Spec = json.RawMessage(`{"v": 3}`)
	stale.Labels = map[string]string{"l": "x"}
	_, err := s.Update(context.Background(), stale)
	wantErr(t, "Update from a stale resourceVersion", err, store.ErrConflict)
	sameObject(t, "after the conflict", mustGet(t, s, kindA, ns, "a"), second)
}

func testUpdateWithAnotherUID(t *testing.T, s store.Store) {
	cur := mustCreate(t, s, obj(kindA, "a", `{"v": 1}`))
	wrong := cur
	wrong.UID = store.NewUID()
	wrong.Spec = json.RawMessage(`{"v": 2}`)
	_, err := s.Update(context.Background(), wrong)
	wantErr(t, "Update naming another UID", err, store.ErrConflict)
	_, err = s.UpdateStatus(context.Background(), wrong)
	wantErr(t, "UpdateStatus naming another UID", err, store.ErrConflict)
	sameObject(t, "after the conflicts", mustGet(t, s, kindA, ns, "a"), cur)
}

func testUpdateMissing(t *testing.T, s store.Store) {
	o := obj(kindA, "missing", `{}`)
	o.ResourceVersion = 1
	_, err := s.Update(context.Background(), o)
	wantErr(t, "Update", err, store.ErrNotFound)
	_, err = s.UpdateStatus(context.Background(), o)
	wantErr(t, "UpdateStatus", err, store.ErrNotFound)
}

// Status is written by UpdateStatus alone (in a cluster, through the status
// subresource, which RBAC grants to the manager only): Update leaves it as
// stored, whatever the object passed says.
func testUpdateReplaces(t *testing.T, s store.Store) {
	in := obj(kindA, "a", `{"v": 1, "keep": true}`)
	in.Labels = map[string]string{"a": "1", "b": "2"}
	cur := mustCreate(t, s, in)
	cur.Status = json.RawMessage(`{"phase": "Old"}`)
	cur = mustUpdateStatus(t, s, cur)

	cur.Spec = json.RawMessage(`{"v": 2}`)
	cur.Labels = map[string]string{"b": "3"}
	cur.Status = nil
	got := mustUpdate(t, s, cur)
	jsonEq(t, "spec", got.Spec, `{"v": 2}`)
	jsonEq(t, "status", got.Status, `{"phase": "Old"}`)
	if !reflect.DeepEqual(got.Labels, map[string]string{"b": "3"}) {
		t.Errorf("labels %v, want only b=3", got.Labels)
	}
	sameObject(t, "Get after Update", mustGet(t, s, kindA, ns, "a"), got)
}

func testGenerationBumpsOnlyOnSpecChange(t *testing.T, s store.Store) {
	cur := mustCreate(t, s, obj(kindA, "a", `{"b": 1.0, "a": [1, {"x": "y"}]}`))
	// noop: the write changes nothing stored, and may keep the
	// resourceVersion (Kubernetes does); every other write moves it.
	steps := []struct {
		what   string
		change func(o *store.Object)
		gen    int64
		noop   bool
	}{
		{"labels only", func(o *store.Object) { o.Labels = map[string]string{"l": "v"} }, 1, false},
		{"status through Update", func(o *store.Object) { o.Status = json.RawMessage(`{"phase": "X"}`) }, 1, true},
		{"contract version only", func(o *store.Object) { o.ContractVersion = 2 }, 1, false},
		{"same spec, other key order, spacing and number form", func(o *store.Object) {
			o.Spec = json.RawMessage("{\"a\":[1,{\"x\":\"\\u0079\"}],\n \"b\":1}")
		}, 1, true},
		{"spec value changed", func(o *store.Object) { o.Spec = json.RawMessage(`{"b": 2, "a": [1, {"x": "y"}]}`) }, 2, false},
		{"spec key added", func(o *store.Object) { o.Spec = json.RawMessage(`{"b": 2, "a": [1, {"x": "y"}], "c": "d"}`) }, 3, false},
		{"spec array reordered", func(o *store.Object) { o.Spec = json.RawMessage(`{"b": 2, "a": [{"x": "y"}, 1], "c": "d"}`) }, 4, false},
		{"spec removed", func(o *store.Object) { o.Spec = nil }, 5, false},
		{"spec still absent", func(o *store.Object) { o.Spec = json.RawMessage(`null`) }, 5, true},
	}
	for _, st := range steps {
		prev := cur.ResourceVersion
		st.change(&cur)
		cur = mustUpdate(t, s, cur)
		if cur.Generation != st.gen {
			t.Fatalf("after %s: generation %d, want %d", st.what, cur.Generation, st.gen)
		}
		if cur.ResourceVersion < prev || !st.noop && cur.ResourceVersion == prev {
			t.Fatalf("after %s: resourceVersion %d after %d", st.what, cur.ResourceVersion, prev)
		}
		if got := mustGet(t, s, kindA, ns, "a"); got.Generation != st.gen {
			t.Fatalf("after %s: stored generation %d, want %d", st.what, got.Generation, st.gen)
		}
	}
}

func testUpdateStatusChangesOnlyStatus(t *testing.T, s store.Store) {
	in := obj(kindA, "a", `{"v": 1}`)
	in.Labels = map[string]string{"l": "v"}
	cur := mustCreate(t, s, in)

	w := cur
	w.Spec = json.RawMessage(`{"v": 999}`)         // ignored
	w.Labels = map[string]string{"other": "label"} // ignored
	w.Immutable = true                             // ignored
	w.Status = json.RawMessage(`{"phase": "InSync", "observedGeneration": 1}`)
	got := mustUpdateStatus(t, s, w)

	want := cur
	want.Status = w.Status
	want.ResourceVersion = got.ResourceVersion
	want.UpdatedAt = got.UpdatedAt
	if got.ResourceVersion <= cur.ResourceVersion {
		t.Errorf("resourceVersion %d, not above %d", got.ResourceVersion, cur.ResourceVersion)
	}
	sameObject(t, "UpdateStatus result", got, want)
	sameObject(t, "Get after UpdateStatus", mustGet(t, s, kindA, ns, "a"), want)
}

func testUpdateStatusPreconditions(t *testing.T, s store.Store) {
	first := mustCreate(t, s, obj(kindA, "a", `{}`))
	first.Status = json.RawMessage(`{"n": 1}`)
	second := mustUpdateStatus(t, s, first)

	first.Status = json.RawMessage(`{"n": 2}`) // first's resourceVersion is stale now
	_, err := s.UpdateStatus(context.Background(), first)
	wantErr(t, "UpdateStatus from a stale resourceVersion", err, store.ErrConflict)
	sameObject(t, "after the conflict", mustGet(t, s, kindA, ns, "a"), second)
}

func testDeleteChecksUID(t *testing.T, s store.Store) {
	ctx := context.Background()
	cur := mustCreate(t, s, obj(kindA, "a", `{}`))
	err := s.Delete(ctx, kindA, ns, "a", store.NewUID())
	wantErr(t, "Delete naming another UID", err, store.ErrConflict)
	sameObject(t, "after the refused Delete", mustGet(t, s, kindA, ns, "a"), cur)

	if err := s.Delete(ctx, kindA, ns, "a", cur.UID); err != nil {
		t.Fatalf("Delete with the right UID: %v", err)
	}
	_, err = s.Get(ctx, kindA, ns, "a")
	wantErr(t, "Get after Delete", err, store.ErrNotFound)
	_, err = s.GetByUID(ctx, cur.UID)
	wantErr(t, "GetByUID after Delete", err, store.ErrNotFound)
	wantErr(t, "second Delete", s.Delete(ctx, kindA, ns, "a", cur.UID), store.ErrNotFound)
	wantErr(t, "Delete of a missing object", s.Delete(ctx, kindA, ns, "never", ""), store.ErrNotFound)

	mustCreate(t, s, obj(kindA, "b", `{}`))
	if err := s.Delete(ctx, kindA, ns, "b", ""); err != nil {
		t.Fatalf("Delete without a UID: %v", err)
	}
}

func testImmutableSpec(t *testing.T, s store.Store) {
	in := obj(kindB, "plan", `{"statements": ["CREATE TABLE t ()"]}`)
	in.Immutable = true
	cur := mustCreate(t, s, in)
	if !cur.Immutable {
		t.Fatalf("Create returned Immutable false")
	}

	changed := cur
	changed.Spec = json.RawMessage(`{"statements": ["DROP TABLE t"]}`)
	_, err := s.Update(context.Background(), changed)
	wantErr(t, "Update of an immutable spec", err, store.ErrImmutable)
	sameObject(t, "after the refused Update", mustGet(t, s, kindB, ns, "plan"), cur)

	// What is not the spec stays writable: a plan is marked stale through
	// its labels or status, never by editing what was approved.
	cur.Spec = json.RawMessage(`{ "statements" : [ "CREATE TABLE t ()" ] }`)
	cur.Labels = map[string]string{"current": "false"}
	cur.Status = json.RawMessage(`{"stale": true}`)
	cur = mustUpdate(t, s, cur)
	if cur.Generation != 1 || !cur.Immutable {
		t.Fatalf("after a labels and status Update: generation %d immutable %v, want 1 true", cur.Generation, cur.Immutable)
	}
	cur.Status = json.RawMessage(`{"stale": false}`)
	cur = mustUpdateStatus(t, s, cur)
	jsonEq(t, "status", mustGet(t, s, kindB, ns, "plan").Status, `{"stale": false}`)
}

func testImmutableOnNotOff(t *testing.T, s store.Store) {
	cur := mustCreate(t, s, obj(kindB, "a", `{"v": 1}`))
	cur.Immutable = true
	cur = mustUpdate(t, s, cur)
	if !cur.Immutable || !mustGet(t, s, kindB, ns, "a").Immutable {
		t.Fatalf("Update did not make the object immutable")
	}
	cur.Immutable = false
	_, err := s.Update(context.Background(), cur)
	wantErr(t, "Update turning Immutable off", err, store.ErrImmutable)
	if !mustGet(t, s, kindB, ns, "a").Immutable {
		t.Fatalf("the object became mutable")
	}
}

// race runs n copies of write at once and returns how many succeeded; every
// failure must be a conflict (or, for creates, already-exists).
func race(t *testing.T, n int, allowed error, write func(i int) error) int {
	t.Helper()
	var (
		wg    sync.WaitGroup
		start = make(chan struct{})
		errs  = make([]error, n)
	)
	for i := range n {
		wg.Go(func() {
			<-start
			errs[i] = write(i)
		})
	}
	close(start)
	wg.Wait()
	wins := 0
	for i, err := range errs {
		switch {
		case err == nil:
			wins++
		case !errors.Is(err, allowed):
			t.Errorf("writer %d: %v, want success or %v", i, err, allowed)
		}
	}
	return wins
}

const racers = 8

func testConcurrentUpdates(t *testing.T, s store.Store) {
	base := mustCreate(t, s, obj(kindA, "a", `{"writer": -1}`))
	var winner store.Object
	var mu sync.Mutex
	wins := race(t, racers, store.ErrConflict, func(i int) error {
		o := base
		o.Spec = json.RawMessage(`{"writer": ` + strconv.Itoa(i) + `}`)
		got, err := s.Update(context.Background(), o)
		if err == nil {
			mu.Lock()
			winner = got
			mu.Unlock()
		}
		return err
	})
	if wins != 1 {
		t.Fatalf("%d of %d updates from one resourceVersion succeeded, want exactly 1", wins, racers)
	}
	got := mustGet(t, s, kindA, ns, "a")
	sameObject(t, "the stored object", got, winner)
	if got.Generation != 2 {
		t.Fatalf("generation %d, want 2", got.Generation)
	}
}

func testConcurrentStatusUpdates(t *testing.T, s store.Store) {
	base := mustCreate(t, s, obj(kindA, "a", `{}`))
	wins := race(t, racers, store.ErrConflict, func(i int) error {
		o := base
		o.Status = json.RawMessage(`{"writer": ` + strconv.Itoa(i) + `}`)
		_, err := s.UpdateStatus(context.Background(), o)
		return err
	})
	if wins != 1 {
		t.Fatalf("%d of %d status updates from one resourceVersion succeeded, want exactly 1", wins, racers)
	}
}

func testConcurrentCreates(t *testing.T, s store.Store) {
	wins := race(t, racers, store.ErrAlreadyExists, func(i int) error {
		_, err := s.Create(context.Background(), obj(kindA, "a", `{"writer": `+strconv.Itoa(i)+`}`))
		return err
	})
	if wins != 1 {
		t.Fatalf("%d of %d creates of one name succeeded, want exactly 1", wins, racers)
	}
}

func testRecreatedObjectGetsNewUID(t *testing.T, s store.Store) {
	ctx := context.Background()
	old := mustCreate(t, s, obj(kindB, "plan", `{"v": 1}`))
	if err := s.Delete(ctx, kindB, ns, "plan", old.UID); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	replacement := mustCreate(t, s, obj(kindB, "plan", `{"v": 1}`))
	if replacement.UID == old.UID {
		t.Fatalf("the re-created object kept UID %s", old.UID)
	}
	if replacement.Generation != 1 || replacement.ResourceVersion <= old.ResourceVersion {
		t.Fatalf("re-created: generation %d resourceVersion %d (old %d)", replacement.Generation, replacement.ResourceVersion, old.ResourceVersion)
	}
	// Whatever named the old incarnation must not reach the new one.
	_, err := s.GetByUID(ctx, old.UID)
	wantErr(t, "GetByUID of the old UID", err, store.ErrNotFound)
	_, err = s.Update(ctx, old)
	wantErr(t, "Update of the old incarnation", err, store.ErrConflict)
	old.ResourceVersion = replacement.ResourceVersion // even with a current resourceVersion
	_, err = s.Update(ctx, old)
	wantErr(t, "Update naming the old UID", err, store.ErrConflict)
	wantErr(t, "Delete naming the old UID", s.Delete(ctx, kindB, ns, "plan", old.UID), store.ErrConflict)
	sameObject(t, "the replacement", mustGet(t, s, kindB, ns, "plan"), replacement)
}

func testResourceVersionIncreasesAcrossObjects(t *testing.T, s store.Store) {
	ctx := context.Background()
	a := mustCreate(t, s, obj(kindA, "a", `{}`))
	b := mustCreate(t, s, obj(kindB, "b", `{}`))
	last := b.ResourceVersion
	if last <= a.ResourceVersion {
		t.Fatalf("second create got %d after %d", last, a.ResourceVersion)
	}
	check := func(what string, rv int64) {
		t.Helper()
		if rv <= last {
			t.Fatalf("%s: resourceVersion %d, not above the last one %d", what, rv, last)
		}
		last = rv
	}
	a.Spec = json.RawMessage(`{"v": 1}`)
	a = mustUpdate(t, s, a)
	check("Update a", a.ResourceVersion)
	b.Status = json.RawMessage(`{"v": 1}`)
	b = mustUpdateStatus(t, s, b)
	check("UpdateStatus b", b.ResourceVersion)
	if noop := mustUpdate(t, s, a); noop.ResourceVersion < a.ResourceVersion {
		t.Fatalf("a write that changes nothing moved the resourceVersion back: %d after %d", noop.ResourceVersion, a.ResourceVersion)
	} else {
		a = noop
		last = max(last, a.ResourceVersion)
	}
	if err := s.Delete(ctx, kindB, ns, "b", ""); err != nil {
		t.Fatal(err)
	}
	c := mustCreate(t, s, obj(kindA, "c", `{}`))
	check("Create c after a delete", c.ResourceVersion)
	for _, o := range []store.Object{a, c} {
		if got := mustGet(t, s, o.Kind, ns, o.Name); got.ResourceVersion != o.ResourceVersion {
			t.Fatalf("Get %s: resourceVersion %d, write returned %d", o.Name, got.ResourceVersion, o.ResourceVersion)
		}
	}
}

func testContractVersionRoundTrips(t *testing.T, s store.Store) {
	ctx := context.Background()
	in := obj(kindA, "a", `{}`)
	in.ContractVersion = 3
	cur := mustCreate(t, s, in)
	versionIs := func(what string, want int) {
		t.Helper()
		if got := mustGet(t, s, kindA, ns, "a").ContractVersion; got != want {
			t.Fatalf("after %s: stored contract version %d, want %d", what, got, want)
		}
		list, err := s.List(ctx, store.ListOptions{})
		if err != nil || len(list) != 1 || list[0].ContractVersion != want {
			t.Fatalf("after %s: List = %+v, %v; want contract version %d", what, list, err, want)
		}
	}
	versionIs("Create", 3)
	cur.ContractVersion = 5
	cur = mustUpdate(t, s, cur)
	versionIs("Update", 5)
	cur.ContractVersion = 7
	cur = mustUpdateStatus(t, s, cur)
	versionIs("UpdateStatus", 7)
}

// Stored state never goes back to an older contract: neither kind of write
// carrying a lower contract version than the stored one lands, and the
// refusal is ErrNewerContract, even when the write is otherwise stale.
func testContractVersionNeverGoesBack(t *testing.T, s store.Store) {
	in := obj(kindA, "a", `{"v":1}`)
	in.ContractVersion = 2
	cur := mustCreate(t, s, in)
	older := cur
	older.ContractVersion = 1
	older.Status = json.RawMessage(`{"phase":"InSync"}`)
	_, err := s.UpdateStatus(context.Background(), older)
	wantErr(t, "UpdateStatus under an older contract", err, store.ErrNewerContract)
	older.Spec = json.RawMessage(`{"v":2}`)
	_, err = s.Update(context.Background(), older)
	wantErr(t, "Update under an older contract", err, store.ErrNewerContract)
	older.ResourceVersion-- // stale as well: the contract is what the caller must hear about
	_, err = s.UpdateStatus(context.Background(), older)
	wantErr(t, "a stale UpdateStatus under an older contract", err, store.ErrNewerContract)
	got := mustGet(t, s, kindA, ns, "a")
	if got.ContractVersion != 2 || got.ResourceVersion != cur.ResourceVersion || got.Status != nil {
		t.Fatalf("a refused write changed the object: %+v", got)
	}
	// The same or a newer contract writes.
	same := got
	same.Status = json.RawMessage(`{"phase":"InSync"}`)
	mustUpdateStatus(t, s, same)
}

// The contract versions recorded inside spec and status are read back as
// EmbeddedContractVersion, in full reads and in metadata-only lists alike.
func testEmbeddedContractVersion(t *testing.T, s store.Store) {
	ctx := context.Background()
	in := obj(kindA, "a", `{"bindings":{"executionBinding":{"contractVersion":4}},"contractVersion":"9"}`)
	created := mustCreate(t, s, in)
	created.Status = json.RawMessage(`{"items":[{"executionBinding":{"contractVersion":6}}]}`)
	created = mustUpdateStatus(t, s, created)
	plain := mustCreate(t, s, obj(kindA, "b", `{}`))
	if created.EmbeddedContractVersion != 6 || plain.EmbeddedContractVersion != 0 {
		t.Fatalf("writes returned embedded contract versions %d and %d, want 6 (a string is not a version) and 0",
			created.EmbeddedContractVersion, plain.EmbeddedContractVersion)
	}
	if got := mustGet(t, s, kindA, ns, "a"); got.EmbeddedContractVersion != 6 {
		t.Fatalf("Get: embedded contract version %d, want 6", got.EmbeddedContractVersion)
	}
	list, err := s.List(ctx, store.ListOptions{MetadataOnly: true})
	if err != nil || len(list) != 2 || list[0].EmbeddedContractVersion != 6 || list[1].EmbeddedContractVersion != 0 {
		t.Fatalf("List metadata only = %+v, %v; want embedded contract versions 6 and 0", list, err)
	}
}

func testTimestamps(t *testing.T, s store.Store) {
	created := mustCreate(t, s, obj(kindA, "a", `{}`))
	if created.CreatedAt.IsZero() || created.UpdatedAt.Before(created.CreatedAt) {
		t.Fatalf("Create: createdAt %v updatedAt %v", created.CreatedAt, created.UpdatedAt)
	}
	if created.CreatedAt.Location() != time.UTC {
		t.Errorf("createdAt %v is not in UTC", created.CreatedAt)
	}
	created.Spec = json.RawMessage(`{"v": 1}`)
	updated := mustUpdate(t, s, created)
	if !updated.CreatedAt.Equal(created.CreatedAt) || updated.UpdatedAt.Before(created.CreatedAt) {
		t.Fatalf("Update: createdAt %v -> %v, updatedAt %v", created.CreatedAt, updated.CreatedAt, updated.UpdatedAt)
	}
}

func testReturnedObjectsAreCopies(t *testing.T, s store.Store) {
	in := obj(kindA, "a", `{"v": 1}`)
	in.Labels = map[string]string{"l": "v"}
	created := mustCreate(t, s, in)
	in.Labels["l"] = "changed by the caller"
	in.Spec[1] = 'X'
	created.Labels["l"] = "changed by the caller"
	created.Spec[1] = 'X'
	got := mustGet(t, s, kindA, ns, "a")
	got.Labels["l"] = "changed by the caller"
	got.Spec[1] = 'X'
	again := mustGet(t, s, kindA, ns, "a")
	if again.Labels["l"] != "v" {
		t.Errorf("stored labels changed through a returned map: %v", again.Labels)
	}
	jsonEq(t, "stored spec", again.Spec, `{"v": 1}`)
}

// A status is written by UpdateStatus alone: a Create that carries one is
// refused, and stores nothing.
func testCreateRefusesAStatus(t *testing.T, s store.Store) {
	o := obj(kindA, "a", `{}`)
	o.Status = json.RawMessage(`{"phase": "InSync"}`)
	_, err := s.Create(context.Background(), o)
	wantErr(t, "Create with a status", err, store.ErrInvalid)
	_, err = s.Get(context.Background(), kindA, ns, "a")
	wantErr(t, "Get after the refused Create", err, store.ErrNotFound)
}
