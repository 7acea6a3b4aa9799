package catalog

// The kinds that real schemas use beside tables and routines: aggregates
// (read with the functions, see functionsQuery), collations and text
// search configurations.

// procName is a pg_proc oid (regproc) as a statement names it: quoted,
// and qualified unless its name alone finds it, which with the catalog
// queries' empty search_path only a function of pg_catalog without
// overloads does. CREATE AGGREGATE finds a support function by its name
// and the argument types the aggregate implies.
func procName(oid string) string {
	return oid + `::regproc::text`
}

// aggregateDefinition is the CREATE OR REPLACE AGGREGATE statement of the
// aggregate whose pg_proc row is p and pg_aggregate row a, one option a
// line, in a fixed order. Each option is written only when it is not what
// CREATE AGGREGATE would make of its absence, so that the same aggregate
// reads the same whichever way it was declared (the old BASETYPE syntax
// included). Every column of pg_aggregate is spelled out: there is no
// option an aggregate could have that this text leaves out.
var aggregateDefinition = `'CREATE OR REPLACE AGGREGATE ' || quote_ident(n.nspname) || '.' || quote_ident(p.proname)
	|| '(' || pg_get_function_arguments(p.oid) || E') (\n    ' || array_to_string(ARRAY[
		'SFUNC = ' || ` + procName("a.aggtransfn") + `,
		'STYPE = ' || format_type(a.aggtranstype, NULL),
		CASE WHEN a.aggtransspace <> 0 THEN 'SSPACE = ' || a.aggtransspace END,
		CASE WHEN a.aggfinalfn <> 0 THEN 'FINALFUNC = ' || ` + procName("a.aggfinalfn") + ` END,
		CASE WHEN a.aggfinalextra THEN 'FINALFUNC_EXTRA' END,
		CASE WHEN a.aggfinalmodify <> CASE WHEN a.aggkind = 'n' THEN 'r' ELSE 'w' END
			THEN 'FINALFUNC_MODIFY = ' || ` + aggModify("a.aggfinalmodify") + ` END,
		CASE WHEN a.aggcombinefn <> 0 THEN 'COMBINEFUNC = ' || ` + procName("a.aggcombinefn") + ` END,
		CASE WHEN a.aggserialfn <> 0 THEN 'SERIALFUNC = ' || ` + procName("a.aggserialfn") + ` END,
		CASE WHEN a.aggdeserialfn <> 0 THEN 'DESERIALFUNC = ' || ` + procName("a.aggdeserialfn") + ` END,
		CASE WHEN a.agginitval IS NOT NULL THEN 'INITCOND = ' || quote_literal(a.agginitval) END,
		CASE WHEN a.aggmtransfn <> 0 THEN 'MSFUNC = ' || ` + procName("a.aggmtransfn") + ` END,
		CASE WHEN a.aggminvtransfn <> 0 THEN 'MINVFUNC = ' || ` + procName("a.aggminvtransfn") + ` END,
		CASE WHEN a.aggmtranstype <> 0 THEN 'MSTYPE = ' || format_type(a.aggmtranstype, NULL) END,
		CASE WHEN a.aggmtransspace <> 0 THEN 'MSSPACE = ' || a.aggmtransspace END,
		CASE WHEN a.aggmfinalfn <> 0 THEN 'MFINALFUNC = ' || ` + procName("a.aggmfinalfn") + ` END,
		CASE WHEN a.aggmfinalextra THEN 'MFINALFUNC_EXTRA' END,
		CASE WHEN a.aggmfinalmodify <> CASE WHEN a.aggkind = 'n' THEN 'r' ELSE 'w' END
			THEN 'MFINALFUNC_MODIFY = ' || ` + aggModify("a.aggmfinalmodify") + ` END,
		CASE WHEN a.aggminitval IS NOT NULL THEN 'MINITCOND = ' || quote_literal(a.aggminitval) END,
		CASE WHEN a.aggsortop <> 0 THEN (SELECT 'SORTOP = OPERATOR(' || quote_ident(opn.nspname) || '.' || op.oprname || ')'
			FROM pg_operator op JOIN pg_namespace opn ON opn.oid = op.oprnamespace WHERE op.oid = a.aggsortop) END,
		CASE p.proparallel WHEN 's' THEN 'PARALLEL = SAFE' WHEN 'r' THEN 'PARALLEL = RESTRICTED' END,
		CASE WHEN a.aggkind = 'h' THEN 'HYPOTHETICAL' END], E',\n    ') || E'\n)'`

