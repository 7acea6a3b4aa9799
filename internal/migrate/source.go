// Package migrate reads a directory of versioned migration files and
// decides, from the history a database records, which of them are pending
// or why none may run.
//
// It does no database work: the runner reads the history table and the
// run journal and passes what it read to Compare and HistoryFingerprint,
// which are pure. Read touches only the file system it is given.
package migrate

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"
	"strings"

	"github.com/ptah-run/ptah/internal/postgres/script"
)

// Source is a migration directory, read and checked.
type Source struct {
	// Layout is the directory's layout, as given or detected.
	Layout Layout
	// Files are the migrations to run, in version order.
	Files []*File
	// HasSum: the directory holds a ptah.sum, and the files match it.
	HasSum bool
}

// File is one migration.
type File struct {
	Version Version
	// Name is the file name's descriptive part ("create_users").
	Name string
	// Path is the file's path in the directory ("0002_create_users.sql").
	Path string
	// SQL is the file's contents, exactly.
	SQL string
	// Checksum is "sha256:" and the hex SHA-256 of the file's bytes.
	Checksum string
	// NoTransaction: the file's first line asks for it to run outside a
	// transaction, one statement at a time.
	NoTransaction bool
	// Statements are the file's statements, in order, each with its line
	// and column in the file.
	Statements []script.Statement
}

// Read reads the migrations at the root of fsys, in layout (LayoutDetect
// to detect it). Subdirectories, dot-files and files that are not .sql
// files are not read, but for ptah.sum: when it is present, the files must
// be exactly those it lists. Every problem found is reported at once, in a
// *SourceError.
func Read(fsys fs.FS, layout Layout) (*Source, error) {
	return read(fsys, "", layout, true)
}

// ReadDir reads the migrations of the directory dir, as Read does.
func ReadDir(dir string, layout Layout) (*Source, error) {
	return read(os.DirFS(dir), dir, layout, true)
}

// read reads and checks a directory; verify: check the files against
// ptah.sum when there is one (not when the sum is about to be rewritten).
func read(fsys fs.FS, dir string, layout Layout, verify bool) (*Source, error) {
	if _, err := ParseLayout(string(layout)); err != nil {
		return nil, err
	}
	names, hasSum, err := list(fsys)
	if err != nil {
		// The path of a PathError is the file system's root, ".": say
		// the directory instead.
		if pe := (*fs.PathError)(nil); errors.As(err, &pe) {
			err = pe.Err
		}
		return nil, fmt.Errorf("reading migrations in %s: %w", displayDir(dir), err)
	}
	var ps problems
	if layout == LayoutDetect {
		if layout = detect(names, &ps); layout == "" {
			return nil, ps.err(dir)
		}
	}
	files := parseNames(names, layout, &ps)
	if len(files) == 0 && len(ps) == 0 {
		ps.add(0, fmt.Errorf("%w: the directory holds no %s file to run", ErrEmpty, layout.Pattern()))
	}
	order(files, &ps)
	for _, f := range files {
		f.load(fsys, &ps)
	}
	src := &Source{Layout: layout, Files: files}
	if verify && hasSum && len(ps) == 0 {
		// A sum is only compared with files that could all be read: a
		// file that failed is reported once, as what it is.
		verifySum(fsys, files, &ps)
		src.HasSum = true
	}
	if err := ps.err(dir); err != nil {
		return nil, err
	}
	return src, nil
}

func displayDir(dir string) string {
	if dir == "" {
		return "the source"
	}
	return dir
}

// list names the .sql files at the root of fsys, and says whether ptah.sum
// is there. A symbolic link counts as what it points to.
func list(fsys fs.FS) (sqlFiles []string, hasSum bool, err error) {
	entries, err := fs.ReadDir(fsys, ".")
	if err != nil {
		return nil, false, err
	}
	for _, e := range entries {
		name := e.Name()
		// Dot-files are editor lock and backup files (.#1_x.sql), not
		// migrations.
		if strings.HasPrefix(name, ".") || (name != SumFile && !strings.HasSuffix(name, ".sql")) {
			continue
		}
		info, err := fs.Stat(fsys, name)
		if err != nil || !info.Mode().IsRegular() {
			continue
		}
		if name == SumFile {
			hasSum = true
			continue
		}
		sqlFiles = append(sqlFiles, name)
	}
	return sqlFiles, hasSum, nil
}

// detect finds the one layout the .sql files follow. It returns "" and
// records why when there is not exactly one.
func detect(sqlFiles []string, ps *problems) Layout {
	if len(sqlFiles) == 0 {
		ps.add(0, fmt.Errorf("%w: the directory holds no .sql file", ErrEmpty))
		return ""
	}
	byLayout := map[Layout][]string{}
	var unknown []string
	for _, name := range sqlFiles {
		if l, ok := layoutOf(name); ok {
			byLayout[l] = append(byLayout[l], name)
		} else {
			unknown = append(unknown, name)
		}
	}
	switch len(byLayout) {
	case 1:
		for l := range byLayout {
			return l
		}
	case 0:
		for _, name := range unknown {
			ps.add(0, badName(name, ""), name)
		}
	default:
		ps.add(0, mixed(byLayout))
	}
	return ""
}

// mixed names some files of each layout found.
func mixed(byLayout map[Layout][]string) error {
	var parts []string
	for _, l := range layouts {
		if files := byLayout[l]; len(files) > 0 {
			parts = append(parts, fmt.Sprintf("%s (%s)", l, listSome(files, 3)))
		}
	}
	return fmt.Errorf("%w: %s; keep the migrations of one layout in the directory and move the other files out",
		ErrMixedLayouts, strings.Join(parts, ", "))
}

// listSome lists the first n names, and how many more there are.
func listSome(names []string, n int) string {
	if len(names) <= n {
		return strings.Join(names, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(names[:n], ", "), len(names)-n)
}

// parseNames makes a File of each migration of the layout, reporting the
// .sql files that are not migrations of it.
func parseNames(sqlFiles []string, layout Layout, ps *problems) []*File {
	var files []*File
	for _, name := range sqlFiles {
		parts, ok := layout.match(name)
		if !ok {
			ps.add(0, badName(name, layout), name)
			continue
		}
		if parts.skip {
			continue
		}
		v, err := ParseVersion(parts.version)
		if err != nil {
			ps.add(0, err, name)
			continue
		}
		files = append(files, &File{Version: v, Name: parts.name, Path: name})
	}
	return files
}

// order sorts files by version and reports each set of files sharing one.
func order(files []*File, ps *problems) {
	slices.SortStableFunc(files, func(a, b *File) int {
		if c := a.Version.Compare(b.Version); c != 0 {
			return c
		}
		return strings.Compare(a.Path, b.Path)
	})
	for i := 0; i < len(files); {
		j := i + 1
		for j < len(files) && files[j].Version.Compare(files[i].Version) == 0 {
			j++
		}
		if j-i > 1 {
			paths := make([]string, 0, j-i)
			for _, f := range files[i:j] {
				paths = append(paths, f.Path)
			}
			ps.add(0, fmt.Errorf("%w %s: a version names one migration; give all but one of them a new version", ErrDuplicateVersion, files[i].Version.Canonical()), paths...)
		}
		i = j
	}
}
