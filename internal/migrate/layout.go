package migrate

import (
	"fmt"
	"regexp"
	"strings"
)

// Layout is how the files of a migration directory are named.
type Layout string

// The layouts ptah reads. The empty Layout asks Read to detect it.
const (
	// LayoutDetect: the one layout every migration file of the directory
	// follows.
	LayoutDetect Layout = ""
	// LayoutNative: <version>_<name>.sql, the version an integer or a
	// timestamp's digits (1_init.sql, 0002_users.sql,
	// 20240101120000_users.sql).
	LayoutNative Layout = "native"
	// LayoutGolangMigrate: <version>_<name>.up.sql; the .down.sql files
	// beside them are not run (ptah never migrates down).
	LayoutGolangMigrate Layout = "golang-migrate"
	// LayoutFlyway: V<version>__<name>.sql, the version possibly dotted
	// (V1.2.3__x.sql) or with underscores for dots (V1_2__x.sql is 1.2).
	// Undo files (U<version>__<name>.sql) are not run; repeatable
	// migrations (R__<name>.sql) are refused.
	LayoutFlyway Layout = "flyway"
)

// layouts are the layouts detection chooses among. Their file names never
// overlap: a file name matches at most one of them.
var layouts = []Layout{LayoutNative, LayoutGolangMigrate, LayoutFlyway}

// ParseLayout reads a layout's name, as spec.source.layout spells it.
func ParseLayout(s string) (Layout, error) {
	l := Layout(s)
	if l == LayoutDetect || l.known() {
		return l, nil
	}
	return "", fmt.Errorf("%w %q: want native, golang-migrate or flyway, or nothing to detect it", ErrBadLayout, s)
}

func (l Layout) known() bool {
	return l == LayoutNative || l == LayoutGolangMigrate || l == LayoutFlyway
}

// Pattern is how the layout names a migration, for messages.
func (l Layout) Pattern() string {
	switch l {
	case LayoutNative:
		return "<version>_<name>.sql"
	case LayoutGolangMigrate:
		return "<version>_<name>.up.sql"
	case LayoutFlyway:
		return "V<version>__<name>.sql"
	}
	return ""
}

var (
	nativeName = regexp.MustCompile(`^([0-9]+)_(.+)\.sql$`)
	// golang-migrate allows an empty name (1_.up.sql).
	golangMigrateName = regexp.MustCompile(`^([0-9]+)_(.*)\.(up|down)\.sql$`)
	flywayName        = regexp.MustCompile(`^([VU])([0-9]+(?:[._][0-9]+)*)__(.+)\.sql$`)
)

// nameParts is what a file name says in a layout.
type nameParts struct {
	version, name string
	// skip: a file of the layout that ptah does not run (a down or undo
	// migration).
	skip bool
}

// match reads a file name in the layout; ok is false when the name is not
// one of the layout's.
func (l Layout) match(file string) (p nameParts, ok bool) {
	switch l {
	case LayoutNative:
		m := nativeName.FindStringSubmatch(file)
		// A golang-migrate file is not also a native one, so that a
		// directory of them is detected as what it is.
		if m == nil || strings.HasSuffix(m[2], ".up") || strings.HasSuffix(m[2], ".down") {
			return p, false
		}
		return nameParts{version: m[1], name: m[2]}, true
	case LayoutGolangMigrate:
		m := golangMigrateName.FindStringSubmatch(file)
		if m == nil {
			return p, false
		}
		return nameParts{version: m[1], name: m[2], skip: m[3] == "down"}, true
	case LayoutFlyway:
		m := flywayName.FindStringSubmatch(file)
		if m == nil {
			return p, false
		}
		return nameParts{version: m[2], name: m[3], skip: m[1] == "U"}, true
	}
	return p, false
}

// layoutOf is the layout a file name belongs to, if any.
func layoutOf(file string) (Layout, bool) {
	for _, l := range layouts {
		if _, ok := l.match(file); ok {
			return l, true
		}
	}
	return "", false
}

// badName explains why a .sql file is not a migration of layout l (the
// detected or given one; "" when none could be detected).
func badName(file string, l Layout) error {
	if other, ok := layoutOf(file); ok {
		return fmt.Errorf("%w: a %s file name, in a %s directory (%s); rename it or move it out of the directory",
			ErrBadFileName, other, l, l.Pattern())
	}
	if l == LayoutFlyway && strings.HasPrefix(file, "R__") {
		return fmt.Errorf("%w: a Flyway repeatable migration, which ptah does not run: every migration runs once, in version order", ErrBadFileName)
	}
	if l == "" {
		return fmt.Errorf("%w: want %s, %s or %s", ErrBadFileName,
			LayoutNative.Pattern(), LayoutGolangMigrate.Pattern(), LayoutFlyway.Pattern())
	}
	return fmt.Errorf("%w: want %s (layout %s); rename it or move it out of the directory", ErrBadFileName, l.Pattern(), l)
}
