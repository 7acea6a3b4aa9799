package catalog

import (
	"container/heap"
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/ptah-run/ptah/internal/postgres"
)

// Diff returns the ordered statements that take a database whose managed
// scope is live to one whose managed scope is desired. It is pure: both
// models were read by Inspect, and nothing here touches a database.
//
// The plan is built as a graph. Every object that changes gets up to two
// nodes: a drop node (it, or the part of it that must go first) and a
// forward node (its creation or in-place alteration). Edges come from the
// dependencies PostgreSQL recorded in both databases: a dependent is dropped
// before what it depends on, and created after. A topological sort, with a
// stable tie-break by kind and name, gives the order. Labels added to
// existing enums (ALTER TYPE ... ADD VALUE) stand outside the graph, at the
// start of the plan (see alterEnum).
func Diff(live, desired *Model) ([]postgres.Statement, error) {
	return DiffWith(live, desired, DiffOptions{})
}

// DiffWith is Diff, with options (an online plan).
func DiffWith(live, desired *Model, opts DiffOptions) ([]postgres.Statement, error) {
	r, err := diff(live, desired, opts)
	return r.stmts, err
}

// diffResult is a plan with what the differ learned making it.
type diffResult struct {
	stmts []postgres.Statement
	// casts are those the column conversions rely on, which only a server
	// can check (checkCasts).
	casts []cast
	// hints are advice for whoever reviews the plan (renameHints).
	hints []string
}

// diff is Diff, also returning the casts its column conversions rely on
// and its hints.
func diff(live, desired *Model, opts DiffOptions) (diffResult, error) {
	if lv, dv := live.ServerVersion/10000, desired.ServerVersion/10000; lv != 0 && dv != 0 && lv != dv {
		return diffResult{}, fmt.Errorf("the target runs PostgreSQL %d and the dev database PostgreSQL %d, which print definitions differently: "+
			"load the declared files on a server of the target's major (--dev-url)", lv, dv)
	}
	d, err := prepareDiff(live, desired, opts)
	if err != nil {
		return diffResult{}, err
	}
	sorted, err := d.sort()
	if err != nil {
		return diffResult{}, err
	}
	// Labels added to existing enums lead the plan (see alterEnum for why
	// that is safe, and LabelPhase for why it is wanted).
	stmts := append(d.labels, sorted...)
	stmts = append(stmts, d.renames(opts.Renames)...)
	return diffResult{stmts: stmts, casts: d.casts, hints: d.renameHints()}, nil
}

// prepareDiff builds the plan's graph of nodes and ordering edges, ready
// to be sorted (by sort, or by the grouping sort of CreationScript).
func prepareDiff(live, desired *Model, opts DiffOptions) (*differ, error) {
	d := newDiffer(live, desired)
	d.online = opts.Online
	d.classify()
	d.propagate()
	if err := d.checkOutside(); err != nil {
		return nil, err
	}
	if err := d.checkTypesInUse(); err != nil {
		return nil, err
	}
	if err := d.checkCollationsInUse(); err != nil {
		return nil, err
	}
	d.emit()
	d.emitPrivileges()
	if err := refusePlan(d.refused, "these array columns cannot follow their composite type's new attributes: PostgreSQL converts an array of "+
		"composite values only by position, which would put values in the wrong attributes. Keep the attribute order and names "+
		"(append new attributes, change types in place), or convert the column with a migration; then plan again"); err != nil {
		return nil, err
	}
	d.connect()
	return d, nil
}

type nodeKey struct {
	id   ID
	drop bool
	// step separates extra nodes of one object (a replaced type's final drop,
	// a sequence's OWNED BY) from its main drop and forward nodes.
	step string
}

type node struct {
	key   nodeKey
	seq   int // insertion order, the last tie-break
	stmts []postgres.Statement
}

// outsideTx reports whether the node's statements all run without a
// transaction.
func (n *node) outsideTx() bool {
	for _, s := range n.stmts {
		if !s.NoTransaction {
			return false
		}
	}
	return len(n.stmts) > 0
}

