package catalog

import (
	"slices"
	"strings"

	"github.com/ptah-run/ptah/internal/postgres"
)

// The locks each statement takes, as the reviewer reads them beside it and
// as the writer uses them to decide whether a statement could queue the
// application behind it (Statement.Locks): the modes stronger than ROW
// EXCLUSIVE it takes on relations that existed before the plan, the
// strongest per relation. The acceptance suite checks every statement it
// plans against the locks PostgreSQL takes (acceptance_locks_test.go).
//
// The relation a statement works on comes from its node (the object it
// creates, alters or drops); the mode from what the statement does, read
// from its SQL, which the differ wrote. A relation the plan creates, or
// drops and creates again, counts as new: no session of the application
// waits for it.

// lockList gathers one statement's locks, the strongest mode per relation.
type lockList struct {
	d     *differ
	drop  bool
	sql   string // the statement, as written
	locks []postgres.Lock
}

// add records mode on the live relation id (a table, view, materialized
// view, sequence or index), unless the plan makes it.
func (l *lockList) add(id ID, mode postgres.LockMode) {
	if !l.d.existing(id, l.drop) {
		return
	}
	l.addKey(qname(id.Schema, id.Name), mode)
}

func (l *lockList) addKey(rel string, mode postgres.LockMode) {
	if mode <= postgres.RowExclusive {
		return
	}
	for i := range l.locks {
		if l.locks[i].Relation == rel {
			l.locks[i].Mode = max(l.locks[i].Mode, mode)
			return
		}
	}
	l.locks = append(l.locks, postgres.Lock{Relation: rel, Mode: mode})
}

// indexes records mode on every live index of table (those of its keys
// included), as a drop of the table takes it.
func (l *lockList) indexes(table ID, mode postgres.LockMode) {
	if !l.d.existing(table, l.drop) {
		return
	}
	for _, k := range l.d.liveLockIndex().indexes[table] {
		l.addKey(k, mode)
	}
}

// keptIndexes records mode on every live index of table the plan does not
// drop (those it drops go before the table changes), as a rewrite
// rebuilds them. An index replaced online is dropped only once its
// successor is built, outside the transaction, after the rewrite: the
// rewrite rebuilds it too.
func (l *lockList) keptIndexes(table ID, mode postgres.LockMode) {
	if !l.d.existing(table, l.drop) {
		return
	}
	for _, ix := range l.d.live.m.Indexes {
		switch {
		case ix.Schema != table.Schema || ix.Table != table.Name:
		case l.d.replacesOnline(ix.ID()):
			l.addKey(qname(ix.Schema, ix.Name), mode) // the live one, though the plan drops it
		case !l.d.dropped[ix.ID()]:
			l.add(ix.ID(), mode)
		}
	}
	for _, c := range l.d.live.m.Constraints {
		if c.Schema == table.Schema && c.Table == table.Name && !l.d.dropped[c.ID()] &&
			(c.Type == PrimaryKey || c.Type == Unique || c.Type == Exclusion) {
			l.add(ID{Kind: KindIndex, Schema: c.Schema, Name: c.Name}, mode)
		}
	}
}

// existing reports whether the relation id is one of the live database's
// that the plan neither creates nor drops and creates again. A drop
// statement (drop) locks the live one it drops.
func (d *differ) existing(id ID, drop bool) bool {
	rel := relationID(d.live, id)
	if rel == nil {
		return false
	}
	return drop || !d.dropped[*rel]
}

// relationID finds the live object named like id among the kinds that are
// relations: id's own kind first, then the others (a lock names a
// relation, not a kind). Indexes of keys are found through their
// constraint.
func relationID(o objects, id ID) *ID {
	for _, k := range []Kind{id.Kind, KindTable, KindView, KindMatView, KindSequence, KindIndex} {
		c := ID{Kind: k, Schema: id.Schema, Name: id.Name}
		if _, ok := o.byID[c]; ok {
			return &c
		}
	}
	for _, c := range o.m.Constraints {
		if c.Schema == id.Schema && c.Name == id.Name && (c.Type == PrimaryKey || c.Type == Unique || c.Type == Exclusion) {
			cid := c.ID()
			return &cid
		}
	}
	return nil
}

