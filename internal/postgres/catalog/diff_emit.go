package catalog

import (
	"fmt"
	"math"
	"regexp"
	"strings"

	"github.com/ptah-run/ptah/internal/postgres"
)

// Extra node steps of one object.
const (
	stepFinish = "finish" // a replaced type: drop the old one once nothing uses it
	stepOwner  = "owner"  // a sequence: OWNED BY, once its column exists
	stepDisown = "disown" // a sequence: OWNED BY NONE, before its old column goes
)

// replacedSuffix names the old type while its columns move to the new one.
const replacedSuffix = "__ptah_old"

func alterTable(schema, table string) string { return "ALTER TABLE " + qname(schema, table) }

func alterColumn(col ID) string {
	return alterTable(col.Schema, col.Name) + " ALTER COLUMN " + ident(col.Sub)
}

// tableIsNew reports whether this plan creates the table the object lives
// on: work on an empty table carries no hazards.
func (d *differ) tableIsNew(schema, table string) bool {
	id := ID{Kind: KindTable, Schema: schema, Name: table}
	_, inLive := d.live.byID[id]
	return !inLive || d.dropped[id]
}

func (d *differ) emitDrop(id ID, obj any) {
	if t, ok := d.live.owner(id); ok && d.dropped[t] && !isForeignKey(obj) {
		d.alias[dropKey(id)] = dropKey(t)
		return
	}
	if d.dropWithParent(id) {
		return
	}
	if parent, ok := parentColumn(d.live, id); ok && d.dropped[parent] {
		// The parent's DROP COLUMN drops it.
		d.alias[dropKey(id)] = dropKey(parent)
		return
	}
	if s, ok := obj.(Sequence); ok && s.OwnedBy != nil {
		col := ColumnID(s.OwnedBy.Schema, s.OwnedBy.Table, s.OwnedBy.Column)
		if d.dropped[col] {
			// Dropping the owning column drops the sequence too.
			d.alias[dropKey(id)] = dropKey(col)
			return
		}
	}
	switch o := obj.(type) {
	case Schema:
		d.add(dropKey(id), stmt("DROP SCHEMA "+ident(o.Name)))
	case Extension:
		d.add(dropKey(id), stmt("DROP EXTENSION "+ident(o.Name)))
	case Enum, Composite:
		d.add(dropKey(id), stmt("DROP TYPE "+qname(id.Schema, id.Name)))
	case Domain:
		d.add(dropKey(id), stmt("DROP DOMAIN "+qname(id.Schema, id.Name)))
	case Sequence:
		d.add(dropKey(id), stmt("DROP SEQUENCE "+qname(id.Schema, id.Name), postgres.HazardDeletesData))
	case Table:
		d.add(dropKey(id), stmt("DROP TABLE "+qname(id.Schema, id.Name), postgres.HazardDeletesData))
	case Column:
		hazards := []postgres.Hazard{postgres.HazardDeletesData}
		if _, recreated := d.desired.byID[id]; (recreated && o.Generated) || o.Virtual {
			// Derived from other columns, recomputed on re-creation; a
			// virtual one stores nothing at all.
			hazards = nil
		}
		d.add(dropKey(id), stmt(alterTable(id.Schema, id.Name)+" DROP COLUMN "+ident(o.Name), hazards...))
	case Constraint:
		d.add(dropKey(id), stmt(alterTable(o.Schema, o.Table)+" DROP CONSTRAINT "+ident(o.Name)))
	case Index:
		switch {
		case d.replacesOnline(id), d.replacesPartitionedOnline(id):
			// emitReplaceOnline (emitPartitionedReplace) drops it, once its
			// successor is built.
		case d.dropsOnline(id, o):
			d.add(dropKey(id), dropIndexOnline(o))
		default:
			d.add(dropKey(id), stmt("DROP INDEX "+qname(o.Schema, o.Name)))
		}
	case View:
		var hazards []postgres.Hazard
		if _, recreated := d.desired.byID[id]; o.Materialized && !recreated {
			hazards = []postgres.Hazard{postgres.HazardDeletesData} // its stored rows, which nothing recomputes
		}
		d.add(dropKey(id), stmt("DROP "+viewWord(o)+" "+qname(o.Schema, o.Name), hazards...))
	case Function:
		d.add(dropKey(id), stmt("DROP "+routineWord(o)+" "+qname(o.Schema, o.Name)+"("+o.IdentityArgs+")"))
	case Trigger:
		d.add(dropKey(id), stmt("DROP TRIGGER "+ident(o.Name)+" ON "+qname(o.Schema, o.Table)))
	case Policy:
		d.add(dropKey(id), stmt("DROP POLICY "+ident(o.Name)+" ON "+qname(o.Schema, o.Table)))
	case Collation:
		d.add(dropKey(id), stmt("DROP COLLATION "+qname(o.Schema, o.Name)))
	case TSConfig:
		d.add(dropKey(id), stmt("DROP TEXT SEARCH CONFIGURATION "+qname(o.Schema, o.Name)))
	}
}

func isForeignKey(obj any) bool {
	c, ok := obj.(Constraint)
	return ok && c.Type == ForeignKey
}

func routineWord(f Function) string {
	switch {
	case f.Procedure:
		return "PROCEDURE"
	case f.Aggregate != "":
		return "AGGREGATE"
	}
	return "FUNCTION"
}

// emitReplaceStart moves a replaced enum or domain out of the way; the new
// type is created under the name, columns are converted, then the old one
// is dropped (stepFinish).
func (d *differ) emitReplaceStart(id ID) {
	word := "TYPE"
	if id.Kind == KindDomain {
		word = "DOMAIN"
	}
	d.add(dropKey(id), stmt(fmt.Sprintf("ALTER %s %s RENAME TO %s", word, qname(id.Schema, id.Name), ident(id.Name+replacedSuffix))))
	d.add(nodeKey{id: id, step: stepFinish}, stmt(fmt.Sprintf("DROP %s %s", word, qname(id.Schema, id.Name+replacedSuffix))))
	for col := range d.converted {
		if d.columnIsOfType(col, id) {
			d.extra = append(d.extra, [2]nodeKey{fwdKey(col), {id: id, step: stepFinish}})
		}
	}
}

