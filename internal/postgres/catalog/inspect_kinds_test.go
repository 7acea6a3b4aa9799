package catalog

import (
	"errors"
	"strings"
	"testing"
)

// Aggregates, collations and text search configurations as Inspect reads
// them (inspect_kinds.go).

func TestInspectAggregates(t *testing.T) {
	t.Parallel()
	m := mustInspect(t, `
		CREATE FUNCTION _group_concat(text, text) RETURNS text LANGUAGE sql IMMUTABLE
			AS $$ SELECT CASE WHEN $2 IS NULL THEN $1 WHEN $1 IS NULL THEN $2 ELSE $1 || ', ' || $2 END $$;
		CREATE AGGREGATE group_concat(text) (SFUNC = _group_concat, STYPE = text);
		COMMENT ON AGGREGATE group_concat(text) IS 'Pagila''s';
		CREATE AGGREGATE "My Max"(int) (SFUNC = int4larger, STYPE = int, SORTOP = >, PARALLEL = SAFE);
		CREATE AGGREGATE pct(float8 ORDER BY float8) (SFUNC = ordered_set_transition, STYPE = internal,
			FINALFUNC = percentile_disc_final, FINALFUNC_EXTRA);
		CREATE AGGREGATE rnk(VARIADIC "any" ORDER BY VARIADIC "any") (SFUNC = ordered_set_transition_multi,
			STYPE = internal, FINALFUNC = rank_final, FINALFUNC_EXTRA, HYPOTHETICAL);
		CREATE TABLE actor (name text);
		CREATE VIEW names AS SELECT group_concat(name) AS names FROM actor;
		-- A window function outside the managed schemas is none of ptah's business.
		CREATE SCHEMA other;
		CREATE FUNCTION other.rn() RETURNS bigint LANGUAGE internal WINDOW AS 'window_row_number';`)
	agg := func(name, args string) ID { return ID{Kind: KindAggregate, Schema: "public", Name: name, Sub: args} }
	gc := find(t, m.Functions, agg("group_concat", "text"))
	equal(t, "group_concat", gc, Function{Schema: "public", Name: "group_concat", Aggregate: "normal", IdentityArgs: "text",
		Result: "text", Comment: "Pagila's",
		Definition: "CREATE OR REPLACE AGGREGATE public.group_concat(text) (\n    SFUNC = public._group_concat,\n    STYPE = text\n)"})
	equal(t, "My Max", find(t, m.Functions, agg("My Max", "integer")).Definition,
		"CREATE OR REPLACE AGGREGATE public.\"My Max\"(integer) (\n    SFUNC = int4larger,\n    STYPE = integer,\n"+
			"    SORTOP = OPERATOR(pg_catalog.>),\n    PARALLEL = SAFE\n)")
	pct := find(t, m.Functions, agg("pct", "double precision ORDER BY double precision"))
	equal(t, "pct kind", pct.Aggregate, "ordered-set")
	equal(t, "pct", pct.Definition, "CREATE OR REPLACE AGGREGATE public.pct(double precision ORDER BY double precision) (\n"+
		"    SFUNC = ordered_set_transition,\n    STYPE = internal,\n    FINALFUNC = percentile_disc_final,\n    FINALFUNC_EXTRA\n)")
	rnk := find(t, m.Functions, agg("rnk", `VARIADIC "any" ORDER BY VARIADIC "any"`))
	equal(t, "rnk kind", rnk.Aggregate, "hypothetical-set")
	if !strings.HasSuffix(rnk.Definition, ",\n    HYPOTHETICAL\n)") {
		t.Errorf("rnk's definition does not say HYPOTHETICAL:\n%s", rnk.Definition)
	}
	// The aggregate depends on its state function; the view on the aggregate.
	fn := ID{Kind: KindFunction, Schema: "public", Name: "_group_concat", Sub: "text, text"}
	if !hasDep(m, gc.ID(), fn) {
		t.Errorf("no dependency of the aggregate on its state function in %v", m.Deps)
	}
	if !hasDep(m, ID{Kind: KindView, Schema: "public", Name: "names"}, gc.ID()) {
		t.Errorf("no dependency of the view on the aggregate in %v", m.Deps)
	}
	_, err := inspectDDL(t, `CREATE FUNCTION rn() RETURNS bigint LANGUAGE internal WINDOW AS 'window_row_number';`)
	var ue *UnsupportedError
	if !errors.As(err, &ue) {
		t.Fatalf("a window function: Inspect returned %v, want an UnsupportedError", err)
	}
	equal(t, "refused", ue.Objects, []string{"window function public.rn()"})
}

