package catalog

// The catalog queries Inspect runs: one per object kind, one for the
// dependencies and one for the objects ptah refuses. Each takes the managed
// schema names as $1 (except the dependency query, which is filtered in Go
// against the objects read). They run with an empty search_path so that
// every name outside pg_catalog comes out schema-qualified, the same way in
// the dev database and in the target.
//
// A query whose text depends on the server's major is a function of its
// server_version_num: the catalog grows with each major (a column's NOT
// NULL became a named pg_constraint row in 18, a domain's in 17), and a
// query for a newer major names columns an older one does not have.

// commentOn is the comment of an object, "" when it has none.
func commentOn(catalog, oid, subid string) string {
	return `COALESCE((SELECT d.description FROM pg_description d
		WHERE d.classoid = '` + catalog + `'::regclass AND d.objoid = ` + oid + ` AND d.objsubid = ` + subid + `), '')`
}

// notExtensionMember holds when the object does not belong to an extension:
// the extension, not ptah, creates and drops it.
func notExtensionMember(catalog, oid string) string {
	return `NOT EXISTS (SELECT FROM pg_depend e
		WHERE e.classid = '` + catalog + `'::regclass AND e.objid = ` + oid + ` AND e.deptype = 'e')`
}

// collationName is the collation coll when it is not def (the type's default
// collation), as it is spliced after COLLATE: quoted, and qualified unless it
// lives in pg_catalog.
func collationName(coll, def string) string {
	return `CASE WHEN ` + coll + ` <> 0 AND ` + coll + ` <> ` + def + ` THEN
		(SELECT CASE WHEN cn.nspname = 'pg_catalog' THEN '' ELSE quote_ident(cn.nspname) || '.' END
			|| quote_ident(co.collname)
		FROM pg_collation co JOIN pg_namespace cn ON cn.oid = co.collnamespace
		WHERE co.oid = ` + coll + `)
	ELSE '' END`
}

// storageWord is an attstorage or typstorage letter as SET STORAGE spells it.
func storageWord(letter string) string {
	return `CASE ` + letter + ` WHEN 'p' THEN 'PLAIN' WHEN 'e' THEN 'EXTERNAL' WHEN 'm' THEN 'MAIN' ELSE 'EXTENDED' END`
}

// columnSettings is, as JSON, the ColumnSettings of column a (of type t)
// when they are not the defaults, else NULL. They are read with the
// columns, which scan every column of the managed relations anyway: a
// subquery per table and view was most of the tables query's time at
// 1,000 tables. attstattarget is NULL for the default from PostgreSQL 17
// on, -1 before.
var columnSettings = `CASE WHEN a.attstorage <> t.typstorage OR a.attcompression IN ('p', 'l')
		OR COALESCE(a.attstattarget, -1) <> -1 OR cardinality(a.attoptions) > 0
	THEN json_build_object(
		'Column', a.attname,
		'Storage', CASE WHEN a.attstorage = t.typstorage THEN '' ELSE ` + storageWord("a.attstorage") + ` END,
		'DefaultStorage', ` + storageWord("t.typstorage") + `,
		'Compression', CASE a.attcompression WHEN 'p' THEN 'pglz' WHEN 'l' THEN 'lz4' ELSE '' END,
		'Statistics', COALESCE(a.attstattarget, -1),
		'Options', COALESCE(a.attoptions, '{}')) END`

// relOptions are the reloptions of relation c, then those of its TOAST
// table (aliased toast), prefixed "toast." as ALTER TABLE ... SET takes them.
const relOptions = `COALESCE(c.reloptions, '{}')
	|| ARRAY(SELECT 'toast.' || o FROM unnest(toast.reloptions) WITH ORDINALITY u(o, i) ORDER BY u.i)`

// indexFlagged is the name of the index of relation c whose pg_index flag
// (indisclustered, indisreplident) is set, "" when none.
func indexFlagged(flag string) string {
	return `COALESCE((SELECT ic.relname FROM pg_index x JOIN pg_class ic ON ic.oid = x.indexrelid
		WHERE x.indrelid = c.oid AND x.` + flag + `), '')`
}

// sequenceOptions are the pg_sequence columns behind SequenceOptions, for a
// pg_sequence row aliased s.
const sequenceOptions = `COALESCE(format_type(s.seqtypid, NULL), ''), COALESCE(s.seqstart, 0),
	COALESCE(s.seqincrement, 0), COALESCE(s.seqmin, 0), COALESCE(s.seqmax, 0),
	COALESCE(s.seqcache, 0), COALESCE(s.seqcycle, false)`

// lastValue is the last value the sequence with oid seq handed out, NULL
// when it has handed out none yet or the role may not read it (as
// pg_sequences.last_value).
func lastValue(seq string) string {
	return `CASE WHEN ` + seq + ` IS NOT NULL AND has_sequence_privilege(` + seq + `, 'SELECT,USAGE')
		THEN pg_sequence_last_value(` + seq + `) END`
}

var schemasQuery = `
SELECT n.oid, n.nspname, ` + commentOn("pg_namespace", "n.oid", "0") + `
FROM pg_namespace n
WHERE n.nspname = ANY($1)`

