package catalog

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

// Collations, text search configurations and aggregates on hand-built
// models (diff_kinds.go); the acceptance suite applies the same plans.

func TestCreateCollation(t *testing.T) {
	t.Parallel()
	tests := []struct {
		c    Collation
		want string
	}{
		{Collation{Schema: "public", Name: "c", Provider: "libc", LcCollate: "C", LcCtype: "C", Deterministic: true},
			`CREATE COLLATION public.c (provider = libc, locale = 'C')`},
		{Collation{Schema: "public", Name: "Mixed", Provider: "libc", LcCollate: "C", LcCtype: "POSIX", Deterministic: true},
			`CREATE COLLATION public."Mixed" (provider = libc, lc_collate = 'C', lc_ctype = 'POSIX')`},
		{Collation{Schema: "app", Name: "ci", Provider: "icu", Locale: "und-u-ks-level2"},
			`CREATE COLLATION app.ci (provider = icu, locale = 'und-u-ks-level2', deterministic = false)`},
		{Collation{Schema: "app", Name: "r", Provider: "icu", Locale: "und", Rules: "&a < g", Deterministic: true},
			`CREATE COLLATION app.r (provider = icu, locale = 'und', rules = '&a < g')`},
		{Collation{Schema: "app", Name: "b", Provider: "builtin", Locale: "C.UTF-8", Deterministic: true},
			`CREATE COLLATION app.b (provider = builtin, locale = 'C.UTF-8')`},
	}
	for _, tc := range tests {
		if got := createCollation(tc.c); got != tc.want {
			t.Errorf("createCollation(%+v)\n got %s\nwant %s", tc.c, got, tc.want)
		}
	}
}

func TestAlterMappings(t *testing.T) {
	t.Parallel()
	simple := []string{"pg_catalog.simple"}
	stem := []string{"pg_catalog.english_stem", "pg_catalog.simple"}
	cfg := func(ms ...TSMapping) TSConfig { return TSConfig{Schema: "public", Name: "My TS", Mappings: ms} }
	const alter = `ALTER TEXT SEARCH CONFIGURATION public."My TS" `
	tests := []struct {
		name string
		l, n TSConfig
		want []string
	}{
		{"new: grouped by dictionaries, in token order", cfg(),
			cfg(TSMapping{"asciiword", stem}, TSMapping{"word", simple}, TSMapping{"numword", stem}),
			[]string{alter + "ADD MAPPING FOR asciiword, numword WITH pg_catalog.english_stem, pg_catalog.simple",
				alter + "ADD MAPPING FOR word WITH pg_catalog.simple"}},
		{"dropped, altered, added",
			cfg(TSMapping{"asciiword", stem}, TSMapping{"word", stem}, TSMapping{"int", simple}, TSMapping{"uint", simple}),
			cfg(TSMapping{"asciiword", simple}, TSMapping{"word", stem}, TSMapping{"email", simple}),
			[]string{alter + "DROP MAPPING FOR int, uint",
				alter + "ALTER MAPPING FOR asciiword WITH pg_catalog.simple",
				alter + "ADD MAPPING FOR email WITH pg_catalog.simple"}},
		{"same", cfg(TSMapping{"word", stem}), cfg(TSMapping{"word", stem}), nil},
		{"dictionary order matters", cfg(TSMapping{"word", stem}),
			cfg(TSMapping{"word", []string{"pg_catalog.simple", "pg_catalog.english_stem"}}),
			[]string{alter + "ALTER MAPPING FOR word WITH pg_catalog.simple, pg_catalog.english_stem"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got := sqls(alterMappings(tc.l, tc.n))
			if len(got) == 0 {
				got = nil
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got\n  %s\nwant\n  %s", strings.Join(got, "\n  "), strings.Join(tc.want, "\n  "))
			}
		})
	}
}

