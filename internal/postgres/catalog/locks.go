package catalog

import (
	"slices"

	"github.com/ptah-run/ptah/internal/postgres"
)

// What each statement of a plan locks, as far as the models tell: enough
// for postgres.PlanPhases to cut a plan that would lock more objects than
// one transaction may hold into transactions that each fit.
//
// PostgreSQL keeps, for the rest of a transaction, a lock on every
// relation a statement touched, and most of those do not fit its
// per-backend fast path: a table it creates (with its TOAST table and
// that table's index), each index it builds, a table it alters (and, when
// the table is rewritten, all its indexes), a table a foreign key
// references, the tables and indexes a drop removes. The names below are
// lock keys, not SQL: equal keys are the same object, counted once per
// transaction however many statements lock it. The estimate errs on the
// large side (every table counts a TOAST table, every foreign key the
// indexes its validation query may open).

// lockIndex is what the estimate needs of one model, indexed once.
type lockIndex struct {
	indexes    map[ID][]string // a table or materialized view: its indexes, constraints' included
	partitions map[ID][]ID     // a partitioned table: its partitions
	refs       map[ID][]ID     // an object: the relations it depends on (a view's tables, a function's)
	typeUsers  map[ID][]ID     // a type: the tables with columns of it
	fkTargets  map[ID][]string // a table: the tables its foreign keys reference
	dropped    map[ID][]string // a table: the other objects its drop locks (types, constraints, defaults)
}

func newLockIndex(o objects) *lockIndex {
	li := &lockIndex{indexes: map[ID][]string{}, partitions: map[ID][]ID{}, refs: map[ID][]ID{},
		typeUsers: map[ID][]ID{}, fkTargets: map[ID][]string{}, dropped: map[ID][]string{}}
	for _, ix := range o.m.Indexes {
		if t, ok := o.owner(ix.ID()); ok {
			li.indexes[t] = append(li.indexes[t], relKey(ix.Schema, ix.Name))
		}
	}
	for _, t := range o.m.Tables {
		k := relKey(t.Schema, t.Name)
		objs := []string{k + " (row type)", k + " (array type)"}
		for _, c := range t.Columns {
			if c.Default != "" {
				objs = append(objs, k+" (default "+c.Name+")")
			}
		}
		li.dropped[t.ID()] = objs
	}
	for _, c := range o.m.Constraints {
		t := ID{Kind: KindTable, Schema: c.Schema, Name: c.Table}
		li.dropped[t] = append(li.dropped[t], relKey(c.Schema, c.Table)+" (constraint "+c.Name+")")
		switch {
		case c.Type == PrimaryKey || c.Type == Unique || c.Type == Exclusion:
			li.indexes[t] = append(li.indexes[t], relKey(c.Schema, c.Name))
		case c.Type == ForeignKey && c.RefTable != nil:
			li.fkTargets[t] = append(li.fkTargets[t], relKey(c.RefTable.Schema, c.RefTable.Name))
		}
	}
	for _, t := range o.m.Tables {
		if p := t.PartitionOf; p != nil {
			parent := ID{Kind: KindTable, Schema: p.Schema, Name: p.Name}
			li.partitions[parent] = append(li.partitions[parent], t.ID())
		}
	}
	for _, dep := range o.deps {
		ref := dep.RefObject
		switch ref.Kind {
		case KindColumn:
			ref = ID{Kind: KindTable, Schema: ref.Schema, Name: ref.Name}
		case KindEnum, KindDomain, KindComposite:
			if dep.Object.Kind == KindColumn {
				li.typeUsers[ref] = append(li.typeUsers[ref], ID{Kind: KindTable, Schema: dep.Object.Schema, Name: dep.Object.Name})
			}
			continue
		case KindTable, KindView, KindMatView:
		default:
			continue
		}
		if _, ok := o.byID[ref]; ok && ref != dep.Object {
			li.refs[dep.Object] = append(li.refs[dep.Object], ref)
		}
	}
	return li
}

func relKey(schema, name string) string { return qname(schema, name) }

// lockSet collects the keys of one statement.
type lockSet struct{ keys []string }

func (l *lockSet) add(keys ...string) { l.keys = append(l.keys, keys...) }

func (l *lockSet) rel(id ID) { l.add(relKey(id.Schema, id.Name)) }

// storage: a relation with storage of its own, and its TOAST table and
// the TOAST table's index.
func (l *lockSet) storage(id ID) {
	k := relKey(id.Schema, id.Name)
	l.add(k, k+" (toast)", k+" (toast index)")
}

// whole: a table or materialized view with everything PostgreSQL locks
// when it drops or rewrites it: its storage, its indexes, its partitions.
func (l *lockSet) whole(li *lockIndex, id ID) {
	l.storage(id)
	l.add(li.indexes[id]...)
	for _, p := range li.partitions[id] {
		l.whole(li, p)
	}
}