func (d *differ) emitCreate(id ID, obj any) {
	k := fwdKey(id)
	switch o := obj.(type) {
	case Schema:
		d.add(k, stmt("CREATE SCHEMA "+ident(o.Name)))
		d.comment(k, "SCHEMA "+ident(o.Name), "", o.Comment)
	case Extension:
		d.add(k, stmt(fmt.Sprintf("CREATE EXTENSION %s WITH SCHEMA %s", ident(o.Name), ident(o.Schema))))
		d.comment(k, "EXTENSION "+ident(o.Name), "", o.Comment)
	case Enum:
		labels := make([]string, len(o.Labels))
		for i, l := range o.Labels {
			labels[i] = literal(l)
		}
		d.add(k, stmt(fmt.Sprintf("CREATE TYPE %s AS ENUM (%s)", qname(o.Schema, o.Name), strings.Join(labels, ", "))))
		d.comment(k, "TYPE "+qname(o.Schema, o.Name), "", o.Comment)
	case Domain:
		d.add(k, stmt(createDomain(o)))
		d.comment(k, "DOMAIN "+qname(o.Schema, o.Name), "", o.Comment)
		for _, c := range o.Constraints {
			d.comment(k, domainConstraint(o, c), "", c.Comment)
		}
	case Composite:
		attrs := make([]string, len(o.Attributes))
		for i, a := range o.Attributes {
			attrs[i] = attributeDef(a)
		}
		d.add(k, stmt(fmt.Sprintf("CREATE TYPE %s AS (%s)", qname(o.Schema, o.Name), strings.Join(attrs, ", "))))
		d.comment(k, "TYPE "+qname(o.Schema, o.Name), "", o.Comment)
		for _, a := range o.Attributes {
			d.comment(k, "COLUMN "+qname(o.Schema, o.Name)+"."+ident(a.Name), "", a.Comment)
		}
	case Sequence:
		d.add(k, stmt("CREATE "+unloggedWord(o.Unlogged)+"SEQUENCE "+qname(o.Schema, o.Name)+" "+sequenceClause(o.Options)))
		d.comment(k, "SEQUENCE "+qname(o.Schema, o.Name), "", o.Comment)
		d.emitOwner(o, nil)
	case Table:
		d.created[id] = true
		d.add(k, stmt(createTable(o, d.partitionColumnOptions(o)), d.partitionHazards(o)...))
		d.comment(k, "TABLE "+qname(o.Schema, o.Name), "", o.Comment)
		for _, c := range o.Columns {
			col := ColumnID(o.Schema, o.Name, c.Name)
			d.alias[fwdKey(col)] = k
			d.comment(k, "COLUMN "+qname(o.Schema, o.Name)+"."+ident(c.Name), "", c.Comment)
		}
		d.tableSettings(nil, o)
		d.rowSecurity(Table{}, o)
	case Column:
		if d.tableIsNew(id.Schema, id.Name) {
			return // part of CREATE TABLE
		}
		if _, ok := parentColumn(d.desired, id); ok {
			d.alterPartitionColumn(id, nil, o) // the parent's ADD COLUMN adds it
			return
		}
		d.add(k, stmt(alterTable(id.Schema, id.Name)+" ADD COLUMN "+columnDef(o), d.addColumnHazards(o)...))
		d.comment(k, "COLUMN "+qname(id.Schema, id.Name)+"."+ident(o.Name), "", o.Comment)
	case Constraint:
		if d.emitPartitionKey(id, o) {
			return
		}
		// After what its columns become (an online NOT NULL waits for
		// its check's validation, which comes late).
		for _, c := range o.Columns {
			d.extra = append(d.extra, [2]nodeKey{fwdKey(ColumnID(o.Schema, o.Table, c)), k})
		}
		switch {
		case d.validatesOnline(o):
			d.emitValidated(k, o)
		case d.keysOnline(o):
			d.emitKeyOnline(k, o)
		default:
			d.add(k, stmt(alterTable(o.Schema, o.Table)+" ADD CONSTRAINT "+ident(o.Name)+" "+o.Definition, d.constraintHazards(o)...))
		}
		d.comment(k, "CONSTRAINT "+ident(o.Name)+" ON "+qname(o.Schema, o.Table), "", o.Comment)
	case Index:
		if d.emitPartitionIndex(id, o) {
			return
		}
		// A partitioned table's index is created ON ONLY it, as printed:
		// each partition's is created and attached on its own.
		switch {
		case d.replacesPartitionedOnline(id):
			d.emitPartitionedReplace(id, o) // online_partition.go
			return
		case d.replacesOnline(id):
			d.emitReplaceOnline(k, id, o)
		case d.buildsOnline(id, o):
			d.add(k, d.createIndexOnline(id, o, o.Name))
		default:
			d.add(k, stmt(o.Definition, d.indexHazards(id, o)...))
		}
		d.comment(k, "INDEX "+qname(o.Schema, o.Name), "", o.Comment)
	case View:
		d.add(k, stmt(createView(o)))
		what := viewWord(o)
		d.comment(k, what+" "+qname(o.Schema, o.Name), "", o.Comment)
		for _, c := range o.Columns {
			d.comment(k, "COLUMN "+qname(o.Schema, o.Name)+"."+ident(c.Name), "", c.Comment)
		}
		if o.Materialized {
			d.matViewSettings(nil, o)
		}
	case Function:
		d.add(k, stmt(strings.TrimSpace(o.Definition)))
		d.comment(k, routineWord(o)+" "+qname(o.Schema, o.Name)+"("+o.IdentityArgs+")", "", o.Comment)
	case Trigger:
		d.add(k, stmt(o.Definition))
		d.triggerState(k, Trigger{}, o)
		d.comment(k, "TRIGGER "+ident(o.Name)+" ON "+qname(o.Schema, o.Table), "", o.Comment)
	case Policy:
		d.add(k, stmt(createPolicy(o)))
		d.comment(k, policyTarget(o), "", o.Comment)
	case Collation:
		d.add(k, stmt(createCollation(o)))
		d.comment(k, "COLLATION "+qname(o.Schema, o.Name), "", o.Comment)
	case TSConfig:
		d.add(k, stmt("CREATE TEXT SEARCH CONFIGURATION "+qname(o.Schema, o.Name)+" (PARSER = "+o.Parser+")"))
		d.add(k, alterMappings(TSConfig{}, o)...)
		d.comment(k, "TEXT SEARCH CONFIGURATION "+qname(o.Schema, o.Name), "", o.Comment)
	}
}