// objects indexes one model by ID.
type objects struct {
	m       *Model
	byID    map[ID]any
	columns map[ID]Column
	pos     map[ID]int // a column's position in its table
	deps    []Dep
}

func indexModel(m *Model) objects {
	// Sized up front: for a schema of thousands of tables, growing the
	// maps and the dependency list step by step cost more than the diff.
	columns := 0
	for _, t := range m.Tables {
		columns += len(t.Columns)
	}
	objectCount := len(m.Schemas) + len(m.Extensions) + len(m.Enums) + len(m.Domains) + len(m.Composites) +
		len(m.Sequences) + len(m.Tables) + len(m.Constraints) + len(m.Indexes) + len(m.Views) + len(m.Functions) +
		len(m.Triggers) + len(m.Policies) + len(m.Collations) + len(m.TSConfigs)
	o := objects{m: m, byID: make(map[ID]any, objectCount+columns), columns: make(map[ID]Column, columns),
		pos: make(map[ID]int, columns), deps: make([]Dep, 0, len(m.Deps))}
	putAll(o, m.Schemas)
	putAll(o, m.Extensions)
	putAll(o, m.Enums)
	putAll(o, m.Domains)
	putAll(o, m.Composites)
	putAll(o, m.Sequences)
	putAll(o, m.Tables)
	putAll(o, m.Constraints)
	putAll(o, m.Indexes)
	putAll(o, m.Views)
	putAll(o, m.Functions)
	putAll(o, m.Triggers)
	putAll(o, m.Policies)
	putAll(o, m.Collations)
	putAll(o, m.TSConfigs)
	for _, t := range m.Tables {
		for i, c := range t.Columns {
			id := ColumnID(t.Schema, t.Name, c.Name)
			o.byID[id], o.columns[id], o.pos[id] = c, c, i
		}
	}
	// A serial column's default needs its sequence and the sequence is owned
	// by the column: ownership is set by a separate statement once both
	// exist, so it is not an ordering dependency.
	owned := map[Dep]bool{}
	for _, s := range m.Sequences {
		if s.OwnedBy != nil {
			owned[Dep{Object: s.ID(), RefObject: ColumnID(s.OwnedBy.Schema, s.OwnedBy.Table, s.OwnedBy.Column)}] = true
			owned[Dep{Object: s.ID(), RefObject: ID{Kind: KindTable, Schema: s.OwnedBy.Schema, Name: s.OwnedBy.Table}}] = true
		}
	}
	for _, dep := range m.Deps {
		if !owned[dep] && dep.Object != dep.RefObject {
			o.deps = append(o.deps, dep)
		}
	}
	return o
}

// putAll indexes objects by their IDs, keeping each one's concrete type.
func putAll[T interface{ ID() ID }](o objects, xs []T) {
	for _, x := range xs {
		o.byID[x.ID()] = x
	}
}

type differ struct {
	live, desired objects

	// dropped: live objects that go away, for good or to be created again.
	dropped map[ID]bool
	// replaced: enums and domains swapped for a new type of the same name,
	// their columns converted in place.
	replaced map[ID]bool
	// converted: columns whose type changes in place (their dependents that
	// PostgreSQL cannot carry across the change are recreated).
	converted map[ID]bool
	// resetDefault: columns whose default must be dropped before something
	// it uses goes away, and set again after.
	resetDefault map[ID]bool
	// remapped: text search configurations whose mappings change in
	// place: what stores their output (indexes, stored generated columns,
	// materialized views, check constraints) is built again.
	remapped map[ID]bool
	// created: tables made by this plan; work on them carries no hazards.
	created map[ID]bool
	// online: indexes on existing tables are built and dropped
	// concurrently (online.go).
	online bool

	nodes map[nodeKey]*node
	alias map[nodeKey]nodeKey
	edges map[nodeKey]map[nodeKey]bool
	extra [][2]nodeKey // orderings emit knows of, applied by connect
	// labels: ALTER TYPE ... ADD VALUE statements, which go first (alterEnum).
	labels []postgres.Statement
	// on indexes what lives on each table, for the settings nodes.
	on *onTables
	// casts: the column conversions made with USING col::type.
	casts []cast
	// refused: conversions the plan cannot make (see convertValue).
	refused []string
	// renamed: desired partition indexes and keys made from a live one
	// under another name (pairPartitionRenames), to the live one's ID.
	renamed     map[ID]ID
	renamedAway map[ID]bool // the live IDs of renamed
	// children: the desired partition indexes and keys attached to each.
	children map[ID][]ID
	// builds: the nodes building a partition's index concurrently
	// (online_partition.go).
	builds []nodeKey
	// partitionedReplace: replacesPartitionedOnline's answers, by index.
	partitionedReplace map[ID]bool
	// liveLocks, desiredLocks: what statementLocks reads, built on first use.
	liveLocks, desiredLocks *lockIndex
}