// statementLocks names what stmt, emitted for node k, locks.
func (d *differ) statementLocks(k nodeKey, stmt postgres.Statement) []string {
	if d.liveLocks == nil {
		d.liveLocks, d.desiredLocks = newLockIndex(d.live), newLockIndex(d.desired)
	}
	live, desired := d.liveLocks, d.desiredLocks
	id := k.id
	rewrite := slices.Contains(stmt.Hazards, postgres.HazardRewritesTable)
	var l lockSet
	if k.step == stepGrants {
		privilegeLockKeys(&l, id)
		return l.keys
	}
	switch id.Kind {
	case KindTable:
		switch {
		case k.drop:
			l.whole(live, id)
			l.add(live.dropped[id]...)
			l.add(live.fkTargets[id]...) // dropping its foreign keys locks them
		case d.tableIsNew(id.Schema, id.Name):
			d.createdTable(&l, id)
		case rewrite:
			l.whole(live, id)
		default:
			l.rel(id)
		}
	case KindColumn:
		table := ID{Kind: KindTable, Schema: id.Schema, Name: id.Name}
		switch {
		case d.tableIsNew(id.Schema, id.Name):
			d.createdTable(&l, table)
		case k.drop || rewrite:
			l.whole(live, table)
		default:
			l.rel(table)
			if c, ok := d.desired.columns[id]; ok && c.Identity != "" {
				l.add(relKey(id.Schema, id.Name) + " (identity " + id.Sub + ")")
			}
		}
	case KindConstraint:
		table := ID{Kind: KindTable, Schema: id.Schema, Name: id.Name}
		l.rel(table)
		c, ok := d.desired.byID[id].(Constraint)
		if k.drop || !ok {
			c, _ = d.live.byID[id].(Constraint)
		}
		switch c.Type {
		case PrimaryKey, Unique, Exclusion:
			l.add(relKey(c.Schema, c.Name))
		case ForeignKey:
			if r := c.RefTable; r != nil {
				ref := ID{Kind: KindTable, Schema: r.Schema, Name: r.Name}
				l.rel(ref)
				if !k.drop {
					// Validating the key plans a query over both tables,
					// which opens every index of each.
					l.add(desired.indexes[table]...)
					l.add(desired.indexes[ref]...)
				}
			}
		}
	case KindIndex:
		ix, ok := d.desired.byID[id].(Index)
		if k.drop || !ok {
			ix, _ = d.live.byID[id].(Index)
		}
		table := ID{Kind: KindTable, Schema: ix.Schema, Name: ix.Table}
		l.rel(table)
		l.add(relKey(ix.Schema, ix.Name))
		for _, p := range desired.partitions[table] {
			l.rel(p)
			l.add(relKey(p.Schema, p.Name) + " (index " + ix.Name + ")")
		}
	case KindView, KindMatView:
		if k.drop {
			l.rel(id)
			if id.Kind == KindMatView {
				l.whole(live, id)
			}
			break
		}
		l.rel(id)
		if id.Kind == KindMatView {
			l.storage(id)
		}
		for _, r := range desired.refs[id] {
			l.rel(r)
		}
	case KindFunction, KindProcedure:
		if !k.drop {
			for _, r := range desired.refs[id] {
				l.rel(r) // a SQL-standard body is parsed, and locks what it reads
			}
		}
	case KindTrigger:
		l.rel(ID{Schema: id.Schema, Name: id.Name})
	case KindPolicy:
		l.rel(ID{Schema: id.Schema, Name: id.Name})
		if !k.drop {
			for _, r := range desired.refs[id] {
				l.rel(r) // the tables its expressions read are opened to parse them
			}
		}
	case KindSequence:
		l.rel(id)
		if s, ok := d.desired.byID[id].(Sequence); ok && k.step == stepOwner && s.OwnedBy != nil {
			l.add(relKey(s.OwnedBy.Schema, s.OwnedBy.Table))
		}
	case KindEnum, KindDomain, KindComposite:
		l.add("type " + qname(id.Schema, id.Name))
		if id.Kind == KindComposite {
			l.rel(id)
		}
		if id.Kind == KindDomain && !k.drop {
			// A new constraint or NOT NULL is checked against every
			// column of the domain.
			for _, t := range live.typeUsers[id] {
				l.rel(t)
			}
		}
	case KindSchema:
		l.add("schema " + ident(id.Name))
	case KindExtension:
		l.add("extension " + ident(id.Name))
	}
	return l.keys
}

// createdTable: a table the plan creates, with its TOAST table, the
// sequences of its identity columns, and, for a partition, the parent and
// the partition's copy of each of the parent's indexes.
func (d *differ) createdTable(l *lockSet, id ID) {
	t, ok := d.desired.byID[id].(Table)
	if !ok {
		l.rel(id)
		return
	}
	if t.PartitionKey == "" {
		l.storage(id)
	} else {
		l.rel(id) // a partitioned table has no storage
	}
	for _, c := range t.Columns {
		if c.Identity != "" {
			l.add(relKey(id.Schema, id.Name) + " (identity " + c.Name + ")")
		}
	}
	if p := t.PartitionOf; p != nil {
		parent := ID{Kind: KindTable, Schema: p.Schema, Name: p.Name}
		l.rel(parent)
		for _, ix := range d.desiredLocks.indexes[parent] {
			l.add(ix, relKey(id.Schema, id.Name)+" (index "+ix+")")
		}
	}
}
