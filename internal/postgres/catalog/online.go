package catalog

import (
	"regexp"
	"strings"

	"github.com/ptah-run/ptah/internal/postgres"
)

// Online plans change a table that holds rows without stopping the
// application's writes for longer than a catalog update (DiffOptions.Online):
//
//   - an index on an existing table is built with CREATE INDEX
//     CONCURRENTLY, and dropped with DROP INDEX CONCURRENTLY;
//   - a changed index is replaced: the new definition is built
//     concurrently under a temporary name, the old index dropped
//     concurrently, and the new one renamed (replacesOnline), so that
//     queries keep an index to use throughout;
//   - an invalid index (a concurrent build that failed) is replaced so;
//   - a foreign key or check constraint added to an existing table is
//     added NOT VALID, which takes its lock for a catalog update only, and
//     validated by VALIDATE CONSTRAINT on its own, which scans the table
//     under a lock that lets reads and writes go on (SHARE UPDATE
//     EXCLUSIVE; a foreign key's referenced table, ROW SHARE); a
//     constraint left NOT VALID by a run cut short is validated, not
//     added again;
//   - NOT NULL on an existing column goes through a check: CHECK (col IS
//     NOT NULL) NOT VALID, its validation on its own, then SET NOT NULL,
//     which the valid check spares a scan under ACCESS EXCLUSIVE, and the
//     check dropped;
//   - a unique or primary key added to an existing table is built as a
//     unique index, concurrently, and made the key with ADD CONSTRAINT
//     ... USING INDEX (a primary key only over columns NOT NULL already).
//
// PostgreSQL refuses the concurrent statements in a transaction block,
// and a validation must not share the transaction that added its
// constraint (which holds the strong lock until it commits): each is a
// Statement.NoTransaction, and postgres.PlanPhases gives it a phase run
// without one. The differ takes such statements last among the ready ones
// (nodeLess), so that a plan's transactional statements stay together.
// A partitioned table's indexes and keys are built so partition by
// partition, and attached (online_partition.go).

// onlineSuffix names an index built to replace another while both exist.
const onlineSuffix = "__ptah_new"

// DiffOptions says how a plan is made.
type DiffOptions struct {
	// Online: indexes on existing tables are built, replaced and dropped
	// concurrently (see above).
	Online bool
	// Renames are carried out after the rest of the plan, which was
	// computed to the desired state under the old names (renames.go).
	Renames []Rename
}

// concurrently turns an index definition, as pg_get_indexdef prints it,
// into its CREATE INDEX CONCURRENTLY under the name as; false when it does
// not read as expected.
func concurrently(def, name, as string) (string, bool) {
	for _, head := range []string{"CREATE INDEX ", "CREATE UNIQUE INDEX "} {
		if rest, ok := strings.CutPrefix(def, head+ident(name)+" ON "); ok && !strings.HasPrefix(rest, "ONLY ") {
			return head + "CONCURRENTLY " + ident(as) + " ON " + rest, true
		}
	}
	return "", false
}

// buildsOnline reports whether desired index ix is built concurrently: in
// an online plan, on a table that holds rows (one indexHazards has
// hazards for), unattached to a partitioned index.
func (d *differ) buildsOnline(id ID, ix Index) bool {
	if !d.online || ix.Parent != nil || len(d.indexHazards(id, ix)) == 0 {
		return false
	}
	_, ok := concurrently(ix.Definition, ix.Name, ix.Name)
	return ok
}

// dropsOnline reports whether live index ix is dropped concurrently: in an
// online plan, from a table that stays, when no partitioned index holds it
// and it is not a partitioned table's own.
func (d *differ) dropsOnline(id ID, ix Index) bool {
	if !d.online || ix.Parent != nil {
		return false
	}
	owner, ok := d.live.owner(id)
	if !ok || d.dropped[owner] {
		return false
	}
	if t, isTable := d.live.byID[owner].(Table); isTable && t.PartitionKey != "" {
		return false
	}
	return !strings.Contains(ix.Definition, " ON ONLY ")
}

// replacesOnline reports whether index id, whose definition changes (or
// which is invalid), is built anew beside the old one and swapped in:
// both can be done concurrently, and nothing the old one is made of
// changes in this plan (a converted column rebuilds its indexes itself).
func (d *differ) replacesOnline(id ID) bool {
	l, wasIndex := d.live.byID[id].(Index)
	n, isIndex := d.desired.byID[id].(Index)
	if !wasIndex || !isIndex || !d.dropped[id] || !d.buildsOnline(id, n) || !d.dropsOnline(id, l) {
		return false
	}
	if len(n.Name)+len(onlineSuffix) > 63 || d.liveRelationNames(n.Schema)[n.Name+onlineSuffix] {
		return false
	}
	for _, dep := range d.live.deps {
		if dep.Object == id && !d.stays(dep.RefObject) {
			return false
		}
	}
	return true
}

