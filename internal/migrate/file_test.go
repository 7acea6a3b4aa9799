package migrate

import (
	"slices"
	"testing"
)

func TestNoTransactionMarker(t *testing.T) {
	t.Parallel()
	const stmt = "CREATE INDEX CONCURRENTLY i ON t (a);\n"
	for _, tt := range []struct {
		name, sql string
		want      bool
	}{
		{"ptah marker", "-- ptah:no-transaction\n" + stmt, true},
		{"goose-style marker", "-- +ptah no_transaction\n" + stmt, true},
		{"no space after the dashes", "--ptah:no-transaction\n" + stmt, true},
		{"white space around", "  --   ptah:no-transaction \t\r\n" + stmt, true},
		{"goose-style, tab and spaces", "--\t+ptah \t no_transaction\n" + stmt, true},
		{"marker then other comments", "-- ptah:no-transaction\n-- builds the index online\n\n" + stmt, true},
		{"the whole file is one statement", "-- ptah:no-transaction\n" + stmt[:len(stmt)-2], true},
		{"no marker", "CREATE TABLE t (a int);\n", false},
		{"a comment that is not a directive", "-- create the table\nCREATE TABLE t (a int);\n", false},
		// Keywords are case-sensitive: upper case is only a comment (and
		// a statement refused in a transaction is then refused by name).
		{"upper case is a comment", "-- PTAH:NO-TRANSACTION\nCREATE TABLE t (a int);\n", false},
		{"goose's own marker is not ptah's", "-- +goose NO TRANSACTION\nCREATE TABLE t (a int);\n", false},
		{"after a statement on the first line", "CREATE TABLE t (a int); -- ptah:no-transaction\n", false},
		{"in a block comment", "/* -- ptah:no-transaction */\nCREATE TABLE t (a int);\n", false},
		{"further down, after the first statement", "CREATE TABLE t (a int);\n-- ptah:no-transaction\nSELECT 1;\n", false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			src, err := Read(dir("1_a.sql="+tt.sql), LayoutNative)
			if err != nil {
				t.Fatal(err)
			}
			if got := src.Files[0].NoTransaction; got != tt.want {
				t.Errorf("NoTransaction = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestNoTransactionMarkerRefused(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name, sql string
		line      int
	}{
		{"underscore in the ptah form", "-- ptah:no_transaction\nSELECT 1;", 1},
		{"capitalized keyword", "-- ptah:No-Transaction\nSELECT 1;", 1},
		{"trailing words", "-- ptah:no-transaction please\nSELECT 1;", 1},
		{"hyphen in the goose form", "-- +ptah no-transaction\nSELECT 1;", 1},
		{"another directive", "-- ptah:timeout 5s\nSELECT 1;", 1},
		{"after a blank first line", "\n-- ptah:no-transaction\nSELECT 1;", 2},
		{"after a comment", "-- adds an index\n-- +ptah no_transaction\nSELECT 1;", 2},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Read(dir("1_a.sql="+tt.sql), LayoutNative)
			checkProblems(t, err, problem{is: ErrBadDirective, path: "1_a.sql", line: tt.line})
		})
	}
}

func TestStatements(t *testing.T) {
	t.Parallel()
	sql := `-- a function, a procedure and a DO block whose bodies hold semicolons
CREATE FUNCTION add(a int, b int) RETURNS int LANGUAGE plpgsql AS $body$
BEGIN
  RETURN a + b; -- not the end
END;
$body$;

CREATE PROCEDURE log_it(m text) LANGUAGE sql
BEGIN ATOMIC
  INSERT INTO log VALUES (m);
  SELECT CASE WHEN m = ';' THEN 1 END;
END;

  DO $$ BEGIN PERFORM 1; END $$; SELECT 'a;b' AS "c;d"
`
	src, err := Read(dir("1_routines.sql="+sql), LayoutNative)
	if err != nil {
		t.Fatal(err)
	}
	f := src.Files[0]
	want := []struct {
		sql          string
		line, column int
	}{
		{"CREATE FUNCTION add(a int, b int) RETURNS int LANGUAGE plpgsql AS $body$\nBEGIN\n  RETURN a + b; -- not the end\nEND;\n$body$", 2, 1},
		{"CREATE PROCEDURE log_it(m text) LANGUAGE sql\nBEGIN ATOMIC\n  INSERT INTO log VALUES (m);\n  SELECT CASE WHEN m = ';' THEN 1 END;\nEND", 8, 1},
		{"DO $$ BEGIN PERFORM 1; END $$", 14, 3},
		{`SELECT 'a;b' AS "c;d"`, 14, 34},
	}
	if len(f.Statements) != len(want) {
		t.Fatalf("%d statements, want %d: %q", len(f.Statements), len(want), statementSQL(f))
	}
	for i, w := range want {
		st := f.Statements[i]
		if st.SQL != w.sql || st.Line != w.line || st.Column != w.column {
			t.Errorf("statement %d: %q at %d:%d\nwant %q at %d:%d", i, st.SQL, st.Line, st.Column, w.sql, w.line, w.column)
		}
	}
}

// Savepoints live inside ptah's transaction, and a BEGIN inside a body is
// not transaction control: none of these is refused.
func TestTransactionControlAllowed(t *testing.T) {
	t.Parallel()
	sql := "SAVEPOINT s;\nROLLBACK TO SAVEPOINT s;\nROLLBACK TO s;\nrollback work to s;\nRELEASE SAVEPOINT s;\n" +
		"COMMIT PREPARED 'x';\nROLLBACK PREPARED 'y';\nDO $$ BEGIN COMMIT; END $$;\nCREATE TABLE begin (commit int);\n" +
		"CREATE INDEX i ON t (a);\nCREATE INDEX IF NOT EXISTS concurrently ON t (a);\n"
	src, err := Read(dir("1_a.sql="+sql), LayoutNative)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(src.Files[0].Statements); n != 11 {
		t.Errorf("%d statements, want 11", n)
	}
	// In a no-transaction file, what a transaction refuses is allowed.
	src, err = Read(dir("1_a.sql=-- ptah:no-transaction\nCREATE INDEX CONCURRENTLY i ON t (a);\nVACUUM t;\n"), LayoutNative)
	if err != nil {
		t.Fatal(err)
	}
	if got := statementSQL(src.Files[0]); !slices.Equal(got, []string{"CREATE INDEX CONCURRENTLY i ON t (a)", "VACUUM t"}) || !src.Files[0].NoTransaction {
		t.Errorf("statements %q, no-transaction %v", got, src.Files[0].NoTransaction)
	}
}
