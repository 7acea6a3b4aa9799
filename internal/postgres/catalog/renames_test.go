package catalog

import (
	"reflect"
	"strings"
	"testing"
)

// Which definition each directive stands beside, and what is refused.
func TestReadRenames(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name, sql string
		want      []renameDirective
		err       string
	}{
		{name: "none", sql: "CREATE TABLE t (a int); -- a comment\n-- ptah is great\n"},
		{name: "table, on its line", sql: "CREATE TABLE posts ( -- ptah:renamed-from articles\n  id int\n);",
			want: []renameDirective{{Line: 1, Table: "posts", Old: "articles"}}},
		{name: "table, qualified and quoted, on the line before",
			sql:  "-- ptah:renamed-from \"Old Posts\"\nCREATE UNLOGGED TABLE IF NOT EXISTS app.\"Posts\" (\n  id int\n);",
			want: []renameDirective{{Line: 1, Schema: "app", Table: "Posts", Old: "Old Posts"}}},
		{name: "columns beside and above, names folded",
			sql: "CREATE TABLE t (\n  id int,\n  Content text DEFAULT 'a,b', -- ptah:renamed-from Body\n" +
				"  -- ptah:renamed-from n\n\n  -- another comment\n  total numeric(10, 2),\n  CONSTRAINT k UNIQUE (id)\n);",
			want: []renameDirective{{Line: 3, Table: "t", Column: "content", Old: "body"}, {Line: 4, Table: "t", Column: "total", Old: "n"}}},
		{name: "a column after a table constraint",
			sql:  "CREATE TABLE t (\n  PRIMARY KEY (a, b),\n  \"A\" int -- ptah:renamed-from a\n);",
			want: []renameDirective{{Line: 3, Table: "t", Column: "A", Old: "a"}}},
		{name: "after the statement, on its last line", sql: "CREATE TABLE t (\n  a int\n); -- ptah:renamed-from s",
			err: "not beside a CREATE TABLE or a column definition"},
		{name: "beside an index", sql: "CREATE INDEX ON t (a); -- ptah:renamed-from i",
			err: "not beside a CREATE TABLE or a column definition"},
		{name: "beside a table and its column", sql: "CREATE TABLE t (a int, -- ptah:renamed-from s\n b int);",
			err: "beside the definitions of several objects (line 1)"},
		{name: "unknown directive", sql: "CREATE TABLE t (a int); -- ptah:rename-from s", err: "unknown directive ptah:rename-from"},
		{name: "two names", sql: "CREATE TABLE t (a int); -- ptah:renamed-from s u", err: `takes one name, the object's old name`},
		{name: "no name", sql: "CREATE TABLE t (a int); -- ptah:renamed-from", err: "takes one name"},
		{name: "in a block comment", sql: "CREATE TABLE t (a int); /* ptah:renamed-from s */", err: "a -- comment of its own"},
		{name: "inside a string, not a directive", sql: "CREATE TABLE t (a text DEFAULT '-- ptah:renamed-from s');"},
		{name: "inside a function body, not a directive",
			sql: "CREATE FUNCTION f() RETURNS int LANGUAGE sql AS $$\nSELECT 1 -- ptah:renamed-from g\n$$;"},
		{name: "a one-line table", sql: "CREATE TABLE t (a int); -- ptah:renamed-from s",
			err: "beside the definitions of several objects (line 1)"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, err := readRenames([]SourceFile{{Name: "f.sql", SQL: tt.sql}})
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("err = %v, want one containing %q", err, tt.err)
				}
				if !strings.HasPrefix(err.Error(), "loading f.sql:") {
					t.Errorf("err = %v, want it placed in f.sql", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			for i := range tt.want {
				tt.want[i].File = "f.sql"
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got  %+v\nwant %+v", got, tt.want)
			}
		})
	}
}