// partitionHazards: a new partition of a table with a default partition
// makes PostgreSQL scan the default one for rows that now belong to it.
func (d *differ) partitionHazards(t Table) []postgres.Hazard {
	if t.PartitionOf == nil || d.tableIsNew(t.PartitionOf.Schema, t.PartitionOf.Name) {
		return nil
	}
	for _, lt := range d.live.m.Tables {
		if sameName(lt.PartitionOf, t.PartitionOf) && lt.PartitionBound == "DEFAULT" && !d.dropped[lt.ID()] {
			return []postgres.Hazard{postgres.HazardScansTable, postgres.HazardMayFail}
		}
	}
	return nil
}

// indexHazards: building an index on rows that already exist holds off
// writes while it reads them all; a unique one may find duplicates.
func (d *differ) indexHazards(id ID, ix Index) []postgres.Hazard {
	owner, ok := d.live.owner(id)
	if !ok {
		owner, ok = d.desired.owner(id)
	}
	if _, existed := d.live.byID[owner]; !ok || !existed || d.dropped[owner] {
		return nil
	}
	if t, _ := d.desired.byID[owner].(Table); t.PartitionKey != "" {
		return nil // a partitioned table holds no rows
	}
	hazards := []postgres.Hazard{postgres.HazardBuildsIndex}
	if strings.HasPrefix(ix.Definition, "CREATE UNIQUE ") {
		hazards = append(hazards, postgres.HazardMayFail)
	}
	return hazards
}

func viewWord(v View) string {
	if v.Materialized {
		return "MATERIALIZED VIEW"
	}
	return "VIEW"
}

// comment sets a comment when it differs from what the object had.
func (d *differ) comment(k nodeKey, target, old, new string) {
	if old == new {
		return
	}
	value := "NULL"
	if new != "" {
		value = literal(new)
	}
	d.add(k, stmt("COMMENT ON "+target+" IS "+value))
}

// emitOwner sets a sequence's OWNED BY once both it and the column exist.
// A sequence that outlives the column that owns it (the column, or its
// table, is dropped or recreated) is let go of first: dropping the owner
// would drop the sequence with it.
func (d *differ) emitOwner(s Sequence, old *ColumnRef) {
	if old != nil {
		oldCol := ColumnID(old.Schema, old.Table, old.Column)
		if d.dropped[oldCol] {
			k := nodeKey{id: s.ID(), step: stepDisown}
			d.add(k, stmt("ALTER SEQUENCE "+qname(s.Schema, s.Name)+" OWNED BY NONE"))
			d.extra = append(d.extra, [2]nodeKey{k, dropKey(oldCol)})
			old = nil
		}
	}
	if sameColumnRef(s.OwnedBy, old) {
		return
	}
	k := nodeKey{id: s.ID(), step: stepOwner}
	owner := "NONE"
	if c := s.OwnedBy; c != nil {
		owner = qname(c.Schema, c.Table) + "." + ident(c.Column)
		col := ColumnID(c.Schema, c.Table, c.Column)
		d.extra = append(d.extra, [2]nodeKey{fwdKey(col), k}, [2]nodeKey{fwdKey(ID{Kind: KindTable, Schema: c.Schema, Name: c.Table}), k})
	}
	d.add(k, stmt("ALTER SEQUENCE "+qname(s.Schema, s.Name)+" OWNED BY "+owner))
	d.extra = append(d.extra, [2]nodeKey{fwdKey(s.ID()), k})
}

func sameColumnRef(a, b *ColumnRef) bool {
	if a == nil || b == nil {
		return a == b
	}
	return *a == *b
}

func (d *differ) emitAlter(id ID, lv, dv any) {
	k := fwdKey(id)
	switch l := lv.(type) {
	case Schema:
		d.comment(k, "SCHEMA "+ident(l.Name), l.Comment, dv.(Schema).Comment)
	case Extension:
		n := dv.(Extension)
		if l.Version != n.Version {
			d.add(k, stmt(fmt.Sprintf("ALTER EXTENSION %s UPDATE TO %s", ident(n.Name), literal(n.Version))))
		}
		d.comment(k, "EXTENSION "+ident(l.Name), l.Comment, n.Comment)
	case Enum:
		d.alterEnum(k, l, dv.(Enum))
	case Domain:
		d.alterDomain(k, l, dv.(Domain))
	case Composite:
		d.alterComposite(k, l, dv.(Composite))
	case Sequence:
		n := dv.(Sequence)
		if opts := changedSequenceOptions(l.Options, n.Options); opts != "" {
			d.add(k, stmt("ALTER SEQUENCE "+qname(n.Schema, n.Name)+" "+opts, boundsHazards(l.Options, n.Options, l.LastValue)...))
		}
		d.comment(k, "SEQUENCE "+qname(n.Schema, n.Name), l.Comment, n.Comment)
		d.emitOwner(n, l.OwnedBy)
		d.sequencePersistence(l, n)
	case Table:
		d.alterTable(k, l, dv.(Table))
	case Column:
		d.alterColumn(id, l, dv.(Column))
	case Constraint:
		n := dv.(Constraint)
		if n.Parent != "" {
			d.alterPartitionKey(id, l, n)
			return
		}
		if d.onlyValidates(l, n) {
			d.emitValidate(k, n)
		}
		if l.Deferrable != n.Deferrable || l.Deferred != n.Deferred {
			d.add(k, stmt(alterTable(n.Schema, n.Table)+" ALTER CONSTRAINT "+ident(n.Name)+" "+deferrability(n)))
		}
		d.comment(k, "CONSTRAINT "+ident(n.Name)+" ON "+qname(n.Schema, n.Table), l.Comment, n.Comment)
	case Index:
		if n := dv.(Index); l.Parent != nil || n.Parent != nil {
			d.alterPartitionIndex(id, l, n)
			return
		}
		d.comment(k, "INDEX "+qname(l.Schema, l.Name), l.Comment, dv.(Index).Comment)
	case View:
		n := dv.(View)
		d.populate(k, l, n)
		d.comment(k, viewWord(n)+" "+qname(n.Schema, n.Name), l.Comment, n.Comment)
		for i, c := range n.Columns {
			d.comment(k, "COLUMN "+qname(n.Schema, n.Name)+"."+ident(c.Name), l.Columns[i].Comment, c.Comment)
		}
		if n.Materialized {
			d.matViewSettings(&l, n)
		}
	case Function:
		n := dv.(Function)
		if l.Definition != n.Definition {
			d.add(k, stmt(strings.TrimSpace(n.Definition)))
		}
		d.comment(k, routineWord(n)+" "+qname(n.Schema, n.Name)+"("+n.IdentityArgs+")", l.Comment, n.Comment)
	case Trigger:
		n := dv.(Trigger)
		d.triggerState(k, l, n)
		d.comment(k, "TRIGGER "+ident(n.Name)+" ON "+qname(n.Schema, n.Table), l.Comment, n.Comment)
	case Policy:
		n := dv.(Policy)
		if alter := alterPolicy(l, n); alter != "" {
			d.add(k, stmt(alter))
		}
		d.comment(k, policyTarget(n), l.Comment, n.Comment)
	case Collation:
		n := dv.(Collation)
		d.comment(k, "COLLATION "+qname(n.Schema, n.Name), l.Comment, n.Comment)
	case TSConfig:
		n := dv.(TSConfig)
		d.add(k, alterMappings(l, n)...)
		d.comment(k, "TEXT SEARCH CONFIGURATION "+qname(n.Schema, n.Name), l.Comment, n.Comment)
	}
}