func (d *differ) liveLockIndex() *lockIndex {
	if d.liveLocks == nil {
		d.liveLocks, d.desiredLocks = newLockIndex(d.live), newLockIndex(d.desired)
	}
	return d.liveLocks
}

// statementLockModes is what stmt, emitted for node k, locks.
func (d *differ) statementLockModes(k nodeKey, stmt postgres.Statement) []postgres.Lock {
	sql := shapeSQL(stmt.SQL)
	// A statement that drops an object locks the live one, whatever node
	// it belongs to (an index replaced online is dropped by its own
	// forward node).
	l := &lockList{d: d, drop: k.drop || strings.HasPrefix(sql, "DROP "), sql: stmt.SQL}
	id := k.id
	table := ID{Kind: KindTable, Schema: id.Schema, Name: id.Name}
	switch {
	case k.step == stepGrants:
		// GRANT and REVOKE update the object's catalog row and take no
		// lock stronger than ROW EXCLUSIVE on a relation (pg_locks agrees,
		// in the acceptance suite's privileges_* cases).
	case strings.HasPrefix(sql, "COMMENT ON "):
		d.commentLocks(l, k, sql)
	case strings.HasPrefix(sql, "SELECT "), strings.HasPrefix(sql, "CREATE FUNCTION"),
		strings.HasPrefix(sql, "CREATE OR REPLACE FUNCTION"), strings.HasPrefix(sql, "CREATE PROCEDURE"),
		strings.HasPrefix(sql, "CREATE OR REPLACE PROCEDURE"):
		// setval takes ROW EXCLUSIVE; a routine's body locks nothing.
	case id.Kind == KindTable || id.Kind == KindColumn:
		switch {
		case strings.HasPrefix(sql, "DROP TABLE"):
			d.dropTableLocks(l, table)
		case strings.HasPrefix(sql, "CREATE "):
			d.createTableLocks(l, table)
		case strings.HasPrefix(sql, "ALTER TABLE"):
			d.alterTableLocks(l, k, table, stmt, sql)
		default:
			l.add(table, postgres.AccessExclusive)
		}
	case id.Kind == KindConstraint:
		d.constraintLocks(l, k, sql)
	case id.Kind == KindIndex:
		d.indexLocks(l, k, sql)
	case id.Kind == KindView || id.Kind == KindMatView:
		switch {
		case strings.HasPrefix(sql, "REFRESH MATERIALIZED VIEW CONCURRENTLY"):
			l.add(id, postgres.Exclusive)
		case strings.HasPrefix(sql, "ALTER MATERIALIZED VIEW"):
			l.add(id, alterTableMode(sql))
			d.clusterLocks(l, id, sql)
		default:
			l.add(id, postgres.AccessExclusive)
			if id.Kind == KindMatView && k.drop {
				l.indexes(id, postgres.AccessExclusive)
			}
		}
	case id.Kind == KindPolicy:
		// CREATE, ALTER and DROP POLICY: on the table only, policies
		// being no partition's but their own table's.
		l.add(table, postgres.AccessExclusive)
	case id.Kind == KindTrigger:
		mode := postgres.ShareRowExclusive
		if strings.HasPrefix(sql, "DROP TRIGGER") {
			mode = postgres.AccessExclusive
		}
		// A trigger on a partitioned table is cloned onto its partitions.
		d.onPartitions(l, table, mode)
	case id.Kind == KindSequence:
		switch {
		case strings.HasPrefix(sql, "ALTER SEQUENCE") && !strings.Contains(sql, " SET LOGGED") && !strings.Contains(sql, " SET UNLOGGED"):
			l.add(id, postgres.ShareRowExclusive)
		default:
			l.add(id, postgres.AccessExclusive)
		}
	case id.Kind == KindDomain:
		if strings.HasPrefix(sql, "ALTER DOMAIN") && (strings.Contains(sql, " ADD CONSTRAINT ") || strings.Contains(sql, " SET NOT NULL")) {
			// Checked against every column of the domain.
			for _, t := range d.liveLockIndex().typeUsers[id] {
				l.add(t, postgres.Share)
			}
		}
	}
	return l.locks
}

