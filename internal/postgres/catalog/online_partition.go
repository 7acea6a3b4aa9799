package catalog

import (
	"sort"
	"strings"

	"github.com/ptah-run/ptah/internal/postgres"
)

// Online index builds on partitioned tables. PostgreSQL refuses CREATE
// INDEX CONCURRENTLY on a partitioned table, but the plan builds a
// partitioned index as pg_dump does anyway (diff_partition_index.go): the
// parent's index ON ONLY the parent (a catalog entry, invalid until every
// partition's index is attached), each partition's index on its own, and
// ATTACH PARTITION. An online plan builds each partition's index that is
// on a table holding rows CONCURRENTLY, in a node of its own
// (stepPartitionBuild), so that the partitions' builds run one after the
// other outside a transaction, writes to the partition going on, each
// followed by its attachment, which only updates the catalog. A
// sub-partitioned partition's index is ON ONLY it too, and is attached to
// its parent's before its own partitions' are attached to it: PostgreSQL
// makes the whole tree valid once the last leaf is attached.
//
// A run cut short between these steps leaves what the next plan settles
// by observing: the parent's index, invalid (which is not rebuilt, see
// invalidRebuilt: the plan attaches what it lacks); a partition's index
// built but not attached (attached by alterPartitionIndex); a partition's
// index left invalid by a failed build (dropped concurrently and built
// again).
//
// A key (PRIMARY KEY, UNIQUE) added to a partitioned table is added ONLY
// to it, as before (PostgreSQL refuses ADD CONSTRAINT ... USING INDEX on a
// partitioned table). Each partition's UNIQUE key, on a partition that
// holds rows, is built as a unique index concurrently, made the
// partition's key USING INDEX and attached (emitPartitionKeyOnline); a
// partition's PRIMARY KEY is added as before, under SHARE on the
// partition for its build (from PostgreSQL 18, PRIMARY KEY USING INDEX
// makes the partition's inherited NOT NULL constraints local to it, which
// a fresh build of the declared schema does not). A key that changes is
// dropped as before (the parent's, which takes every partition's with it,
// under ACCESS EXCLUSIVE on each), and added again so.
//
// A changed partitioned index is replaced by a whole new tree built
// beside it under temporary names (emitPartitionedReplace), then swapped
// in. What no online plan avoids: PostgreSQL refuses DROP INDEX
// CONCURRENTLY on a partitioned index, and an index attached to one cannot
// be dropped alone, so the drop of a partitioned index (dropped for good,
// or the old tree of a replacement) takes ACCESS EXCLUSIVE on the parent,
// on every partition and on their indexes. It only updates the catalog,
// but it waits in the lock queue behind every query on any partition, and
// holds those that come after it meanwhile (the plan's lock timeout and
// retries bound that wait).

// stepPartitionBuild: a partition's index, built concurrently before the
// node that attaches it.
const stepPartitionBuild = "partition-build"

// buildsPartitionOnline reports whether desired partition index ix is
// built concurrently: in an online plan, on a partition that holds rows
// (one indexHazards has hazards for) and is no partitioned table itself.
func (d *differ) buildsPartitionOnline(id ID, ix Index) bool {
	if !d.online || ix.Parent == nil || len(d.indexHazards(id, ix)) == 0 {
		return false
	}
	_, ok := concurrently(ix.Definition, ix.Name, ix.Name)
	return ok
}

// emitPartitionBuild builds partition index ix concurrently, in a node of
// its own before node k, which attaches it.
func (d *differ) emitPartitionBuild(k nodeKey, id ID, ix Index) {
	b := nodeKey{id: id, step: stepPartitionBuild}
	d.add(b, d.createIndexOnline(id, ix, ix.Name))
	d.extra = append(d.extra, [2]nodeKey{b, k})
	d.builds = append(d.builds, b)
}

// connectPartitionBuilds orders each partition's concurrent build after
// whatever its index's forward node waits for (its columns, the drop of
// an invalid index of the same name, ...): the build is that node's
// first part.
func (d *differ) connectPartitionBuilds() {
	if len(d.builds) == 0 {
		return
	}
	of := map[nodeKey]nodeKey{}
	for _, b := range d.builds {
		of[d.resolve(fwdKey(b.id))] = b
	}
	var add [][2]nodeKey
	for a, succ := range d.edges {
		for s := range succ {
			if b, ok := of[s]; ok && a != b {
				add = append(add, [2]nodeKey{a, b})
			}
		}
	}
	for _, e := range add {
		d.before(e[0], e[1])
	}
}

// onOnly says whether ix is a partitioned table's own index, which
// pg_get_indexdef prints ON ONLY the table.
func onOnly(ix Index) bool { return strings.Contains(ix.Definition, " ON ONLY ") }

