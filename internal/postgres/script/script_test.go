package script

import (
	"reflect"
	"strings"
	"testing"
)

func sqls(stmts []Statement) []string {
	if len(stmts) == 0 {
		return nil
	}
	out := make([]string, len(stmts))
	for i, s := range stmts {
		out[i] = s.SQL
	}
	return out
}

func TestSplit(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name, src string
		want      []string
	}{
		{"empty", "", nil},
		{"white space and comments only", " \n-- c;\n/* ; */ ;; \n", nil},
		{"one without a semicolon", "SELECT 1", []string{"SELECT 1"}},
		{"trimmed", "\n  SELECT 1  ;\n\n", []string{"SELECT 1"}},
		{"several", "SELECT 1; SELECT 2;\nSELECT 3", []string{"SELECT 1", "SELECT 2", "SELECT 3"}},
		{"empty statements", ";;SELECT 1;;;SELECT 2;;", []string{"SELECT 1", "SELECT 2"}},
		{"line comment", "SELECT 1 -- not the end; really\n, 2;", []string{"SELECT 1 -- not the end; really\n, 2"}},
		{"line comment ends at CR", "SELECT 1 -- c\r; SELECT 2", []string{"SELECT 1", "SELECT 2"}},
		{"comment before the semicolon stays outside", "SELECT 1 /* c */;", []string{"SELECT 1"}},
		{"nested block comment", "SELECT /* a /* b; */ c; */ 1; SELECT 2", []string{"SELECT /* a /* b; */ c; */ 1", "SELECT 2"}},
		{"minus and slash alone", "SELECT 4-1/2; SELECT 2", []string{"SELECT 4-1/2", "SELECT 2"}},
		{"operator running into a comment", "SELECT 1+--x;\n2; SELECT 3", []string{"SELECT 1+--x;\n2", "SELECT 3"}},
		{"string", "SELECT 'a;b'; SELECT 2", []string{"SELECT 'a;b'", "SELECT 2"}},
		{"doubled quote", "SELECT 'it''s;'; SELECT 2", []string{"SELECT 'it''s;'", "SELECT 2"}},
		{"backslash is plain in a standard string", `SELECT 'a\'; SELECT 2`, []string{`SELECT 'a\'`, "SELECT 2"}},
		{"E string escapes the quote", `SELECT E'a\'; b'; SELECT 2`, []string{`SELECT E'a\'; b'`, "SELECT 2"}},
		{"lower-case e string", `SELECT e'\\'; SELECT 2`, []string{`SELECT e'\\'`, "SELECT 2"}},
		{"e ending a word is not a prefix", `SELECT type'a\'; SELECT 2`, []string{`SELECT type'a\'`, "SELECT 2"}},
		{"E string with a doubled quote", `SELECT E'a''b;'; SELECT 2`, []string{`SELECT E'a''b;'`, "SELECT 2"}},
		{"bit, hex and national strings", "SELECT B'1;', X'F;', N'n;'; SELECT 2", []string{"SELECT B'1;', X'F;', N'n;'", "SELECT 2"}},
		{"unicode string and identifier", `SELECT U&'\0041;' AS U&"a;b"; SELECT 2`, []string{`SELECT U&'\0041;' AS U&"a;b"`, "SELECT 2"}},
		{"string continued on the next line", "SELECT 'a'\n'b;c'; SELECT 2", []string{"SELECT 'a'\n'b;c'", "SELECT 2"}},
		{"E string continued, escapes and all", "SELECT E'a'\n  '\\';'; SELECT 2", []string{"SELECT E'a'\n  '\\';'", "SELECT 2"}},
		{"continued past a comment", "SELECT E'a' -- x\n -- y\n'\\';'; SELECT 2", []string{"SELECT E'a' -- x\n -- y\n'\\';'", "SELECT 2"}},
		{"no continuation on the same line", `SELECT E'a' '\'; SELECT 2`, []string{`SELECT E'a' '\'`, `SELECT 2`}},
		{"quoted identifier", `CREATE TABLE "a;""b" (id int); SELECT 2`, []string{`CREATE TABLE "a;""b" (id int)`, "SELECT 2"}},
		{"dollar quotes", "CREATE FUNCTION f() RETURNS int AS $$ SELECT 1; $$ LANGUAGE sql; SELECT 2",
			[]string{"CREATE FUNCTION f() RETURNS int AS $$ SELECT 1; $$ LANGUAGE sql", "SELECT 2"}},
		{"tagged dollar quotes nest other tags", "DO $body$ BEGIN EXECUTE $x$SELECT 1;$x$; END $body$; SELECT 2",
			[]string{"DO $body$ BEGIN EXECUTE $x$SELECT 1;$x$; END $body$", "SELECT 2"}},
		{"dollar quote with quotes and comments inside", "SELECT $$ ' \" -- /* $$; SELECT 2", []string{"SELECT $$ ' \" -- /* $$", "SELECT 2"}},
		{"a dollar in an identifier is not a quote", "SELECT a$b$c; SELECT $1; SELECT 2", []string{"SELECT a$b$c", "SELECT $1", "SELECT 2"}},
		{"a tag may not start with a digit", "SELECT $1$; SELECT 2", []string{"SELECT $1$", "SELECT 2"}},
		{"parentheses", "CREATE RULE r AS ON INSERT TO t DO ALSO (INSERT INTO a VALUES (1); INSERT INTO b VALUES (2)); SELECT 2",
			[]string{"CREATE RULE r AS ON INSERT TO t DO ALSO (INSERT INTO a VALUES (1); INSERT INTO b VALUES (2))", "SELECT 2"}},
		{"stray closing parenthesis", "SELECT 1); SELECT 2", []string{"SELECT 1)", "SELECT 2"}},
		{"BEGIN ATOMIC body", "CREATE FUNCTION f() RETURNS int LANGUAGE sql\nBEGIN ATOMIC\n  SELECT 1;\n  SELECT 2;\nEND;\nSELECT 3",
			[]string{"CREATE FUNCTION f() RETURNS int LANGUAGE sql\nBEGIN ATOMIC\n  SELECT 1;\n  SELECT 2;\nEND", "SELECT 3"}},
		{"CASE inside BEGIN ATOMIC", "create or replace procedure p() begin atomic select case when true then 1 end; insert into t values (case 1 when 1 then 2 end); end; SELECT 3",
			[]string{"create or replace procedure p() begin atomic select case when true then 1 end; insert into t values (case 1 when 1 then 2 end); end", "SELECT 3"}},
		{"a routine named begin", "CREATE FUNCTION begin() RETURNS int RETURN 1; SELECT 2", []string{"CREATE FUNCTION begin() RETURNS int RETURN 1", "SELECT 2"}},
		{"BEGIN outside a routine is a statement", "BEGIN; CREATE TABLE t (); END; SELECT 2", []string{"BEGIN", "CREATE TABLE t ()", "END", "SELECT 2"}},
		{"CASE outside a body", "SELECT CASE WHEN true THEN 1 END; SELECT 2", []string{"SELECT CASE WHEN true THEN 1 END", "SELECT 2"}},
		{"multi-byte identifiers", "CREATE TABLE café (naïve text); SELECT 2", []string{"CREATE TABLE café (naïve text)", "SELECT 2"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Split(tt.src)
			if err != nil {
				t.Fatalf("Split(%q): %v", tt.src, err)
			}
			if g := sqls(got); !reflect.DeepEqual(g, tt.want) {
				t.Errorf("Split(%q)\n got %q\nwant %q", tt.src, g, tt.want)
			}
			checkSpans(t, tt.src, got)
		})
	}
}

