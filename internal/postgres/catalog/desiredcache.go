package catalog

import (
	"bytes"
	"context"
	"encoding/gob"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/ptah-run/ptah/internal/fingerprint"
)

// The desired-state cache keeps the model the declared files load to, so a
// plan whose files, dev server and ptah are unchanged reads it instead of
// creating a dev database, loading every file into it and reading its
// catalog: for a large schema nearly the whole cost of a plan.
//
// An entry is found by a key that covers everything the model depends on
// (desiredKey): the files' names and contents in load order, the managed
// schemas and what is read of them, the dev server (its exact version, its
// settings as a new session starts with them, the roles, tablespaces and
// extension versions the files may name, the encoding and locale a new
// database gets, the role the files run as and its settings), the
// connection's own parameters, and the build of ptah that reads the
// catalog. An entry is never changed, only written under a new key, so a
// hit is never stale: anything that could change the model changes the
// key, and the files are loaded again.
//
// A hit still needs the dev database when the plan asks what only it can
// answer (a declared rename, whose old names are looked up there, or a
// column type change, whose cast is tried there): then the files are
// loaded as without a cache.

// DesiredCache stores encoded desired-state models by key.
type DesiredCache interface {
	// Get returns the entry stored under key, or nil when there is none.
	Get(ctx context.Context, key string) ([]byte, error)
	// Put stores an entry under key.
	Put(ctx context.Context, key string, data []byte) error
}

// DirCache is a DesiredCache in a directory of files, one per entry,
// written whole before they are given their name. It keeps the newest
// DirCacheEntries entries.
type DirCache struct{ Dir string }

// DirCacheEntries is how many entries a DirCache keeps.
const DirCacheEntries = 16

const dirCacheSuffix = ".model"

func (c DirCache) path(key string) string { return filepath.Join(c.Dir, key+dirCacheSuffix) }

// Get reads key's file; a missing file is a miss.
func (c DirCache) Get(_ context.Context, key string) ([]byte, error) {
	data, err := os.ReadFile(c.path(key))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	return data, err
}

// Put writes key's file through a temporary file renamed into place, so a
// reader never sees half an entry, then removes the oldest entries beyond
// DirCacheEntries.
func (c DirCache) Put(_ context.Context, key string, data []byte) error {
	if err := os.MkdirAll(c.Dir, 0o700); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(c.Dir, ".tmp-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), c.path(key)); err != nil {
		return err
	}
	c.prune()
	return nil
}

// prune removes the oldest entries beyond DirCacheEntries; it is best
// effort (another ptah may be pruning too).
func (c DirCache) prune() {
	entries, err := os.ReadDir(c.Dir)
	if err != nil {
		return
	}
	type entry struct {
		name string
		mod  time.Time
	}
	var files []entry
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), dirCacheSuffix) {
			continue
		}
		if info, err := e.Info(); err == nil {
			files = append(files, entry{e.Name(), info.ModTime()})
		}
	}
	if len(files) <= DirCacheEntries {
		return
	}
	sort.Slice(files, func(i, j int) bool { return files[i].mod.After(files[j].mod) })
	for _, f := range files[DirCacheEntries:] {
		_ = os.Remove(filepath.Join(c.Dir, f.name))
	}
}

// desiredCacheFormat names the key's layout and the entries' encoding:
// change it when either changes.
const desiredCacheFormat = "ptah.run/desired-cache/v1"

// The settings a new session's reset value of which cannot change what
// the declared files load to. Every other setting is part of the key.
var keyIgnoresSettings = []string{"application_name"}

// serverKeyQuery reads, in one round trip, what the dev server contributes
// to the key. Every part is readable by a role without privileges.
const serverKeyQuery = `
SELECT current_setting('server_version_num'), version(), current_user,
	(SELECT string_agg(name || '=' || COALESCE(reset_val, ''), E'\n' ORDER BY name) FROM pg_settings WHERE name <> ALL($1)),
	(SELECT string_agg(name || '=' || COALESCE(default_version, ''), E'\n' ORDER BY name) FROM pg_available_extensions),
	(SELECT string_agg(quote_ident(rolname), E'\n' ORDER BY rolname) FROM pg_roles),
	(SELECT string_agg(quote_ident(spcname), E'\n' ORDER BY spcname) FROM pg_tablespace),
	(SELECT string_agg(setdatabase || ' ' || setrole || ' ' || array_to_string(setconfig, E'\t'), E'\n' ORDER BY setdatabase, setrole)
		FROM pg_db_role_setting WHERE setdatabase = 0),
	(SELECT concat_ws(' ', pg_encoding_to_char(encoding), datcollate, datctype) FROM pg_database WHERE datname = 'template0')`