func newDiffer(live, desired *Model) *differ {
	return &differ{
		live: indexModel(live), desired: indexModel(desired),
		dropped: map[ID]bool{}, replaced: map[ID]bool{}, converted: map[ID]bool{},
		resetDefault: map[ID]bool{}, remapped: map[ID]bool{}, created: map[ID]bool{}, renamed: map[ID]ID{}, renamedAway: map[ID]bool{},
		nodes: map[nodeKey]*node{}, alias: map[nodeKey]nodeKey{}, edges: map[nodeKey]map[nodeKey]bool{},
	}
}

// classify decides, object by object, what must be dropped outright: what
// the desired state lacks, and what cannot be altered into its desired form.
func (d *differ) classify() {
	d.pairPartitionRenames()
	for id, lv := range d.live.byID {
		dv, ok := d.desired.byID[id]
		if !ok {
			if !d.isRenamedAway(id) {
				d.dropped[id] = true
			}
			continue
		}
		switch l := lv.(type) {
		case Table:
			if tableNeedsRecreate(l, dv.(Table)) {
				d.dropped[id] = true
			}
		case Column:
			if columnNeedsRecreate(l, dv.(Column)) {
				d.dropped[id] = true
			} else if l.Type != dv.(Column).Type || l.Collation != dv.(Column).Collation {
				d.converted[id] = true
			}
		case Constraint:
			c := dv.(Constraint)
			if (!canAlterConstraint(l, c) && !d.onlyValidates(l, c)) || l.Invalid {
				d.dropped[id] = true
				// An attached key cannot be dropped alone: its parent goes too.
				if p, ok := constraintParent(d.live, l); ok {
					d.dropped[p] = true
				}
			}
		case Index:
			n := dv.(Index)
			if l.Parent != nil || n.Parent != nil {
				d.classifyPartitionIndex(id, l, n)
			} else if l.Definition != n.Definition || invalidRebuilt(l) {
				// An invalid index is built again, under the same definition
				// (a partitioned table's own, invalid, gets the partitions'
				// indexes it lacks attached instead).
				d.dropped[id] = true
			}
		case View:
			v := dv.(View)
			if set, reset := optionChanges(l.Options, v.Options); l.Definition != v.Definition || set+reset != "" || !sameViewColumns(l.Columns, v.Columns) {
				d.dropped[id] = true
			}
		case Function:
			if !canReplaceFunction(l, dv.(Function)) {
				d.dropped[id] = true
			}
		case Trigger:
			if l.Definition != dv.(Trigger).Definition {
				d.dropped[id] = true
			}
		case Policy:
			if !canAlterPolicy(l, dv.(Policy)) {
				d.dropped[id] = true
			}
		case Collation:
			if !sameCollation(l, dv.(Collation)) {
				d.dropped[id] = true
			}
		case TSConfig:
			n := dv.(TSConfig)
			if l.Parser != n.Parser {
				d.dropped[id] = true
			} else if !slices.EqualFunc(l.Mappings, n.Mappings, sameMapping) {
				d.remapped[id] = true
			}
		case Enum:
			if _, ok := addedLabels(l.Labels, dv.(Enum).Labels); !ok {
				d.replaced[id] = true
			}
		case Domain:
			n := dv.(Domain)
			if l.BaseType != n.BaseType || l.Collation != n.Collation {
				d.replaced[id] = true
			}
		case Composite:
			if d.compositeNeedsReplace(l, dv.(Composite)) {
				d.replaced[id] = true
			}
		case Extension:
			if l.Schema != dv.(Extension).Schema {
				d.dropped[id] = true
			}
		}
	}
	// Everything on a dropped table goes with it.
	for id := range d.live.byID {
		if t, ok := d.live.owner(id); ok && d.dropped[t] {
			d.dropped[id] = true
		}
	}
}