// stays reports whether live object ref, which an index replaced online
// depends on, outlasts the plan unchanged: neither dropped, converted nor
// replaced, nor a column of a dropped table.
func (d *differ) stays(ref ID) bool {
	if d.dropped[ref] || d.converted[ref] || d.replaced[ref] {
		return false
	}
	return ref.Kind != KindColumn || !d.dropped[ID{Kind: KindTable, Schema: ref.Schema, Name: ref.Name}]
}

// createIndexOnline is the statement that builds ix concurrently under the
// name as.
func (d *differ) createIndexOnline(id ID, ix Index, as string) postgres.Statement {
	sql, _ := concurrently(ix.Definition, ix.Name, as)
	// A concurrent build lets writes go on (its SHARE UPDATE EXCLUSIVE
	// blocks neither reads nor writes); it waits for the transactions
	// under way, and scans the table twice.
	s := stmt(sql, d.indexHazards(id, ix)...)
	s.NoTransaction = true
	return s
}

func dropIndexOnline(ix Index) postgres.Statement {
	s := stmt("DROP INDEX CONCURRENTLY " + qname(ix.Schema, ix.Name))
	s.NoTransaction = true
	return s
}

// emitReplaceOnline builds index ix anew under a temporary name, drops the
// live one and gives the new one its name.
func (d *differ) emitReplaceOnline(k nodeKey, id ID, ix Index) {
	tmp := ix.Name + onlineSuffix
	d.add(k, d.createIndexOnline(id, ix, tmp),
		dropIndexOnline(d.live.byID[id].(Index)),
		stmt("ALTER INDEX "+qname(ix.Schema, tmp)+" RENAME TO "+ident(ix.Name)))
}

// stepValidate: a constraint added NOT VALID, validated.
const stepValidate = "validate"

// notValid is the suffix pg_get_constraintdef prints for a constraint not
// yet validated.
const notValid = " NOT VALID"

// validatesOnline reports whether constraint c, added by this plan, is
// added NOT VALID and validated after: in an online plan, a foreign key or
// check on a table that holds rows and is no partition nor partitioned,
// and not declared NOT VALID itself.
func (d *differ) validatesOnline(c Constraint) bool {
	if !d.online || (c.Type != ForeignKey && c.Type != Check) || len(d.constraintHazards(c)) == 0 {
		return false
	}
	t, ok := d.desired.byID[ID{Kind: KindTable, Schema: c.Schema, Name: c.Table}].(Table)
	return ok && t.PartitionKey == "" && t.PartitionOf == nil
}

// onlyValidates reports whether live constraint l, which an online run
// cut short left NOT VALID, becomes n by its validation alone.
func (d *differ) onlyValidates(l, n Constraint) bool {
	return l.Definition == n.Definition+notValid && d.validatesOnline(n)
}

// emitValidated adds constraint c NOT VALID at node k, and validates it
// on its own after (stepValidate).
func (d *differ) emitValidated(k nodeKey, c Constraint) {
	d.add(k, stmt(alterTable(c.Schema, c.Table)+" ADD CONSTRAINT "+ident(c.Name)+" "+c.Definition+notValid))
	d.emitValidate(k, c)
}

// emitValidate validates constraint c, after node k.
func (d *differ) emitValidate(k nodeKey, c Constraint) {
	v := nodeKey{id: k.id, step: stepValidate}
	s := stmt(alterTable(c.Schema, c.Table)+" VALIDATE CONSTRAINT "+ident(c.Name), postgres.HazardScansTable, postgres.HazardMayFail)
	s.NoTransaction = true
	d.add(v, s)
	d.extra = append(d.extra, [2]nodeKey{k, v})
}

// Extra node steps of online plans.
const (
	stepNotNullCheck = "not-null-check" // a column: its temporary check, added NOT VALID
	stepKeyIndex     = "key-index"      // a key: its unique index, built concurrently
)

// notNullSuffix names the check an online plan proves a column NOT NULL
// with.
const notNullSuffix = "_ptah_not_null"