var extensionsQuery = `
SELECT x.oid, x.extname, n.nspname, x.extversion, ` + commentOn("pg_extension", "x.oid", "0") + `,
	ARRAY(SELECT m.classid::regclass::text FROM pg_depend m
		WHERE m.refclassid = 'pg_extension'::regclass AND m.refobjid = x.oid AND m.deptype = 'e'
		ORDER BY m.classid, m.objid),
	ARRAY(SELECT m.objid FROM pg_depend m
		WHERE m.refclassid = 'pg_extension'::regclass AND m.refobjid = x.oid AND m.deptype = 'e'
		ORDER BY m.classid, m.objid)
FROM pg_extension x
JOIN pg_namespace n ON n.oid = x.extnamespace
WHERE n.nspname = ANY($1)`

var enumsQuery = `
SELECT t.oid, t.typarray, n.nspname, t.typname,
	ARRAY(SELECT e.enumlabel::text FROM pg_enum e WHERE e.enumtypid = t.oid ORDER BY e.enumsortorder),
	` + commentOn("pg_type", "t.oid", "0") + `
FROM pg_type t
JOIN pg_namespace n ON n.oid = t.typnamespace
WHERE n.nspname = ANY($1) AND t.typtype = 'e' AND ` + notExtensionMember("pg_type", "t.oid")

// domainsQuery reads domains; from PostgreSQL 17 on, also the name of a
// domain's NOT NULL constraint.
func domainsQuery(version int) string {
	notNullName := `''`
	if version >= 170000 {
		notNullName = `COALESCE((SELECT k.conname::text FROM pg_constraint k
		WHERE k.contypid = t.oid AND k.contype = 'n'), '')`
	}
	return `
SELECT t.oid, t.typarray, n.nspname, t.typname, format_type(t.typbasetype, t.typtypmod),
	` + collationName("t.typcollation", "b.typcollation") + `,
	COALESCE(pg_get_expr(t.typdefaultbin, 0), t.typdefault, ''), t.typnotnull, ` + notNullName + `,
	ARRAY(SELECT k.conname::text FROM pg_constraint k
		WHERE k.contypid = t.oid AND k.contype = 'c' ORDER BY k.conname),
	ARRAY(SELECT pg_get_constraintdef(k.oid) FROM pg_constraint k
		WHERE k.contypid = t.oid AND k.contype = 'c' ORDER BY k.conname),
	ARRAY(SELECT k.oid FROM pg_constraint k WHERE k.contypid = t.oid),
	ARRAY(SELECT ` + commentOn("pg_constraint", "k.oid", "0") + ` FROM pg_constraint k
		WHERE k.contypid = t.oid AND k.contype = 'c' ORDER BY k.conname),
	` + commentOn("pg_type", "t.oid", "0") + `
FROM pg_type t
JOIN pg_namespace n ON n.oid = t.typnamespace
JOIN pg_type b ON b.oid = t.typbasetype
WHERE n.nspname = ANY($1) AND t.typtype = 'd' AND ` + notExtensionMember("pg_type", "t.oid")
}

// Only free-standing composite types: the row types of tables and views
// have typtype 'c' too, but their relation is not relkind 'c'.
var compositesQuery = `
SELECT t.oid, t.typarray, t.typrelid, n.nspname, t.typname, ` + commentOn("pg_type", "t.oid", "0") + `
FROM pg_type t
JOIN pg_namespace n ON n.oid = t.typnamespace
JOIN pg_class c ON c.oid = t.typrelid
WHERE n.nspname = ANY($1) AND t.typtype = 'c' AND c.relkind = 'c'
	AND ` + notExtensionMember("pg_type", "t.oid")

// Identity sequences are left out: they are part of their column. OWNED BY
// is the auto ('a') dependency of a serial's sequence on its column.
var sequencesQuery = `
SELECT c.oid, n.nspname, c.relname, c.relpersistence = 'u', ` + sequenceOptions + `, ` + lastValue("c.oid") + `,
	o.attrelid IS NOT NULL, COALESCE(on_.nspname, ''), COALESCE(oc.relname, ''), COALESCE(o.attname, ''),
	` + commentOn("pg_class", "c.oid", "0") + `
FROM pg_class c
JOIN pg_namespace n ON n.oid = c.relnamespace
JOIN pg_sequence s ON s.seqrelid = c.oid
LEFT JOIN pg_depend d ON d.classid = 'pg_class'::regclass AND d.objid = c.oid
	AND d.refclassid = 'pg_class'::regclass AND d.refobjsubid > 0 AND d.deptype = 'a'
LEFT JOIN pg_attribute o ON o.attrelid = d.refobjid AND o.attnum = d.refobjsubid
LEFT JOIN pg_class oc ON oc.oid = o.attrelid
LEFT JOIN pg_namespace on_ ON on_.oid = oc.relnamespace
WHERE n.nspname = ANY($1) AND c.relkind = 'S' AND ` + notExtensionMember("pg_class", "c.oid") + `
	AND NOT EXISTS (SELECT FROM pg_depend i
		WHERE i.classid = 'pg_class'::regclass AND i.objid = c.oid
			AND i.refclassid = 'pg_class'::regclass AND i.deptype = 'i')`

