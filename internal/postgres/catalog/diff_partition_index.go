package catalog

import (
	"fmt"
	"regexp"
	"strings"
	"unicode/utf8"

	"github.com/ptah-run/ptah/internal/postgres"
)

// Indexes and keys of partitioned tables. Each partition's index (or key)
// is attached to its parent's and has a name and storage parameters of its
// own, so the model lists it (Index.Parent, Constraint.Parent), and the plan
// builds the tree the way pg_dump does, which keeps every name:
//
//	CREATE INDEX parent_idx ON ONLY parent ...        (ALTER TABLE ONLY ... ADD for a key)
//	CREATE INDEX part_idx ON part ...                 (each partition's, as declared)
//	ALTER INDEX parent_idx ATTACH PARTITION part_idx
//
// A partition created while its parent's index already exists gets a copy
// of it from PostgreSQL, under a name PostgreSQL chooses (autoName): the
// plan renames it when the declared name differs. An index or key that a
// partition already has on its own is attached, not rebuilt; one attached
// under another name is renamed.

// indexParent is the ID of the partitioned index ix is attached to.
func indexParent(ix Index) (ID, bool) {
	if ix.Parent == nil {
		return ID{}, false
	}
	return ID{Kind: KindIndex, Schema: ix.Parent.Schema, Name: ix.Parent.Name}, true
}

// constraintParent is the ID of the parent table's key that partition key
// c (in o's model) is attached to.
func constraintParent(o objects, c Constraint) (ID, bool) {
	t, ok := o.byID[ID{Kind: KindTable, Schema: c.Schema, Name: c.Table}].(Table)
	if c.Parent == "" || !ok || t.PartitionOf == nil {
		return ID{}, false
	}
	return ID{Kind: KindConstraint, Schema: t.PartitionOf.Schema, Name: t.PartitionOf.Name, Sub: c.Parent}, true
}

// partitionParent is the ID of the index or key a partition's index or key
// (in o's model) is attached to.
func partitionParent(o objects, id ID) (ID, bool) {
	switch x := o.byID[id].(type) {
	case Index:
		return indexParent(x)
	case Constraint:
		return constraintParent(o, x)
	}
	return ID{}, false
}

// indexName is the name of the index behind an index or key (a key's index
// is named after it).
func indexName(id ID) string {
	if id.Kind == KindConstraint {
		return qname(id.Schema, id.Sub)
	}
	return qname(id.Schema, id.Name)
}

func tableOf(id ID, obj any) ID {
	if ix, ok := obj.(Index); ok {
		return ID{Kind: KindTable, Schema: ix.Schema, Name: ix.Table}
	}
	return ID{Kind: KindTable, Schema: id.Schema, Name: id.Name}
}

// withClause matches the storage parameters pg_get_indexdef prints.
var withClause = regexp.MustCompile(` WITH \(([^)]*)\)`)

func withoutOptions(def string) string { return withClause.ReplaceAllString(def, "") }

func indexOptions(def string) []string {
	m := withClause.FindStringSubmatch(def)
	if m == nil {
		return nil
	}
	return strings.Split(m[1], ", ")
}

// withoutName is an index definition without the index's own name, to
// compare two indexes' definitions.
func withoutName(ix Index) string {
	return strings.Replace(withoutOptions(ix.Definition), " INDEX "+ident(ix.Name)+" ON ", " INDEX ON ", 1)
}

// pairPartitionRenames finds, for each desired partition index or key
// missing from the live database, a live one of the same partition that
// can become it in place: attached to the same parent under another name
// (renamed), or not attached yet with the same definition (renamed if
// need be, and attached).
func (d *differ) pairPartitionRenames() {
	// The candidates: live indexes and keys the desired state lacks, by table.
	candidates := map[ID][]ID{}
	for _, lid := range d.sortedIDs(d.live.byID) {
		if _, inDesired := d.desired.byID[lid]; !inDesired && (lid.Kind == KindIndex || lid.Kind == KindConstraint) {
			t := tableOf(lid, d.live.byID[lid])
			candidates[t] = append(candidates[t], lid)
		}
	}
	if len(candidates) == 0 {
		return
	}
	taken := map[ID]bool{}
	for _, id := range d.sortedIDs(d.desired.byID) {
		if _, inLive := d.live.byID[id]; inLive {
			continue
		}
		want, ok := partitionParent(d.desired, id)
		if !ok {
			continue
		}
		for _, lid := range candidates[tableOf(id, d.desired.byID[id])] {
			if !taken[lid] && lid.Kind == id.Kind && d.canBecome(lid, id, want) {
				d.renamed[id], d.renamedAway[lid], taken[lid] = lid, true, true
				break
			}
		}
	}
}

