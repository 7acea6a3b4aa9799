package catalog

import (
	"fmt"
	"strings"
)

// The settings of a table or materialized view that change how it is
// stored, replicated or estimated rather than what it holds: its TOAST
// table's storage parameters, its replica identity, the index CLUSTER ON
// marked, and its columns' storage, compression, statistics target and
// options. None of them rewrites the table or scans it: each is a catalog
// update (SET STORAGE and SET COMPRESSION apply to values written from then
// on; existing values stay as they are until rewritten).
//
// They are set in a node of their own (stepSettings), after the relation,
// its columns, its indexes and constraints, and those of the tables it is a
// partition of, exist in their final form: a TOAST table appears with the
// first column that needs one, USING INDEX and CLUSTER ON name an index, and
// ALTER COLUMN TYPE (which recurses to partitions) resets a column's storage
// and compression to its new type's defaults. Every statement says ONLY, so
// that each partition's settings are its own, as they are in the catalog.

const stepSettings = "settings"

// defaultSettings are what a new column has.
func defaultSettings(col string) ColumnSettings { return ColumnSettings{Column: col, Statistics: -1} }

func settingsOf(list []ColumnSettings, col string) (ColumnSettings, bool) {
	for _, s := range list {
		if s.Column == col {
			return s, true
		}
	}
	return defaultSettings(col), false
}

// splitToastOptions separates the "toast." options from the relation's own.
func splitToastOptions(opts []string) (own, toast []string) {
	for _, o := range opts {
		if strings.HasPrefix(o, "toast.") {
			toast = append(toast, o)
		} else {
			own = append(own, o)
		}
	}
	return own, toast
}

// chain is the table id and the tables it is a partition of, in the
// desired model, nearest first.
func (d *differ) chain(id ID) []ID {
	out := []ID{id}
	for len(out) < 100 {
		t, ok := d.desired.byID[out[len(out)-1]].(Table)
		if !ok || t.PartitionOf == nil {
			break
		}
		out = append(out, ID{Kind: KindTable, Schema: t.PartitionOf.Schema, Name: t.PartitionOf.Name})
	}
	return out
}

// onTables indexes, once per plan, the objects that live on each table,
// view or materialized view.
type onTables struct {
	desired map[ID][]ID // the desired objects on it
	rebuilt map[ID]bool // the plan drops an index or constraint on it
}

func (d *differ) onTables() *onTables {
	if d.on != nil {
		return d.on
	}
	d.on = &onTables{desired: map[ID][]ID{}, rebuilt: map[ID]bool{}}
	for id := range d.desired.byID {
		if t, ok := d.desired.owner(id); ok {
			d.on.desired[t] = append(d.on.desired[t], id)
		}
	}
	for x := range d.dropped {
		if x.Kind == KindIndex || x.Kind == KindConstraint {
			if t, ok := d.live.owner(x); ok {
				d.on.rebuilt[t] = true
			}
		}
	}
	return d.on
}

// settingsAfter orders a relation's settings node after everything on it
// and on the tables it is a partition of.
func (d *differ) settingsAfter(k nodeKey) {
	d.extra = append(d.extra, [2]nodeKey{fwdKey(k.id), k})
	for _, t := range d.chain(k.id) {
		for _, id := range d.onTables().desired[t] {
			d.extra = append(d.extra, [2]nodeKey{fwdKey(id), k})
		}
	}
}

// indexRebuilt reports whether the plan drops an index or constraint of
// table id or of a table it is a partition of: the index a replica identity
// or CLUSTER ON names may be among them (or be one's partition), and loses
// the mark when it is built again.
func (d *differ) indexRebuilt(id ID) bool {
	for _, t := range d.chain(id) {
		if d.onTables().rebuilt[t] {
			return true
		}
	}
	return false
}

// tableSettings emits the settings of table n; l is its live form, nil
// when the plan creates it.
func (d *differ) tableSettings(l *Table, n Table) {
	k := nodeKey{id: n.ID(), step: stepSettings}
	target := "ALTER TABLE ONLY " + qname(n.Schema, n.Name)
	_, nToast := splitToastOptions(n.Options)
	if l != nil {
		// A TOAST table's options are set once its columns exist: ADD
		// COLUMN creates the TOAST table a new column needs.
		_, lToast := splitToastOptions(l.Options)
		if set, reset := optionChanges(lToast, nToast); set != "" || reset != "" {
			if reset != "" {
				d.add(k, stmt(target+" RESET ("+reset+")"))
			}
			if set != "" {
				d.add(k, stmt(target+" SET ("+set+")"))
			}
		}
	}
	d.columnSettings(k, target, l, n)
	rebuilt := l != nil && d.indexRebuilt(n.ID())
	var live Table
	if l != nil {
		live = *l
	}
	if live.ReplicaIdentity != n.ReplicaIdentity || live.ReplicaIndex != n.ReplicaIndex ||
		(rebuilt && n.ReplicaIdentity == "USING INDEX") {
		d.add(k, stmt(target+" REPLICA IDENTITY "+replicaIdentity(n)))
	}
	d.clusterOn(k, "ALTER TABLE "+qname(n.Schema, n.Name), live.ClusterOn, n.ClusterOn, rebuilt)
	if d.has(k) {
		d.settingsAfter(k)
	}
}

func replicaIdentity(t Table) string {
	switch t.ReplicaIdentity {
	case "":
		return "DEFAULT"
	case "USING INDEX":
		return "USING INDEX " + ident(t.ReplicaIndex)
	}
	return t.ReplicaIdentity
}

// clusterOn marks the index CLUSTER ON names, again when it is rebuilt.
func (d *differ) clusterOn(k nodeKey, alter, l, n string, rebuilt bool) {
	switch {
	case n != "" && (n != l || rebuilt):
		d.add(k, stmt(alter+" CLUSTER ON "+ident(n)))
	case n == "" && l != "":
		d.add(k, stmt(alter+" SET WITHOUT CLUSTER"))
	}
}