// Which directives a plan carries out, and what follows them.
func TestResolveRenames(t *testing.T) {
	t.Parallel()
	table := func(schema, name string, cols ...string) Table {
		t := Table{Schema: schema, Name: name}
		for _, c := range cols {
			t.Columns = append(t.Columns, Column{Name: c, Type: "text"})
		}
		return t
	}
	key := func(tbl, name string, typ ConstraintType) Constraint {
		return Constraint{Schema: "public", Table: tbl, Name: name, Type: typ}
	}
	seq := func(name, tbl, col string) Sequence {
		return Sequence{Schema: "public", Name: name, OwnedBy: &ColumnRef{Schema: "public", Table: tbl, Column: col}}
	}
	live := &Model{
		Tables: []Table{table("public", "articles", "id", "body"), table("public", "docs", "id", "body", "n")},
		Constraints: []Constraint{key("articles", "articles_pkey", PrimaryKey), key("articles", "articles_body_check", Check),
			key("docs", "docs_body_key", Unique), key("docs", "docs_n_check", Check)},
		Indexes:   []Index{{Schema: "public", Table: "docs", Name: "docs_body_n_idx"}, {Schema: "public", Table: "docs", Name: "docs_n_idx"}},
		Sequences: []Sequence{seq("articles_id_seq", "articles", "id")},
	}
	desired := &Model{
		Tables: []Table{table("public", "posts", "id", "content"), table("public", "docs", "id", "content", "n")},
		Constraints: []Constraint{key("posts", "posts_pkey", PrimaryKey), key("posts", "posts_content_check", Check),
			key("docs", "docs_content_key", Unique), key("docs", "docs_n_check", Check)},
		Indexes:   []Index{{Schema: "public", Table: "docs", Name: "docs_content_n_idx"}, {Schema: "public", Table: "docs", Name: "docs_n_idx"}},
		Sequences: []Sequence{seq("posts_id_seq", "posts", "id")},
	}
	d := func(tbl, col, old string) renameDirective {
		return renameDirective{File: "f.sql", Line: 1, Table: tbl, Column: col, Old: old}
	}
	got, err := resolveRenames([]renameDirective{d("posts", "content", "body"), d("posts", "", "articles"), d("docs", "content", "body")}, live, desired)
	if err != nil {
		t.Fatal(err)
	}
	want := []Rename{
		{Kind: KindTable, Schema: "public", Old: "articles", New: "posts", Declared: "f.sql:1"},
		{Kind: KindColumn, Schema: "public", Table: "posts", Old: "body", New: "content", Declared: "f.sql:1"},
		{Kind: KindColumn, Schema: "public", Table: "docs", Old: "body", New: "content", Declared: "f.sql:1"},
		{Kind: KindConstraint, Schema: "public", Table: "posts", Old: "articles_pkey", New: "posts_pkey"},
		{Kind: KindConstraint, Schema: "public", Table: "posts", Old: "articles_body_check", New: "posts_content_check"},
		{Kind: KindConstraint, Schema: "public", Table: "docs", Old: "docs_body_key", New: "docs_content_key"},
		{Kind: KindIndex, Schema: "public", Table: "docs", Old: "docs_body_n_idx", New: "docs_content_n_idx"},
		{Kind: KindSequence, Schema: "public", Table: "posts", Old: "articles_id_seq", New: "posts_id_seq"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got:\n%+v\nwant:\n%+v", got, want)
	}
	wantUndo := []string{
		"ALTER TABLE public.posts RENAME CONSTRAINT posts_pkey TO articles_pkey",
		"ALTER TABLE public.posts RENAME CONSTRAINT posts_content_check TO articles_body_check",
		"ALTER TABLE public.docs RENAME CONSTRAINT docs_content_key TO docs_body_key",
		"ALTER INDEX public.docs_content_n_idx RENAME TO docs_body_n_idx",
		"ALTER SEQUENCE public.posts_id_seq RENAME TO articles_id_seq",
		"ALTER TABLE public.posts RENAME COLUMN content TO body",
		"ALTER TABLE public.docs RENAME COLUMN content TO body",
		"ALTER TABLE public.posts RENAME TO articles",
	}
	if undo := undoRenames(got); !reflect.DeepEqual(undo, wantUndo) {
		t.Errorf("undo:\n%s\nwant:\n%s", strings.Join(undo, "\n"), strings.Join(wantUndo, "\n"))
	}

	// Done already (the target has the new names), or nothing to rename:
	// nothing to do.
	for _, ds := range [][]renameDirective{{d("docs", "n", "total")}, {d("docs", "", "documents")}} {
		if got, err := resolveRenames(ds, desired, desired); err != nil || len(got) != 0 {
			t.Errorf("resolveRenames(%+v) = %+v, %v; want nothing", ds, got, err)
		}
	}
	// Refused.
	for _, tt := range []struct {
		ds  []renameDirective
		err string
	}{
		{[]renameDirective{d("docs", "content", "n")}, "which the table also has"},
		{[]renameDirective{d("posts", "", "docs")}, "which the declared files also create"},
		{[]renameDirective{d("docs", "content", "body"), d("docs", "content", "x")}, "names the same column as the directive at f.sql:1"},
		{[]renameDirective{d("docs", "id", "body"), d("docs", "content", "body")}, "names the same column"},
		{[]renameDirective{d("nope", "", "x")}, "beside table nope, which the declared files do not leave"},
		{[]renameDirective{d("docs", "gone", "x")}, "has no column gone"},
	} {
		if _, err := resolveRenames(tt.ds, live, desired); err == nil || !strings.Contains(err.Error(), tt.err) {
			t.Errorf("resolveRenames(%+v) = %v, want an error containing %q", tt.ds, err, tt.err)
		}
	}
}
