package config

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/ptah-run/ptah/pkg/api/v1alpha1"
)

// Select returns the PtahSchema resources named by names, in the order
// given, or every one when names is empty. A name is metadata.name, or
// namespace/name when namespaces are used, optionally prefixed by the kind
// (PtahSchema/app). It never returns a PtahMigration: its callers work on
// schemas (see SelectAll and SelectMigrations).
func (f *File) Select(names []string) ([]*Resource, error) {
	if len(f.Resources) == 0 {
		return nil, &Error{File: f.Path, Err: fmt.Errorf("declares no %s; this command works on %s resources only",
			v1alpha1.KindPtahSchema, v1alpha1.KindPtahSchema)}
	}
	return f.selectFrom(f.Resources, names)
}

// SelectMigrations is Select for the PtahMigration resources.
func (f *File) SelectMigrations(names []string) ([]*Resource, error) {
	if len(f.Migrations) == 0 {
		return nil, &Error{File: f.Path, Err: fmt.Errorf("declares no %s; this command works on %s resources only",
			v1alpha1.KindPtahMigration, v1alpha1.KindPtahMigration)}
	}
	return f.selectFrom(f.Migrations, names)
}

// SelectAll is Select over the resources of every kind: every resource in
// document order when names is empty. Names are unique per kind only, so a
// bare name selects the resources of every kind that have it; prefix it
// with the kind to pick one (PtahMigration/app, PtahMigration/team/app).
func (f *File) SelectAll(names []string) ([]*Resource, error) {
	return f.selectFrom(f.Documents, names)
}

func (f *File) selectFrom(from []*Resource, names []string) ([]*Resource, error) {
	if len(names) == 0 {
		return from, nil
	}
	var out []*Resource
	picked := map[*Resource]bool{}
	for _, name := range names {
		found := false
		for _, r := range from {
			if r.matches(name) {
				found = true
				if !picked[r] {
					picked[r] = true
					out = append(out, r)
				}
			}
		}
		if !found {
			return nil, &Error{File: f.Path, Err: fmt.Errorf("no resource named %q; available: %s%s",
				name, strings.Join(nameList(from), ", "), f.otherKind(from, name))}
		}
	}
	return out, nil
}

// otherKind explains a name that resources outside from have.
func (f *File) otherKind(from []*Resource, name string) string {
	for _, r := range f.Documents {
		if !slices.Contains(from, r) && r.matches(name) {
			return fmt.Sprintf(" (%s is a %s, which this command does not work on)", name, r.Kind())
		}
	}
	return ""
}

// matches reports whether name selects r: its name or namespace/name,
// optionally prefixed by its kind and a slash. A kind is never mistaken for
// a namespace: namespaces are lowercase.
func (r *Resource) matches(name string) bool {
	if kind, rest, ok := strings.Cut(name, "/"); ok && slices.Contains(declarable, kind) {
		if kind != r.Kind() {
			return false
		}
		name = rest
	}
	return name == r.Name() || (r.Namespace() != "" && name == r.Namespace()+"/"+r.Name())
}

func nameList(rs []*Resource) []string {
	var out []string
	for _, r := range rs {
		n := r.Name()
		if r.Namespace() != "" {
			n = r.Namespace() + "/" + n
		}
		if !slices.Contains(out, n) {
			out = append(out, n)
		}
	}
	return out
}

// relative resolves p against the directory of the configuration file, so a
// ptah.yaml means the same thing from whatever directory ptah runs in.
func (r *Resource) relative(p string) string {
	if filepath.IsAbs(p) {
		return filepath.Clean(p)
	}
	return filepath.Join(filepath.Dir(r.File), p)
}

// SourceDir is spec.source.path resolved against the configuration file,
// for either kind. For a PtahMigration it is the directory of versioned
// files, which config does not read: the migration source does, knowing
// their layouts.
func (r *Resource) SourceDir() string {
	if r.Migration != nil {
		return r.relative(r.Migration.Spec.Source.Path)
	}
	return r.relative(r.Schema.Spec.Source.Path)
}

// SQLFile is one declared file, in load order.
type SQLFile struct {
	Name string // the path as shown to people: the source directory joined with the file name
	SQL  string
}

