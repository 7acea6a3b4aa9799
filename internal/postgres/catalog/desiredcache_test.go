package catalog

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/ptah-run/ptah/internal/pgtest"
)

// Every part of keyParts, and every part of the request the model
// depends on, changes the key; nothing else does.
func TestDesiredKeyCoversEveryPart(t *testing.T) {
	base := keyParts{Params: map[string]string{"TimeZone": "UTC"}}
	v := reflect.ValueOf(&base).Elem()
	for i := range v.NumField() {
		if f := v.Field(i); f.Kind() == reflect.String {
			f.SetString("value of " + v.Type().Field(i).Name)
		}
	}
	req := PlanRequest{Schemas: []string{"public"}, Files: []SourceFile{{Name: "a.sql", SQL: "CREATE TABLE a (id int);"}, {Name: "b.sql", SQL: "CREATE TABLE b (id int);"}}}
	want := desiredKey(base, req)

	for i := range v.NumField() {
		name := v.Type().Field(i).Name
		changed := base
		changed.Params = map[string]string{"TimeZone": "UTC"}
		f := reflect.ValueOf(&changed).Elem().Field(i)
		switch f.Kind() {
		case reflect.String:
			f.SetString(f.String() + " changed")
		case reflect.Map:
			changed.Params = map[string]string{"TimeZone": "Asia/Tokyo"}
		default:
			t.Fatalf("keyParts.%s: a %s; teach this test to change it", name, f.Kind())
		}
		if desiredKey(changed, req) == want {
			t.Errorf("changing keyParts.%s leaves the key as it was", name)
		}
	}
	swapped := func(r PlanRequest) PlanRequest { r.Files = []SourceFile{r.Files[1], r.Files[0]}; return r }
	for what, r := range map[string]PlanRequest{
		"a file's contents":  {Schemas: req.Schemas, Files: []SourceFile{req.Files[0], {Name: "b.sql", SQL: "CREATE TABLE b (id bigint);"}}},
		"a file's name":      {Schemas: req.Schemas, Files: []SourceFile{req.Files[0], {Name: "c.sql", SQL: req.Files[1].SQL}}},
		"the files' order":   swapped(req),
		"a file more":        {Schemas: req.Schemas, Files: append(append([]SourceFile(nil), req.Files...), SourceFile{Name: "c.sql"})},
		"the schemas":        {Schemas: []string{"public", "app"}, Files: req.Files},
		"managed privileges": {Schemas: req.Schemas, Files: req.Files, Privileges: true},
	} {
		if desiredKey(base, r) == want {
			t.Errorf("changing %s leaves the key as it was", what)
		}
	}
	base.Params["DateStyle"] = "SQL"
	if desiredKey(base, req) == want {
		t.Error("a session parameter more leaves the key as it was")
	}
	delete(base.Params, "DateStyle")
	// What the plan does with the model, not the model, is left out.
	same := req
	same.Online, same.LockTimeout, same.TargetURL = true, time.Minute, "postgres://elsewhere/db"
	if desiredKey(base, same) != want {
		t.Error("the target, lock timeout or online policy changed the key; the model does not depend on them")
	}
}

// cacheFiles is a declaration with something of each kind the cache must
// carry exactly: defaults, identity (whose sequence's name and last value
// the model keeps out of its JSON), views, functions, comments.
var cacheFiles = []SourceFile{{Name: "schema.sql", SQL: `
CREATE TABLE users (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, name text NOT NULL DEFAULT '', created timestamptz DEFAULT '2020-01-01 00:00');
CREATE INDEX users_name ON users (lower(name));
CREATE VIEW named AS SELECT id, name FROM users WHERE name <> '';
CREATE FUNCTION hello(n int) RETURNS text LANGUAGE sql AS $$ SELECT 'hello ' || n $$;
COMMENT ON TABLE users IS 'people';
`}}