func TestDiffKinds(t *testing.T) {
	t.Parallel()
	c1 := Collation{Schema: "public", Name: "c1", Provider: "libc", LcCollate: "C", LcCtype: "C", Deterministic: true}
	c1posix := c1
	c1posix.LcCollate, c1posix.LcCtype = "POSIX", "POSIX"
	name := Column{Name: "name", Type: "text", Collation: "public.c1"}
	usesC1 := Dep{Object: ColumnID("public", "t", "name"), RefObject: c1.ID()}
	ix := Index{Schema: "public", Table: "t", Name: "t_name", Definition: "CREATE INDEX t_name ON public.t USING btree (name COLLATE public.c1)"}
	ixUsesC1 := Dep{Object: ix.ID(), RefObject: c1.ID()}

	ts := TSConfig{Schema: "public", Name: "ts", Parser: `pg_catalog."default"`,
		Mappings: []TSMapping{{"word", []string{"pg_catalog.simple"}}}}
	tsStem := ts
	tsStem.Mappings = []TSMapping{{"word", []string{"pg_catalog.english_stem"}}}
	tsIx := Index{Schema: "public", Table: "d", Name: "d_body",
		Definition: "CREATE INDEX d_body ON public.d USING gin (to_tsvector('public.ts'::regconfig, body))"}
	tsView := View{Schema: "public", Name: "v", Definition: " SELECT to_tsvector('public.ts'::regconfig, d.body) AS w FROM public.d;",
		Columns: []ViewColumn{{Name: "w", Type: "tsvector"}}}
	tsDeps := []Dep{{Object: tsIx.ID(), RefObject: ts.ID()}, {Object: tsView.ID(), RefObject: ts.ID()}}
	d := tbl("d", col("body", "text"))

	agg := func(def string) Function {
		return Function{Schema: "public", Name: "a", Aggregate: "normal", IdentityArgs: "text", Result: "text",
			Definition: "CREATE OR REPLACE AGGREGATE public.a(text) (\n    " + def + "\n)"}
	}
	sfunc := Function{Schema: "public", Name: "sf", IdentityArgs: "text, text", Result: "text",
		Definition: "CREATE OR REPLACE FUNCTION public.sf(text, text)\n RETURNS text\nAS $$ select $1 $$"}
	aggOnSfunc := agg("SFUNC = public.sf,\n    STYPE = text")
	aggOnTextcat := agg("SFUNC = textcat,\n    STYPE = text")
	hypothetical := aggOnTextcat
	hypothetical.Aggregate = "hypothetical-set"
	aggView := View{Schema: "public", Name: "av", Definition: " SELECT public.a(t.name) AS a FROM public.t;",
		Columns: []ViewColumn{{Name: "a", Type: "text"}}}
	aggDeps := []Dep{{Object: aggOnSfunc.ID(), RefObject: sfunc.ID()}, {Object: aggView.ID(), RefObject: aggOnSfunc.ID()}}
	t1 := tbl("t", col("name", "text"))

	tests := []struct {
		name          string
		live, desired Model
		want          []string
		refused       string
	}{
		{
			name:    "an unused collation that changes is dropped and created again, its index around it",
			live:    Model{Schemas: pub(), Tables: []Table{t1}, Indexes: []Index{ix}, Collations: []Collation{c1}, Deps: []Dep{ixUsesC1}},
			desired: Model{Schemas: pub(), Tables: []Table{t1}, Indexes: []Index{ix}, Collations: []Collation{c1posix}, Deps: []Dep{ixUsesC1}},
			want: []string{"DROP INDEX public.t_name", "DROP COLLATION public.c1",
				"CREATE COLLATION public.c1 (provider = libc, locale = 'POSIX')", ix.Definition},
		},
		{
			name:    "a collation a column uses cannot change",
			live:    Model{Schemas: pub(), Tables: []Table{tbl("t", name)}, Collations: []Collation{c1}, Deps: []Dep{usesC1}},
			desired: Model{Schemas: pub(), Tables: []Table{tbl("t", name)}, Collations: []Collation{c1posix}, Deps: []Dep{usesC1}},
			refused: "column public.t.name uses collation public.c1, whose definition changes",
		},
		{
			name:    "a new collation comes before the column that uses it",
			live:    Model{Schemas: pub(), Tables: []Table{tbl("t", col("id", "integer"))}},
			desired: Model{Schemas: pub(), Tables: []Table{tbl("t", col("id", "integer"), name)}, Collations: []Collation{c1}, Deps: []Dep{usesC1}},
			want:    []string{"CREATE COLLATION public.c1 (provider = libc, locale = 'C')", "ALTER TABLE public.t ADD COLUMN name text COLLATE public.c1"},
		},
		{
			name:    "new mappings rebuild the index, not the view",
			live:    Model{Schemas: pub(), Tables: []Table{d}, Indexes: []Index{tsIx}, Views: []View{tsView}, TSConfigs: []TSConfig{ts}, Deps: tsDeps},
			desired: Model{Schemas: pub(), Tables: []Table{d}, Indexes: []Index{tsIx}, Views: []View{tsView}, TSConfigs: []TSConfig{tsStem}, Deps: tsDeps},
			want: []string{"DROP INDEX public.d_body",
				"ALTER TEXT SEARCH CONFIGURATION public.ts ALTER MAPPING FOR word WITH pg_catalog.english_stem", tsIx.Definition},
		},
		{
			name: "a new parser drops and creates the configuration again, its users around it",
			live: Model{Schemas: pub(), Tables: []Table{d}, Indexes: []Index{tsIx}, Views: []View{tsView}, TSConfigs: []TSConfig{ts}, Deps: tsDeps},
			desired: Model{Schemas: pub(), Tables: []Table{d}, Indexes: []Index{tsIx}, Views: []View{tsView},
				TSConfigs: []TSConfig{{Schema: "public", Name: "ts", Parser: "other.p", Mappings: ts.Mappings}}, Deps: tsDeps},
			want: []string{"DROP VIEW public.v", "DROP INDEX public.d_body", "DROP TEXT SEARCH CONFIGURATION public.ts",
				"CREATE TEXT SEARCH CONFIGURATION public.ts (PARSER = other.p)",
				"ALTER TEXT SEARCH CONFIGURATION public.ts ADD MAPPING FOR word WITH pg_catalog.simple",
				tsIx.Definition, createView(tsView)},
		},
		{
			name: "an aggregate moving off its state function is replaced in place, its view kept, before the function goes",
			live: Model{Schemas: pub(), Tables: []Table{t1}, Functions: []Function{sfunc, aggOnSfunc}, Views: []View{aggView}, Deps: aggDeps},
			desired: Model{Schemas: pub(), Tables: []Table{t1}, Functions: []Function{aggOnTextcat}, Views: []View{aggView},
				Deps: []Dep{{Object: aggView.ID(), RefObject: aggOnTextcat.ID()}}},
			want: []string{aggOnTextcat.Definition, "DROP FUNCTION public.sf(text, text)"},
		},
		{
			name: "an aggregate whose kind changes is dropped and created again, its view around it",
			live: Model{Schemas: pub(), Tables: []Table{t1}, Functions: []Function{aggOnTextcat}, Views: []View{aggView},
				Deps: []Dep{{Object: aggView.ID(), RefObject: aggOnTextcat.ID()}}},
			desired: Model{Schemas: pub(), Tables: []Table{t1}, Functions: []Function{hypothetical}},
			want:    []string{"DROP VIEW public.av", "DROP AGGREGATE public.a(text)", hypothetical.Definition},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := Diff(&tc.live, &tc.desired)
			if tc.refused != "" {
				var ue *UnsupportedError
				if !errors.As(err, &ue) || !strings.Contains(err.Error(), tc.refused) {
					t.Fatalf("Diff = %v, %v; want a refusal naming %q", sqls(got), err, tc.refused)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if g := sqls(got); !reflect.DeepEqual(g, tc.want) {
				t.Errorf("got\n  %s\nwant\n  %s", strings.Join(g, "\n  "), strings.Join(tc.want, "\n  "))
			}
		})
	}
}