// alterTableMode is the lock ALTER TABLE takes on its table for what sql
// does (PostgreSQL's AlterTableGetLockLevel, for the subcommands the
// differ writes): ACCESS EXCLUSIVE unless the subcommand is one of those
// that take less.
func alterTableMode(sql string) postgres.LockMode {
	switch {
	case strings.Contains(sql, " VALIDATE CONSTRAINT "),
		strings.Contains(sql, " SET STATISTICS "),
		strings.Contains(sql, " CLUSTER ON "),
		strings.Contains(sql, " SET WITHOUT CLUSTER"),
		strings.Contains(sql, " ATTACH PARTITION "),
		// Storage parameters (fillfactor, autovacuum's, TOAST's) and
		// column options (n_distinct).
		strings.Contains(sql, " SET ("), strings.Contains(sql, " RESET ("):
		return postgres.ShareUpdateExclusive
	case strings.Contains(sql, " FOREIGN KEY "),
		strings.Contains(sql, " ENABLE TRIGGER "), strings.Contains(sql, " DISABLE TRIGGER "),
		strings.Contains(sql, " ENABLE ALWAYS TRIGGER "), strings.Contains(sql, " ENABLE REPLICA TRIGGER "):
		return postgres.ShareRowExclusive
	}
	return postgres.AccessExclusive
}

// alterTableLocks: an ALTER TABLE of a table or one of its columns. It
// takes its mode on the table and, unless ONLY, on every partition; a
// rewrite rebuilds every index, a type change without one those over the
// column; a column's foreign keys and identity sequence go with it.
func (d *differ) alterTableLocks(l *lockList, k nodeKey, table ID, stmt postgres.Statement, sql string) {
	mode := alterTableMode(sql)
	rewrite := slices.Contains(stmt.Hazards, postgres.HazardRewritesTable)
	tables := []ID{table}
	if !strings.HasPrefix(sql, "ALTER TABLE ONLY ") {
		tables = d.withPartitions(table)
	}
	col := ""
	if k.id.Kind == KindColumn {
		col = k.id.Sub
	}
	typeChange := col != "" && strings.Contains(sql, " TYPE ")
	for _, t := range tables {
		l.add(t, mode)
		switch {
		case rewrite:
			l.keptIndexes(t, postgres.AccessExclusive)
		case typeChange:
			d.indexesOver(l, t, col)
		}
		if (strings.Contains(sql, " SET LOGGED") || strings.Contains(sql, " SET UNLOGGED")) && d.live.m.ServerVersion >= 150000 {
			// From PostgreSQL 15 on, a table's sequences follow it.
			d.ownedSequences(l, t, "", postgres.AccessExclusive, false)
		}
	}
	if typeChange {
		// Its foreign keys, either way, are dropped and added again.
		for _, c := range d.live.m.Constraints {
			if c.Type != ForeignKey || c.RefTable == nil || d.dropped[c.ID()] {
				continue
			}
			ref := ID{Kind: KindTable, Schema: c.RefTable.Schema, Name: c.RefTable.Name}
			if c.Schema == table.Schema && c.Table == table.Name && slices.Contains(c.Columns, col) {
				l.add(ref, postgres.AccessExclusive)
			}
			if ref == table && slices.Contains(refColumns(c.Definition), col) {
				l.add(ID{Kind: KindTable, Schema: c.Schema, Name: c.Table}, postgres.AccessExclusive)
			}
		}
	}
	if col != "" {
		switch {
		case strings.Contains(sql, " DROP IDENTITY"):
			d.identitySequence(l, table, col, postgres.AccessExclusive)
		case strings.Contains(sql, " DROP COLUMN "):
			d.ownedSequences(l, table, col, postgres.AccessExclusive, true)
		case strings.Contains(sql, " SET GENERATED "), strings.Contains(sql, " SET INCREMENT "),
			strings.Contains(sql, " SET MINVALUE "), strings.Contains(sql, " SET MAXVALUE "),
			strings.Contains(sql, " SET NO MINVALUE"), strings.Contains(sql, " SET NO MAXVALUE"),
			strings.Contains(sql, " SET START "), strings.Contains(sql, " SET CACHE "),
			strings.Contains(sql, " SET CYCLE"), strings.Contains(sql, " SET NO CYCLE"), strings.Contains(sql, " RESTART"):
			d.identitySequence(l, table, col, postgres.ShareRowExclusive)
		}
	}
	if strings.Contains(sql, " REFERENCES ") {
		for _, c := range d.desired.m.Constraints {
			if c.Type == ForeignKey && c.RefTable != nil && c.Schema == table.Schema && c.Table == table.Name &&
				(col == "" || slices.Contains(c.Columns, col)) {
				l.add(ID{Kind: KindTable, Schema: c.RefTable.Schema, Name: c.RefTable.Name}, postgres.ShareRowExclusive)
			}
		}
	}
	if strings.Contains(sql, " REPLICA IDENTITY USING INDEX ") {
		// The index is opened in SHARE mode to check it can serve.
		if ix, ok := d.liveIndexNamed(table.Schema, l.sql, "USING INDEX "); ok {
			l.add(ix, postgres.Share)
		}
	}
	d.clusterLocks(l, table, sql)
	if strings.Contains(sql, " RENAME CONSTRAINT ") {
		// A key's index is renamed with it.
		if c, ok := d.liveConstraintRenamed(table, l.sql); ok && (c.Type == PrimaryKey || c.Type == Unique || c.Type == Exclusion) {
			l.add(ID{Kind: KindIndex, Schema: c.Schema, Name: c.Name}, postgres.ShareUpdateExclusive)
		}
	}
}

