package migrate

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"testing/fstest"
)

// problem is a problem a test expects: its sentinel, the file it names
// (and the line, when not 0), and what its message says.
type problem struct {
	is   error
	path string
	line int
	says []string
}

func (p problem) String() string {
	return fmt.Sprintf("%v at %s:%d saying %q", p.is, p.path, p.line, p.says)
}

// checkProblems asserts that err is a SourceError holding exactly the
// wanted problems (in any order), each naming its file in the message.
func checkProblems(t *testing.T, err error, want ...problem) {
	t.Helper()
	var se *SourceError
	if !errors.As(err, &se) {
		t.Fatalf("error %v (%T), want a *SourceError", err, err)
	}
	if len(se.Problems) != len(want) {
		t.Errorf("%d problems, want %d:\n%v", len(se.Problems), len(want), err)
	}
	msg := err.Error()
	for _, w := range want {
		if !errors.Is(err, w.is) {
			t.Errorf("error does not wrap %v:\n%s", w.is, msg)
		}
		if !slices.ContainsFunc(se.Problems, w.matches) {
			t.Errorf("no problem %s among:\n%s", w, msg)
		}
	}
}

func (w problem) matches(p Problem) bool {
	if !errors.Is(p, w.is) || p.Line != w.line {
		return false
	}
	text := p.Error()
	if w.path != "" && (!slices.Contains(p.Paths, w.path) || !strings.Contains(text, w.path)) {
		return false
	}
	for _, s := range w.says {
		if !strings.Contains(text, s) {
			return false
		}
	}
	return true
}