// triggerState sets a trigger's enabled state. Without ONLY, ALTER TABLE
// sets the trigger's clones on partitions too, as a new partition's clone
// copies its parent's.
func (d *differ) triggerState(k nodeKey, l, n Trigger) {
	if l.Enabled == n.Enabled {
		return
	}
	state := n.Enabled
	if state == "" {
		state = "ENABLE"
	}
	d.add(k, stmt(alterTable(n.Schema, n.Table)+" "+state+" TRIGGER "+ident(n.Name)))
}

// populate fills or empties a materialized view whose populated state
// changes. Emptying it throws its rows away until the next refresh.
func (d *differ) populate(k nodeKey, l, n View) {
	if l.WithNoData == n.WithNoData {
		return
	}
	name := "REFRESH MATERIALIZED VIEW " + qname(n.Schema, n.Name)
	if n.WithNoData {
		d.add(k, stmt(name+" WITH NO DATA", postgres.HazardDeletesData))
	} else {
		d.add(k, stmt(name))
	}
}

// alterEnum adds n's new labels to l in place, or replaces the type when
// they cannot be added (see classify).
//
// The ADD VALUE statements do not join the enum's node: they go to
// d.labels, which Diff puts at the very start of the plan, so that the
// writer can commit them in a transaction of their own before anything uses
// the new labels (PostgreSQL refuses to use a label in the transaction that
// added it, SQLSTATE 55P04). Moving them ahead of every other statement is
// safe because an ADD VALUE needs only two things, both true before the
// plan starts:
//
//   - the type, under its name. alterEnum only runs for a type present in
//     both models (emitAlter), and not replaced (checked here): so it exists
//     in the live database and no statement of the plan creates, renames
//     or drops it. (A type the plan creates is created whole by CREATE
//     TYPE, with all its labels; a replaced one is renamed and created
//     again, with no ADD VALUE.)
//   - the neighbour label its position names: either a label the type
//     already has, or one added by an earlier ADD VALUE of this same loop,
//     which keeps its order.
//
// Nothing else in the plan can be needed by an ADD VALUE: it reads no
// table, function or other type. Each statement says IF NOT EXISTS, so
// that a plan whose first transaction committed and whose rest did not can
// be run again as it stands (a fresh plan would not add the labels at all).
func (d *differ) alterEnum(k nodeKey, l, n Enum) {
	name := qname(n.Schema, n.Name)
	if d.replaced[l.ID()] {
		d.emitCreate(l.ID(), n)
		return
	}
	added, _ := addedLabels(l.Labels, n.Labels)
	isNew := map[string]bool{}
	for _, a := range added {
		isNew[a] = true
	}
	for i, label := range n.Labels {
		if !isNew[label] {
			continue
		}
		where := ""
		switch {
		case i > 0:
			// n.Labels[i-1] exists by now: an old label, or one added just before.
			where = " AFTER " + literal(n.Labels[i-1])
		case len(l.Labels) > 0:
			// The first label: before the first old one (n.Labels[1] may be
			// new too, and not added yet). With no old label, no position.
			where = " BEFORE " + literal(l.Labels[0])
		}
		d.labels = append(d.labels, stmt("ALTER TYPE "+name+" ADD VALUE IF NOT EXISTS "+literal(label)+where))
	}
	d.comment(k, "TYPE "+name, l.Comment, n.Comment)
}

func (d *differ) alterDomain(k nodeKey, l, n Domain) {
	name := qname(n.Schema, n.Name)
	if d.replaced[l.ID()] {
		d.emitCreate(l.ID(), n)
		return
	}
	if l.Default != n.Default {
		if n.Default == "" {
			d.add(k, stmt("ALTER DOMAIN "+name+" DROP DEFAULT"))
		} else {
			d.add(k, stmt("ALTER DOMAIN "+name+" SET DEFAULT "+n.Default))
		}
	}
	switch {
	case l.NotNull && !n.NotNull:
		d.add(k, stmt("ALTER DOMAIN "+name+" DROP NOT NULL"))
	case !l.NotNull && n.NotNull && n.NotNullName != "":
		d.add(k, stmt("ALTER DOMAIN "+name+" ADD CONSTRAINT "+ident(n.NotNullName)+" NOT NULL", d.domainCheckHazards(n.ID())...))
	case !l.NotNull && n.NotNull:
		d.add(k, stmt("ALTER DOMAIN "+name+" SET NOT NULL", d.domainCheckHazards(n.ID())...))
	case l.NotNull && n.NotNull && l.NotNullName != n.NotNullName:
		d.add(k, stmt("ALTER DOMAIN "+name+" RENAME CONSTRAINT "+
			ident(notNullName(l.NotNullName, n.Name, ""))+" TO "+ident(notNullName(n.NotNullName, n.Name, ""))))
	}
	old := map[string]string{}
	for _, c := range l.Constraints {
		old[c.Name] = c.Definition
	}
	want := map[string]string{}
	for _, c := range n.Constraints {
		want[c.Name] = c.Definition
	}
	for _, c := range l.Constraints {
		if def, ok := want[c.Name]; !ok || def != c.Definition {
			d.add(k, stmt("ALTER DOMAIN "+name+" DROP CONSTRAINT "+ident(c.Name)))
		}
	}
	oldComment := map[string]string{}
	for _, c := range l.Constraints {
		oldComment[c.Name] = c.Comment
	}
	for _, c := range n.Constraints {
		if def, ok := old[c.Name]; !ok || def != c.Definition {
			d.add(k, stmt("ALTER DOMAIN "+name+" ADD CONSTRAINT "+ident(c.Name)+" "+c.Definition, d.domainCheckHazards(n.ID())...))
			oldComment[c.Name] = "" // a new constraint has no comment
		}
		d.comment(k, domainConstraint(n, c), oldComment[c.Name], c.Comment)
	}
	d.comment(k, "DOMAIN "+name, l.Comment, n.Comment)
}