// clusterLocks: CLUSTER ON takes SHARE UPDATE EXCLUSIVE on the index too.
func (d *differ) clusterLocks(l *lockList, rel ID, sql string) {
	if strings.Contains(sql, " CLUSTER ON ") {
		if ix, ok := d.liveIndexNamed(rel.Schema, l.sql, "CLUSTER ON "); ok {
			l.add(ix, postgres.ShareUpdateExclusive)
		}
	}
}

// liveIndexNamed finds the live index (or key's index) whose name follows
// after in sql.
func (d *differ) liveIndexNamed(schema, sql, after string) (ID, bool) {
	i := strings.Index(strings.ToUpper(sql), after)
	if i < 0 {
		return ID{}, false
	}
	name := readIdent(sql[i+len(after):])
	id := ID{Kind: KindIndex, Schema: schema, Name: name}
	return id, relationID(d.live, id) != nil
}

// liveConstraintRenamed is the live constraint an ALTER TABLE ... RENAME
// CONSTRAINT names.
func (d *differ) liveConstraintRenamed(table ID, sql string) (Constraint, bool) {
	i := strings.Index(strings.ToUpper(sql), "RENAME CONSTRAINT ")
	if i < 0 {
		return Constraint{}, false
	}
	name := readIdent(sql[i+len("RENAME CONSTRAINT "):])
	c, ok := d.live.byID[ID{Kind: KindConstraint, Schema: table.Schema, Name: table.Name, Sub: name}].(Constraint)
	return c, ok
}

// readIdent reads the identifier s starts with, quoted or not.
func readIdent(s string) string {
	if strings.HasPrefix(s, `"`) {
		var b strings.Builder
		for i := 1; i < len(s); i++ {
			if s[i] == '"' {
				if i+1 < len(s) && s[i+1] == '"' {
					b.WriteByte('"')
					i++
					continue
				}
				break
			}
			b.WriteByte(s[i])
		}
		return b.String()
	}
	end := strings.IndexAny(s, " ;,()\n")
	if end < 0 {
		end = len(s)
	}
	return s[:end]
}