// canAlterConstraint: a foreign key's deferrability is the one thing
// ALTER CONSTRAINT changes in place; anything else means drop and add.
func canAlterConstraint(l, n Constraint) bool {
	if l.Definition == n.Definition {
		return true
	}
	return l.Type == ForeignKey && n.Type == ForeignKey &&
		withoutDeferrability(l.Definition) == withoutDeferrability(n.Definition)
}

// canAlterPolicy: ALTER POLICY sets a policy's roles and expressions, but
// cannot take an expression away, nor change whether the policy is
// permissive or what command it is for.
func canAlterPolicy(l, n Policy) bool {
	return l.Permissive == n.Permissive && l.Command == n.Command &&
		(l.Using == "" || n.Using != "") && (l.Check == "" || n.Check != "")
}

func withoutDeferrability(def string) string {
	for _, clause := range []string{" INITIALLY DEFERRED", " INITIALLY IMMEDIATE", " NOT DEFERRABLE", " DEFERRABLE"} {
		def = strings.TrimSuffix(def, clause)
	}
	return def
}

func tableNeedsRecreate(l, n Table) bool {
	return l.PartitionKey != n.PartitionKey ||
		!sameName(l.PartitionOf, n.PartitionOf) || l.PartitionBound != n.PartitionBound
}

func columnNeedsRecreate(l, n Column) bool {
	// PostgreSQL before 17 cannot change a generation expression in place,
	// none can turn a regular column into a generated one, nor a stored
	// generated column into a virtual one.
	return l.Generated != n.Generated || l.Virtual != n.Virtual || (n.Generated && l.Default != n.Default)
}

func sameName(a, b *ObjectName) bool {
	if a == nil || b == nil {
		return a == b
	}
	return *a == *b
}

func sameViewColumns(a, b []ViewColumn) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].Name != b[i].Name || a[i].Type != b[i].Type {
			return false
		}
	}
	return true
}

// canReplaceFunction reports whether CREATE OR REPLACE can turn l into n:
// it cannot change the result type, nor argument names or defaults, which
// pg_get_functiondef prints on its first line.
//
// For an aggregate, whose first line is its signature, CREATE OR REPLACE
// AGGREGATE cannot change its kind (normal, ordered-set, hypothetical-set)
// either; it can change everything else but the result type, which the
// state type or final function may set.
func canReplaceFunction(l, n Function) bool {
	return l.Result == n.Result && l.Aggregate == n.Aggregate && firstLine(l.Definition) == firstLine(n.Definition)
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(strings.TrimSpace(s), "\n")
	return line
}

// addedLabels returns the labels n adds to l when l's labels appear in n in
// the same order, so that ALTER TYPE ... ADD VALUE reaches n.
func addedLabels(l, n []string) ([]string, bool) {
	i := 0
	var added []string
	for _, label := range n {
		if i < len(l) && l[i] == label {
			i++
			continue
		}
		added = append(added, label)
	}
	return added, i == len(l)
}

// owner returns the table, view or materialized view an object lives on.
func (o objects) owner(id ID) (ID, bool) {
	var name string
	switch v := o.byID[id].(type) {
	case Column, Constraint, Trigger, Policy:
		name = id.Name
	case Index:
		name = v.Table
	default:
		return ID{}, false
	}
	for _, k := range []Kind{KindTable, KindView, KindMatView} {
		t := ID{Kind: k, Schema: id.Schema, Name: name}
		if _, ok := o.byID[t]; ok {
			return t, true
		}
	}
	return ID{}, false
}