// matViewSettings emits the settings of materialized view n; l is its live
// form, nil when the plan creates it. (Its storage parameters, TOAST's
// included, are part of its definition: a change recreates it.)
func (d *differ) matViewSettings(l *View, n View) {
	k := nodeKey{id: n.ID(), step: stepSettings}
	alter := "ALTER MATERIALIZED VIEW " + qname(n.Schema, n.Name)
	var live []ColumnSettings
	liveCluster := ""
	rebuilt := false
	if l != nil {
		live, liveCluster = l.ColumnSettings, l.ClusterOn
		rebuilt = d.indexRebuilt(n.ID())
	}
	for _, c := range n.Columns {
		want, _ := settingsOf(n.ColumnSettings, c.Name)
		base, _ := settingsOf(live, c.Name)
		if want.DefaultStorage == "" {
			want.DefaultStorage = base.DefaultStorage
		}
		d.columnChanges(k, alter, base, want, false, false)
	}
	d.clusterOn(k, alter, liveCluster, n.ClusterOn, rebuilt)
	if d.has(k) {
		d.settingsAfter(k)
	}
}

// columnSettings emits the column settings of table n, each compared with
// what the column has once the rest of the plan ran (see settingsBase).
func (d *differ) columnSettings(k nodeKey, target string, l *Table, n Table) {
	names := map[string]bool{}
	var cols []string
	add := func(list []ColumnSettings) {
		for _, s := range list {
			if !names[s.Column] {
				names[s.Column] = true
				cols = append(cols, s.Column)
			}
		}
	}
	add(n.ColumnSettings)
	if l != nil {
		add(l.ColumnSettings)
	}
	parents := d.newPartitionParents(l, n)
	for _, p := range parents {
		add(p.ColumnSettings)
	}
	for _, col := range cols {
		if !d.tableHasColumn(n, col) {
			continue // dropped with its column
		}
		want, _ := settingsOf(n.ColumnSettings, col)
		base := defaultSettings(col)
		if l != nil {
			base = d.settingsBase(*l, n, col)
		}
		// A new partition inherits its parent's storage and compression as
		// they are when it is created, which the plan does not pin down:
		// when either form of the parent's differs from the default, the
		// partition's are set whatever they should be.
		var forceStorage, forceCompression bool
		for _, p := range parents {
			ps, _ := settingsOf(p.ColumnSettings, col)
			forceStorage = forceStorage || ps.Storage != ""
			forceCompression = forceCompression || ps.Compression != ""
			if want.DefaultStorage == "" {
				want.DefaultStorage = ps.DefaultStorage
			}
		}
		if want.DefaultStorage == "" {
			want.DefaultStorage = base.DefaultStorage
		}
		d.columnChanges(k, target, base, want, forceStorage, forceCompression)
	}
}

// newPartitionParents are the live and desired forms of the parent of
// partition n when the plan creates n.
func (d *differ) newPartitionParents(l *Table, n Table) []Table {
	if l != nil || n.PartitionOf == nil {
		return nil
	}
	var out []Table
	p := ID{Kind: KindTable, Schema: n.PartitionOf.Schema, Name: n.PartitionOf.Name}
	for _, m := range []objects{d.desired, d.live} {
		if pt, ok := m.byID[p].(Table); ok {
			out = append(out, pt)
		}
	}
	return out
}

// tableHasColumn reports whether table n has column col in the desired
// model (as its own column, or inherited from a table it is a partition of).
func (d *differ) tableHasColumn(n Table, col string) bool {
	for _, t := range d.chain(n.ID()) {
		if _, ok := d.desired.columns[ColumnID(t.Schema, t.Name, col)]; ok {
			return true
		}
	}
	return false
}

// settingsBase is what column col of existing table n has when its
// settings node runs: a column added again has the defaults; ALTER COLUMN
// TYPE (here or on a table n is a partition of) keeps the statistics target
// and options but resets storage and compression to the new type's.
func (d *differ) settingsBase(l, n Table, col string) ColumnSettings {
	base, _ := settingsOf(l.ColumnSettings, col)
	for _, t := range d.chain(n.ID()) {
		c := ColumnID(t.Schema, t.Name, col)
		if d.dropped[c] {
			base = defaultSettings(col)
		}
		if d.converted[c] {
			base.Storage, base.Compression = "", ""
		}
	}
	return base
}

// columnChanges emits what takes column settings l to n. forceStorage and
// forceCompression set them even when they seem to be as wanted.
func (d *differ) columnChanges(k nodeKey, target string, l, n ColumnSettings, forceStorage, forceCompression bool) {
	alter := target + " ALTER COLUMN " + ident(n.Column)
	if l.Storage != n.Storage || forceStorage {
		storage := n.Storage
		if storage == "" {
			storage = n.DefaultStorage
		}
		if storage != "" {
			d.add(k, stmt(alter+" SET STORAGE "+storage))
		}
	}
	if l.Compression != n.Compression || forceCompression {
		compression := n.Compression
		if compression == "" {
			compression = "DEFAULT"
		}
		d.add(k, stmt(alter+" SET COMPRESSION "+compression))
	}
	if l.Statistics != n.Statistics {
		d.add(k, stmt(fmt.Sprintf("%s SET STATISTICS %d", alter, n.Statistics)))
	}
	if set, reset := optionChanges(l.Options, n.Options); set != "" || reset != "" {
		if reset != "" {
			d.add(k, stmt(alter+" RESET ("+reset+")"))
		}
		if set != "" {
			d.add(k, stmt(alter+" SET ("+set+")"))
		}
	}
}