// SQLFiles reads the declared *.sql files of the source directory in lexical
// order. Subdirectories are not read, nor dot-files (editor lock and backup
// files), so what loads is exactly what `ls dir/*.sql` shows.
//
// It reads a PtahSchema's files only: a PtahMigration's directory is a
// versioned sequence, read by the migration source.
func (r *Resource) SQLFiles() ([]SQLFile, error) {
	if r.Schema == nil {
		return nil, fmt.Errorf("%s: SQLFiles reads the files of a %s; a %s's are read as a versioned sequence",
			r.Ref(), v1alpha1.KindPtahSchema, r.Kind())
	}
	files, err := ReadSQLDir(r.SourceDir())
	if err != nil {
		return nil, r.errorf("spec.source.path", "%w", err)
	}
	return files, nil
}

// ErrNoSQLFiles: a source directory holds no declared file.
var ErrNoSQLFiles = errors.New("no .sql files")

// ReadSQLDir reads the *.sql files of dir in lexical order, each named by
// its path. Subdirectories are not read, nor dot-files (editor lock and
// backup files, and a mounted ConfigMap's own bookkeeping), so what loads
// is exactly what `ls dir/*.sql` shows; links to files are followed.
func ReadSQLDir(dir string) ([]SQLFile, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		var pe *fs.PathError
		if errors.As(err, &pe) {
			err = pe.Err
		}
		return nil, fmt.Errorf("cannot read directory %s: %w", dir, err)
	}
	var names []string
	for _, e := range entries {
		name := e.Name()
		if !strings.HasSuffix(name, ".sql") || strings.HasPrefix(name, ".") {
			continue
		}
		// Stat follows symlinks: a link to a file is a declared file too.
		if info, err := os.Stat(filepath.Join(dir, name)); err != nil || !info.Mode().IsRegular() {
			continue
		}
		names = append(names, name)
	}
	if len(names) == 0 {
		return nil, fmt.Errorf("directory %s has %w", dir, ErrNoSQLFiles)
	}
	sort.Strings(names) // ReadDir sorts already; lexical order is the contract
	files := make([]SQLFile, 0, len(names))
	for _, name := range names {
		p := filepath.Join(dir, name)
		data, err := os.ReadFile(p)
		if err != nil {
			return nil, fmt.Errorf("reading %s: %w", p, err)
		}
		files = append(files, SQLFile{Name: p, SQL: string(data)})
	}
	return files, nil
}

// ResolveURL returns the target's connection URL, from the environment
// (getenv), a file, or the literal url field, and checks it with check
// (which says what does not parse, never repeating the URL). A literal URL
// comes with a warning for the caller to show: it puts credentials in the
// file. Errors name where the URL was looked for, never the URL.
func (r *Resource) ResolveURL(getenv func(string) string, check func(string) error) (url, warning string, err error) {
	t := r.Target()
	field, where := "spec.target.url", "spec.target.url"
	switch {
	case t.URLFrom != nil && t.URLFrom.Env != "":
		field, where = "spec.target.urlFrom.env", "environment variable "+t.URLFrom.Env
		url = strings.TrimSpace(getenv(t.URLFrom.Env))
		if url == "" {
			return "", "", r.errorf(field, "environment variable %s is not set or empty; it must hold the target database's URL", t.URLFrom.Env)
		}
	case t.URLFrom != nil && t.URLFrom.File != "":
		p := r.relative(t.URLFrom.File)
		field, where = "spec.target.urlFrom.file", p
		data, err := os.ReadFile(p)
		if err != nil {
			var pe *fs.PathError
			if errors.As(err, &pe) {
				err = pe.Err
			}
			return "", "", r.errorf(field, "cannot read %s: %w", p, err)
		}
		url = strings.TrimSpace(string(data))
		if url == "" {
			return "", "", r.errorf(field, "%s is empty; it must hold the target database's URL", p)
		}
	default:
		url = t.URL
		warning = fmt.Sprintf("%s:%d: %s: spec.target.url is a literal URL in the file; prefer urlFrom.env or urlFrom.file so credentials stay out of it",
			r.File, lineOf(r.node, "spec.target.url"), r.Ref())
	}
	if check != nil {
		if err := check(url); err != nil {
			return "", "", r.errorf(field, "the URL in %s is not a PostgreSQL connection URL: %v", where, err)
		}
	}
	return url, warning, nil
}