func TestInspectCollations(t *testing.T) {
	t.Parallel()
	m := mustInspect(t, `
		CREATE COLLATION c1 (provider = libc, locale = 'C');
		CREATE COLLATION "From C" FROM "C";
		CREATE COLLATION mixed (provider = libc, lc_collate = 'C', lc_ctype = 'POSIX');
		COMMENT ON COLLATION c1 IS 'bytewise';
		CREATE TABLE t (a text COLLATE c1, b text);
		CREATE INDEX t_b ON t (b COLLATE mixed);`)
	equal(t, "collations", m.Collations, []Collation{
		{Schema: "public", Name: "From C", Provider: "libc", LcCollate: "C", LcCtype: "C", Deterministic: true},
		{Schema: "public", Name: "c1", Provider: "libc", LcCollate: "C", LcCtype: "C", Deterministic: true, Comment: "bytewise"},
		{Schema: "public", Name: "mixed", Provider: "libc", LcCollate: "C", LcCtype: "POSIX", Deterministic: true},
	})
	coll := func(name string) ID { return ID{Kind: KindCollation, Schema: "public", Name: name} }
	if !hasDep(m, ColumnID("public", "t", "a"), coll("c1")) {
		t.Errorf("no dependency of the column on its collation in %v", m.Deps)
	}
	if !hasDep(m, ID{Kind: KindIndex, Schema: "public", Name: "t_b"}, coll("mixed")) {
		t.Errorf("no dependency of the index on its collation in %v", m.Deps)
	}
	if !hasDep(m, coll("c1"), publicSchema()) {
		t.Errorf("no dependency of the collation on its schema in %v", m.Deps)
	}
}

// An ICU collation, where the server has ICU. (PostgreSQL 14 keeps its
// locale in collcollate, 15 and 16 in colliculocale, 17 on in colllocale.)
func TestInspectCollationsICU(t *testing.T) {
	t.Parallel()
	m, err := inspectDDL(t, `CREATE COLLATION ci (provider = icu, locale = 'und-u-ks-level2', deterministic = false);`)
	if err != nil {
		if strings.Contains(err.Error(), "ICU") || strings.Contains(err.Error(), "icu") {
			t.Skipf("this server has no ICU: %v", err)
		}
		t.Fatal(err)
	}
	equal(t, "collations", m.Collations, []Collation{
		{Schema: "public", Name: "ci", Provider: "icu", Locale: "und-u-ks-level2", Deterministic: false},
	})
}

func TestInspectTSConfigs(t *testing.T) {
	t.Parallel()
	m := mustInspect(t, `
		CREATE TEXT SEARCH CONFIGURATION "My TS" (PARSER = default);
		ALTER TEXT SEARCH CONFIGURATION "My TS" ADD MAPPING FOR word, asciiword WITH english_stem, simple;
		ALTER TEXT SEARCH CONFIGURATION "My TS" ADD MAPPING FOR int WITH simple;
		COMMENT ON TEXT SEARCH CONFIGURATION "My TS" IS 'mine';
		CREATE TEXT SEARCH CONFIGURATION empty (PARSER = default);
		CREATE TABLE docs (body text, tsv tsvector GENERATED ALWAYS AS (to_tsvector('public."My TS"', body)) STORED);
		CREATE INDEX docs_body ON docs USING gin (to_tsvector('public.empty', body));`)
	stems := []string{"pg_catalog.english_stem", "pg_catalog.simple"}
	equal(t, "configurations", m.TSConfigs, []TSConfig{
		{Schema: "public", Name: "My TS", Parser: `pg_catalog."default"`, Comment: "mine", Mappings: []TSMapping{
			{Token: "asciiword", Dictionaries: stems},
			{Token: "word", Dictionaries: stems},
			{Token: "int", Dictionaries: []string{"pg_catalog.simple"}},
		}},
		{Schema: "public", Name: "empty", Parser: `pg_catalog."default"`},
	})
	cfg := func(name string) ID { return ID{Kind: KindTSConfig, Schema: "public", Name: name} }
	if !hasDep(m, ColumnID("public", "docs", "tsv"), cfg("My TS")) {
		t.Errorf("no dependency of the generated column on its configuration in %v", m.Deps)
	}
	if !hasDep(m, ID{Kind: KindIndex, Schema: "public", Name: "docs_body"}, cfg("empty")) {
		t.Errorf("no dependency of the index on its configuration in %v", m.Deps)
	}

	// COPY reads as the parser and mappings it copied.
	copied := mustInspect(t, `CREATE TEXT SEARCH CONFIGURATION x (COPY = pg_catalog.english);`)
	x := find(t, copied.TSConfigs, cfg("x"))
	if len(x.Mappings) < 10 || !sameMapping(x.Mappings[0], TSMapping{Token: "asciiword", Dictionaries: []string{"pg_catalog.english_stem"}}) {
		t.Errorf("a copy of english reads %#v", x.Mappings)
	}
}

// Dictionaries, parsers and templates in a managed schema stay refused, and
// so does a configuration mapped to such a dictionary, through it.
func TestInspectTSConfigOnRefusedDictionary(t *testing.T) {
	t.Parallel()
	_, err := inspectDDL(t, `
		CREATE TEXT SEARCH DICTIONARY d (TEMPLATE = simple);
		CREATE TEXT SEARCH CONFIGURATION x (COPY = simple);
		ALTER TEXT SEARCH CONFIGURATION x ALTER MAPPING FOR asciiword WITH d;`)
	var ue *UnsupportedError
	if !errors.As(err, &ue) {
		t.Fatalf("Inspect returned %v, want an UnsupportedError", err)
	}
	equal(t, "refused", ue.Objects, []string{"text search dictionary public.d"})
}