// invalidRebuilt says whether live index ix is invalid and so built again.
// A partitioned table's own index is invalid only while some partition's
// index is not attached to it (a run cut short leaves it so): the plan
// attaches what it lacks, which makes it valid, rather than dropping the
// partitions' indexes that are built already.
func invalidRebuilt(ix Index) bool { return ix.Invalid && !onOnly(ix) }

// markAncestorsDropped marks dropped every index live index ix is attached
// to, up the tree: PostgreSQL drops an attached index only with them.
func (d *differ) markAncestorsDropped(ix Index) {
	for p, ok := indexParent(ix); ok; {
		d.dropped[p] = true
		up, isIndex := d.live.byID[p].(Index)
		if !isIndex {
			return
		}
		p, ok = indexParent(up)
	}
}

// dropPartitionedIndexLocks: DROP INDEX of a partitioned table's index
// drops the partitions' indexes attached to it, down the tree, and locks
// them and every partition ACCESS EXCLUSIVE.
func (d *differ) dropPartitionedIndexLocks(l *lockList, table ID, ix Index) {
	if !onOnly(ix) {
		return
	}
	d.onPartitions(l, table, postgres.AccessExclusive)
	below := map[ID]bool{ix.ID(): true}
	for changed := true; changed; {
		changed = false
		for _, c := range d.live.m.Indexes {
			if p, ok := indexParent(c); ok && below[p] && !below[c.ID()] {
				below[c.ID()], changed = true, true
				l.add(c.ID(), postgres.AccessExclusive)
			}
		}
	}
}

// attachLocks: ALTER INDEX ... ATTACH PARTITION takes SHARE UPDATE
// EXCLUSIVE on the parent's index, besides ACCESS EXCLUSIVE on the
// partition's.
func attachLocks(l *lockList, parent ID) {
	l.add(parent, postgres.ShareUpdateExclusive)
}

// Steps of a partitioned index replaced online.
const (
	stepReplaceCreate = "replace-create" // the parent's new index, ON ONLY, under the temporary name
	stepReplaceAttach = "replace-attach" // a partition's new index, attached to its parent's new one
)

// replacesPartitionedOnline reports whether partitioned index id, which
// changes (or holds an invalid partition's index), is replaced by a whole
// new tree built beside the old one, each partition's index concurrently,
// and swapped in: the old tree is dropped and the new one renamed in one
// transaction, so that queries have an index to use throughout. It takes
// an online plan; the same partitions' indexes, by name, before and after
// (a partition added or removed in the same plan, or an index renamed,
// takes the plain path: the old tree dropped, the new one built); each
// partition holding rows; temporary names that fit and are free; and
// nothing the old tree is made of changing in this plan.
func (d *differ) replacesPartitionedOnline(id ID) bool {
	if !d.online || !d.dropped[id] || id.Kind != KindIndex {
		return false
	}
	if r, ok := d.partitionedReplace[id]; ok {
		return r
	}
	r := d.canReplacePartitionedOnline(id)
	if d.partitionedReplace == nil {
		d.partitionedReplace = map[ID]bool{}
	}
	d.partitionedReplace[id] = r
	return r
}

func (d *differ) canReplacePartitionedOnline(id ID) bool {
	l, wasIndex := d.live.byID[id].(Index)
	n, isIndex := d.desired.byID[id].(Index)
	if !wasIndex || !isIndex || l.Parent != nil || n.Parent != nil || !onOnly(l) || !onOnly(n) {
		return false
	}
	tree := append([]ID{id}, d.partitionDescendants(id)...)
	live := d.liveIndexTree(id)
	if len(live) != len(tree) {
		return false
	}
	names := d.liveRelationNames(n.Schema)
	for _, x := range tree {
		ix, ok := d.desired.byID[x].(Index)
		lx, inLive := d.live.byID[x].(Index)
		if !ok || !inLive || !live[x] || !d.dropped[x] || x.Schema != n.Schema {
			return false
		}
		if len(ix.Name)+len(onlineSuffix) > 63 || names[ix.Name+onlineSuffix] {
			return false
		}
		if owner, ok := d.live.owner(x); !ok || d.dropped[owner] || (ix.Parent != nil) != (lx.Parent != nil) {
			return false
		}
		if _, ok := createOnlyAs(ix, ix.Name); !ok && !d.buildsPartitionOnline(x, ix) {
			return false
		}
	}
	for _, dep := range d.live.deps {
		if !live[dep.Object] {
			continue
		}
		if ref := dep.RefObject; !live[ref] && !d.stays(ref) {
			return false
		}
	}
	return true
}

// liveIndexTree is live partitioned index id and the indexes attached to
// it, down the tree.
func (d *differ) liveIndexTree(id ID) map[ID]bool {
	tree := map[ID]bool{id: true}
	for changed := true; changed; {
		changed = false
		for _, c := range d.live.m.Indexes {
			if p, ok := indexParent(c); ok && tree[p] && !tree[c.ID()] {
				tree[c.ID()], changed = true, true
			}
		}
	}
	return tree
}