// propagate extends the drops to everything that depends on what is
// dropped, replaced or converted, until nothing changes.
func (d *differ) propagate() {
	for changed := true; changed; {
		changed = false
		for _, dep := range d.live.deps {
			x, y := dep.Object, dep.RefObject
			if d.dropped[x] {
				continue
			}
			if d.affects(x, y) {
				changed = true
			}
		}
		if d.followParents() {
			changed = true
		}
	}
}

// affects applies what a change to y means for x, which depends on it, and
// reports whether it marked anything new.
func (d *differ) affects(x, y ID) bool {
	mark := func(m map[ID]bool, id ID) bool {
		if m[id] {
			return false
		}
		m[id] = true
		return true
	}
	switch {
	case d.dropped[y]:
		if y.Kind == KindCollation && x.Kind == KindColumn {
			return false // refused while the column keeps it (checkCollationsInUse)
		}
		if x.Kind == KindColumn && !d.live.columns[x].Generated {
			return mark(d.resetDefault, x)
		}
		if x.Kind == KindSequence && y.Kind == KindColumn {
			return false // an owned sequence, handled by the ownership edge
		}
		if d.altersPolicyAway(x, y) {
			return false // ALTER POLICY lets go of y, before y goes (connect)
		}
		if d.replacesAggregateAway(x, y) {
			return false // so does CREATE OR REPLACE AGGREGATE
		}
		return mark(d.dropped, x)
	case d.replaced[y]:
		switch x.Kind {
		case KindColumn:
			if d.columnIsOfType(x, y) {
				return mark(d.converted, x)
			}
			if !d.live.columns[x].Generated {
				return mark(d.resetDefault, x)
			}
		case KindDomain, KindComposite:
			// A type over (or holding) a replaced type is replaced too: its
			// values, stored in columns, go through the same conversion.
			if _, kept := d.desired.byID[x]; kept {
				return mark(d.replaced, x)
			}
		}
		return mark(d.dropped, x)
	case d.remapped[y]:
		return d.affectsRemapped(x, mark)
	case d.converted[y]:
		// ALTER COLUMN TYPE rebuilds indexes and constraints itself; views,
		// triggers and generated columns that read the column must go.
		switch x.Kind {
		case KindIndex, KindConstraint, KindSequence:
			return false
		case KindColumn:
			if !d.live.columns[x].Generated {
				return false
			}
		}
		return mark(d.dropped, x)
	}
	return false
}

// altersPolicyAway says whether x is a policy that ALTER POLICY takes to
// its desired form, and so lets go of y, which the plan drops for good:
// the policy then stays in place (no moment without it) rather than being
// dropped and created again. Its expressions must read differently: the
// same text may name another object of y's name (an overload of a
// function), which only parsing the expressions again resolves, and
// alterPolicy then sets them all (a text that did not change would keep
// its dependency on y).
func (d *differ) altersPolicyAway(x, y ID) bool {
	if x.Kind != KindPolicy {
		return false
	}
	if _, kept := d.desired.byID[y]; kept {
		return false
	}
	l, ok1 := d.live.byID[x].(Policy)
	n, ok2 := d.desired.byID[x].(Policy)
	return ok1 && ok2 && canAlterPolicy(l, n) && (l.Using != n.Using || l.Check != n.Check)
}

// checkOutside refuses a plan that drops or changes what an object outside
// the managed schemas depends on: PostgreSQL would refuse the statement, and
// ptah does not touch objects outside its scope to make way.
func (d *differ) checkOutside() error {
	var refused []string
	for _, o := range d.live.m.Outside {
		y := o.RefObject
		var what string
		_, kept := d.desired.byID[y]
		switch {
		case d.dropped[y] && kept:
			what = "which the plan drops and creates again"
		case d.dropped[y]:
			what = "which the plan drops"
		case d.replaced[y]:
			what = "which the plan replaces with a new type"
		case d.converted[y] && !strings.HasPrefix(o.Object, "constraint "):
			// (PostgreSQL carries a foreign key across the change itself.)
			what = "whose type the plan changes"
		default:
			continue
		}
		refused = append(refused, o.Object+" depends on "+describe(y)+", "+what)
	}
	return refusePlan(refused, "objects outside the managed schemas depend on objects this plan drops or changes, and PostgreSQL would refuse to; "+
		"ptah does not touch objects outside spec.schemas. Drop or change these dependents first (and recreate them after), "+
		"or add their schemas to spec.schemas so that ptah plans them too; then plan again")
}