// aggModify spells a pg_aggregate finalfunc_modify letter.
func aggModify(letter string) string {
	return `CASE ` + letter + ` WHEN 'r' THEN 'READ_ONLY' WHEN 's' THEN 'SHAREABLE' ELSE 'READ_WRITE' END`
}

// aggregateKind names pg_aggregate.aggkind as Function.Aggregate holds it.
const aggregateKind = `CASE a.aggkind WHEN 'o' THEN 'ordered-set' WHEN 'h' THEN 'hypothetical-set' ELSE 'normal' END`

// collationsQuery reads the collations. The ICU locale has a column of its
// own from PostgreSQL 15 on (colliculocale, renamed colllocale in 17, when
// the builtin provider came); before, it is in collcollate. ICU rules came
// in 16.
func collationsQuery(version int) string {
	locale := `CASE WHEN o.collprovider = 'i' THEN o.collcollate END`
	switch {
	case version >= 170000:
		locale = `o.colllocale`
	case version >= 150000:
		locale = `o.colliculocale`
	}
	rules := `''`
	if version >= 160000 {
		rules = `COALESCE(o.collicurules, '')`
	}
	return `
SELECT o.oid, n.nspname, o.collname,
	CASE o.collprovider WHEN 'c' THEN 'libc' WHEN 'i' THEN 'icu' WHEN 'b' THEN 'builtin' ELSE o.collprovider::text END,
	COALESCE(CASE WHEN o.collprovider <> 'c' THEN ` + locale + ` END, ''),
	CASE WHEN o.collprovider = 'c' THEN COALESCE(o.collcollate, '') ELSE '' END,
	CASE WHEN o.collprovider = 'c' THEN COALESCE(o.collctype, '') ELSE '' END,
	o.collisdeterministic, ` + rules + `, ` + commentOn("pg_collation", "o.oid", "0") + `
FROM pg_collation o
JOIN pg_namespace n ON n.oid = o.collnamespace
WHERE n.nspname = ANY($1) AND ` + notExtensionMember("pg_collation", "o.oid")
}

// tsConfigsQuery reads the text search configurations, and their mappings
// (as JSON, TSMapping's fields) in the parser's token type order. Parser
// and dictionaries are named qualified (pg_catalog's too, its parser being
// called "default").
var tsConfigsQuery = `
SELECT c.oid, n.nspname, c.cfgname, quote_ident(pn.nspname) || '.' || quote_ident(p.prsname),
	COALESCE((SELECT json_agg(json_build_object('Token', t.alias, 'Dictionaries',
			ARRAY(SELECT quote_ident(dn.nspname) || '.' || quote_ident(d.dictname)
				FROM pg_ts_config_map m JOIN pg_ts_dict d ON d.oid = m.mapdict
				JOIN pg_namespace dn ON dn.oid = d.dictnamespace
				WHERE m.mapcfg = c.oid AND m.maptokentype = t.tokid ORDER BY m.mapseqno)) ORDER BY t.tokid)
		FROM ts_token_type(c.cfgparser) t
		WHERE EXISTS (SELECT FROM pg_ts_config_map m WHERE m.mapcfg = c.oid AND m.maptokentype = t.tokid)), '[]'),
	` + commentOn("pg_ts_config", "c.oid", "0") + `
FROM pg_ts_config c
JOIN pg_namespace n ON n.oid = c.cfgnamespace
JOIN pg_ts_parser p ON p.oid = c.cfgparser
JOIN pg_namespace pn ON pn.oid = p.prsnamespace
WHERE n.nspname = ANY($1) AND ` + notExtensionMember("pg_ts_config", "c.oid")

func (in *inspector) readCollations() error {
	var oid uint32
	var c Collation
	dest := []any{&oid, &c.Schema, &c.Name, &c.Provider, &c.Locale, &c.LcCollate, &c.LcCtype, &c.Deterministic, &c.Rules, &c.Comment}
	return in.each("collations", collationsQuery(in.version), dest, func() error {
		in.m.Collations = append(in.m.Collations, c)
		in.objects[catalogKey{"pg_collation", oid}] = c.ID()
		return nil
	})
}

func (in *inspector) readTSConfigs() error {
	var oid uint32
	var c TSConfig
	dest := []any{&oid, &c.Schema, &c.Name, &c.Parser, &c.Mappings, &c.Comment}
	return in.each("text search configurations", tsConfigsQuery, dest, func() error {
		c.Mappings = nilIfEmpty(c.Mappings)
		in.m.TSConfigs = append(in.m.TSConfigs, c)
		c.Mappings = nil // json decoding would reuse its array for the next row
		in.objects[catalogKey{"pg_ts_config", oid}] = c.ID()
		return nil
	})
}
