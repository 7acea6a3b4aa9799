package catalog

import (
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
//   - an invalid index (a concurrent build that failed) is replaced so.
//
// PostgreSQL refuses these statements in a transaction block: each is a
// Statement.NoTransaction, and postgres.PlanPhases gives it a phase run
// without one. Indexes of partitioned tables and of partitions attached
// to a parent's index are built as before, in the plan's transaction.

// onlineSuffix names an index built to replace another while both exist.
const onlineSuffix = "__ptah_new"

// DiffOptions says how a plan is made.
type DiffOptions struct {
	// Online: indexes on existing tables are built, replaced and dropped
	// concurrently (see above).
	Online bool
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
		if dep.Object != id {
			continue
		}
		ref := dep.RefObject
		if d.dropped[ref] || d.converted[ref] || d.replaced[ref] {
			return false
		}
		if ref.Kind == KindColumn {
			if t := (ID{Kind: KindTable, Schema: ref.Schema, Name: ref.Name}); d.dropped[t] {
				return false
			}
		}
	}
	return true
}

// createIndexOnline is the statement that builds ix concurrently under the
// name as.
func (d *differ) createIndexOnline(id ID, ix Index, as string) postgres.Statement {
	sql, _ := concurrently(ix.Definition, ix.Name, as)
	var hazards []postgres.Hazard
	for _, h := range d.indexHazards(id, ix) {
		// A concurrent build lets writes go on; it waits for the
		// transactions under way, and scans the table twice.
		if h != postgres.HazardBlocksWrites {
			hazards = append(hazards, h)
		}
	}
	s := stmt(sql, hazards...)
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