// checkTypesInUse refuses a plan that must drop and create again a type
// (because something it depends on is dropped) while a column it keeps
// stores that type: PostgreSQL would refuse the drop, and the plan has no
// way to carry the column's values across.
func (d *differ) checkTypesInUse() error {
	var refused []string
	for _, dep := range d.live.deps {
		col, typ := dep.Object, dep.RefObject
		if col.Kind != KindColumn || d.dropped[col] || !d.dropped[typ] || !d.columnIsOfType(col, typ) {
			continue
		}
		if _, kept := d.desired.byID[typ]; kept {
			refused = append(refused, describe(col)+" is of "+describe(typ)+", which the plan must drop and create again")
		}
	}
	return refusePlan(refused, "these types must be dropped and created again, since something they depend on is (a function their constraint "+
		"calls, ...), and PostgreSQL cannot drop a type a column stores. Make the change in steps (first move the columns "+
		"to another type, or change what the type depends on in a separate plan), or with a migration; then plan again")
}

// refusePlan is the error refusing a plan for the changes refused (none:
// nil), sorted, and why, with what to do instead.
func refusePlan(refused []string, reason string) error {
	if len(refused) == 0 {
		return nil
	}
	sort.Strings(refused)
	return &UnsupportedError{Where: "plan", Objects: refused, Reason: reason}
}

func (d *differ) columnIsOfType(col, typ ID) bool {
	t := strings.TrimSuffix(d.live.columns[col].Type, "[]")
	return t == qname(typ.Schema, typ.Name) || t == typ.Schema+"."+typ.Name
}

// Node bookkeeping.

func (d *differ) resolve(k nodeKey) nodeKey {
	for {
		a, ok := d.alias[k]
		if !ok {
			return k
		}
		k = a
	}
}

func (d *differ) add(k nodeKey, stmts ...postgres.Statement) {
	for i := range stmts {
		stmts[i].LockKeys = d.statementLocks(k, stmts[i])
		stmts[i].Locks = d.statementLockModes(k, stmts[i])
		stmts[i].Hazards = postgres.LockHazards(stmts[i].Hazards, stmts[i].Locks)
	}
	k = d.resolve(k)
	n, ok := d.nodes[k]
	if !ok {
		n = &node{key: k, seq: len(d.nodes)}
		d.nodes[k] = n
	}
	n.stmts = append(n.stmts, stmts...)
}

func (d *differ) has(k nodeKey) bool {
	_, ok := d.nodes[d.resolve(k)]
	return ok
}

// before orders a before b when both nodes exist.
func (d *differ) before(a, b nodeKey) {
	a, b = d.resolve(a), d.resolve(b)
	if a == b || !d.has(a) || !d.has(b) {
		return
	}
	if d.edges[a] == nil {
		d.edges[a] = map[nodeKey]bool{}
	}
	d.edges[a][b] = true
}

func dropKey(id ID) nodeKey { return nodeKey{id: id, drop: true} }
func fwdKey(id ID) nodeKey  { return nodeKey{id: id} }

// emit creates the nodes and their statements.
func (d *differ) emit() {
	// Parents first, so that children can alias into their nodes.
	for _, id := range d.sortedIDs(d.live.byID) {
		if d.dropped[id] {
			d.emitDrop(id, d.live.byID[id])
		} else if d.resetDefault[id] {
			c := d.live.columns[id]
			if c.Default != "" {
				d.add(dropKey(id), stmt(alterColumn(id)+" DROP DEFAULT"))
			}
		}
		if d.replaced[id] {
			d.emitReplaceStart(id)
		}
	}
	for _, id := range d.sortedIDs(d.desired.byID) {
		dv := d.desired.byID[id]
		lv, inLive := d.live.byID[id]
		if !inLive || d.dropped[id] {
			d.emitCreate(id, dv)
			continue
		}
		d.emitAlter(id, lv, dv)
	}
}