// withPartitions is table and, when it is partitioned, its live
// partitions, theirs too.
func (d *differ) withPartitions(table ID) []ID {
	out := []ID{table}
	for _, p := range d.liveLockIndex().partitions[table] {
		out = append(out, d.withPartitions(p)...)
	}
	return out
}

// onPartitions adds mode on table and its partitions.
func (d *differ) onPartitions(l *lockList, table ID, mode postgres.LockMode) {
	for _, t := range d.withPartitions(table) {
		l.add(t, mode)
	}
}

// indexesOver adds ACCESS EXCLUSIVE on the live indexes of table over
// column col: a type change rebuilds them.
func (d *differ) indexesOver(l *lockList, table ID, col string) {
	for _, ix := range d.live.m.Indexes {
		if ix.Schema == table.Schema && ix.Table == table.Name && slices.Contains(ix.Columns, col) && !d.dropped[ix.ID()] {
			l.add(ix.ID(), postgres.AccessExclusive)
		}
	}
	for _, c := range d.live.m.Constraints {
		if c.Schema == table.Schema && c.Table == table.Name && slices.Contains(c.Columns, col) && !d.dropped[c.ID()] &&
			(c.Type == PrimaryKey || c.Type == Unique || c.Type == Exclusion) {
			l.add(ID{Kind: KindIndex, Schema: c.Schema, Name: c.Name}, postgres.AccessExclusive)
		}
	}
}

// ownedSequences adds mode on the live sequences owned by table's column
// col (any column when ""), and on its identity sequences. With drops
// (a column dropped), only the sequences that go with it: one the plan
// keeps is disowned first.
func (d *differ) ownedSequences(l *lockList, table ID, col string, mode postgres.LockMode, drops bool) {
	for _, s := range d.live.m.Sequences {
		if o := s.OwnedBy; o != nil && o.Schema == table.Schema && o.Table == table.Name && (col == "" || o.Column == col) {
			if _, kept := d.desired.byID[s.ID()]; drops && kept && !d.dropped[s.ID()] {
				continue
			}
			l.add(s.ID(), mode)
		}
	}
	if t, ok := d.live.byID[table].(Table); ok {
		for _, c := range t.Columns {
			if c.IdentitySequence != "" && (col == "" || c.Name == col) {
				l.addKey(qname(table.Schema, c.IdentitySequence), mode)
			}
		}
	}
}

// identitySequence adds mode on the identity sequence of table's column
// col.
func (d *differ) identitySequence(l *lockList, table ID, col string, mode postgres.LockMode) {
	if c, ok := d.live.columns[ID{Kind: KindColumn, Schema: table.Schema, Name: table.Name, Sub: col}]; ok && c.IdentitySequence != "" && l.d.existing(table, l.drop) {
		l.addKey(qname(table.Schema, c.IdentitySequence), mode)
	}
}

// refColumns are the referenced columns of a foreign key's definition
// ("FOREIGN KEY (a) REFERENCES t(id) ...").
func refColumns(def string) []string {
	i := strings.Index(def, " REFERENCES ")
	if i < 0 {
		return nil
	}
	rest := def[i:]
	open, end := strings.IndexByte(rest, '('), strings.IndexByte(rest, ')')
	if open < 0 || end < open {
		return nil
	}
	var cols []string
	for _, c := range strings.Split(rest[open+1:end], ",") {
		cols = append(cols, readIdent(strings.TrimSpace(c)))
	}
	return cols
}

// dropTableLocks: a table goes with its indexes, the sequences it owns
// that go too, and its partitions not dropped on their own; a partition's
// parent is locked as well.
func (d *differ) dropTableLocks(l *lockList, table ID) {
	l.add(table, postgres.AccessExclusive)
	l.indexes(table, postgres.AccessExclusive)
	for _, p := range d.liveLockIndex().partitions[table] {
		if !d.dropped[p] {
			d.dropTableLocks(l, p)
		}
	}
	for _, s := range d.live.m.Sequences {
		if o := s.OwnedBy; o != nil && o.Schema == table.Schema && o.Table == table.Name {
			if _, kept := d.desired.byID[s.ID()]; !kept || d.dropped[s.ID()] {
				l.add(s.ID(), postgres.AccessExclusive)
			}
		}
	}
	if t, ok := d.live.byID[table].(Table); ok && t.PartitionOf != nil {
		l.add(ID{Kind: KindTable, Schema: t.PartitionOf.Schema, Name: t.PartitionOf.Name}, postgres.AccessExclusive)
	}
}

