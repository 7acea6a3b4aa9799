package catalog

import (
	"strings"

	"github.com/ptah-run/ptah/internal/postgres"
)

// The columns of a partition are its parent's: their type, collation,
// generation and identity follow the parent, and statements on the parent
// reach every partition (ADD and DROP COLUMN, TYPE, SET and DROP DEFAULT,
// SET and DROP NOT NULL). A partition's own are its columns' comments, and
// a default and NOT NULL that may differ from the parent's: those the diff
// plans on the partition, after the parent's statements, as far as they
// differ from what the parent's statements leave on it.

// parentColumn is the column of the partition's parent that column col of
// a partition (in o's model) inherits.
func parentColumn(o objects, col ID) (ID, bool) {
	t, ok := o.byID[ID{Kind: KindTable, Schema: col.Schema, Name: col.Name}].(Table)
	if !ok || t.PartitionOf == nil {
		return ID{}, false
	}
	return ColumnID(t.PartitionOf.Schema, t.PartitionOf.Name, col.Sub), true
}

// ancestorColumns are the columns col inherits from, nearest first.
func ancestorColumns(o objects, col ID) []ID {
	var out []ID
	for p, ok := parentColumn(o, col); ok && len(out) < 100; p, ok = parentColumn(o, p) {
		out = append(out, p)
	}
	return out
}

// setsDefault says whether the plan's statements on column col set its
// default, and with it its partitions'.
func (d *differ) setsDefault(col ID) bool {
	n := d.desired.columns[col]
	l, inLive := d.live.columns[col]
	if _, isPartition := parentColumn(d.desired, col); isPartition {
		return !n.Generated && n.Default != d.inheritedDefault(col)
	}
	if !inLive || d.dropped[col] {
		return true // ADD COLUMN
	}
	return l.Default != n.Default || ((d.converted[col] || d.resetDefault[col]) && l.Default != "")
}

// inheritedDefault is the default partition column col has once its
// ancestors' statements ran: the nearest one's that sets it, else its own.
func (d *differ) inheritedDefault(col ID) string {
	for _, a := range ancestorColumns(d.desired, col) {
		if d.setsDefault(a) {
			return d.desired.columns[a].Default
		}
	}
	if d.resetDefault[col] {
		return ""
	}
	return d.live.columns[col].Default
}

// setsNotNull is setsDefault for NOT NULL.
func (d *differ) setsNotNull(col ID) bool {
	n := d.desired.columns[col]
	l, inLive := d.live.columns[col]
	if _, isPartition := parentColumn(d.desired, col); isPartition {
		return n.NotNull != d.inheritedNotNull(col)
	}
	return !inLive || d.dropped[col] || l.NotNull != n.NotNull
}

// inheritedNotNull is inheritedDefault for NOT NULL.
func (d *differ) inheritedNotNull(col ID) bool {
	for _, a := range ancestorColumns(d.desired, col) {
		if d.setsNotNull(a) {
			return d.desired.columns[a].NotNull
		}
	}
	return d.live.columns[col].NotNull
}

// alterPartitionColumn plans what is a partition's own on column id: its
// default and NOT NULL where they differ from what its parent's statements
// leave, and its comment. live is nil when the partition's parent adds the
// column (or adds it again).
func (d *differ) alterPartitionColumn(id ID, live *Column, n Column) {
	k := fwdKey(id)
	if parent, ok := parentColumn(d.desired, id); ok {
		d.extra = append(d.extra, [2]nodeKey{fwdKey(parent), k})
	}
	if d.setsDefault(id) {
		if n.Default == "" {
			d.add(k, stmt(alterColumn(id)+" DROP DEFAULT"))
		} else {
			d.add(k, stmt(alterColumn(id)+" SET DEFAULT "+n.Default))
		}
	}
	if d.setsNotNull(id) {
		if n.NotNull {
			d.add(k, stmt(alterColumn(id)+" SET NOT NULL", postgres.HazardMayFail, postgres.HazardScansTable))
		} else {
			d.add(k, stmt(alterColumn(id)+" DROP NOT NULL"))
		}
	}
	old := ""
	if live != nil {
		old = live.Comment
	}
	d.comment(k, "COLUMN "+qname(id.Schema, id.Name)+"."+ident(id.Sub), old, n.Comment)
}

// partitionColumnOptions is the column list of CREATE TABLE ... PARTITION
// OF: a new partition takes its parent's columns as they are by then (its
// creation waits for the parent's column statements), so it says only
// where its default or NOT NULL differ.
func (d *differ) partitionColumnOptions(t Table) string {
	var cols []string
	for _, c := range t.Columns {
		parent, ok := parentColumn(d.desired, ColumnID(t.Schema, t.Name, c.Name))
		if !ok {
			continue
		}
		p := d.desired.columns[parent]
		d.extra = append(d.extra, [2]nodeKey{fwdKey(parent), fwdKey(t.ID())})
		opts := ""
		if c.Default != p.Default && c.Default != "" && !c.Generated {
			opts += " DEFAULT " + c.Default
		}
		if c.NotNull && !p.NotNull {
			opts += " NOT NULL"
		}
		if opts != "" {
			cols = append(cols, ident(c.Name)+" WITH OPTIONS"+opts)
		}
	}
	if len(cols) == 0 {
		return ""
	}
	return " (" + strings.Join(cols, ", ") + ")"
}