// canBecome says whether live index or key lid can be renamed (and
// attached) into desired id, attached to parent.
func (d *differ) canBecome(lid, id, parent ID) bool {
	lp, attached := partitionParent(d.live, lid)
	if attached && lp != parent {
		return false
	}
	switch l := d.live.byID[lid].(type) {
	case Index:
		return !l.Invalid && withoutName(l) == withoutName(d.desired.byID[id].(Index))
	case Constraint:
		n := d.desired.byID[id].(Constraint)
		return !l.Invalid && l.Type == n.Type && l.Definition == n.Definition
	}
	return false
}

// isRenamedAway says whether live object lid becomes another (renamed).
func (d *differ) isRenamedAway(lid ID) bool { return d.renamedAway[lid] }

// classifyPartitionIndex decides for a partition index present in both
// models: storage parameters change in place; a definition that differs
// otherwise means the parent's index is built again (an attached index
// cannot be dropped alone).
func (d *differ) classifyPartitionIndex(id ID, l, n Index) {
	switch {
	case invalidRebuilt(l):
		// An invalid index attached to its parent's (which only a failed
		// build attached by hand leaves) goes with the whole tree.
		d.dropped[id] = true
		d.markAncestorsDropped(l)
	case l.Definition == n.Definition:
	case withoutOptions(l.Definition) == withoutOptions(n.Definition) && (l.Parent != nil || n.Parent != nil):
		// in place (alterPartitionIndex)
	default:
		d.dropped[id] = true
		if p, ok := indexParent(l); ok {
			d.dropped[p] = true
		}
	}
}

// followParents marks dropped the partitions' indexes and keys whose
// parent is dropped: PostgreSQL drops them with it. It reports whether it
// marked anything.
func (d *differ) followParents() bool {
	changed := false
	for id := range d.live.byID {
		if p, ok := partitionParent(d.live, id); ok && d.dropped[p] && !d.dropped[id] {
			d.dropped[id], changed = true, true
		}
	}
	return changed
}

// dropWithParent aliases the drop of an attached index or key to its
// parent's drop, which drops it.
func (d *differ) dropWithParent(id ID) bool {
	p, ok := partitionParent(d.live, id)
	if !ok || !d.dropped[p] {
		return false
	}
	d.alias[dropKey(id)] = dropKey(p)
	return true
}

// autoCreated says whether PostgreSQL creates desired partition index or
// key id itself: its partition is created by the plan while the parent's
// index already exists (or is itself created that way).
func (d *differ) autoCreated(id ID) bool {
	p, ok := partitionParent(d.desired, id)
	if !ok || !d.tableIsNew(tableOf(id, d.desired.byID[id]).Schema, tableOf(id, d.desired.byID[id]).Name) {
		return false
	}
	if _, inLive := d.live.byID[p]; inLive && !d.dropped[p] {
		return true
	}
	return d.autoCreated(p)
}

// emitPartitionIndex creates (or renames, or lets PostgreSQL create)
// desired index ix, and attaches it to its parent. It reports whether ix
// was handled here.
func (d *differ) emitPartitionIndex(id ID, ix Index) bool {
	parent, hasParent := indexParent(ix)
	k := fwdKey(id)
	if from, ok := d.renamed[id]; ok {
		l := d.live.byID[from].(Index)
		d.add(k, stmt("ALTER INDEX "+qname(l.Schema, l.Name)+" RENAME TO "+ident(ix.Name)))
		d.alterPartitionIndex(id, l, ix)
		return true
	}
	if !hasParent {
		return false
	}
	if d.replacedWithTree(id) {
		return true // emitPartitionedReplace builds it
	}
	if d.autoCreated(id) {
		auto := autoName(ix.Table, ix.Columns, "idx", d.liveRelationNames(ix.Schema))
		if auto != ix.Name {
			d.add(k, stmt("ALTER INDEX "+qname(ix.Schema, auto)+" RENAME TO "+ident(ix.Name)))
		}
		// The copy has its parent's storage parameters.
		if pix, ok := d.desired.byID[parent].(Index); ok {
			d.indexOptionChanges(k, ix, indexOptions(pix.Definition), indexOptions(ix.Definition))
		}
		d.comment(k, "INDEX "+qname(ix.Schema, ix.Name), "", ix.Comment)
		return true
	}
	if d.buildsPartitionOnline(id, ix) {
		d.emitPartitionBuild(k, id, ix) // online_partition.go
	} else {
		d.add(k, stmt(ix.Definition, d.indexHazards(id, ix)...))
	}
	d.attach(k, parent, id)
	d.comment(k, "INDEX "+qname(ix.Schema, ix.Name), "", ix.Comment)
	return true
}