func (d *differ) alterComposite(k nodeKey, l, n Composite) {
	name := qname(n.Schema, n.Name)
	if d.replaced[l.ID()] {
		d.emitCreate(l.ID(), n)
		return
	}
	// Only values stored in table columns can be lost or fail to convert.
	var deletes, mayFail []postgres.Hazard
	if d.storedInColumns(l.ID()) {
		deletes, mayFail = []postgres.Hazard{postgres.HazardDeletesData}, []postgres.Hazard{postgres.HazardMayFail}
	}
	old := map[string]Attribute{}
	for _, a := range l.Attributes {
		old[a.Name] = a
	}
	want := map[string]bool{}
	for _, a := range n.Attributes {
		want[a.Name] = true
	}
	for _, a := range l.Attributes {
		if !want[a.Name] {
			d.add(k, stmt("ALTER TYPE "+name+" DROP ATTRIBUTE "+ident(a.Name), deletes...))
		}
	}
	for _, a := range n.Attributes {
		o, ok := old[a.Name]
		switch {
		case !ok:
			d.add(k, stmt("ALTER TYPE "+name+" ADD ATTRIBUTE "+attributeDef(a)))
		case o.Type != a.Type || o.Collation != a.Collation:
			def := a.Type
			if a.Collation != "" {
				def += " COLLATE " + a.Collation
			}
			d.add(k, stmt("ALTER TYPE "+name+" ALTER ATTRIBUTE "+ident(a.Name)+" TYPE "+def, mayFail...))
		}
		d.comment(k, "COLUMN "+name+"."+ident(a.Name), o.Comment, a.Comment)
	}
	d.comment(k, "TYPE "+name, l.Comment, n.Comment)
}

func (d *differ) storedInColumns(typ ID) bool {
	for _, dep := range d.live.deps {
		if dep.RefObject == typ && dep.Object.Kind == KindColumn {
			return true
		}
	}
	return false
}

func (d *differ) alterTable(k nodeKey, l, n Table) {
	name := qname(n.Schema, n.Name)
	if l.Unlogged != n.Unlogged {
		mode := "LOGGED"
		if n.Unlogged {
			mode = "UNLOGGED"
		}
		d.add(k, stmt(alterTable(n.Schema, n.Name)+" SET "+mode, postgres.HazardRewritesTable))
	}
	lOwn, _ := splitToastOptions(l.Options)
	nOwn, _ := splitToastOptions(n.Options)
	if set, reset := optionChanges(lOwn, nOwn); set != "" || reset != "" {
		if reset != "" {
			d.add(k, stmt(alterTable(n.Schema, n.Name)+" RESET ("+reset+")"))
		}
		if set != "" {
			d.add(k, stmt(alterTable(n.Schema, n.Name)+" SET ("+set+")"))
		}
	}
	d.comment(k, "TABLE "+name, l.Comment, n.Comment)
	d.tableSettings(&l, n)
	d.rowSecurity(l, n)
}

// optionChanges compares reloptions ("key=value") and returns what to SET
// and what to RESET.
func optionChanges(l, n []string) (set, reset string) {
	old := map[string]string{}
	for _, o := range l {
		key, val, _ := strings.Cut(o, "=")
		old[key] = val
	}
	want := map[string]bool{}
	var sets, resets []string
	for _, o := range n {
		key, val, _ := strings.Cut(o, "=")
		want[key] = true
		if v, ok := old[key]; !ok || v != val {
			sets = append(sets, o)
		}
	}
	for _, o := range l {
		key, _, _ := strings.Cut(o, "=")
		if !want[key] {
			resets = append(resets, key)
		}
	}
	return strings.Join(sets, ", "), strings.Join(resets, ", ")
}

func (d *differ) alterColumn(id ID, l, n Column) {
	if _, ok := parentColumn(d.desired, id); ok {
		d.alterPartitionColumn(id, &l, n)
		return
	}
	k := fwdKey(id)
	oldDefault := l.Default
	if d.resetDefault[id] {
		oldDefault = "" // dropped by the column's drop node
	}
	if l.Identity != "" && n.Identity == "" {
		d.add(k, stmt(alterColumn(id)+" DROP IDENTITY"))
	}
	if d.converted[id] {
		if oldDefault != "" {
			d.add(k, stmt(alterColumn(id)+" DROP DEFAULT"))
			oldDefault = ""
		}
		d.add(k, stmt(alterColumn(id)+" TYPE "+typeWithCollation(n.Type, n.Collation)+" USING "+d.conversion(id, l, n), d.conversionHazards(id, l, n)...))
	}
	if oldDefault != n.Default && !n.Generated {
		if n.Default == "" {
			d.add(k, stmt(alterColumn(id)+" DROP DEFAULT"))
		} else {
			d.add(k, stmt(alterColumn(id)+" SET DEFAULT "+n.Default))
		}
	}
	switch {
	case l.NotNull && !n.NotNull:
		d.add(k, stmt(alterColumn(id)+" DROP NOT NULL"))
	case !l.NotNull && n.NotNull:
		set := alterColumn(id) + " SET NOT NULL"
		if n.NotNullName != "" {
			set = alterTable(id.Schema, id.Name) + " ADD CONSTRAINT " + ident(n.NotNullName) + " NOT NULL " + ident(id.Sub)
		}
		if d.setsNotNullOnline(id) {
			d.emitNotNullOnline(k, id, set)
		} else {
			d.add(k, stmt(set, postgres.HazardMayFail, postgres.HazardScansTable))
		}
	case l.NotNull && n.NotNull && l.NotNullName != n.NotNullName:
		d.add(k, stmt(alterTable(id.Schema, id.Name)+" RENAME CONSTRAINT "+
			ident(notNullName(l.NotNullName, id.Name, id.Sub))+" TO "+ident(notNullName(n.NotNullName, id.Name, id.Sub))))
	}
	switch {
	case n.Identity != "" && l.Identity == "":
		d.add(k, stmt(alterColumn(id)+" ADD "+identityClause(n)))
	case n.Identity != "" && l.Identity != n.Identity:
		d.add(k, stmt(alterColumn(id)+" SET GENERATED "+identityWord(n.Identity)))
	}
	if n.Identity != "" && l.Identity != "" && l.IdentityOptions != nil && n.IdentityOptions != nil {
		if opts := changedSequenceOptions(*l.IdentityOptions, *n.IdentityOptions); opts != "" {
			d.add(k, stmt(alterColumn(id)+" "+identitySetOptions(*l.IdentityOptions, *n.IdentityOptions),
				boundsHazards(*l.IdentityOptions, *n.IdentityOptions, l.IdentityLastValue)...))
		}
	}
	d.comment(k, "COLUMN "+qname(id.Schema, id.Name)+"."+ident(id.Sub), l.Comment, n.Comment)
}