var tablesQuery = `
SELECT c.oid, c.reltype, rt.typarray, n.nspname, c.relname, c.relpersistence = 'u',
	COALESCE(pg_get_partkeydef(c.oid), ''),
	c.relispartition, COALESCE(pn.nspname, ''), COALESCE(pc.relname, ''),
	COALESCE(pg_get_expr(c.relpartbound, c.oid), ''),
	` + relOptions + `,
	CASE c.relreplident WHEN 'f' THEN 'FULL' WHEN 'n' THEN 'NOTHING'
		WHEN 'i' THEN CASE WHEN ` + indexFlagged("indisreplident") + ` = '' THEN 'NOTHING' ELSE 'USING INDEX' END
		ELSE '' END,
	CASE WHEN c.relreplident = 'i' THEN ` + indexFlagged("indisreplident") + ` ELSE '' END,
	` + indexFlagged("indisclustered") + `,
	c.relrowsecurity, c.relforcerowsecurity,
	` + commentOn("pg_class", "c.oid", "0") + `
FROM pg_class c
JOIN pg_namespace n ON n.oid = c.relnamespace
JOIN pg_type rt ON rt.oid = c.reltype
LEFT JOIN pg_class toast ON toast.oid = c.reltoastrelid
LEFT JOIN pg_inherits h ON c.relispartition AND h.inhrelid = c.oid
LEFT JOIN pg_class pc ON pc.oid = h.inhparent
LEFT JOIN pg_namespace pn ON pn.oid = pc.relnamespace
WHERE n.nspname = ANY($1) AND c.relkind IN ('r', 'p') AND ` + notExtensionMember("pg_class", "c.oid")

var viewsQuery = `
SELECT c.oid, c.reltype, rt.typarray,
	COALESCE((SELECT r.oid FROM pg_rewrite r WHERE r.ev_class = c.oid AND r.rulename = '_RETURN'), 0),
	n.nspname, c.relname, c.relkind = 'm', pg_get_viewdef(c.oid),
	` + relOptions + `, NOT c.relispopulated, ` + indexFlagged("indisclustered") + `,
	` + commentOn("pg_class", "c.oid", "0") + `
FROM pg_class c
JOIN pg_namespace n ON n.oid = c.relnamespace
JOIN pg_type rt ON rt.oid = c.reltype
LEFT JOIN pg_class toast ON toast.oid = c.reltoastrelid
WHERE n.nspname = ANY($1) AND c.relkind IN ('v', 'm') AND ` + notExtensionMember("pg_class", "c.oid")

// columnsQuery reads the columns of tables, views and composite types, in
// attnum order; a partition's too, though they are its parent's (PostgreSQL
// 15 marks none of them local), for their defaults, NOT NULL and comments
// are its own. An identity column's options come from the sequence that is
// internally ('i') dependent on it, looked up in a lateral subquery that
// runs only for an identity column: OFFSET 0 keeps it a subquery, so that
// attidentity gates it (a one-time filter) rather than filtering after a
// pg_depend probe for every column, which was about half the query's time at
// 1,000 tables. attgenerated is 's' (STORED) or, from
// PostgreSQL 18 on, 'v' (VIRTUAL). From 18 on, a NOT NULL is a
// pg_constraint row whose name is read too, unless it is inherited. The
// last column is the column's settings, for a table's or materialized
// view's ColumnSettings.
func columnsQuery(version int) string {
	notNullName, notNullJoin := `''`, ``
	if version >= 180000 {
		// A NOT NULL a partition inherits is its parent's: named after the
		// parent when the partition was created under it, or whatever it
		// was called when it was attached. Its name is not the
		// partition's to declare, and is not modeled.
		notNullName = `CASE WHEN nn.coninhcount > 0 THEN '' ELSE COALESCE(nn.conname::text, '') END`
		notNullJoin = `
LEFT JOIN pg_constraint nn ON nn.conrelid = a.attrelid AND nn.contype = 'n' AND nn.conkey[1] = a.attnum`
	}
	return `
SELECT a.attrelid, a.attnum, COALESCE(ad.oid, 0), a.attname, format_type(a.atttypid, a.atttypmod),
	` + collationName("a.attcollation", "t.typcollation") + `,
	a.attnotnull, ` + notNullName + `, COALESCE(pg_get_expr(ad.adbin, ad.adrelid), ''), a.attgenerated::text,
	a.attidentity::text, s.seqrelid IS NOT NULL, ` + sequenceOptions + `, ` + lastValue("s.seqrelid") + `,
	COALESCE(s.relname::text, ''),
	` + commentOn("pg_class", "a.attrelid", "a.attnum") + `, ` + columnSettings + `
FROM pg_attribute a
JOIN pg_class c ON c.oid = a.attrelid
JOIN pg_namespace n ON n.oid = c.relnamespace
JOIN pg_type t ON t.oid = a.atttypid
LEFT JOIN pg_attrdef ad ON ad.adrelid = a.attrelid AND ad.adnum = a.attnum` + notNullJoin + `
LEFT JOIN LATERAL (SELECT s.*, sc.relname
	FROM pg_depend id JOIN pg_sequence s ON s.seqrelid = id.objid JOIN pg_class sc ON sc.oid = s.seqrelid
	WHERE a.attidentity <> '' AND id.refclassid = 'pg_class'::regclass
		AND id.refobjid = a.attrelid AND id.refobjsubid = a.attnum
		AND id.classid = 'pg_class'::regclass AND id.deptype = 'i'
	OFFSET 0) s ON true
WHERE n.nspname = ANY($1) AND c.relkind IN ('r', 'p', 'v', 'm', 'c')
	AND a.attnum > 0 AND NOT a.attisdropped
	AND ` + notExtensionMember("pg_class", "c.oid") + `
ORDER BY a.attrelid, a.attnum`
}