// replacedWithTree says whether desired partition index id is built by
// the online replacement of the tree it belongs to.
func (d *differ) replacedWithTree(id ID) bool {
	for {
		ix, ok := d.desired.byID[id].(Index)
		if !ok {
			return false
		}
		p, ok := indexParent(ix)
		if !ok {
			return id.Kind == KindIndex && d.replacesPartitionedOnline(id)
		}
		id = p
	}
}

// createOnlyAs is partitioned index ix's CREATE INDEX ... ON ONLY under
// the name as; false when ix is no partitioned table's own.
func createOnlyAs(ix Index, as string) (string, bool) {
	for _, head := range []string{"CREATE INDEX ", "CREATE UNIQUE INDEX "} {
		if rest, ok := strings.CutPrefix(ix.Definition, head+ident(ix.Name)+" ON ONLY "); ok {
			return head + ident(as) + " ON ONLY " + rest, true
		}
	}
	return "", false
}

// emitPartitionedReplace builds partitioned index id's new tree under
// temporary names: ON ONLY the parent (stepReplaceCreate), each
// sub-partitioned partition's ON ONLY it and each other partition's
// concurrently, each attached to its parent's (stepReplaceAttach); then,
// at id's forward node, once every one is attached, drops the old tree
// and gives the new one the names.
func (d *differ) emitPartitionedReplace(id ID, ix Index) {
	create := nodeKey{id: id, step: stepReplaceCreate}
	sql, _ := createOnlyAs(ix, ix.Name+onlineSuffix)
	d.add(create, stmt(sql))
	swap := fwdKey(id)
	// created: the node after which each new index of the tree exists.
	created := map[ID]nodeKey{id: create}
	tree := d.partitionDescendants(id)
	sortIDs := func(ids []ID) {
		sort.Slice(ids, func(i, j int) bool { return d.less(ids[i], ids[j]) })
	}
	sortIDs(tree)
	var renames []postgres.Statement
	for _, c := range tree {
		cx := d.desired.byID[c].(Index)
		parent, _ := indexParent(cx)
		tmp := cx.Name + onlineSuffix
		attach := nodeKey{id: c, step: stepReplaceAttach}
		if sub, ok := createOnlyAs(cx, tmp); ok {
			d.add(attach, stmt(sub))
		} else {
			b := nodeKey{id: c, step: stepPartitionBuild}
			d.add(b, d.createIndexOnline(c, cx, tmp))
			d.extra = append(d.extra, [2]nodeKey{b, attach})
		}
		d.add(attach, stmt("ALTER INDEX "+qname(cx.Schema, parentName(d, parent)+onlineSuffix)+" ATTACH PARTITION "+qname(cx.Schema, tmp)))
		created[c] = attach
		d.extra = append(d.extra, [2]nodeKey{attach, swap})
		renames = append(renames, stmt("ALTER INDEX "+qname(cx.Schema, tmp)+" RENAME TO "+ident(cx.Name)))
	}
	// Parents' new indexes exist before their partitions' are attached.
	for _, c := range tree {
		p, _ := indexParent(d.desired.byID[c].(Index))
		d.extra = append(d.extra, [2]nodeKey{created[p], created[c]})
	}
	d.add(swap, stmt("DROP INDEX "+qname(ix.Schema, ix.Name)),
		stmt("ALTER INDEX "+qname(ix.Schema, ix.Name+onlineSuffix)+" RENAME TO "+ident(ix.Name)))
	d.add(swap, renames...)
	d.comment(swap, "INDEX "+qname(ix.Schema, ix.Name), "", ix.Comment)
	for _, c := range tree {
		cx := d.desired.byID[c].(Index)
		d.comment(swap, "INDEX "+qname(cx.Schema, cx.Name), "", cx.Comment)
	}
}

// parentName is the name of desired index p.
func parentName(d *differ, p ID) string { return d.desired.byID[p].(Index).Name }

// emitPartitionKeyOnline adds partition key c, attached to its parent's
// key: its unique index built concurrently, made the key (ADD CONSTRAINT
// ... USING INDEX, which PostgreSQL allows on a partition but not on a
// partitioned table), and attached. A key on a partitioned table is so
// added online: the parent's ONLY it (a catalog entry), each partition's
// this way.
func (d *differ) emitPartitionKeyOnline(k nodeKey, parent, id ID, c Constraint) {
	d.emitKeyOnline(k, c)
	d.builds = append(d.builds, nodeKey{id: id, step: stepKeyIndex})
	d.attach(k, parent, id)
	d.comment(k, "CONSTRAINT "+ident(c.Name)+" ON "+qname(c.Schema, c.Table), "", c.Comment)
}