func TestReadRefuses(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name   string
		fsys   fstest.MapFS
		layout Layout
		want   []problem
	}{
		{name: "empty directory", fsys: dir(),
			want: []problem{{is: ErrEmpty, says: []string{"no .sql file"}}}},
		{name: "no .sql file", fsys: dir("README.md", "sub/1_a.sql"),
			want: []problem{{is: ErrEmpty}}},
		{name: "empty in the given layout", fsys: dir(), layout: LayoutFlyway,
			want: []problem{{is: ErrEmpty, says: []string{"V<version>__<name>.sql"}}}},
		{name: "only down files", fsys: dir("1_a.down.sql", "2_b.down.sql"),
			want: []problem{{is: ErrEmpty, says: []string{"<version>_<name>.up.sql"}}}},

		{name: "native and flyway", fsys: dir("1_a.sql", "2_b.sql", "V3__c.sql"),
			want: []problem{{is: ErrMixedLayouts, says: []string{"native (1_a.sql, 2_b.sql)", "flyway (V3__c.sql)"}}}},
		{name: "native and golang-migrate", fsys: dir("1_a.sql", "2_b.up.sql", "2_b.down.sql"),
			want: []problem{{is: ErrMixedLayouts, says: []string{"native (1_a.sql)", "golang-migrate (2_b.down.sql, 2_b.up.sql)"}}}},
		{name: "mixed, many files", fsys: dir("1_a.sql", "2_b.sql", "3_c.sql", "4_d.sql", "5_e.sql", "V6__f.sql"),
			want: []problem{{is: ErrMixedLayouts, says: []string{"native (1_a.sql, 2_b.sql, 3_c.sql and 2 more)", "flyway (V6__f.sql)"}}}},

		{name: "unparsable among detected", fsys: dir("1_a.sql", "init.sql", "2_b.sql", "3-c.sql"),
			want: []problem{
				{is: ErrBadFileName, path: "init.sql", says: []string{"<version>_<name>.sql (layout native)"}},
				{is: ErrBadFileName, path: "3-c.sql"},
			}},
		{name: "nothing parses", fsys: dir("init.sql", "1.sql"),
			want: []problem{
				{is: ErrBadFileName, path: "init.sql", says: []string{"<version>_<name>.sql, <version>_<name>.up.sql or V<version>__<name>.sql"}},
				{is: ErrBadFileName, path: "1.sql"},
			}},
		{name: "another layout's file in a given layout", fsys: dir("1_a.sql", "V2__b.sql"), layout: LayoutNative,
			want: []problem{{is: ErrBadFileName, path: "V2__b.sql", says: []string{"a flyway file name, in a native directory"}}}},
		{name: "a golang-migrate file in a native directory", fsys: dir("1_a.sql", "2_b.up.sql"), layout: LayoutNative,
			want: []problem{{is: ErrBadFileName, path: "2_b.up.sql", says: []string{"golang-migrate"}}}},
		{name: "flyway repeatable", fsys: dir("V1__a.sql", "R__views.sql"), layout: LayoutFlyway,
			want: []problem{{is: ErrBadFileName, path: "R__views.sql", says: []string{"repeatable"}}}},
		{name: "flyway lower-case prefix", fsys: dir("V1__a.sql", "v2__b.sql"), layout: LayoutFlyway,
			want: []problem{{is: ErrBadFileName, path: "v2__b.sql"}}},
		{name: "flyway single underscore", fsys: dir("V1__a.sql", "V2_b.sql"), layout: LayoutFlyway,
			want: []problem{{is: ErrBadFileName, path: "V2_b.sql"}}},

		{name: "duplicate version", fsys: dir("1_a.sql", "0001_b.sql", "2_c.sql"),
			want: []problem{{is: ErrDuplicateVersion, path: "0001_b.sql", says: []string{"1_a.sql", "version 1"}}}},
		{name: "three of one version", fsys: dir("2_a.sql", "02_b.sql", "002_c.sql"),
			want: []problem{{is: ErrDuplicateVersion, path: "002_c.sql", says: []string{"02_b.sql", "2_a.sql"}}}},
		{name: "flyway duplicate spelled differently", fsys: dir("V1.2__a.sql", "V1_2__b.sql", "V1.2.0__c.sql"),
			want: []problem{{is: ErrDuplicateVersion, path: "V1.2__a.sql", says: []string{"V1_2__b.sql", "V1.2.0__c.sql", "version 1.2"}}}},
		{name: "golang-migrate duplicate", fsys: dir("1_a.up.sql", "01_b.up.sql"),
			want: []problem{{is: ErrDuplicateVersion, path: "1_a.up.sql", says: []string{"01_b.up.sql"}}}},

		{name: "no statements", fsys: dir("1_a.sql", "2_b.sql=-- nothing yet\n/* really */ ;\n"),
			want: []problem{{is: ErrNoStatements, path: "2_b.sql"}}},
		{name: "empty file", fsys: dir("1_a.sql="),
			want: []problem{{is: ErrNoStatements, path: "1_a.sql"}}},
		{name: "unterminated string", fsys: dir("1_a.sql=SELECT 1;\nSELECT 'x;\n"),
			want: []problem{{is: ErrBadSQL, path: "1_a.sql", line: 2, says: []string{"unterminated quoted string"}}}},
		{name: "psql meta-command", fsys: dir("1_a.sql=SELECT 1;\n\n\\connect other\n"),
			want: []problem{{is: ErrBadSQL, path: "1_a.sql", line: 3, says: []string{"meta-command"}}}},

		{name: "BEGIN and COMMIT in a transactional file", fsys: dir("1_a.sql=BEGIN;\nCREATE TABLE t ();\nCOMMIT;\n"),
			want: []problem{
				{is: ErrTransactionControl, path: "1_a.sql", line: 1, says: []string{"BEGIN", "transaction of its own"}},
				{is: ErrTransactionControl, path: "1_a.sql", line: 3, says: []string{"COMMIT"}},
			}},
		{name: "START TRANSACTION, END, ROLLBACK, ABORT", fsys: dir("1_a.sql=START TRANSACTION;\nEND;\nrollback work;\nabort;\nprepare transaction 'x';"),
			want: []problem{
				{is: ErrTransactionControl, path: "1_a.sql", line: 1, says: []string{"START TRANSACTION"}},
				{is: ErrTransactionControl, path: "1_a.sql", line: 2, says: []string{"END"}},
				{is: ErrTransactionControl, path: "1_a.sql", line: 3, says: []string{"ROLLBACK"}},
				{is: ErrTransactionControl, path: "1_a.sql", line: 4, says: []string{"ABORT"}},
				{is: ErrTransactionControl, path: "1_a.sql", line: 5, says: []string{"PREPARE TRANSACTION"}},
			}},
		{name: "BEGIN in a no-transaction file", fsys: dir("1_a.sql=-- ptah:no-transaction\nCREATE INDEX CONCURRENTLY i ON t (a);\nBEGIN;\nSELECT 1;\nCOMMIT;\n"),
			want: []problem{
				{is: ErrTransactionControl, path: "1_a.sql", line: 3, says: []string{"BEGIN in a no-transaction file", "one statement at a time"}},
				{is: ErrTransactionControl, path: "1_a.sql", line: 5, says: []string{"COMMIT"}},
			}},
		{name: "statements PostgreSQL refuses in a transaction", fsys: dir("1_a.sql=CREATE TABLE t (a int);\n" +
			"CREATE INDEX CONCURRENTLY i ON t (a);\nCREATE UNIQUE INDEX CONCURRENTLY IF NOT EXISTS j ON t (a);\n" +
			"DROP INDEX CONCURRENTLY i;\nREINDEX INDEX CONCURRENTLY j;\nVACUUM t;\nALTER SYSTEM SET work_mem = '1MB';\nCREATE DATABASE x;\n"),
			want: []problem{
				{is: ErrNeedsNoTransaction, path: "1_a.sql", line: 2, says: []string{"CREATE INDEX CONCURRENTLY", NoTransactionMarker}},
				{is: ErrNeedsNoTransaction, path: "1_a.sql", line: 3, says: []string{"CREATE INDEX CONCURRENTLY"}},
				{is: ErrNeedsNoTransaction, path: "1_a.sql", line: 4, says: []string{"DROP INDEX CONCURRENTLY"}},
				{is: ErrNeedsNoTransaction, path: "1_a.sql", line: 5, says: []string{"REINDEX CONCURRENTLY"}},
				{is: ErrNeedsNoTransaction, path: "1_a.sql", line: 6, says: []string{"VACUUM"}},
				{is: ErrNeedsNoTransaction, path: "1_a.sql", line: 7, says: []string{"ALTER SYSTEM"}},
				{is: ErrNeedsNoTransaction, path: "1_a.sql", line: 8, says: []string{"CREATE DATABASE"}},
			}},

		{name: "unknown directive", fsys: dir("1_a.sql=-- ptah:no_transaction\nSELECT 1;"),
			want: []problem{{is: ErrBadDirective, path: "1_a.sql", line: 1, says: []string{"ptah:no_transaction", NoTransactionMarker}}}},
		{name: "directive after the first line", fsys: dir("1_a.sql=-- adds an index\n-- ptah:no-transaction\nSELECT 1;"),
			want: []problem{{is: ErrBadDirective, path: "1_a.sql", line: 2, says: []string{"first line"}}}},

		{name: "every problem at once", fsys: dir("1_a.sql", "01_b.sql", "x.sql", "2_c.sql=", "3_d.sql=COMMIT;"),
			want: []problem{
				{is: ErrDuplicateVersion, path: "01_b.sql"},
				{is: ErrBadFileName, path: "x.sql"},
				{is: ErrNoStatements, path: "2_c.sql"},
				{is: ErrTransactionControl, path: "3_d.sql", line: 1},
			}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			src, err := Read(tt.fsys, tt.layout)
			if src != nil {
				t.Errorf("Read returned a source with the error")
			}
			checkProblems(t, err, tt.want...)
		})
	}
}