func TestSplitPositions(t *testing.T) {
	t.Parallel()
	src := "-- header\n\nCREATE TABLE a (id int);  SELECT 'é'; SELECT\n  2 ;\n/* tail */"
	got, err := Split(src)
	if err != nil {
		t.Fatal(err)
	}
	type pos struct {
		From, Start, End, To, Line, Column int
	}
	want := []pos{
		{0, 11, 34, 35, 3, 1},
		{35, 37, 48, 49, 3, 27},
		{49, 50, 60, 62, 3, 39}, // the column counts é as one character
	}
	if len(got) != len(want) {
		t.Fatalf("got %d statements", len(got))
	}
	for i, s := range got {
		if p := (pos{s.From, s.Start, s.End, s.To, s.Line, s.Column}); p != want[i] {
			t.Errorf("statement %d (%q): %+v, want %+v", i+1, s.SQL, p, want[i])
		}
	}
	if tail := src[got[2].To:]; tail != "\n/* tail */" {
		t.Errorf("tail = %q", tail)
	}
	if l, c := Position(src, strings.Index(src, "2 ;")); l != 4 || c != 3 {
		t.Errorf("Position = %d:%d, want 4:3", l, c)
	}
}

func TestSplitHead(t *testing.T) {
	t.Parallel()
	for src, want := range map[string][]string{
		"CREATE UNIQUE INDEX CONCURRENTLY i ON t (a)": {"create", "unique", "index", "concurrently"},
		"vacuum":                       {"vacuum"},
		"Alter System set work_mem=1":  {"alter", "system", "set", "work_mem"},
		`CREATE TABLE "x" ()`:          {"create", "table"},
		"DROP DATABASE IF EXISTS prod": {"drop", "database", "if", "exists"},
		"(SELECT 1)":                   nil,
	} {
		got, err := Split(src)
		if err != nil || len(got) != 1 {
			t.Fatalf("Split(%q) = %v, %v", src, got, err)
		}
		if !reflect.DeepEqual(got[0].Head, want) {
			t.Errorf("Head of %q = %q, want %q", src, got[0].Head, want)
		}
	}
}