// Table constraints declared on the table itself: copies inherited by
// partitions are not local, except a partition's keys, which are attached
// to the parent's and named on their own. Constraint triggers ('t') are triggers in the
// model, and NOT NULL is a column property. The third column is the index
// a key or exclusion constraint owns (a foreign key's conindid is the
// referenced key's index instead). The constrained columns come as conkey's
// attnums, named in Go after the table's columns (readConstraints): a
// subquery on pg_attribute per constraint was about a third of the query's
// time at 1,000 tables.
var constraintsQuery = `
SELECT k.oid, k.conrelid, CASE WHEN k.contype IN ('p', 'u', 'x') THEN k.conindid ELSE 0 END,
	n.nspname, c.relname, k.conname, k.contype::text,
	-- pg_get_constraintdef leaves out the storage parameters of a key's index.
	pg_get_constraintdef(k.oid) || CASE WHEN k.contype IN ('p', 'u') AND ki.reloptions IS NOT NULL
		THEN ' WITH (' || array_to_string(ki.reloptions, ', ') || ')' ELSE '' END,
	k.condeferrable, k.condeferred,
	COALESCE(k.conkey, '{}'),
	k.confrelid <> 0, COALESCE(rn.nspname, ''), COALESCE(rc.relname, ''),
	k.contype IN ('p', 'u', 'x') AND NOT COALESCE(kx.indisvalid, true),
	COALESCE(pk.conname, ''),
	` + commentOn("pg_constraint", "k.oid", "0") + `
FROM pg_constraint k
JOIN pg_class c ON c.oid = k.conrelid
JOIN pg_namespace n ON n.oid = c.relnamespace
LEFT JOIN pg_class rc ON rc.oid = k.confrelid
LEFT JOIN pg_namespace rn ON rn.oid = rc.relnamespace
LEFT JOIN pg_class ki ON ki.oid = k.conindid
LEFT JOIN pg_index kx ON kx.indexrelid = k.conindid
LEFT JOIN pg_constraint pk ON pk.oid = k.conparentid AND k.contype IN ('p', 'u', 'x')
WHERE n.nspname = ANY($1) AND k.conrelid <> 0 AND (k.conislocal OR pk.oid IS NOT NULL)
	AND k.contype IN ('p', 'u', 'c', 'f', 'x')
	AND ` + notExtensionMember("pg_class", "c.oid")

// Indexes that a constraint owns are the constraint's. An index partition
// names the index it is attached to.
var indexesQuery = `
SELECT i.indexrelid, n.nspname, c.relname, ic.relname, pg_get_indexdef(i.indexrelid), NOT i.indisvalid,
	pi.oid IS NOT NULL, COALESCE(pin.nspname, ''), COALESCE(pi.relname, ''),
	ARRAY(SELECT a.attname::text FROM pg_attribute a WHERE a.attrelid = i.indexrelid AND a.attnum > 0 ORDER BY a.attnum),
	` + commentOn("pg_class", "i.indexrelid", "0") + `
FROM pg_index i
JOIN pg_class ic ON ic.oid = i.indexrelid
JOIN pg_class c ON c.oid = i.indrelid
JOIN pg_namespace n ON n.oid = c.relnamespace
LEFT JOIN pg_inherits h ON h.inhrelid = i.indexrelid
LEFT JOIN pg_class pi ON pi.oid = h.inhparent
LEFT JOIN pg_namespace pin ON pin.oid = pi.relnamespace
WHERE n.nspname = ANY($1) AND c.relkind IN ('r', 'p', 'm')
	AND ` + notExtensionMember("pg_class", "c.oid") + `
	AND ` + notExtensionMember("pg_class", "i.indexrelid") + `
	AND NOT EXISTS (SELECT FROM pg_depend d
		WHERE d.classid = 'pg_class'::regclass AND d.objid = i.indexrelid
			AND d.refclassid = 'pg_constraint'::regclass AND d.deptype = 'i')`