func (d *differ) sortedIDs(m map[ID]any) []ID {
	ids := make([]ID, 0, len(m))
	for id := range m {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return d.less(ids[i], ids[j]) })
	return ids
}

// less orders IDs by kind, then name; the columns of one table keep their
// desired order, since added columns land in the order they are added.
func (d *differ) less(a, b ID) bool {
	if ra, rb := kindRank(a.Kind), kindRank(b.Kind); ra != rb {
		return ra < rb
	}
	if a.Schema != b.Schema {
		return a.Schema < b.Schema
	}
	if a.Name != b.Name {
		return a.Name < b.Name
	}
	if a.Kind == KindColumn {
		pa, okA := d.desired.pos[a]
		pb, okB := d.desired.pos[b]
		if okA && okB {
			return pa < pb
		}
	}
	return a.Sub < b.Sub
}

// kindRank is the natural creation order when dependencies leave a choice.
func kindRank(k Kind) int {
	switch k {
	case KindSchema:
		return 0
	case KindExtension, KindCollation:
		return 1
	case KindEnum, KindDomain, KindComposite:
		return 2
	case KindSequence:
		return 3
	case KindFunction, KindProcedure, KindAggregate, KindTSConfig:
		return 4
	case KindTable:
		return 5
	case KindColumn:
		return 6
	case KindConstraint:
		return 7
	case KindIndex:
		return 8
	case KindView:
		return 9
	case KindMatView:
		return 10
	case KindTrigger:
		return 11
	case KindPolicy:
		return 12
	}
	return 13
}

func stmt(sql string, hazards ...postgres.Hazard) postgres.Statement {
	return postgres.Statement{SQL: sql, Hazards: hazards}
}

// connect adds the ordering edges.
func (d *differ) connect() {
	for _, dep := range d.live.deps {
		x, y := dep.Object, dep.RefObject
		// A dependent leaves before what it depends on changes or goes.
		d.before(dropKey(x), dropKey(y))
		d.before(dropKey(x), fwdKey(y))
		d.before(dropKey(x), nodeKey{id: y, step: stepFinish})
		// An old type goes before the old type it is over, or holds.
		d.before(nodeKey{id: x, step: stepFinish}, nodeKey{id: y, step: stepFinish})
		// A partition's column changes with its parent's (diff_partition.go).
		for _, a := range ancestorColumns(d.live, y) {
			d.before(dropKey(x), fwdKey(a))
		}
		// An object altered away from y does so before y goes for good. (When
		// y is created again, x was dropped or reset by propagate instead.)
		// (A reset default already let go of what it used.)
		if !d.dropped[x] && !(d.resetDefault[x] && !d.columnIsOfType(x, y)) {
			if _, recreated := d.desired.byID[y]; !recreated {
				d.before(fwdKey(x), dropKey(y))
			}
			d.before(fwdKey(x), nodeKey{id: y, step: stepFinish})
		}
	}
	for _, dep := range d.desired.deps {
		x, y := dep.Object, dep.RefObject
		d.before(fwdKey(y), fwdKey(x))
		d.before(fwdKey(y), nodeKey{id: x, step: stepOwner})
		for _, a := range ancestorColumns(d.desired, y) {
			d.before(fwdKey(a), fwdKey(x))
		}
	}
	for _, e := range d.extra {
		d.before(e[0], e[1])
	}
	d.connectPartitions()
	for k := range d.nodes {
		id := k.id
		d.before(dropKey(id), fwdKey(id))
		d.before(fwdKey(id), nodeKey{id: id, step: stepFinish})
		if t, ok := d.desired.owner(id); ok {
			d.before(fwdKey(t), fwdKey(id))
		}
		if t, ok := d.live.owner(id); ok {
			d.before(dropKey(id), dropKey(t))
		}
		if id.Schema != "" {
			s := ID{Kind: KindSchema, Name: id.Schema}
			d.before(fwdKey(s), k)
			d.before(k, dropKey(s))
		}
	}
	d.connectPartitionBuilds()
}