// conversion is the USING expression that turns the column's old value
// into the new type (see convertValue).
func (d *differ) conversion(id ID, l, n Column) string {
	return d.convertValue(ident(id.Sub), l.Type, n.Type, cast{column: id})
}

// conversionHazards: a binary-coercible change (a wider varchar or numeric,
// varchar to text, a new collation) only touches the catalog; any other
// change rewrites the table, and may fail on existing values unless every
// old value fits the new type.
func (d *differ) conversionHazards(id ID, l, n Column) []postgres.Hazard {
	if typ, ok := d.replacedTypeOf(id); ok {
		hazards := []postgres.Hazard{postgres.HazardRewritesTable}
		if typ.Kind == KindComposite {
			deletes, mayFail := d.compositeLoses(typ)
			if deletes {
				hazards = append(hazards, postgres.HazardDeletesData)
			}
			if mayFail {
				hazards = append(hazards, postgres.HazardMayFail)
			}
			return hazards
		}
		if d.replacementMayFail(typ) {
			hazards = append(hazards, postgres.HazardMayFail)
		}
		return hazards
	}
	switch {
	case binaryCoercible(l.Type, n.Type):
		// Indexes survive a binary-coercible change, except where it changes
		// their collation (the order they are built in): those are rebuilt.
		if l.Collation != n.Collation && d.indexed(id) {
			return []postgres.Hazard{postgres.HazardBuildsIndex}
		}
		return nil
	case widening(l.Type, n.Type):
		return []postgres.Hazard{postgres.HazardRewritesTable}
	}
	return []postgres.Hazard{postgres.HazardRewritesTable, postgres.HazardMayFail}
}

// indexed says whether an index, or a key or exclusion constraint's index,
// covers the live column col.
func (d *differ) indexed(col ID) bool {
	for _, dep := range d.live.deps {
		if dep.RefObject != col {
			continue
		}
		switch o := d.live.byID[dep.Object].(type) {
		case Index:
			return true
		case Constraint:
			if o.Type == PrimaryKey || o.Type == Unique || o.Type == Exclusion {
				return true
			}
		}
	}
	return false
}

func (d *differ) replacedTypeOf(col ID) (ID, bool) {
	for typ := range d.replaced {
		if d.columnIsOfType(col, typ) {
			return typ, true
		}
	}
	return ID{}, false
}

// replacementMayFail: a value of the old type may have no place in the
// new one (an enum label removed, a domain on another base type).
func (d *differ) replacementMayFail(typ ID) bool {
	l, isEnum := d.live.byID[typ].(Enum)
	if !isEnum {
		return true
	}
	want := map[string]bool{}
	for _, label := range d.desired.byID[typ].(Enum).Labels {
		want[label] = true
	}
	for _, label := range l.Labels {
		if !want[label] {
			return true
		}
	}
	return false
}

func binaryCoercible(from, to string) bool {
	const vc, num = "character varying", "numeric"
	switch {
	case from == to:
		return true // only the collation changes
	case strings.HasPrefix(from, vc):
		if to == "text" || to == vc {
			return true
		}
		a, okA := typmod(from, vc+"(%d)")
		b, okB := typmod(to, vc+"(%d)")
		return okA && okB && b >= a
	case strings.HasPrefix(from, num+"("):
		if to == num {
			return true
		}
		var p1, s1, p2, s2 int
		_, err1 := fmt.Sscanf(from, num+"(%d,%d)", &p1, &s1)
		_, err2 := fmt.Sscanf(to, num+"(%d,%d)", &p2, &s2)
		return err1 == nil && err2 == nil && s1 == s2 && p2 >= p1
	}
	return false
}

func typmod(typ, format string) (int, bool) {
	var n int
	_, err := fmt.Sscanf(typ, format, &n)
	return n, err == nil
}

// widening reports conversions every old value survives.
func widening(from, to string) bool {
	if strings.HasSuffix(from, "[]") && strings.HasSuffix(to, "[]") {
		return widening(strings.TrimSuffix(from, "[]"), strings.TrimSuffix(to, "[]"))
	}
	switch {
	case to == "text", binaryCoercible(from, to):
		return true
	case from == "smallint":
		return to == "integer" || to == "bigint"
	case from == "integer":
		return to == "bigint"
	case from == "real":
		return to == "double precision"
	case from == "timestamp without time zone":
		return to == "timestamp with time zone"
	case strings.HasPrefix(from, "numeric"):
		// As many digits before and after the point, or more.
		var p1, s1, p2, s2 int
		_, err1 := fmt.Sscanf(from, "numeric(%d,%d)", &p1, &s1)
		_, err2 := fmt.Sscanf(to, "numeric(%d,%d)", &p2, &s2)
		return to == "numeric" || (err1 == nil && err2 == nil && s2 >= s1 && p2-s2 >= p1-s1)
	}
	return false
}

// domainCheckHazards: a constraint added to a domain is checked against
// every value of it stored in a column, which reads each table that has
// one (under SHARE: writes wait).
func (d *differ) domainCheckHazards(domain ID) []postgres.Hazard {
	if len(d.liveLockIndex().typeUsers[domain]) == 0 {
		return []postgres.Hazard{postgres.HazardMayFail}
	}
	return []postgres.Hazard{postgres.HazardMayFail, postgres.HazardScansTable}
}