func TestReadRefusesAnUnknownLayout(t *testing.T) {
	t.Parallel()
	_, err := Read(dir("1_a.sql"), "liquibase")
	if !errors.Is(err, ErrBadLayout) || !strings.Contains(err.Error(), `"liquibase"`) {
		t.Errorf("Read with layout liquibase: %v; want ErrBadLayout naming it", err)
	}
	if l, err := ParseLayout("golang-migrate"); l != LayoutGolangMigrate || err != nil {
		t.Errorf("ParseLayout(golang-migrate) = %q, %v", l, err)
	}
}

func TestSourceErrorMessage(t *testing.T) {
	t.Parallel()
	// One problem: on one line, prefixed by the directory.
	one := &SourceError{Dir: "db/migrations", Problems: []Problem{{Paths: []string{"1_a.sql"}, Line: 3, Err: ErrNoStatements}}}
	if got, want := one.Error(), "migrations in db/migrations: 1_a.sql:3: no statements"; got != want {
		t.Errorf("got %q\nwant %q", got, want)
	}
	two := &SourceError{Problems: []Problem{
		{Paths: []string{"1_a.sql", "01_b.sql"}, Err: ErrDuplicateVersion},
		{Err: ErrEmpty},
	}}
	if got, want := two.Error(), "migrations: 2 problems:\n  1_a.sql, 01_b.sql: duplicate version\n  no migration files"; got != want {
		t.Errorf("got %q\nwant %q", got, want)
	}
}