// Functions, procedures and aggregates; PostgreSQL prints no definition
// of an aggregate, which is written from pg_aggregate instead.
var functionsQuery = `
SELECT p.oid, n.nspname, p.proname, p.prokind = 'p', CASE WHEN p.prokind = 'a' THEN ` + aggregateKind + ` ELSE '' END,
	pg_get_function_identity_arguments(p.oid),
	CASE WHEN p.prokind = 'p' THEN '' ELSE COALESCE(pg_get_function_result(p.oid), '') END,
	CASE WHEN p.prokind = 'a' THEN ` + aggregateDefinition + ` ELSE pg_get_functiondef(p.oid) END,
	` + commentOn("pg_proc", "p.oid", "0") + `
FROM pg_proc p
JOIN pg_namespace n ON n.oid = p.pronamespace
LEFT JOIN pg_aggregate a ON a.aggfnoid = p.oid
WHERE n.nspname = ANY($1) AND p.prokind IN ('f', 'p', 'a') AND ` + notExtensionMember("pg_proc", "p.oid")

// Internal triggers implement foreign keys; triggers with a parent are the
// clones a partitioned table's trigger puts on each partition.
var triggersQuery = `
SELECT g.oid, n.nspname, c.relname, g.tgname, pg_get_triggerdef(g.oid),
	CASE g.tgenabled WHEN 'D' THEN 'DISABLE' WHEN 'R' THEN 'ENABLE REPLICA' WHEN 'A' THEN 'ENABLE ALWAYS' ELSE '' END,
	` + commentOn("pg_trigger", "g.oid", "0") + `
FROM pg_trigger g
JOIN pg_class c ON c.oid = g.tgrelid
JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = ANY($1) AND NOT g.tgisinternal AND g.tgparentid = 0
	AND ` + notExtensionMember("pg_class", "c.oid")

// Row-level security policies, on tables and partitioned tables (the only
// relations PostgreSQL takes them on). A partition's are its own: policies
// are not cloned. polroles holds 0 for PUBLIC, which PostgreSQL keeps alone
// (it drops the other roles named beside it); pg_get_userbyid reads the
// role names without the privileges pg_authid needs.
var policiesQuery = `
SELECT p.oid, n.nspname, c.relname, p.polname, p.polpermissive,
	CASE p.polcmd WHEN 'r' THEN 'SELECT' WHEN 'a' THEN 'INSERT' WHEN 'w' THEN 'UPDATE' WHEN 'd' THEN 'DELETE' ELSE 'ALL' END,
	ARRAY(SELECT CASE WHEN u.r = 0 THEN 'PUBLIC' ELSE quote_ident(pg_get_userbyid(u.r)) END
		FROM unnest(p.polroles) u(r)),
	COALESCE(pg_get_expr(p.polqual, p.polrelid), ''), COALESCE(pg_get_expr(p.polwithcheck, p.polrelid), ''),
	` + commentOn("pg_policy", "p.oid", "0") + `
FROM pg_policy p
JOIN pg_class c ON c.oid = p.polrelid
JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = ANY($1) AND c.relkind IN ('r', 'p') AND ` + notExtensionMember("pg_class", "c.oid")

// depsQuery is pg_depend, reduced to rows that can be between objects of
// the model: those were created after initdb, so their oids are at least
// FirstNormalObjectId (16384), except the public schema's. The Go side maps
// both ends to IDs, through the aliases the other queries return (a view's
// rewrite rule, a column default, an array type, ...), and drops the rest.
// The catalogs' names come from a join with pg_class rather than a
// regclass cast per row, and duplicate rows are left to the model's own
// sort, which removes them (sortModel): at 1,000 tables that takes the
// query's backend CPU time from about 45 ms to 20, on a new session as on
// warm caches.
const depsQuery = `
WITH catalogs AS (
	SELECT c.oid, c.relname::text AS name FROM pg_class c
	WHERE c.relnamespace = 'pg_catalog'::regnamespace AND c.relkind = 'r')
SELECT COALESCE(oc.name, d.classid::regclass::text), d.objid, d.objsubid,
	COALESCE(rc.name, d.refclassid::regclass::text), d.refobjid, d.refobjsubid, d.deptype = 'n'
FROM pg_depend d
LEFT JOIN catalogs oc ON oc.oid = d.classid
LEFT JOIN catalogs rc ON rc.oid = d.refclassid
WHERE d.deptype IN ('n', 'a', 'i') AND d.objid >= 16384
	AND (d.refobjid >= 16384 OR d.refclassid = 'pg_namespace'::regclass)`

// relkindWord names a relation kind in an error message.
func relkindWord(relkind string) string {
	return `CASE ` + relkind + ` WHEN 'v' THEN 'view' WHEN 'm' THEN 'materialized view'
		WHEN 'f' THEN 'foreign table' WHEN 'i' THEN 'index' WHEN 'I' THEN 'index' ELSE 'table' END`
}

// triggerStateWord describes a pg_trigger.tgenabled value.
func triggerStateWord(state string) string {
	return `CASE ` + state + ` WHEN 'D' THEN 'disabled' WHEN 'R' THEN 'enabled for replicas only'
		WHEN 'A' THEN 'enabled always' ELSE 'enabled' END`
}