// TestSplitFollowsStandardConformingStrings: with the setting off, a
// backslash escapes in plain strings too; SET and RESET in the script
// switch it as the server would, SET LOCAL until the transaction ends.
func TestSplitFollowsStandardConformingStrings(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name string
		opts Options
		src  string
		want []string
	}{
		{"off from the start", Options{NonStandardStrings: true}, `SELECT 'a\'; b'; SELECT 2`, []string{`SELECT 'a\'; b'`, "SELECT 2"}},
		{"set off", Options{}, `SET standard_conforming_strings = off; SELECT 'a\'; b'`,
			[]string{"SET standard_conforming_strings = off", `SELECT 'a\'; b'`}},
		{"set to 'on' again", Options{NonStandardStrings: true}, `SET SESSION standard_conforming_strings TO 'on'; SELECT 'a\'; SELECT 2`,
			[]string{"SET SESSION standard_conforming_strings TO 'on'", `SELECT 'a\'`, "SELECT 2"}},
		{"reset", Options{NonStandardStrings: true}, `RESET standard_conforming_strings; SELECT 'a\'; SELECT 2`,
			[]string{"RESET standard_conforming_strings", `SELECT 'a\'`, "SELECT 2"}},
		{"reset all", Options{NonStandardStrings: true}, `reset all; SELECT 'a\'; SELECT 2`,
			[]string{"reset all", `SELECT 'a\'`, "SELECT 2"}},
		{"set local lasts until commit", Options{},
			`BEGIN; SET LOCAL standard_conforming_strings = off; SELECT 'a\'; b'; COMMIT; SELECT 'c\'; SELECT 2`,
			[]string{"BEGIN", "SET LOCAL standard_conforming_strings = off", `SELECT 'a\'; b'`, "COMMIT", `SELECT 'c\'`, "SELECT 2"}},
		{"set local outside a transaction does nothing", Options{},
			`SET LOCAL standard_conforming_strings = off; SELECT 'a\'; SELECT 2`,
			[]string{"SET LOCAL standard_conforming_strings = off", `SELECT 'a\'`, "SELECT 2"}},
		{"a rolled-back set is undone", Options{},
			`BEGIN; SET standard_conforming_strings = off; ROLLBACK TO SAVEPOINT s; SELECT 'a\'; b'; ROLLBACK; SELECT 'c\'; SELECT 2`,
			[]string{"BEGIN", "SET standard_conforming_strings = off", "ROLLBACK TO SAVEPOINT s", `SELECT 'a\'; b'`, "ROLLBACK", `SELECT 'c\'`, "SELECT 2"}},
		{"a committed set stays", Options{},
			`BEGIN; SET standard_conforming_strings = off; COMMIT; SELECT 'a\'; b'`,
			[]string{"BEGIN", "SET standard_conforming_strings = off", "COMMIT", `SELECT 'a\'; b'`}},
		{"E strings escape either way", Options{}, `SET standard_conforming_strings = on; SELECT E'a\'; b'`,
			[]string{"SET standard_conforming_strings = on", `SELECT E'a\'; b'`}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tt.opts.Split(tt.src)
			if err != nil {
				t.Fatal(err)
			}
			if g := sqls(got); !reflect.DeepEqual(g, tt.want) {
				t.Errorf("Split(%q)\n got %q\nwant %q", tt.src, g, tt.want)
			}
		})
	}
}