// alterPartitionIndex attaches l, and changes its storage parameters, to
// make it n.
func (d *differ) alterPartitionIndex(id ID, l, n Index) {
	k := fwdKey(id)
	d.indexOptionChanges(k, n, indexOptions(l.Definition), indexOptions(n.Definition))
	if p, ok := indexParent(n); ok && l.Parent == nil {
		d.attach(k, p, id)
	}
	d.comment(k, "INDEX "+qname(n.Schema, n.Name), l.Comment, n.Comment)
}

func (d *differ) indexOptionChanges(k nodeKey, ix Index, l, n []string) {
	set, reset := optionChanges(l, n)
	if reset != "" {
		d.add(k, stmt("ALTER INDEX "+qname(ix.Schema, ix.Name)+" RESET ("+reset+")"))
	}
	if set != "" {
		d.add(k, stmt("ALTER INDEX "+qname(ix.Schema, ix.Name)+" SET ("+set+")"))
	}
}

// attach adds to node k the ATTACH PARTITION of child to parent, after the
// parent exists.
func (d *differ) attach(k nodeKey, parent, child ID) {
	d.add(k, stmt("ALTER INDEX "+indexName(parent)+" ATTACH PARTITION "+indexName(child)))
	d.extra = append(d.extra, [2]nodeKey{fwdKey(parent), k})
}

// emitPartitionKey is emitPartitionIndex for a key or exclusion
// constraint; a parent's own key is added to the parent ONLY (it holds no
// rows, and each partition's is added on its own).
func (d *differ) emitPartitionKey(id ID, c Constraint) bool {
	k := fwdKey(id)
	if from, ok := d.renamed[id]; ok {
		l := d.live.byID[from].(Constraint)
		d.add(k, stmt(alterTable(c.Schema, c.Table)+" RENAME CONSTRAINT "+ident(l.Name)+" TO "+ident(c.Name)))
		d.alterPartitionKey(id, l, c)
		return true
	}
	if c.Type != PrimaryKey && c.Type != Unique && c.Type != Exclusion {
		return false
	}
	parent, hasParent := constraintParent(d.desired, c)
	if hasParent && d.autoCreated(id) {
		if auto := autoKeyName(c, d.liveRelationNames(c.Schema)); auto != c.Name {
			d.add(k, stmt(alterTable(c.Schema, c.Table)+" RENAME CONSTRAINT "+ident(auto)+" TO "+ident(c.Name)))
		}
		d.comment(k, "CONSTRAINT "+ident(c.Name)+" ON "+qname(c.Schema, c.Table), "", c.Comment)
		return true
	}
	t, _ := d.desired.byID[ID{Kind: KindTable, Schema: c.Schema, Name: c.Table}].(Table)
	if !hasParent && t.PartitionKey == "" {
		return false
	}
	if hasParent && d.keysOnline(c) {
		d.emitPartitionKeyOnline(k, parent, id, c) // online_partition.go
		return true
	}
	var hazards []postgres.Hazard
	if t.PartitionKey == "" {
		hazards = d.constraintHazards(c)
	}
	d.add(k, stmt("ALTER TABLE ONLY "+qname(c.Schema, c.Table)+" ADD CONSTRAINT "+ident(c.Name)+" "+c.Definition, hazards...))
	if hasParent {
		d.attach(k, parent, id)
	}
	d.comment(k, "CONSTRAINT "+ident(c.Name)+" ON "+qname(c.Schema, c.Table), "", c.Comment)
	return true
}

// alterPartitionKey attaches l to make it n.
func (d *differ) alterPartitionKey(id ID, l, n Constraint) {
	k := fwdKey(id)
	if p, ok := constraintParent(d.desired, n); ok && l.Parent == "" {
		d.attach(k, p, id)
	}
	d.comment(k, "CONSTRAINT "+ident(n.Name)+" ON "+qname(n.Schema, n.Table), l.Comment, n.Comment)
}