// createTableLocks: a new partition locks its parent, the parent's
// indexes (which it gets a copy of) and the parent's default partition
// (which is checked for rows that now belong to the new one).
func (d *differ) createTableLocks(l *lockList, table ID) {
	t, ok := d.desired.byID[table].(Table)
	if !ok || t.PartitionOf == nil {
		return
	}
	parent := ID{Kind: KindTable, Schema: t.PartitionOf.Schema, Name: t.PartitionOf.Name}
	l.add(parent, postgres.AccessExclusive)
	if !l.d.existing(parent, false) {
		return
	}
	for _, key := range d.liveLockIndex().indexes[parent] {
		l.addKey(key, postgres.ShareUpdateExclusive)
	}
	for _, lt := range d.live.m.Tables {
		if sameName(lt.PartitionOf, t.PartitionOf) && lt.PartitionBound == "DEFAULT" {
			l.add(lt.ID(), postgres.AccessExclusive)
		}
	}
}

// constraintLocks: a key, check, exclusion or foreign key added, validated
// or dropped.
func (d *differ) constraintLocks(l *lockList, k nodeKey, sql string) {
	id := k.id
	table := ID{Kind: KindTable, Schema: id.Schema, Name: id.Name}
	c, ok := d.desired.byID[id].(Constraint)
	if k.drop || !ok {
		c, _ = d.live.byID[id].(Constraint)
	}
	var ref *ID
	if c.Type == ForeignKey && c.RefTable != nil {
		ref = &ID{Kind: KindTable, Schema: c.RefTable.Schema, Name: c.RefTable.Name}
	}
	switch {
	case strings.HasPrefix(sql, "CREATE UNIQUE INDEX CONCURRENTLY"):
		l.add(table, postgres.ShareUpdateExclusive)
	case strings.HasPrefix(sql, "CREATE "):
		l.add(table, postgres.Share)
	case strings.Contains(sql, " DROP CONSTRAINT "):
		l.add(table, postgres.AccessExclusive)
		if c.Type == PrimaryKey || c.Type == Unique || c.Type == Exclusion {
			l.add(ID{Kind: KindIndex, Schema: c.Schema, Name: c.Name}, postgres.AccessExclusive)
		}
		if ref != nil {
			l.add(*ref, postgres.AccessExclusive)
		}
	case strings.Contains(sql, " VALIDATE CONSTRAINT "):
		l.add(table, postgres.ShareUpdateExclusive)
	case ref != nil && strings.Contains(sql, " FOREIGN KEY "):
		l.add(table, postgres.ShareRowExclusive)
		// A key referencing a partitioned table references each partition.
		d.onPartitions(l, *ref, postgres.ShareRowExclusive)
	case strings.HasPrefix(sql, "ALTER INDEX"):
		d.indexLocks(l, nodeKey{id: ID{Kind: KindIndex, Schema: c.Schema, Name: c.Name}, drop: k.drop}, sql)
		if p, ok := constraintParent(d.desired, c); ok && strings.Contains(sql, " ATTACH PARTITION ") {
			attachLocks(l, ID{Kind: KindIndex, Schema: p.Schema, Name: p.Sub})
		}
	default:
		l.add(table, alterTableMode(sql))
		if strings.Contains(sql, " RENAME CONSTRAINT ") && (c.Type == PrimaryKey || c.Type == Unique || c.Type == Exclusion) {
			if lc, ok := d.liveConstraintRenamed(table, l.sql); ok {
				l.add(ID{Kind: KindIndex, Schema: lc.Schema, Name: lc.Name}, postgres.ShareUpdateExclusive)
			}
		}
	}
}