func TestSplitErrors(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		src          string
		line, column int
		msg          string
	}{
		{"SELECT 1;\n\\connect other\nSELECT 2;", 2, 1, `psql meta-command \connect: not SQL`},
		{"SELECT 1;\n  \\i other.sql", 2, 3, `psql meta-command \i: not SQL`},
		{"SELECT 1 \\gset\n", 1, 10, `psql meta-command \gset`},
		{"COPY t FROM stdin;\n1\tx\n\\.\n", 3, 1, `psql meta-command \. (or COPY data)`},
		{"SELECT 1;\nSELECT 'abc", 2, 8, "unterminated quoted string"},
		{"SELECT E'abc\\'", 1, 8, "unterminated quoted string"},
		{"SELECT \"abc", 1, 8, "unterminated quoted identifier"},
		{"SELECT 1;\n/* a /* b */", 2, 1, "unterminated /* comment"},
		{"é SELECT $f$ body", 1, 10, "unterminated dollar-quoted string $f$"},
	} {
		_, err := Split(tt.src)
		e, ok := err.(*Error)
		if !ok {
			t.Errorf("Split(%q) = %v, want an *Error", tt.src, err)
			continue
		}
		if e.Line != tt.line || e.Column != tt.column || !strings.Contains(e.Msg, tt.msg) {
			t.Errorf("Split(%q): %d:%d %q, want %d:%d %q", tt.src, e.Line, e.Column, e.Msg, tt.line, tt.column, tt.msg)
		}
	}
}