func (d *differ) addColumnHazards(c Column) []postgres.Hazard {
	switch {
	case c.Virtual && c.NotNull:
		// Nothing is written, but every row is computed to check it.
		return []postgres.Hazard{postgres.HazardScansTable, postgres.HazardMayFail}
	case c.Virtual:
		return nil // only the catalog changes
	case d.constrainedDomain(c.Type):
		// PostgreSQL checks the domain's constraints against every row's
		// new value (the default, or NULL), rewriting the table to do so.
		return []postgres.Hazard{postgres.HazardRewritesTable, postgres.HazardMayFail}
	case c.Generated || c.Identity != "":
		return []postgres.Hazard{postgres.HazardRewritesTable}
	case c.Default != "" && volatileDefault(c.Default):
		return []postgres.Hazard{postgres.HazardRewritesTable}
	case c.NotNull && c.Default == "":
		return []postgres.Hazard{postgres.HazardMayFail}
	}
	return nil
}

// constrainedDomain says whether typ is a desired domain with a NOT NULL or
// CHECK constraint, its own or its base domain's.
func (d *differ) constrainedDomain(typ string) bool {
	for range d.desired.m.Domains { // a chain of domains is no longer than their number
		dom, ok := d.desiredDomain(typ)
		if !ok {
			return false
		}
		if dom.NotNull || len(dom.Constraints) > 0 {
			return true
		}
		typ = dom.BaseType
	}
	return false
}

// desiredDomain is the desired domain whose name format_type prints as typ.
func (d *differ) desiredDomain(typ string) (Domain, bool) {
	for _, dom := range d.desired.m.Domains {
		if typ == qname(dom.Schema, dom.Name) || typ == dom.Schema+"."+dom.Name {
			return dom, true
		}
	}
	return Domain{}, false
}

// volatileDefault is a conservative guess from the text: a default that
// calls a function other than the usual stable ones may be volatile, and a
// volatile default is computed for, and written to, every existing row.
func volatileDefault(expr string) bool {
	rest := expr
	for _, stable := range []string{"now()", "transaction_timestamp()", "statement_timestamp()"} {
		rest = strings.ReplaceAll(rest, stable, "")
	}
	return functionCall.MatchString(rest)
}

// functionCall matches a name followed by "(", but not a type modifier
// after a cast ("::numeric(10,2)").
var functionCall = regexp.MustCompile(`(^|[^:A-Za-z0-9_."])[A-Za-z_][A-Za-z0-9_."]*\(`)

func (d *differ) constraintHazards(c Constraint) []postgres.Hazard {
	if d.tableIsNew(c.Schema, c.Table) || strings.HasSuffix(c.Definition, notValid) {
		// A constraint declared NOT VALID checks no existing row.
		return nil
	}
	switch c.Type {
	case PrimaryKey, Unique, Exclusion:
		return []postgres.Hazard{postgres.HazardBuildsIndex, postgres.HazardMayFail}
	}
	return []postgres.Hazard{postgres.HazardScansTable, postgres.HazardMayFail}
}

func typeWithCollation(typ, collation string) string {
	if collation != "" {
		return typ + " COLLATE " + collation
	}
	return typ
}

func columnDef(c Column) string {
	var b strings.Builder
	b.WriteString(ident(c.Name) + " " + typeWithCollation(c.Type, c.Collation))
	switch {
	case c.Virtual:
		b.WriteString(" GENERATED ALWAYS AS (" + c.Default + ") VIRTUAL")
	case c.Generated:
		b.WriteString(" GENERATED ALWAYS AS (" + c.Default + ") STORED")
	case c.Identity != "":
		b.WriteString(" " + identityClause(c))
	case c.Default != "":
		b.WriteString(" DEFAULT " + c.Default)
	}
	b.WriteString(notNullClause(c.NotNull, c.NotNullName))
	return b.String()
}

// notNullClause is a column's or domain's NOT NULL, naming its constraint
// when the model has a name for it.
func notNullClause(notNull bool, name string) string {
	switch {
	case !notNull:
		return ""
	case name != "":
		return " CONSTRAINT " + ident(name) + " NOT NULL"
	}
	return " NOT NULL"
}

// notNullName is the name of the NOT NULL constraint of column col of
// table (or of domain table, when col is ""), given the model's name for it.
func notNullName(name, table, col string) string {
	if name != "" {
		return name
	}
	return defaultNotNullName(table, col)
}

func identityWord(mode string) string {
	if mode == "a" {
		return "ALWAYS"
	}
	return "BY DEFAULT"
}

func identityClause(c Column) string {
	s := "GENERATED " + identityWord(c.Identity) + " AS IDENTITY"
	if o := c.IdentityOptions; o != nil && *o != defaultSequenceOptions(o.Type) {
		// The defaults of MINVALUE, MAXVALUE and START depend on the
		// direction, so once anything differs, say everything.
		all := sequenceClause(*o)
		s += " (" + strings.TrimPrefix(all, "AS "+o.Type+" ") + ")"
	}
	return s
}

// identitySetOptions is ALTER COLUMN's list of identity options that
// differ: each one prefixed with SET. The sequence type is left out: an
// identity column's sequence follows the column's type.
func identitySetOptions(l, n SequenceOptions) string {
	var out []string
	for _, o := range sequenceOptionChanges(l, n) {
		if !strings.HasPrefix(o, "AS ") {
			out = append(out, "SET "+o)
		}
	}
	return strings.Join(out, " ")
}

// boundsHazards: PostgreSQL refuses new bounds (MINVALUE, MAXVALUE, or
// those of a new AS type) that leave out the sequence's current value. When
// that value is known (last, the last value handed out) the check is exact;
// when it is not (none handed out yet, or not readable), narrower bounds
// may leave it out.
func boundsHazards(l, n SequenceOptions, last *int64) []postgres.Hazard {
	mayFail := []postgres.Hazard{postgres.HazardMayFail}
	if last != nil {
		if *last < n.Min || *last > n.Max {
			return mayFail
		}
		return nil
	}
	if n.Min > l.Min || n.Max < l.Max {
		return mayFail
	}
	return nil
}