// unsupportedQuery names every object in the managed schemas that the model
// cannot represent, and every database-wide object ptah cannot scope to the
// managed schemas but that reaches into them (event triggers, publications,
// casts of their types, default privileges in them), so that Inspect
// refuses them rather than planning around them. Properties the model
// leaves out are refused the same way when they are not the defaults.
// From PostgreSQL 18 on, that includes a NOT NULL constraint that is NOT
// VALID or NO INHERIT.
func unsupportedQuery(version int) string {
	q := unsupportedAnyVersion
	if version >= 180000 {
		q += `
UNION ALL
SELECT format('%s NOT NULL constraint "%s" on table %I.%I',
	CASE WHEN NOT k.convalidated THEN 'NOT VALID' ELSE 'NO INHERIT' END, k.conname, n.nspname, c.relname)
FROM pg_constraint k JOIN pg_class c ON c.oid = k.conrelid JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = ANY($1) AND k.contype = 'n' AND (NOT k.convalidated OR k.connoinherit)
	AND ` + notExtensionMember("pg_class", "c.oid")
	}
	return q
}

var unsupportedAnyVersion = `
SELECT format('rule "%s" on %s %I.%I', r.rulename, ` + relkindWord("c.relkind") + `, n.nspname, c.relname)
FROM pg_rewrite r JOIN pg_class c ON c.oid = r.ev_class JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = ANY($1) AND r.rulename <> '_RETURN'
	AND ` + notExtensionMember("pg_class", "c.oid") + ` AND ` + notExtensionMember("pg_rewrite", "r.oid") + `
UNION ALL
SELECT format('foreign table %I.%I', n.nspname, c.relname)
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = ANY($1) AND c.relkind = 'f' AND ` + notExtensionMember("pg_class", "c.oid") + `
UNION ALL
SELECT format('typed table %I.%I (OF type)', n.nspname, c.relname)
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = ANY($1) AND c.reloftype <> 0 AND ` + notExtensionMember("pg_class", "c.oid") + `
UNION ALL
SELECT format('table %I.%I inherits from %I.%I (table inheritance)', cn.nspname, c.relname, pn.nspname, p.relname)
FROM pg_inherits h
JOIN pg_class c ON c.oid = h.inhrelid JOIN pg_namespace cn ON cn.oid = c.relnamespace
JOIN pg_class p ON p.oid = h.inhparent JOIN pg_namespace pn ON pn.oid = p.relnamespace
WHERE (cn.nspname = ANY($1) OR pn.nspname = ANY($1)) AND NOT c.relispartition
	AND c.relkind IN ('r', 'p', 'f') AND ` + notExtensionMember("pg_class", "c.oid") + `
UNION ALL
SELECT format('window function %I.%I(%s)', n.nspname, p.proname, pg_get_function_identity_arguments(p.oid))
FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
WHERE n.nspname = ANY($1) AND p.prokind = 'w' AND ` + notExtensionMember("pg_proc", "p.oid") + `
UNION ALL
SELECT format('%s %I.%I', CASE WHEN t.typtype = 'r' THEN 'range type'
		WHEN NOT t.typisdefined THEN 'shell type' ELSE 'base type' END, n.nspname, t.typname)
FROM pg_type t JOIN pg_namespace n ON n.oid = t.typnamespace
WHERE n.nspname = ANY($1) AND (t.typtype IN ('r', 'p')
		OR (t.typtype = 'b' AND NOT EXISTS (SELECT FROM pg_type e WHERE e.oid = t.typelem AND e.typarray = t.oid)))
	AND ` + notExtensionMember("pg_type", "t.oid") + `
UNION ALL
SELECT format('operator %I.%s', n.nspname, o.oprname)
FROM pg_operator o JOIN pg_namespace n ON n.oid = o.oprnamespace
WHERE n.nspname = ANY($1) AND ` + notExtensionMember("pg_operator", "o.oid") + `
UNION ALL
SELECT format('operator class %I.%I using %I', n.nspname, o.opcname, a.amname)
FROM pg_opclass o JOIN pg_namespace n ON n.oid = o.opcnamespace JOIN pg_am a ON a.oid = o.opcmethod
WHERE n.nspname = ANY($1) AND ` + notExtensionMember("pg_opclass", "o.oid") + `
UNION ALL
SELECT format('operator family %I.%I using %I', n.nspname, o.opfname, a.amname)
FROM pg_opfamily o JOIN pg_namespace n ON n.oid = o.opfnamespace JOIN pg_am a ON a.oid = o.opfmethod
WHERE n.nspname = ANY($1) AND ` + notExtensionMember("pg_opfamily", "o.oid") + `
UNION ALL
SELECT format('conversion %I.%I', n.nspname, o.conname)
FROM pg_conversion o JOIN pg_namespace n ON n.oid = o.connamespace
WHERE n.nspname = ANY($1) AND ` + notExtensionMember("pg_conversion", "o.oid") + `
UNION ALL
SELECT format('text search dictionary %I.%I', n.nspname, o.dictname)
FROM pg_ts_dict o JOIN pg_namespace n ON n.oid = o.dictnamespace
WHERE n.nspname = ANY($1) AND ` + notExtensionMember("pg_ts_dict", "o.oid") + `
UNION ALL
SELECT format('text search parser %I.%I', n.nspname, o.prsname)
FROM pg_ts_parser o JOIN pg_namespace n ON n.oid = o.prsnamespace
WHERE n.nspname = ANY($1) AND ` + notExtensionMember("pg_ts_parser", "o.oid") + `
UNION ALL
SELECT format('text search template %I.%I', n.nspname, o.tmplname)
FROM pg_ts_template o JOIN pg_namespace n ON n.oid = o.tmplnamespace
WHERE n.nspname = ANY($1) AND ` + notExtensionMember("pg_ts_template", "o.oid") + `
UNION ALL
SELECT format('statistics object %I.%I', n.nspname, o.stxname)
FROM pg_statistic_ext o JOIN pg_namespace n ON n.oid = o.stxnamespace
WHERE n.nspname = ANY($1) AND ` + notExtensionMember("pg_statistic_ext", "o.oid") + `
UNION ALL
SELECT format('event trigger "%s"', o.evtname)
FROM pg_event_trigger o
WHERE ` + notExtensionMember("pg_event_trigger", "o.oid") + `
UNION ALL
SELECT format('publication "%s" publishes %s %I.%I', p.pubname, ` + relkindWord("c.relkind") + `, n.nspname, c.relname)
FROM pg_publication_rel r JOIN pg_publication p ON p.oid = r.prpubid
JOIN pg_class c ON c.oid = r.prrelid JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = ANY($1)
UNION ALL
SELECT format('publication "%s" publishes the tables of schema %I (FOR TABLES IN SCHEMA)', p.pubname, n.nspname)
FROM pg_namespace n
JOIN pg_depend dn ON dn.refclassid = 'pg_namespace'::regclass AND dn.refobjid = n.oid
	-- pg_publication_namespace (PostgreSQL 15 on), read through pg_depend
	-- so that the query runs on 14 as well.
	AND dn.classid = to_regclass('pg_catalog.pg_publication_namespace')
JOIN pg_depend dp ON dp.classid = dn.classid AND dp.objid = dn.objid AND dp.refclassid = 'pg_publication'::regclass
JOIN pg_publication p ON p.oid = dp.refobjid
WHERE n.nspname = ANY($1)
UNION ALL
SELECT format('publication "%s" publishes every table, those of the managed schemas included (FOR ALL TABLES)', p.pubname)
FROM pg_publication p
WHERE p.puballtables
UNION ALL
SELECT format('cast (%s AS %s)', format_type(k.castsource, NULL), format_type(k.casttarget, NULL))
FROM pg_cast k
WHERE (EXISTS (SELECT FROM pg_type t JOIN pg_namespace n ON n.oid = t.typnamespace
			WHERE t.oid IN (k.castsource, k.casttarget) AND n.nspname = ANY($1))
		OR EXISTS (SELECT FROM pg_proc f JOIN pg_namespace n ON n.oid = f.pronamespace
			WHERE f.oid = k.castfunc AND n.nspname = ANY($1)))
	AND ` + notExtensionMember("pg_cast", "k.oid") + `
	-- A range type's cast to its multirange type comes and goes with it.
	AND NOT EXISTS (SELECT FROM pg_depend i
		WHERE i.classid = 'pg_cast'::regclass AND i.objid = k.oid AND i.deptype = 'i')
UNION ALL
SELECT format('default privileges on %s in schema %I for role %I (ALTER DEFAULT PRIVILEGES)',
	CASE d.defaclobjtype WHEN 'r' THEN 'tables' WHEN 'S' THEN 'sequences' WHEN 'f' THEN 'functions'
		WHEN 'T' THEN 'types' WHEN 'n' THEN 'schemas' ELSE d.defaclobjtype::text END,
	n.nspname, pg_get_userbyid(d.defaclrole))
FROM pg_default_acl d JOIN pg_namespace n ON n.oid = d.defaclnamespace
WHERE n.nspname = ANY($1)
UNION ALL
SELECT format('trigger "%s" on table %I.%I is %s, unlike the trigger on %I.%I it is cloned from (ALTER TABLE on a partition)',
	g.tgname, n.nspname, c.relname, ` + triggerStateWord("g.tgenabled") + `, pn.nspname, pc.relname)
FROM pg_trigger g JOIN pg_class c ON c.oid = g.tgrelid JOIN pg_namespace n ON n.oid = c.relnamespace
JOIN pg_trigger pg ON pg.oid = g.tgparentid
JOIN pg_class pc ON pc.oid = pg.tgrelid JOIN pg_namespace pn ON pn.oid = pc.relnamespace
WHERE n.nspname = ANY($1) AND ` + userTrigger("g") + ` AND g.tgenabled <> pg.tgenabled
	AND ` + notExtensionMember("pg_class", "c.oid") + `
UNION ALL
SELECT format('the triggers of constraint "%s" on table %I.%I are %s (ALTER TABLE %I.%I DISABLE TRIGGER ALL)',
	COALESCE(k.conname, g.tgname), COALESCE(kn.nspname, n.nspname), COALESCE(kc.relname, c.relname),
	` + triggerStateWord("g.tgenabled") + `, n.nspname, c.relname)
FROM pg_trigger g JOIN pg_class c ON c.oid = g.tgrelid JOIN pg_namespace n ON n.oid = c.relnamespace
LEFT JOIN pg_constraint k ON k.oid = g.tgconstraint
LEFT JOIN pg_class kc ON kc.oid = k.conrelid LEFT JOIN pg_namespace kn ON kn.oid = kc.relnamespace
WHERE n.nspname = ANY($1) AND NOT ` + userTrigger("g") + ` AND g.tgenabled <> 'O'
	AND ` + notExtensionMember("pg_class", "c.oid") + `
UNION ALL
SELECT format('%s %I.%I is in tablespace %I', ` + relkindWord("c.relkind") + `, n.nspname, c.relname, s.spcname)
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace JOIN pg_tablespace s ON s.oid = c.reltablespace
WHERE n.nspname = ANY($1) AND c.relkind IN ('r', 'p', 'm', 'i', 'I')
	AND ` + notExtensionMember("pg_class", "CASE WHEN c.relkind IN ('i', 'I') THEN (SELECT x.indrelid FROM pg_index x WHERE x.indexrelid = c.oid) ELSE c.oid END") + `
UNION ALL
SELECT format('%s %I.%I uses table access method %I', ` + relkindWord("c.relkind") + `, n.nspname, c.relname, a.amname)
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace JOIN pg_am a ON a.oid = c.relam
WHERE n.nspname = ANY($1) AND c.relkind IN ('r', 'p', 'm') AND a.amname <> 'heap'
	AND ` + notExtensionMember("pg_class", "c.oid") + `
UNION ALL
SELECT format('statistics target of column %s of index %I.%I (ALTER INDEX ... SET STATISTICS)', a.attnum, n.nspname, ic.relname)
FROM pg_attribute a JOIN pg_index i ON i.indexrelid = a.attrelid
JOIN pg_class ic ON ic.oid = i.indexrelid JOIN pg_namespace n ON n.oid = ic.relnamespace
WHERE n.nspname = ANY($1) AND COALESCE(a.attstattarget, -1) <> -1
	AND ` + notExtensionMember("pg_class", "i.indrelid")

