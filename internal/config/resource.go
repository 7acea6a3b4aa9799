package config

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// Select returns the resources named by names, in the order given, or every
// resource when names is empty. A name is metadata.name, or namespace/name
// when namespaces are used.
func (f *File) Select(names []string) ([]*Resource, error) {
	if len(names) == 0 {
		return f.Resources, nil
	}
	var out []*Resource
	picked := map[*Resource]bool{}
	for _, name := range names {
		found := false
		for _, r := range f.Resources {
			s := r.Schema
			if name == s.Name || (s.Namespace != "" && name == s.Namespace+"/"+s.Name) {
				found = true
				if !picked[r] {
					picked[r] = true
					out = append(out, r)
				}
			}
		}
		if !found {
			return nil, &Error{File: f.Path, Err: fmt.Errorf("no resource named %q; available: %s", name, strings.Join(f.names(), ", "))}
		}
	}
	return out, nil
}

func (f *File) names() []string {
	var names []string
	for _, r := range f.Resources {
		n := r.Schema.Name
		if r.Schema.Namespace != "" {
			n = r.Schema.Namespace + "/" + n
		}
		names = append(names, n)
	}
	return names
}

// relative resolves p against the directory of the configuration file, so a
// ptah.yaml means the same thing from whatever directory ptah runs in.
func (r *Resource) relative(p string) string {
	if filepath.IsAbs(p) {
		return filepath.Clean(p)
	}
	return filepath.Join(filepath.Dir(r.File), p)
}

// SourceDir is spec.source.path resolved against the configuration file.
func (r *Resource) SourceDir() string { return r.relative(r.Schema.Spec.Source.Path) }

// SQLFile is one declared file, in load order.
type SQLFile struct {
	Name string // the path as shown to people: the source directory joined with the file name
	SQL  string
}

// SQLFiles reads the declared *.sql files of the source directory in lexical
// order. Subdirectories are not read, nor dot-files (editor lock and backup
// files), so what loads is exactly what `ls dir/*.sql` shows.
func (r *Resource) SQLFiles() ([]SQLFile, error) {
	dir := r.SourceDir()
	entries, err := os.ReadDir(dir)
	if err != nil {
		var pe *fs.PathError
		if errors.As(err, &pe) {
			err = pe.Err
		}
		return nil, r.errorf("spec.source.path", "cannot read directory %s: %w", dir, err)
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
		return nil, r.errorf("spec.source.path", "directory %s has no .sql files", dir)
	}
	sort.Strings(names) // ReadDir sorts already; lexical order is the contract
	files := make([]SQLFile, 0, len(names))
	for _, name := range names {
		p := filepath.Join(dir, name)
		data, err := os.ReadFile(p)
		if err != nil {
			return nil, r.errorf("spec.source.path", "reading %s: %w", p, err)
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
	t := r.Schema.Spec.Target
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