// checkSpans holds Split's promise about the bytes: the statements' spans
// tile the script from 0, each SQL is its bytes, the tail and what
// surrounds each statement hold no statement.
func checkSpans(t *testing.T, src string, stmts []Statement) {
	t.Helper()
	var b strings.Builder
	from := 0
	for i, s := range stmts {
		if s.From != from || !(s.From <= s.Start && s.Start < s.End && s.End <= s.To && s.To <= len(src)) {
			t.Fatalf("statement %d: spans From %d Start %d End %d To %d (previous To %d, len %d)", i, s.From, s.Start, s.End, s.To, from, len(src))
		}
		if src[s.Start:s.End] != s.SQL {
			t.Fatalf("statement %d: SQL %q is not src[%d:%d] %q", i, s.SQL, s.Start, s.End, src[s.Start:s.End])
		}
		if l, c := Position(src, s.Start); l != s.Line || c != s.Column {
			t.Fatalf("statement %d: at %d:%d, Position says %d:%d", i, s.Line, s.Column, l, c)
		}
		if after := src[s.End:s.To]; !strings.HasSuffix(after, ";") && s.To != s.End {
			t.Fatalf("statement %d: followed by %q, which does not end in its semicolon", i, after)
		}
		for _, trivia := range []string{src[s.From:s.Start], strings.TrimSuffix(src[s.End:s.To], ";")} {
			if more, err := Split(trivia); err != nil || len(more) > 0 {
				t.Fatalf("statement %d: the text around it, %q, splits into %q, %v", i, trivia, sqls(more), err)
			}
		}
		b.WriteString(src[s.From:s.To])
		from = s.To
	}
	tail := src[from:]
	if more, err := Split(tail); err != nil || len(more) > 0 {
		t.Fatalf("the tail %q splits into %q, %v", tail, sqls(more), err)
	}
	if b.WriteString(tail); b.String() != src {
		t.Fatalf("joined back: %q, want %q", b.String(), src)
	}
}

// FuzzSplit: whatever the input, splitting loses no byte and invents
// none, and each statement split again is itself.
func FuzzSplit(f *testing.F) {
	for _, seed := range []string{
		"SELECT 1; SELECT 2",
		"CREATE FUNCTION f() RETURNS int LANGUAGE sql BEGIN ATOMIC SELECT 1; END; SELECT 2;",
		"SELECT E'a\\'b' -- c\n; /* d /* e */ */ SELECT $t$ x; $t$;;",
		"SELECT 'a'\n'b'; SELECT U&\"x\"",
		"SET standard_conforming_strings = off; SELECT 'a\\'; b';",
		"DO $$ BEGIN END $$; ; (;) \"q;\"",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, src string) {
		stmts, err := Split(src)
		if err != nil {
			e, ok := err.(*Error)
			if !ok || e.Offset < 0 || e.Offset > len(src) || e.Line < 1 || e.Column < 1 {
				t.Fatalf("Split(%q) = %#v", src, err)
			}
			return
		}
		checkSpans(t, src, stmts)
		if strings.Contains(strings.ToLower(src), "standard_conforming_strings") {
			return // a statement may have been read with the setting off
		}
		for _, s := range stmts {
			again, err := Split(s.SQL)
			if err != nil || len(again) != 1 || again[0].SQL != s.SQL {
				t.Fatalf("statement %q splits again into %q, %v", s.SQL, sqls(again), err)
			}
		}
	})
}

// OnToken hears every token and comment, with its bytes in the script,
// strings and comments whole whatever they hold.
func TestSplitReportsTokens(t *testing.T) {
	t.Parallel()
	src := "CREATE TABLE \"T\" ( -- c;\n a text DEFAULT 'x;y', /* b */ n int DEFAULT $$;$$);\nSELECT $1"
	type tok struct {
		kind TokenKind
		text string
	}
	var got []tok
	stmts, err := Options{OnToken: func(k Token) { got = append(got, tok{k.Kind, src[k.Start:k.End]}) }}.Split(src)
	if err != nil {
		t.Fatal(err)
	}
	want := []tok{{Word, "CREATE"}, {Word, "TABLE"}, {Other, `"T"`}, {Other, "("}, {Comment, "-- c;"},
		{Word, "a"}, {Word, "text"}, {Word, "DEFAULT"}, {String, "'x;y'"}, {Other, ","}, {Comment, "/* b */"},
		{Word, "n"}, {Word, "int"}, {Word, "DEFAULT"}, {String, "$$;$$"}, {Other, ")"},
		{Word, "SELECT"}, {Other, "$1"}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("tokens:\n got %v\nwant %v", got, want)
	}
	if len(stmts) != 2 {
		t.Errorf("got %d statements, want 2", len(stmts))
	}
}