// outsideQuery describes the objects ($1 catalogs, $2 oids, $3 sub-ids)
// that depend on the model without being part of it, and names the schema
// each lives in: its own, or its relation's for a rule, default or trigger,
// or its operator family's for an operator family's member (empty for an
// object in no schema, such as a cast). A view's rule is described as the
// view.
const outsideQuery = `
SELECT u.i,
	CASE WHEN u.cat = 'pg_rewrite'::regclass
		THEN (SELECT pg_describe_object('pg_class'::regclass, r.ev_class, 0) FROM pg_rewrite r WHERE r.oid = u.objid)
		ELSE pg_describe_object(u.cat, u.objid, u.objsubid) END,
	COALESCE((pg_identify_object(u.cat, u.objid, u.objsubid)).schema,
		(SELECT n.nspname FROM pg_namespace n WHERE n.oid = CASE u.cat
			WHEN 'pg_rewrite'::regclass THEN (SELECT c.relnamespace FROM pg_rewrite r
				JOIN pg_class c ON c.oid = r.ev_class WHERE r.oid = u.objid)
			WHEN 'pg_attrdef'::regclass THEN (SELECT c.relnamespace FROM pg_attrdef a
				JOIN pg_class c ON c.oid = a.adrelid WHERE a.oid = u.objid)
			WHEN 'pg_trigger'::regclass THEN (SELECT c.relnamespace FROM pg_trigger g
				JOIN pg_class c ON c.oid = g.tgrelid WHERE g.oid = u.objid)
			WHEN 'pg_policy'::regclass THEN (SELECT c.relnamespace FROM pg_policy p
				JOIN pg_class c ON c.oid = p.polrelid WHERE p.oid = u.objid)
			WHEN 'pg_amop'::regclass THEN (SELECT f.opfnamespace FROM pg_amop o
				JOIN pg_opfamily f ON f.oid = o.amopfamily WHERE o.oid = u.objid)
			WHEN 'pg_amproc'::regclass THEN (SELECT f.opfnamespace FROM pg_amproc o
				JOIN pg_opfamily f ON f.oid = o.amprocfamily WHERE o.oid = u.objid)
			END), '')
FROM (SELECT c::regclass AS cat, o AS objid, s AS objsubid, i
	FROM unnest($1::text[], $2::oid[], $3::int[]) WITH ORDINALITY AS x(c, o, s, i)) u`

// userTrigger is true for a trigger a user made, or its clone on a
// partition; false for the triggers PostgreSQL makes for a constraint (a
// foreign key's, a deferrable key's). Before PostgreSQL 15 a clone is
// marked internal like the latter; it is told apart by having a parent
// and no constraint, or a constraint trigger's.
func userTrigger(g string) string {
	return `(NOT ` + g + `.tgisinternal OR (` + g + `.tgparentid <> 0 AND (` + g + `.tgconstraint = 0
		OR EXISTS (SELECT FROM pg_constraint ut WHERE ut.oid = ` + g + `.tgconstraint AND ut.contype = 't'))))`
}
