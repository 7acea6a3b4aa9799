package catalog

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/ptah-run/ptah/internal/pgtest"
	"github.com/ptah-run/ptah/internal/postgres"
)

// benchModel builds a model of n tables, each with a primary key, an index,
// a foreign key to the previous table and a view over it: the shape of a
// large application schema.
func benchModel(n int, extraColumn bool) *Model {
	m := &Model{Schemas: []Schema{{Name: "public"}}}
	for i := 0; i < n; i++ {
		name := fmt.Sprintf("t%04d", i)
		cols := []Column{{Name: "id", Type: "bigint", NotNull: true}, {Name: "parent_id", Type: "bigint"}, {Name: "body", Type: "text"}}
		if extraColumn && i%10 == 0 {
			cols = append(cols, Column{Name: "added", Type: "integer"})
		}
		m.Tables = append(m.Tables, Table{Schema: "public", Name: name, Columns: cols})
		pk := Constraint{Schema: "public", Table: name, Name: name + "_pkey", Type: PrimaryKey, Definition: "PRIMARY KEY (id)", Columns: []string{"id"}}
		m.Constraints = append(m.Constraints, pk)
		m.Deps = append(m.Deps, Dep{Object: pk.ID(), RefObject: ColumnID("public", name, "id")})
		if i > 0 {
			prev := fmt.Sprintf("t%04d", i-1)
			fk := Constraint{Schema: "public", Table: name, Name: name + "_parent_fkey", Type: ForeignKey,
				Definition: "FOREIGN KEY (parent_id) REFERENCES public." + prev + "(id)", Columns: []string{"parent_id"}}
			m.Constraints = append(m.Constraints, fk)
			m.Deps = append(m.Deps, Dep{Object: fk.ID(), RefObject: ID{Kind: KindConstraint, Schema: "public", Name: prev, Sub: prev + "_pkey"}})
		}
		m.Indexes = append(m.Indexes, Index{Schema: "public", Table: name, Name: name + "_body_idx",
			Definition: "CREATE INDEX " + name + "_body_idx ON public." + name + " USING btree (body)"})
		v := View{Schema: "public", Name: "v_" + name, Definition: " SELECT id, body FROM public." + name + ";"}
		m.Views = append(m.Views, v)
		m.Deps = append(m.Deps, Dep{Object: v.ID(), RefObject: ColumnID("public", name, "body")})
	}
	return m
}

// BenchmarkDiff: planning between two 1000-table models, one column added
// to every tenth table.
func BenchmarkDiff(b *testing.B) {
	live, desired := benchModel(1000, false), benchModel(1000, true)
	b.ReportAllocs()
	for b.Loop() {
		stmts, err := Diff(live, desired)
		if err != nil || len(stmts) != 100 {
			b.Fatalf("got %d statements, %v", len(stmts), err)
		}
	}
}

// BenchmarkInspect: reading a 200-table schema (with indexes, foreign keys
// and views) from a real server.
func BenchmarkInspect(b *testing.B) {
	url := pgtest.NewDB(b)
	var ddl strings.Builder
	for i := 0; i < 200; i++ {
		fmt.Fprintf(&ddl, "CREATE TABLE t%d (id bigint PRIMARY KEY, parent_id bigint, body text);\n", i)
		fmt.Fprintf(&ddl, "CREATE INDEX ON t%d (body);\nCREATE VIEW v%d AS SELECT id, body FROM t%d;\n", i, i, i)
		if i > 0 {
			fmt.Fprintf(&ddl, "ALTER TABLE t%d ADD FOREIGN KEY (parent_id) REFERENCES t%d (id);\n", i, i-1)
		}
	}
	pgtest.Exec(b, url, ddl.String())
	ctx := context.Background()
	conn, err := postgres.Connect(ctx, url)
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close(ctx)
	b.ReportAllocs()
	for b.Loop() {
		m, err := Inspect(ctx, conn, []string{"public"})
		if err != nil || len(m.Tables) != 200 {
			b.Fatalf("got %d tables, %v", len(m.Tables), err)
		}
	}
}

// BenchmarkDiffFromEmpty: planning 10,000 tables (with their keys,
// indexes and views) into an empty database, the first plan of a large
// schema.
func BenchmarkDiffFromEmpty(b *testing.B) {
	empty, desired := &Model{Schemas: []Schema{{Name: "public"}}}, benchModel(10000, false)
	b.ReportAllocs()
	for b.Loop() {
		stmts, err := Diff(empty, desired)
		if err != nil || len(stmts) != 49999 {
			b.Fatalf("got %d statements, %v", len(stmts), err)
		}
	}
}