// sort orders the nodes topologically: among the nodes whose predecessors
// are done, drops come first (dependents' kinds first), then forward nodes
// in kind order, then by name.
func (d *differ) sort() ([]postgres.Statement, error) {
	indeg := map[nodeKey]int{}
	for _, succ := range d.edges {
		for b := range succ {
			indeg[b]++
		}
	}
	// The ready nodes are a heap: the next node is always the least of
	// them (nodeLess is a total order on nodes), without sorting them all
	// again after each one, which a plan of tens of thousands of
	// statements cannot afford.
	ready := &readyNodes{less: d.nodeLess}
	for k, n := range d.nodes {
		if indeg[k] == 0 {
			ready.nodes = append(ready.nodes, n)
		}
	}
	heap.Init(ready)
	var out []postgres.Statement
	done := 0
	for ready.Len() > 0 {
		n := heap.Pop(ready).(*node)
		done++
		out = append(out, n.stmts...)
		for b := range d.edges[n.key] {
			if indeg[b]--; indeg[b] == 0 {
				heap.Push(ready, d.nodes[b])
			}
		}
	}
	if done != len(d.nodes) {
		var stuck []string
		for k := range d.nodes {
			if indeg[k] > 0 {
				stuck = append(stuck, describe(k.id))
			}
		}
		sort.Strings(stuck)
		return nil, fmt.Errorf("cannot order the changes: circular dependency among %s", strings.Join(stuck, ", "))
	}
	return out, nil
}

// readyNodes is a heap of nodes (container/heap), least first.
type readyNodes struct {
	nodes []*node
	less  func(a, b *node) bool
}

func (r *readyNodes) Len() int           { return len(r.nodes) }
func (r *readyNodes) Less(i, j int) bool { return r.less(r.nodes[i], r.nodes[j]) }
func (r *readyNodes) Swap(i, j int)      { r.nodes[i], r.nodes[j] = r.nodes[j], r.nodes[i] }
func (r *readyNodes) Push(x any)         { r.nodes = append(r.nodes, x.(*node)) }
func (r *readyNodes) Pop() any {
	n := r.nodes[len(r.nodes)-1]
	r.nodes = r.nodes[:len(r.nodes)-1]
	return n
}

func (d *differ) nodeLess(a, b *node) bool {
	if a.key.drop != b.key.drop {
		return a.key.drop
	}
	// Statements run without a transaction (an online plan's) come after
	// the transactional ones that are ready, so that those share a
	// transaction rather than being cut in two around them.
	if na, nb := !a.key.drop && a.outsideTx(), !b.key.drop && b.outsideTx(); na != nb {
		return nb
	}
	// Grants come after the other changes that are ready: they are what
	// a reviewer reads last, and nothing else waits for them.
	if ga, gb := a.key.step == stepGrants, b.key.step == stepGrants; ga != gb {
		return gb
	}
	ra, rb := kindRank(a.key.id.Kind), kindRank(b.key.id.Kind)
	if a.key.drop {
		ra, rb = -ra, -rb
	}
	if ra != rb {
		return ra < rb
	}
	if a.key.id != b.key.id {
		return d.less(a.key.id, b.key.id)
	}
	return a.key.step < b.key.step
}

// describe names an object for people: `table public.users`.
func describe(id ID) string {
	switch id.Kind {
	case KindSchema, KindExtension:
		return string(id.Kind) + " " + ident(id.Name)
	case KindColumn:
		return "column " + qname(id.Schema, id.Name) + "." + ident(id.Sub)
	case KindConstraint, KindTrigger, KindPolicy:
		return string(id.Kind) + " " + ident(id.Sub) + " on " + qname(id.Schema, id.Name)
	case KindFunction, KindProcedure, KindAggregate:
		return string(id.Kind) + " " + qname(id.Schema, id.Name) + "(" + id.Sub + ")"
	}
	return string(id.Kind) + " " + qname(id.Schema, id.Name)
}
