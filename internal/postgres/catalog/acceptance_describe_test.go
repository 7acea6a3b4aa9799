package catalog_test

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
)

// describeQuery lists, one line per object or property, the schema of the
// whole database outside the system schemas, as pg_dump --schema-only
// (without owners and privileges) would show it: the acceptance suite's
// independent check where no pg_dump can read the server, and a second one
// where pg_dump can. It is deliberately not built from the catalog
// package's queries, so that a property Inspect fails to read still shows
// up here. It runs with an empty search_path, so every name outside
// pg_catalog comes out schema-qualified.
//
// What pg_dump does not show is left out: columns are numbered by position
// (dropped columns leave gaps in attnum), enum labels by rank (added ones
// get fractional sort orders), a policy's roles are listed sorted, and the
// copies of a partitioned table's foreign keys and triggers on its
// partitions.
const describeQuery = `
WITH ns AS (
	SELECT n.oid, n.nspname FROM pg_namespace n
	WHERE n.nspname !~ '^pg_' AND n.nspname <> 'information_schema'
), members AS (
	SELECT d.classid, d.objid FROM pg_depend d WHERE d.deptype = 'e'
), rels AS (
	SELECT c.* FROM pg_class c
	WHERE c.relnamespace IN (SELECT oid FROM ns)
		AND (c.oid, 'pg_class'::regclass::oid) NOT IN (SELECT objid, classid FROM members)
)
SELECT 'schema ' || quote_ident(n.nspname) FROM ns n
UNION ALL
SELECT format('extension %I version %s schema %I', x.extname, x.extversion, n.nspname)
FROM pg_extension x JOIN pg_namespace n ON n.oid = x.extnamespace
UNION ALL
SELECT format('relation %s kind=%s persistence=%s am=%s options=%s replica-identity=%s rls=%s,%s partition-key=%s bound=%s of=%s',
	c.oid::regclass, c.relkind, c.relpersistence, COALESCE(am.amname, ''), COALESCE(c.reloptions::text, ''),
	c.relreplident, c.relrowsecurity, c.relforcerowsecurity,
	CASE WHEN c.relkind = 'p' THEN pg_get_partkeydef(c.oid) ELSE '' END,
	COALESCE(pg_get_expr(c.relpartbound, c.oid), ''), c.reloftype::regtype)
FROM rels c LEFT JOIN pg_am am ON am.oid = c.relam
WHERE c.relkind IN ('r', 'p', 'v', 'm', 'S', 'f', 'c')
UNION ALL
SELECT format('relation %s inherits %s #%s', h.inhrelid::regclass, h.inhparent::regclass, h.inhseqno)
FROM pg_inherits h JOIN rels c ON c.oid = h.inhrelid
UNION ALL
SELECT format('column %s.%I #%s type=%s not-null=%s default=%s identity=%s generated=%s collation=%s local=%s inherited=%s storage=%s compression=%s statistics=%s options=%s',
	a.attrelid::regclass, a.attname, row_number() OVER (PARTITION BY a.attrelid ORDER BY a.attnum),
	format_type(a.atttypid, a.atttypmod), a.attnotnull, COALESCE(pg_get_expr(ad.adbin, ad.adrelid), ''),
	a.attidentity, a.attgenerated,
	CASE WHEN a.attcollation <> t.typcollation THEN a.attcollation::regcollation::text ELSE '' END,
	a.attislocal, a.attinhcount, a.attstorage, a.attcompression, COALESCE(a.attstattarget, -1),
	COALESCE(a.attoptions::text, ''))
FROM pg_attribute a
JOIN rels c ON c.oid = a.attrelid
JOIN pg_type t ON t.oid = a.atttypid
LEFT JOIN pg_attrdef ad ON ad.adrelid = a.attrelid AND ad.adnum = a.attnum
WHERE a.attnum > 0 AND NOT a.attisdropped AND c.relkind IN ('r', 'p', 'v', 'm', 'f', 'c')
UNION ALL
SELECT format('constraint %s on %s type=%s definition=%s deferrable=%s deferred=%s validated=%s local=%s inherited=%s no-inherit=%s',
	-- The name of a NOT NULL a partition inherits (PostgreSQL 18) follows
	-- how the partition was made, and PostgreSQL will not rename it: it is
	-- not schema ptah manages (see the README).
	CASE WHEN k.contype = 'n' AND k.coninhcount > 0 THEN '(inherited)' ELSE quote_ident(k.conname) END,
	CASE WHEN k.conrelid <> 0 THEN k.conrelid::regclass::text ELSE 'domain ' || k.contypid::regtype END,
	k.contype, pg_get_constraintdef(k.oid), k.condeferrable, k.condeferred, k.convalidated,
	k.conislocal, k.coninhcount, k.connoinherit)
FROM pg_constraint k
WHERE k.connamespace IN (SELECT oid FROM ns) AND k.conparentid = 0
	AND (k.conrelid IN (SELECT oid FROM rels) OR (k.conrelid = 0
		AND (k.contypid, 'pg_type'::regclass::oid) NOT IN (SELECT objid, classid FROM members)))
UNION ALL
SELECT format('index %s definition=%s clustered=%s replica-identity=%s valid=%s',
	i.indexrelid::regclass, pg_get_indexdef(i.indexrelid), i.indisclustered, i.indisreplident, i.indisvalid)
FROM pg_index i JOIN rels c ON c.oid = i.indrelid
UNION ALL
SELECT format('type %s kind=%s base=%s not-null=%s default=%s collation=%s labels=%s',
	t.oid::regtype, t.typtype, CASE WHEN t.typtype = 'd' THEN format_type(t.typbasetype, t.typtypmod) ELSE '' END,
	t.typnotnull, COALESCE(pg_get_expr(t.typdefaultbin, 0), t.typdefault, ''),
	CASE WHEN t.typtype = 'd' AND t.typcollation <> b.typcollation THEN t.typcollation::regcollation::text ELSE '' END,
	ARRAY(SELECT e.enumlabel::text FROM pg_enum e WHERE e.enumtypid = t.oid ORDER BY e.enumsortorder))
FROM pg_type t LEFT JOIN pg_type b ON b.oid = t.typbasetype
WHERE t.typnamespace IN (SELECT oid FROM ns)
	AND (t.oid, 'pg_type'::regclass::oid) NOT IN (SELECT objid, classid FROM members)
	AND NOT EXISTS (SELECT FROM pg_type e WHERE e.typarray = t.oid)
	AND (t.typrelid = 0 OR t.typrelid IN (SELECT oid FROM rels WHERE relkind = 'c'))
UNION ALL
SELECT format('routine %s kind=%s definition=%s', p.oid::regprocedure, p.prokind,
	CASE WHEN p.prokind IN ('f', 'p') THEN pg_get_functiondef(p.oid) ELSE '' END)
FROM pg_proc p
WHERE p.pronamespace IN (SELECT oid FROM ns)
	AND (p.oid, 'pg_proc'::regclass::oid) NOT IN (SELECT objid, classid FROM members)
UNION ALL
SELECT format('aggregate %s kind=%s direct=%s sfunc=%s stype=%s sspace=%s final=%s,%s,%s combine=%s serial=%s,%s init=%s '
		'msfunc=%s minv=%s mstype=%s msspace=%s mfinal=%s,%s,%s minit=%s sortop=%s parallel=%s',
	a.aggfnoid::regprocedure, a.aggkind, a.aggnumdirectargs, a.aggtransfn, a.aggtranstype::regtype, a.aggtransspace,
	a.aggfinalfn, a.aggfinalextra, a.aggfinalmodify, a.aggcombinefn, a.aggserialfn, a.aggdeserialfn, a.agginitval,
	a.aggmtransfn, a.aggminvtransfn, a.aggmtranstype::regtype, a.aggmtransspace, a.aggmfinalfn, a.aggmfinalextra,
	a.aggmfinalmodify, a.aggminitval, a.aggsortop::regoperator, p.proparallel)
FROM pg_aggregate a JOIN pg_proc p ON p.oid = a.aggfnoid
WHERE p.pronamespace IN (SELECT oid FROM ns)
	AND (p.oid, 'pg_proc'::regclass::oid) NOT IN (SELECT objid, classid FROM members)
UNION ALL
-- Every column of pg_collation but its version (the server's library's)
-- and encoding (CREATE COLLATION ... FROM copies the source's, which
-- pg_dump does not keep).
SELECT format('collation %s %s', o.oid::regcollation,
	to_jsonb(o) - 'oid' - 'collnamespace' - 'collowner' - 'collversion' - 'collencoding')
FROM pg_collation o
WHERE o.collnamespace IN (SELECT oid FROM ns)
	AND (o.oid, 'pg_collation'::regclass::oid) NOT IN (SELECT objid, classid FROM members)
UNION ALL
SELECT format('text search configuration %s parser=%s mappings=%s', c.oid::regconfig,
	(SELECT quote_ident(pn.nspname) || '.' || quote_ident(p.prsname) FROM pg_ts_parser p
		JOIN pg_namespace pn ON pn.oid = p.prsnamespace WHERE p.oid = c.cfgparser),
	ARRAY(SELECT format('%s/%s/%s', m.maptokentype, m.mapseqno, m.mapdict::regdictionary)
		FROM pg_ts_config_map m WHERE m.mapcfg = c.oid ORDER BY m.maptokentype, m.mapseqno))
FROM pg_ts_config c
WHERE c.cfgnamespace IN (SELECT oid FROM ns)
	AND (c.oid, 'pg_ts_config'::regclass::oid) NOT IN (SELECT objid, classid FROM members)
UNION ALL
SELECT format('trigger %I on %s definition=%s enabled=%s', g.tgname, g.tgrelid::regclass, pg_get_triggerdef(g.oid), g.tgenabled)
FROM pg_trigger g JOIN rels c ON c.oid = g.tgrelid
WHERE NOT g.tgisinternal AND g.tgparentid = 0
UNION ALL
SELECT format('view %s definition=%s', c.oid::regclass, pg_get_viewdef(c.oid))
FROM rels c WHERE c.relkind IN ('v', 'm')
UNION ALL
SELECT format('sequence %s type=%s start=%s increment=%s min=%s max=%s cache=%s cycle=%s owned-by=%s',
	s.seqrelid::regclass, s.seqtypid::regtype, s.seqstart, s.seqincrement, s.seqmin, s.seqmax, s.seqcache, s.seqcycle,
	COALESCE((SELECT format('%s.%I (%s)', d.refobjid::regclass, a.attname, d.deptype)
		FROM pg_depend d JOIN pg_attribute a ON a.attrelid = d.refobjid AND a.attnum = d.refobjsubid
		WHERE d.classid = 'pg_class'::regclass AND d.objid = s.seqrelid AND d.refclassid = 'pg_class'::regclass
			AND d.refobjsubid > 0 AND d.deptype IN ('a', 'i')), ''))
FROM pg_sequence s JOIN rels c ON c.oid = s.seqrelid
UNION ALL
SELECT format('rule %I on %s definition=%s', r.rulename, r.ev_class::regclass, pg_get_ruledef(r.oid))
FROM pg_rewrite r JOIN rels c ON c.oid = r.ev_class
WHERE r.rulename <> '_RETURN'
UNION ALL
SELECT format('policy %I on %s command=%s permissive=%s roles=%s using=%s check=%s', p.polname, p.polrelid::regclass,
	p.polcmd, p.polpermissive,
	-- The roles in name order: PostgreSQL keeps them as the TO list named
	-- them, an order that means nothing (pg_dump does not keep it either).
	ARRAY(SELECT r::regrole::text FROM unnest(p.polroles) r ORDER BY r::regrole::text COLLATE "C"),
	COALESCE(pg_get_expr(p.polqual, p.polrelid), ''),
	COALESCE(pg_get_expr(p.polwithcheck, p.polrelid), ''))
FROM pg_policy p JOIN rels c ON c.oid = p.polrelid
UNION ALL
SELECT format('statistics %I.%I definition=%s', n.nspname, s.stxname, pg_get_statisticsobjdef(s.oid))
FROM pg_statistic_ext s JOIN ns n ON n.oid = s.stxnamespace
UNION ALL
SELECT format('comment on %s: %s', pg_describe_object(d.classoid, d.objoid, d.objsubid), d.description)
FROM pg_description d
WHERE d.objoid >= 16384 AND (d.objoid, d.classoid) NOT IN (SELECT objid, classid FROM members)
ORDER BY 1`

// describe runs describeQuery on conn, in a read-only transaction of its own.
func describe(ctx context.Context, conn *pgx.Conn) (string, error) {
	tx, err := conn.BeginTx(ctx, pgx.TxOptions{AccessMode: pgx.ReadOnly})
	if err != nil {
		return "", err
	}
	defer tx.Rollback(context.Background())
	if _, err := tx.Exec(ctx, "SET LOCAL search_path = ''"); err != nil {
		return "", err
	}
	rows, err := tx.Query(ctx, describeQuery)
	if err != nil {
		return "", fmt.Errorf("describing the database: %w", err)
	}
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return "", fmt.Errorf("describing the database: %w", err)
	}
	return strings.Join(lines, "\n") + "\n", nil
}