// connectPartitions orders the tree: a partition the plan creates comes
// before its parent's new index or key (else PostgreSQL would copy the
// index onto it under a name of its own); and what uses a key or index
// (a foreign key needs it valid) waits for every partition's to be
// attached.
func (d *differ) connectPartitions() {
	for id := range d.desired.byID {
		p, ok := partitionParent(d.desired, id)
		if !ok {
			continue
		}
		t := tableOf(id, d.desired.byID[id])
		if d.created[t] {
			d.before(fwdKey(t), fwdKey(p))
		}
	}
	for _, dep := range d.desired.deps {
		for _, c := range d.partitionDescendants(dep.RefObject) {
			d.before(fwdKey(c), fwdKey(dep.Object))
		}
	}
}

// partitionDescendants are the desired indexes or keys attached to id, and
// theirs.
func (d *differ) partitionDescendants(id ID) []ID {
	if id.Kind != KindIndex && id.Kind != KindConstraint {
		return nil
	}
	if d.children == nil {
		d.children = map[ID][]ID{}
		for cid := range d.desired.byID {
			if p, ok := partitionParent(d.desired, cid); ok {
				d.children[p] = append(d.children[p], cid)
			}
		}
	}
	var out []ID
	for _, c := range d.children[id] {
		out = append(out, c)
		out = append(out, d.partitionDescendants(c)...)
	}
	return out
}

// liveRelationNames are the names of the relations in schema in the live
// database: what PostgreSQL's choice of a name avoids.
func (d *differ) liveRelationNames(schema string) map[string]bool {
	names := map[string]bool{}
	for id, obj := range d.live.byID {
		if id.Schema != schema {
			continue
		}
		switch o := obj.(type) {
		case Table, View, Sequence, Composite, Index:
			names[id.Name] = true
		case Constraint:
			if o.Type == PrimaryKey || o.Type == Unique || o.Type == Exclusion {
				names[o.Name] = true
			}
		}
	}
	return names
}

// nameDataLen is PostgreSQL's NAMEDATALEN: identifiers are at most
// nameDataLen-1 bytes.
const nameDataLen = 64

// autoName is the name PostgreSQL gives the index it creates on table for
// a partitioned index (ChooseIndexName in indexcmds.c): table, the index's
// column names and label, shortened to fit, with a number after the label
// until no relation in taken has it.
func autoName(table string, columns []string, label string, taken map[string]bool) string {
	var addition *string
	if label != "pkey" {
		a := indexNameAddition(columns)
		addition = &a
	}
	for pass := 0; ; pass++ {
		l := label
		if pass > 0 {
			l = fmt.Sprintf("%s%d", label, pass)
		}
		name := makeObjectName(table, addition, l)
		if !taken[name] {
			return name
		}
	}
}

// autoKeyName is autoName for a key or exclusion constraint.
func autoKeyName(c Constraint, taken map[string]bool) string {
	switch c.Type {
	case PrimaryKey:
		return autoName(c.Table, nil, "pkey", taken)
	case Exclusion:
		return autoName(c.Table, c.Columns, "excl", taken)
	}
	return autoName(c.Table, c.Columns, "key", taken)
}

// indexNameAddition is ChooseIndexNameAddition over ChooseIndexColumnNames.
func indexNameAddition(columns []string) string {
	var names []string
	for _, orig := range columns {
		cur := orig
		for i := 1; contains(names, cur); i++ {
			suffix := fmt.Sprint(i)
			cur = clip(orig, nameDataLen-1-len(suffix)) + suffix
		}
		names = append(names, cur)
	}
	var b strings.Builder
	for _, n := range names {
		if b.Len() > 0 {
			b.WriteByte('_')
		}
		b.WriteString(clip(n, nameDataLen-1))
		if b.Len() >= nameDataLen {
			break
		}
	}
	return b.String()
}

// makeObjectName is makeObjectName in PostgreSQL's indexcmds.c.
func makeObjectName(name1 string, name2 *string, label string) string {
	overhead := len(label) + 1
	n1, n2 := len(name1), 0
	if name2 != nil {
		n2 = len(*name2)
		overhead++
	}
	avail := nameDataLen - 1 - overhead
	for n1+n2 > avail {
		if n1 > n2 {
			n1--
		} else {
			n2--
		}
	}
	name := clip(name1, n1)
	if name2 != nil {
		name += "_" + clip(*name2, n2)
	}
	return name + "_" + label
}

// clip cuts s to at most n bytes, on a character boundary.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

func contains(xs []string, x string) bool {
	for _, s := range xs {
		if s == x {
			return true
		}
	}
	return false
}