// keyParts is everything the key covers besides the request's files,
// schemas and options. Every field is part of the key (desiredKey).
type keyParts struct {
	Build                               string // buildIdentity
	ServerVersion, Version, User        string
	Settings, Extensions, Roles         string
	Tablespaces, RoleSettings, Template string
	Params                              map[string]string // the session's parameters
}

// readKeyParts reads the key's parts from the dev server admin is
// connected to.
func readKeyParts(ctx context.Context, admin *pgx.Conn) (keyParts, error) {
	p := keyParts{Build: buildIdentity(), Params: map[string]string{}}
	var settings, extensions, roles, tablespaces, roleSettings, template *string
	if err := admin.QueryRow(ctx, serverKeyQuery, keyIgnoresSettings).Scan(&p.ServerVersion, &p.Version, &p.User,
		&settings, &extensions, &roles, &tablespaces, &roleSettings, &template); err != nil {
		return p, fmt.Errorf("reading the dev server's settings for the desired-state cache: %w", err)
	}
	str := func(s *string) string {
		if s == nil {
			return ""
		}
		return *s
	}
	p.Settings, p.Extensions, p.Roles = str(settings), str(extensions), str(roles)
	p.Tablespaces, p.RoleSettings, p.Template = str(tablespaces), str(roleSettings), str(template)
	// The session's own parameters travel to the dev database's session
	// (loadDesired), all but search_path; the application name says which
	// process is connected.
	for k, v := range admin.Config().RuntimeParams {
		if k != "search_path" && !slices.Contains(keyIgnoresSettings, k) {
			p.Params[k] = v
		}
	}
	return p, nil
}

// desiredKey is the cache key of the model req's files load to on a dev
// server described by p.
func desiredKey(p keyParts, req PlanRequest) string {
	b := fingerprint.New(desiredCacheFormat).String("build", p.Build).
		Strings("schemas", managedSchemas(req.Schemas)).Bool("privileges", req.Privileges).
		String("serverVersion", p.ServerVersion).String("version", p.Version).String("user", p.User).
		String("settings", p.Settings).String("extensions", p.Extensions).String("roles", p.Roles).
		String("tablespaces", p.Tablespaces).String("roleSettings", p.RoleSettings).String("template", p.Template)
	names := slices.Sorted(maps.Keys(p.Params))
	b.Int("params", int64(len(names)))
	for _, k := range names {
		b.String(k, p.Params[k])
	}
	b.Int("files", int64(len(req.Files)))
	for _, f := range req.Files {
		b.String("name", f.Name).String("sql", f.SQL)
	}
	return b.Sum()
}

// buildIdentity names the build of ptah running: its module version and
// revision when it carries them, and the executable's size and time, so a
// rebuilt binary (a development build says "(devel)") never reads the
// entries of another.
var buildIdentity = sync.OnceValue(func() string {
	var parts []string
	if info, ok := debug.ReadBuildInfo(); ok {
		parts = append(parts, info.Main.Path, info.Main.Version, info.GoVersion)
		for _, s := range info.Settings {
			if strings.HasPrefix(s.Key, "vcs.") || s.Key == "-ldflags" {
				parts = append(parts, s.Key+"="+s.Value)
			}
		}
	}
	if exe, err := os.Executable(); err == nil {
		if st, err := os.Stat(exe); err == nil {
			parts = append(parts, fmt.Sprint(st.Size(), st.ModTime().UnixNano()))
		}
	}
	return strings.Join(parts, "\n")
})

// cacheEntry is what an entry holds: the key again (a file renamed by hand
// is not taken for another entry) and the model.
type cacheEntry struct {
	Key   string
	Model *Model
}

func encodeDesired(key string, m *Model) ([]byte, error) {
	var buf bytes.Buffer
	if err := gob.NewEncoder(&buf).Encode(cacheEntry{Key: key, Model: m}); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// decodeDesired returns the model of an entry, or nil for an entry that
// cannot be read as one for key (written by another format, or damaged):
// a miss.
func decodeDesired(key string, data []byte) *Model {
	var e cacheEntry
	if err := gob.NewDecoder(bytes.NewReader(data)).Decode(&e); err != nil || e.Key != key || e.Model == nil {
		return nil
	}
	canonicalize(e.Model)
	return e.Model
}