// indexLocks: an index built, dropped, renamed, changed or attached.
func (d *differ) indexLocks(l *lockList, k nodeKey, sql string) {
	ix, ok := d.desired.byID[k.id].(Index)
	if k.drop || !ok {
		ix, _ = d.live.byID[k.id].(Index)
	}
	table := ID{Kind: KindTable, Schema: ix.Schema, Name: ix.Table}
	if ix.Table == "" {
		table = ID{}
	}
	// The live index this one is (renamed in place, for a partition's).
	self := ID{Kind: KindIndex, Schema: k.id.Schema, Name: k.id.Name}
	if live, ok := d.renamed[k.id]; ok {
		self = ID{Kind: KindIndex, Schema: live.Schema, Name: live.Name}
	}
	switch {
	case strings.HasPrefix(sql, "CREATE INDEX CONCURRENTLY"), strings.HasPrefix(sql, "CREATE UNIQUE INDEX CONCURRENTLY"):
		l.add(table, postgres.ShareUpdateExclusive)
	case strings.HasPrefix(sql, "CREATE "):
		l.add(table, postgres.Share)
		if !strings.Contains(sql, " ON ONLY ") {
			d.onPartitions(l, table, postgres.Share)
		}
	case strings.HasPrefix(sql, "DROP INDEX CONCURRENTLY"):
		l.add(table, postgres.ShareUpdateExclusive)
		l.add(self, postgres.AccessExclusive)
	case strings.HasPrefix(sql, "DROP INDEX"):
		l.add(table, postgres.AccessExclusive)
		l.add(self, postgres.AccessExclusive)
		d.dropPartitionedIndexLocks(l, table, ix)
	case strings.Contains(sql, " ATTACH PARTITION "):
		// The partition's index, attached to the parent's.
		l.add(self, postgres.AccessExclusive)
		if p, ok := indexParent(ix); ok {
			attachLocks(l, p)
		}
	case strings.HasPrefix(sql, "ALTER INDEX"):
		// RENAME TO, SET (...), ALTER COLUMN ... SET STATISTICS.
		l.add(self, postgres.ShareUpdateExclusive)
	default:
		l.add(self, postgres.AccessExclusive)
	}
}

// commentLocks: COMMENT ON a relation or a column takes SHARE UPDATE
// EXCLUSIVE on the relation (on a constraint, trigger or policy, less).
func (d *differ) commentLocks(l *lockList, k nodeKey, sql string) {
	id := k.id
	switch {
	case strings.HasPrefix(sql, "COMMENT ON COLUMN "), strings.HasPrefix(sql, "COMMENT ON TABLE "):
		l.add(ID{Kind: KindTable, Schema: id.Schema, Name: id.Name}, postgres.ShareUpdateExclusive)
	case strings.HasPrefix(sql, "COMMENT ON VIEW "), strings.HasPrefix(sql, "COMMENT ON MATERIALIZED VIEW "),
		strings.HasPrefix(sql, "COMMENT ON SEQUENCE "), strings.HasPrefix(sql, "COMMENT ON INDEX "):
		l.add(id, postgres.ShareUpdateExclusive)
	}
}

// shapeSQL is sql upper-cased with its quoted identifiers and string
// literals blanked, so that a name never reads as a keyword.
func shapeSQL(sql string) string {
	var b strings.Builder
	b.Grow(len(sql))
	for i := 0; i < len(sql); i++ {
		switch c := sql[i]; c {
		case '"', '\'':
			b.WriteByte(c)
			for i++; i < len(sql); i++ {
				if sql[i] == c {
					if i+1 < len(sql) && sql[i+1] == c {
						i++
						continue
					}
					break
				}
			}
			b.WriteByte(c)
		case '\n', '\t', '\r':
			b.WriteByte(' ')
		default:
			if 'a' <= c && c <= 'z' {
				c -= 'a' - 'A'
			}
			b.WriteByte(c)
		}
	}
	return b.String()
}