// defaultSequenceOptions are what CREATE SEQUENCE gives a sequence of typ
// when told nothing else.
func defaultSequenceOptions(typ string) SequenceOptions {
	max := int64(math.MaxInt64)
	switch typ {
	case "integer":
		max = math.MaxInt32
	case "smallint":
		max = math.MaxInt16
	}
	return SequenceOptions{Type: typ, Start: 1, Increment: 1, Min: 1, Max: max, Cache: 1}
}

func unloggedWord(unlogged bool) string {
	if unlogged {
		return "UNLOGGED "
	}
	return ""
}

// sequencePersistence sets a sequence LOGGED or UNLOGGED, after the table
// that owns it changed its own: ALTER TABLE ... SET [UN]LOGGED changes the
// sequences the table owns as well (from PostgreSQL 15, the first with
// unlogged sequences), which is then all there is to do. (A sequence that
// keeps its persistence while the table that owns it changes takes a second
// plan: this plan cannot tell whether the server changes it.)
func (d *differ) sequencePersistence(l, n Sequence) {
	if l.Unlogged == n.Unlogged {
		return
	}
	if o := l.OwnedBy; o != nil {
		id := ID{Kind: KindTable, Schema: o.Schema, Name: o.Table}
		lt, ok1 := d.live.byID[id].(Table)
		nt, ok2 := d.desired.byID[id].(Table)
		if ok1 && ok2 && !d.dropped[id] && lt.Unlogged != nt.Unlogged && nt.Unlogged == n.Unlogged {
			return
		}
	}
	k := nodeKey{id: n.ID(), step: stepSettings}
	mode := "LOGGED"
	if n.Unlogged {
		mode = "UNLOGGED"
	}
	d.add(k, stmt("ALTER SEQUENCE "+qname(n.Schema, n.Name)+" SET "+mode))
	d.extra = append(d.extra, [2]nodeKey{fwdKey(n.ID()), k})
	for _, s := range []Sequence{l, n} {
		if s.OwnedBy != nil {
			d.extra = append(d.extra, [2]nodeKey{fwdKey(ID{Kind: KindTable, Schema: s.OwnedBy.Schema, Name: s.OwnedBy.Table}), k})
		}
	}
}

func sequenceClause(o SequenceOptions) string {
	cycle := "NO CYCLE"
	if o.Cycle {
		cycle = "CYCLE"
	}
	return fmt.Sprintf("AS %s INCREMENT BY %d MINVALUE %d MAXVALUE %d START WITH %d CACHE %d %s",
		o.Type, o.Increment, o.Min, o.Max, o.Start, o.Cache, cycle)
}

// changedSequenceOptions lists the options of n that differ from l, in
// ALTER SEQUENCE syntax; "" when none.
func changedSequenceOptions(l, n SequenceOptions) string {
	return strings.Join(sequenceOptionChanges(l, n), " ")
}

// sequenceOptionChanges is one clause per option of n that differs from l.
func sequenceOptionChanges(l, n SequenceOptions) []string {
	var parts []string
	if l.Type != n.Type {
		parts = append(parts, "AS "+n.Type)
	}
	if l.Increment != n.Increment {
		parts = append(parts, fmt.Sprintf("INCREMENT BY %d", n.Increment))
	}
	if l.Min != n.Min {
		parts = append(parts, fmt.Sprintf("MINVALUE %d", n.Min))
	}
	if l.Max != n.Max {
		parts = append(parts, fmt.Sprintf("MAXVALUE %d", n.Max))
	}
	if l.Start != n.Start {
		parts = append(parts, fmt.Sprintf("START WITH %d", n.Start))
	}
	if l.Cache != n.Cache {
		parts = append(parts, fmt.Sprintf("CACHE %d", n.Cache))
	}
	if l.Cycle != n.Cycle {
		if n.Cycle {
			parts = append(parts, "CYCLE")
		} else {
			parts = append(parts, "NO CYCLE")
		}
	}
	return parts
}

// createTable is CREATE TABLE t; for a partition, columns is the column
// list of PARTITION OF (see partitionColumnOptions).
func createTable(t Table, columns string) string {
	var b strings.Builder
	b.WriteString("CREATE ")
	if t.Unlogged {
		b.WriteString("UNLOGGED ")
	}
	b.WriteString("TABLE " + qname(t.Schema, t.Name))
	if t.PartitionOf != nil {
		b.WriteString(" PARTITION OF " + qname(t.PartitionOf.Schema, t.PartitionOf.Name) + columns)
		b.WriteString(" " + t.PartitionBound)
	} else {
		cols := make([]string, len(t.Columns))
		for i, c := range t.Columns {
			cols[i] = "\n    " + columnDef(c)
		}
		b.WriteString(" (" + strings.Join(cols, ",") + "\n)")
	}
	if t.PartitionKey != "" {
		b.WriteString(" PARTITION BY " + t.PartitionKey)
	}
	if len(t.Options) > 0 {
		b.WriteString(" WITH (" + strings.Join(t.Options, ", ") + ")")
	}
	return b.String()
}

func createDomain(o Domain) string {
	s := "CREATE DOMAIN " + qname(o.Schema, o.Name) + " AS " + typeWithCollation(o.BaseType, o.Collation)
	if o.Default != "" {
		s += " DEFAULT " + o.Default
	}
	s += notNullClause(o.NotNull, o.NotNullName)
	for _, c := range o.Constraints {
		s += " CONSTRAINT " + ident(c.Name) + " " + c.Definition
	}
	return s
}

func domainConstraint(o Domain, c DomainConstraint) string {
	return "CONSTRAINT " + ident(c.Name) + " ON DOMAIN " + qname(o.Schema, o.Name)
}

func attributeDef(a Attribute) string {
	return ident(a.Name) + " " + typeWithCollation(a.Type, a.Collation)
}

func createView(v View) string {
	s := "CREATE " + viewWord(v) + " " + qname(v.Schema, v.Name)
	if len(v.Options) > 0 {
		s += " WITH (" + strings.Join(v.Options, ", ") + ")"
	}
	body := strings.TrimSuffix(strings.TrimSpace(v.Definition), ";")
	if v.Materialized && v.WithNoData {
		body += "\nWITH NO DATA"
	}
	return s + " AS\n" + body
}

func deferrability(c Constraint) string {
	switch {
	case c.Deferred:
		return "DEFERRABLE INITIALLY DEFERRED"
	case c.Deferrable:
		return "DEFERRABLE INITIALLY IMMEDIATE"
	}
	return "NOT DEFERRABLE"
}