func observeCached(t *testing.T, req PlanRequest) *Observation {
	t.Helper()
	obs, err := Observe(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	return obs
}

func modelJSON(t *testing.T, m *Model) string {
	t.Helper()
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// The second plan of an unchanged declaration comes from the cache, and
// is the plan, and the model, the dev database gives.
func TestDesiredCacheAnswersAnUnchangedDeclaration(t *testing.T) {
	target := pgtest.NewDB(t)
	pgtest.Exec(t, target, "CREATE TABLE users (id bigint PRIMARY KEY)")
	cache := DirCache{Dir: t.TempDir()}
	req := PlanRequest{TargetURL: target, Files: cacheFiles, Schemas: []string{"public"}, Cache: cache}

	first := observeCached(t, req)
	second := observeCached(t, req)
	if first.DesiredFrom != DesiredLoaded || second.DesiredFrom != DesiredCached {
		t.Fatalf("desired state from %q then %q; want the dev database, then the cache", first.DesiredFrom, second.DesiredFrom)
	}
	if !reflect.DeepEqual(first.Desired, second.Desired) {
		t.Errorf("the cached model differs from the loaded one:\nloaded %s\ncached %s", modelJSON(t, first.Desired), modelJSON(t, second.Desired))
	}
	if !reflect.DeepEqual(first.Plan, second.Plan) || len(first.Plan.Statements) == 0 {
		t.Errorf("the cached plan differs from the loaded one (or is empty): %+v\n%+v", first.Plan, second.Plan)
	}
	uncached := req
	uncached.Cache = nil
	if third := observeCached(t, uncached); !reflect.DeepEqual(third.Desired, second.Desired) {
		t.Error("the cached model differs from one loaded without a cache")
	}
}

// A change on the dev server that changes what the files load to is a
// fresh load, never the old entry: here the time zone, in which a
// timestamptz default is read when the file runs.
func TestDesiredCacheIsNotServedAfterTheServerChanges(t *testing.T) {
	server := pgtest.NewServer(t)
	target := pgtest.NewDBOn(t, server)
	cache := DirCache{Dir: t.TempDir()}
	req := PlanRequest{TargetURL: target, Files: cacheFiles, Schemas: []string{"public"}, Cache: cache}
	before := observeCached(t, req)
	if again := observeCached(t, req); again.DesiredFrom != DesiredCached {
		t.Fatalf("the unchanged declaration was not answered from the cache (%s)", again.DesiredFrom)
	}

	changes := []struct {
		what string
		sql  []string
	}{
		{"the server's time zone", []string{"ALTER SYSTEM SET TimeZone = 'Asia/Tokyo'", "SELECT pg_reload_conf()"}},
		{"a role", []string{"CREATE ROLE cache_test_reader"}},
		{"a role's settings", []string{"ALTER ROLE cache_test_reader SET work_mem = '8MB'"}},
	}
	for _, c := range changes {
		for _, sql := range c.sql {
			pgtest.Exec(t, server, sql)
		}
		time.Sleep(100 * time.Millisecond) // the reload reaches new sessions
		obs := observeCached(t, req)
		if obs.DesiredFrom != DesiredLoaded {
			t.Errorf("after changing %s the plan used the cache", c.what)
		}
		if again := observeCached(t, req); again.DesiredFrom != DesiredCached {
			t.Errorf("after changing %s the fresh load was not kept", c.what)
		}
	}
	// The time zone did change the model: the cache would have been stale.
	uncached := req
	uncached.Cache = nil
	now := observeCached(t, uncached)
	if modelJSON(t, now.Desired) == modelJSON(t, before.Desired) {
		t.Fatal("the model does not depend on the time zone; this test proves nothing")
	}
	if cached := observeCached(t, req); modelJSON(t, cached.Desired) != modelJSON(t, now.Desired) {
		t.Error("the cache serves a model the server no longer loads the files to")
	}
}

// The cache answers only what it can: a declared rename (whose old names
// the dev database looks up) and a type change (whose cast it tries) load
// the files, and give the plan they give without a cache.
func TestDesiredCacheLoadsWhatOnlyTheDevDatabaseAnswers(t *testing.T) {
	for _, c := range []struct{ name, live, declared string }{
		{"rename", "CREATE TABLE people (id int PRIMARY KEY)", "CREATE TABLE users ( -- ptah:renamed-from people\n id int PRIMARY KEY)"},
		{"cast", "CREATE TABLE users (id int PRIMARY KEY, n text)", "CREATE TABLE users (id int PRIMARY KEY, n integer)"},
	} {
		t.Run(c.name, func(t *testing.T) {
			target := pgtest.NewDB(t)
			pgtest.Exec(t, target, c.live)
			req := PlanRequest{TargetURL: target, Files: []SourceFile{{Name: "s.sql", SQL: c.declared}}, Schemas: []string{"public"}, Cache: DirCache{Dir: t.TempDir()}}
			first, second := observeCached(t, req), observeCached(t, req)
			if second.DesiredFrom != DesiredLoaded {
				t.Errorf("the %s was planned from the cache", c.name)
			}
			if !reflect.DeepEqual(first.Plan, second.Plan) {
				t.Errorf("plans differ:\n%+v\n%+v", first.Plan, second.Plan)
			}
		})
	}
}

// An entry that cannot be read (damaged, or written for another key) is a
// miss, and is replaced; a cache that cannot be written is reported and
// the plan made without it.
func TestDesiredCacheSurvivesBadEntries(t *testing.T) {
	target := pgtest.NewDB(t)
	dir := t.TempDir()
	var reported []error
	req := PlanRequest{TargetURL: target, Files: cacheFiles, Schemas: []string{"public"}, Cache: DirCache{Dir: dir},
		OnCacheError: func(err error) { reported = append(reported, err) }}
	observeCached(t, req)
	entries, _ := filepath.Glob(filepath.Join(dir, "*"+dirCacheSuffix))
	if len(entries) != 1 {
		t.Fatalf("entries after one plan: %v", entries)
	}
	if err := os.WriteFile(entries[0], []byte("not a model"), 0o600); err != nil {
		t.Fatal(err)
	}
	if obs := observeCached(t, req); obs.DesiredFrom != DesiredLoaded {
		t.Fatal("a damaged entry was used")
	}
	if obs := observeCached(t, req); obs.DesiredFrom != DesiredCached {
		t.Fatal("the damaged entry was not replaced")
	}
	if len(reported) != 0 {
		t.Fatalf("errors reported for a cache that works: %v", reported)
	}

	blocked := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(blocked, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	req.Cache = DirCache{Dir: filepath.Join(blocked, "cache")} // under a file: cannot be created
	if obs := observeCached(t, req); obs.DesiredFrom != DesiredLoaded || len(obs.Plan.Statements) == 0 {
		t.Fatal("the plan failed or changed with a cache that cannot be written")
	}
	if len(reported) != 1 || !strings.Contains(reported[0].Error(), "not a directory") {
		t.Errorf("reported %v; want the cache's error", reported)
	}
}

func TestDirCacheKeepsTheNewestEntries(t *testing.T) {
	c := DirCache{Dir: t.TempDir()}
	ctx := context.Background()
	old := time.Now().Add(-time.Hour)
	for i := range DirCacheEntries + 3 {
		key := fmt.Sprintf("k%02d", i)
		if err := c.Put(ctx, key, []byte(key)); err != nil {
			t.Fatal(err)
		}
		// Each entry older than the next.
		_ = os.Chtimes(c.path(key), old.Add(time.Duration(i)*time.Minute), old.Add(time.Duration(i)*time.Minute))
	}
	if err := c.Put(ctx, "newest", []byte("x")); err != nil {
		t.Fatal(err)
	}
	for i := range DirCacheEntries + 3 {
		key := fmt.Sprintf("k%02d", i)
		data, err := c.Get(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		if kept := data != nil; kept != (i >= 4) {
			t.Errorf("entry %s kept: %v", key, kept)
		}
	}
	if data, _ := c.Get(ctx, "newest"); string(data) != "x" {
		t.Error("the newest entry is gone")
	}
	if left, _ := filepath.Glob(filepath.Join(c.Dir, ".tmp-*")); len(left) != 0 {
		t.Errorf("temporary files left: %v", left)
	}
}