// setsNotNullOnline reports whether column id, which becomes NOT NULL, is
// proved so by a validated check first: in an online plan, on a table
// that stays and is no partition nor partitioned, and that this plan does
// not rewrite for the column anyway (a type conversion scans it already).
func (d *differ) setsNotNullOnline(id ID) bool {
	if !d.online || d.converted[id] || d.tableIsNew(id.Schema, id.Name) {
		return false
	}
	t, ok := d.desired.byID[ID{Kind: KindTable, Schema: id.Schema, Name: id.Name}].(Table)
	return ok && t.PartitionKey == "" && t.PartitionOf == nil
}

// emitNotNullOnline makes column id NOT NULL at node k by set (SET NOT
// NULL, or the named constraint's ADD), after a check proves it.
func (d *differ) emitNotNullOnline(k nodeKey, id ID, set string) {
	name := id.Sub
	if len(name)+len(notNullSuffix) > 63 {
		name = name[:63-len(notNullSuffix)]
	}
	check, table := ident(name+notNullSuffix), alterTable(id.Schema, id.Name)
	add := nodeKey{id: id, step: stepNotNullCheck}
	d.add(add, stmt(table+" ADD CONSTRAINT "+check+" CHECK ("+ident(id.Sub)+" IS NOT NULL)"+notValid))
	v := nodeKey{id: id, step: stepValidate}
	s := stmt(table+" VALIDATE CONSTRAINT "+check, postgres.HazardScansTable, postgres.HazardMayFail)
	s.NoTransaction = true
	d.add(v, s)
	d.extra = append(d.extra, [2]nodeKey{add, v}, [2]nodeKey{v, k})
	// The valid check proves the column holds no NULL: no scan.
	d.add(k, stmt(set), stmt(table+" DROP CONSTRAINT "+check))
}

// keyColumns matches a key's definition that names columns only.
var keyColumns = regexp.MustCompile(`^(UNIQUE|PRIMARY KEY) \(([^()]+)\)$`)

// keysOnline reports whether key c, added by this plan, is built as a
// unique index concurrently first: in an online plan, on a table that
// holds rows and is not partitioned (and, if a partition, for a unique
// key attached to its parent's), when its definition is
// a plain list of columns (no INCLUDE, WITH, NULLS NOT DISTINCT, WITHOUT
// OVERLAPS or deferral, which a btree index or USING INDEX cannot all
// carry), and, for a primary key,
// when its columns are NOT NULL already, or made so online before it (else
// adding it would set them so, scanning the table under ACCESS EXCLUSIVE).
func (d *differ) keysOnline(c Constraint) bool {
	if !d.online || (c.Type != Unique && c.Type != PrimaryKey) || c.Deferrable || len(d.constraintHazards(c)) == 0 {
		return false
	}
	m := keyColumns.FindStringSubmatch(c.Definition)
	t, ok := d.desired.byID[ID{Kind: KindTable, Schema: c.Schema, Name: c.Table}].(Table)
	// A partition's unique key attached to its parent's is built so too
	// (emitPartitionKey); a partitioned table's own is added ONLY to it. A
	// partition's primary key is not: from PostgreSQL 18, USING INDEX
	// makes the partition's inherited NOT NULL constraints its own.
	if m == nil || strings.Contains(m[2], " WITHOUT OVERLAPS") || !ok || t.PartitionKey != "" ||
		(t.PartitionOf != nil && (c.Parent == "" || c.Type == PrimaryKey)) {
		return false
	}
	if c.Type == PrimaryKey {
		for _, col := range c.Columns {
			id := ColumnID(c.Schema, c.Table, col)
			l, existed := d.live.byID[id].(Column)
			n, _ := d.desired.byID[id].(Column)
			if !existed || !l.NotNull && !(n.NotNull && d.setsNotNullOnline(id)) {
				return false
			}
		}
	}
	return true
}

// emitKeyOnline builds key c's unique index concurrently, and makes it
// the key at node k.
func (d *differ) emitKeyOnline(k nodeKey, c Constraint) {
	m := keyColumns.FindStringSubmatch(c.Definition)
	ix := nodeKey{id: k.id, step: stepKeyIndex}
	s := stmt("CREATE UNIQUE INDEX CONCURRENTLY "+ident(c.Name)+" ON "+qname(c.Schema, c.Table)+" USING btree ("+m[2]+")",
		postgres.HazardBuildsIndex, postgres.HazardMayFail)
	s.NoTransaction = true
	d.add(ix, s)
	d.extra = append(d.extra, [2]nodeKey{ix, k})
	d.add(k, stmt(alterTable(c.Schema, c.Table)+" ADD CONSTRAINT "+ident(c.Name)+" "+m[1]+" USING INDEX "+ident(c.Name)))
}
