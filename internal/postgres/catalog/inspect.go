package catalog

import (
	"context"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5"
)

// ptahSchema holds ptah's own bookkeeping; it is never part of a model.
const ptahSchema = "ptah"

// Inspect reads the managed schemas of the database conn is connected to into a Model.
func Inspect(ctx context.Context, conn *pgx.Conn, schemas []string) (*Model, error) {
	return InspectWith(ctx, conn, schemas, InspectOptions{})
}

// InspectOptions says what Inspect reads beyond the schema itself.
type InspectOptions struct {
	// Privileges: the grants on the managed objects are read too
	// (Model.Privileges), for a plan that manages them.
	Privileges bool
}

// InspectWith is Inspect, with options.
func InspectWith(ctx context.Context, conn *pgx.Conn, schemas []string, opts InspectOptions) (m *Model, err error) {
	end, err := beginSnapshot(ctx, conn)
	if err != nil {
		return nil, err
	}
	defer func() {
		if _, endErr := conn.Exec(ctx, end); endErr != nil && err == nil {
			m, err = nil, fmt.Errorf("ending the catalog snapshot: %w", endErr)
		}
	}()
	version, err := serverVersion(ctx, conn)
	if err != nil {
		return nil, err
	}
	in := &inspector{
		ctx:     ctx,
		conn:    conn,
		version: version,
		schemas: managedSchemas(schemas),
		m:       &Model{ServerVersion: version},
		objects: map[catalogKey]ID{},
		rels:    map[uint32]*relation{},
		owners:  map[ID]ID{},
	}
	if err := in.run(opts); err != nil {
		return nil, err
	}
	return in.m, nil
}

// serverVersion reads server_version_num, which picks the variant of each
// catalog query that depends on the major.
func serverVersion(ctx context.Context, conn *pgx.Conn) (int, error) {
	var v int
	if err := conn.QueryRow(ctx, "SELECT current_setting('server_version_num')::int").Scan(&v); err != nil {
		return 0, fmt.Errorf("reading the server's version: %w", err)
	}
	return v, nil
}

// beginSnapshot makes every catalog query see the same snapshot and print
// names the same way whatever the session's search_path was: with an empty
// search_path, everything outside pg_catalog is schema-qualified. It returns
// the statement that restores the session. Inside the caller's transaction
// it uses a savepoint, so the caller's transaction is left as it was.
func beginSnapshot(ctx context.Context, conn *pgx.Conn) (end string, err error) {
	begin := "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY"
	end = "ROLLBACK"
	if conn.PgConn().TxStatus() != 'I' {
		begin = "SAVEPOINT ptah_inspect"
		end = "ROLLBACK TO SAVEPOINT ptah_inspect; RELEASE SAVEPOINT ptah_inspect"
	}
	// JIT only slows catalog queries down, by seconds when the catalog is big.
	if _, err := conn.Exec(ctx, begin+"; SET LOCAL search_path = ''; SET LOCAL jit = off"); err != nil {
		return "", fmt.Errorf("starting the catalog snapshot: %w", err)
	}
	return end, nil
}

// managedSchemas is schemas without ptah's own schema and duplicates.
func managedSchemas(schemas []string) []string {
	out := []string{}
	for _, s := range schemas {
		if s != ptahSchema && !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	return out
}

// inspector reads one model. Besides the model it keeps, for each object
// read, the catalog row it came from, so that pg_depend can be mapped to IDs.
type inspector struct {
	ctx     context.Context
	conn    *pgx.Conn
	version int // server_version_num
	schemas []string
	m       *Model
	// objects maps catalog rows to the model object they are or stand for
	// in pg_depend: an object's own row, and aliases such as its array
	// type, its column defaults or its rewrite rule.
	objects map[catalogKey]ID
	rels    map[uint32]*relation // the model's pg_class rows, by oid
	owners  map[ID]ID            // sequence to the column it is OWNED BY
}

// catalogKey is a catalog row: the catalog's name (as regclass prints it,
// e.g. "pg_type") and the row's oid.
type catalogKey struct {
	catalog string
	oid     uint32
}

// relation is a pg_class row of the model: a table, view, materialized
// view, sequence, index or composite type.
type relation struct {
	id      ID
	columns map[int16]string // attnum to name, tables only
	// index into Model.Tables, Model.Views or Model.Composites, for columns
	tableAt, viewAt, compositeAt int
}

func (in *inspector) run(opts InspectOptions) error {
	steps := []func() error{
		in.readUnsupported,
		in.readSchemas,
		in.readExtensions,
		in.readCollations,
		in.readTSConfigs,
		in.readEnums,
		in.readDomains,
		in.readComposites,
		in.readSequences,
		in.readTables,
		in.readViews,
		in.readColumns,
		in.readConstraints,
		in.readIndexes,
		in.readFunctions,
		in.readTriggers,
		in.readPolicies,
		in.readDeps,
	}
	if opts.Privileges {
		steps = append(steps, in.readPrivileges)
	}
	for _, step := range steps {
		if err := step(); err != nil {
			return err
		}
	}
	sortModel(in.m)
	canonicalize(in.m)
	return nil
}

// each runs one catalog query (with the managed schemas as $1) and calls fn
// after scanning each row into dest.
func (in *inspector) each(what, sql string, dest []any, fn func() error) error {
	rows, err := in.conn.Query(in.ctx, named(what, sql), in.schemas)
	if err != nil {
		return fmt.Errorf("reading %s: %w", what, err)
	}
	if _, err := pgx.ForEachRow(rows, dest, fn); err != nil {
		return fmt.Errorf("reading %s: %w", what, err)
	}
	return nil
}

// QueryNamePrefix begins every catalog query ptah sends, on a line of its
// own, followed by what the query reads: so that pg_stat_activity, the
// server's log and a tracer name each one.
const QueryNamePrefix = "-- ptah: "

// named is sql, named what (QueryNamePrefix).
func named(what, sql string) string { return QueryNamePrefix + what + "\n" + sql }

// addType records the pg_type rows of object id: its own type (for a table
// or view, its row type) and that type's array type.
func (in *inspector) addType(oid, array uint32, id ID) {
	in.objects[catalogKey{"pg_type", oid}] = id
	if array != 0 {
		in.objects[catalogKey{"pg_type", array}] = id
	}
}

// newRelation records a pg_class row of the model.
func (in *inspector) newRelation(oid uint32, id ID) *relation {
	r := &relation{id: id, tableAt: -1, viewAt: -1, compositeAt: -1}
	in.rels[oid] = r
	return r
}

func (in *inspector) readUnsupported() error {
	var objects []string
	var name string
	err := in.each("unsupported objects", unsupportedQuery(in.version), []any{&name}, func() error {
		objects = append(objects, name)
		return nil
	})
	if err != nil {
		return err
	}
	if len(objects) > 0 {
		slices.Sort(objects)
		return &UnsupportedError{Where: "database", Objects: slices.Compact(objects)}
	}
	return nil
}

func (in *inspector) readSchemas() error {
	var oid uint32
	var s Schema
	return in.each("schemas", schemasQuery, []any{&oid, &s.Name, &s.Comment}, func() error {
		in.m.Schemas = append(in.m.Schemas, s)
		in.objects[catalogKey{"pg_namespace", oid}] = s.ID()
		return nil
	})
}

// readExtensions reads the extensions and, so that depending on one of its
// types or functions is depending on the extension, their members.
func (in *inspector) readExtensions() error {
	var oid uint32
	var e Extension
	var memberCatalogs []string
	var memberOIDs []uint32
	dest := []any{&oid, &e.Name, &e.Schema, &e.Version, &e.Comment, &memberCatalogs, &memberOIDs}
	return in.each("extensions", extensionsQuery, dest, func() error {
		in.m.Extensions = append(in.m.Extensions, e)
		in.objects[catalogKey{"pg_extension", oid}] = e.ID()
		for i, cat := range memberCatalogs {
			in.objects[catalogKey{cat, memberOIDs[i]}] = e.ID()
		}
		return nil
	})
}

func (in *inspector) readEnums() error {
	var oid, array uint32
	var e Enum
	return in.each("enums", enumsQuery, []any{&oid, &array, &e.Schema, &e.Name, &e.Labels, &e.Comment}, func() error {
		in.m.Enums = append(in.m.Enums, e)
		in.addType(oid, array, e.ID())
		return nil
	})
}

func (in *inspector) readDomains() error {
	var oid, array uint32
	var d Domain
	var names, defs, comments []string
	var constraintOIDs []uint32
	var notNullName string
	dest := []any{&oid, &array, &d.Schema, &d.Name, &d.BaseType, &d.Collation, &d.Default, &d.NotNull, &notNullName,
		&names, &defs, &constraintOIDs, &comments, &d.Comment}
	return in.each("domains", domainsQuery(in.version), dest, func() error {
		d.NotNullName = ""
		if notNullName != defaultNotNullName(d.Name, "") {
			d.NotNullName = notNullName
		}
		d.Constraints = nil
		for i := range names {
			d.Constraints = append(d.Constraints, DomainConstraint{Name: names[i], Definition: defs[i], Comment: comments[i]})
		}
		in.m.Domains = append(in.m.Domains, d)
		in.addType(oid, array, d.ID())
		// What a domain's constraints depend on, the domain depends on.
		for _, c := range constraintOIDs {
			in.objects[catalogKey{"pg_constraint", c}] = d.ID()
		}
		return nil
	})
}

func (in *inspector) readComposites() error {
	var oid, array, relid uint32
	var c Composite
	dest := []any{&oid, &array, &relid, &c.Schema, &c.Name, &c.Comment}
	return in.each("composite types", compositesQuery, dest, func() error {
		in.m.Composites = append(in.m.Composites, c)
		in.addType(oid, array, c.ID())
		in.newRelation(relid, c.ID()).compositeAt = len(in.m.Composites) - 1
		return nil
	})
}

func (in *inspector) readSequences() error {
	var oid uint32
	var s Sequence
	var owned bool
	var owner ColumnRef
	o := &s.Options
	dest := []any{&oid, &s.Schema, &s.Name, &s.Unlogged, &o.Type, &o.Start, &o.Increment, &o.Min, &o.Max, &o.Cache, &o.Cycle,
		&s.LastValue, &owned, &owner.Schema, &owner.Table, &owner.Column, &s.Comment}
	return in.each("sequences", sequencesQuery, dest, func() error {
		s.OwnedBy = nil
		if owned {
			ref := owner
			s.OwnedBy = &ref
			in.owners[s.ID()] = ColumnID(ref.Schema, ref.Table, ref.Column)
		}
		in.m.Sequences = append(in.m.Sequences, s)
		in.newRelation(oid, s.ID())
		return nil
	})
}

func (in *inspector) readTables() error {
	var oid, rowType, rowArray uint32
	var t Table
	var isPartition bool
	var parent ObjectName
	dest := []any{&oid, &rowType, &rowArray, &t.Schema, &t.Name, &t.Unlogged, &t.PartitionKey, &isPartition, &parent.Schema, &parent.Name,
		&t.PartitionBound, &t.Options, &t.ReplicaIdentity, &t.ReplicaIndex, &t.ClusterOn,
		&t.RowSecurity, &t.ForceRowSecurity, &t.Comment}
	return in.each("tables", tablesQuery, dest, func() error {
		t.PartitionOf = nil
		if isPartition {
			p := parent
			t.PartitionOf = &p
		}
		// Options keep PostgreSQL's stored order, which pg_dump shows; the
		// diff compares them as a set.
		in.m.Tables = append(in.m.Tables, t)
		r := in.newRelation(oid, t.ID())
		r.columns, r.tableAt = map[int16]string{}, len(in.m.Tables)-1
		in.addType(rowType, rowArray, t.ID())
		return nil
	})
}

func (in *inspector) readViews() error {
	var oid, rowType, rowArray, rule uint32
	var v View
	dest := []any{&oid, &rowType, &rowArray, &rule, &v.Schema, &v.Name, &v.Materialized, &v.Definition, &v.Options,
		&v.WithNoData, &v.ClusterOn, &v.Comment}
	return in.each("views", viewsQuery, dest, func() error {
		in.m.Views = append(in.m.Views, v)
		in.newRelation(oid, v.ID()).viewAt = len(in.m.Views) - 1
		in.addType(rowType, rowArray, v.ID())
		// A view's query is its _RETURN rule: what the rule uses, the view uses.
		in.objects[catalogKey{"pg_rewrite", rule}] = v.ID()
		return nil
	})
}

// readColumns fills the columns of the tables, views and composite types
// already read, and the ColumnSettings of the tables and views.
func (in *inspector) readColumns() error {
	var relid, defaultOID uint32
	var attnum int16
	var c Column
	var hasIdentitySeq bool
	var o SequenceOptions
	var notNullName, generated string
	var settings *ColumnSettings
	dest := []any{&relid, &attnum, &defaultOID, &c.Name, &c.Type, &c.Collation, &c.NotNull, &notNullName, &c.Default, &generated,
		&c.Identity, &hasIdentitySeq, &o.Type, &o.Start, &o.Increment, &o.Min, &o.Max, &o.Cache, &o.Cycle,
		&c.IdentityLastValue, &c.IdentitySequence, &c.Comment, &settings}
	return in.each("columns", columnsQuery(in.version), dest, func() error {
		r := in.rels[relid]
		if settings != nil && r != nil {
			in.addColumnSettings(r, *settings)
		}
		settings = nil // json decoding would reuse it for the next row
		if r == nil {
			return nil
		}
		c.Generated, c.Virtual = generated != "", generated == "v"
		c.NotNullName = ""
		if notNullName != defaultNotNullName(r.id.Name, c.Name) {
			c.NotNullName = notNullName
		}
		c.IdentityOptions = nil
		if c.Identity != "" && hasIdentitySeq {
			opts := o
			c.IdentityOptions = &opts
		}
		in.addColumn(r, attnum, c)
		// What a column's default uses, the column uses.
		if defaultOID != 0 {
			in.objects[catalogKey{"pg_attrdef", defaultOID}] = in.columnID(r, int32(attnum))
		}
		return nil
	})
}

func (in *inspector) addColumn(r *relation, attnum int16, c Column) {
	switch {
	case r.tableAt >= 0:
		t := &in.m.Tables[r.tableAt]
		t.Columns = append(t.Columns, c)
		r.columns[attnum] = c.Name
	case r.viewAt >= 0:
		v := &in.m.Views[r.viewAt]
		v.Columns = append(v.Columns, ViewColumn{Name: c.Name, Type: c.Type, Comment: c.Comment})
	case r.compositeAt >= 0:
		ct := &in.m.Composites[r.compositeAt]
		ct.Attributes = append(ct.Attributes, Attribute{Name: c.Name, Type: c.Type, Collation: c.Collation, Comment: c.Comment})
	}
}

// addColumnSettings adds the settings of a column of r, in attnum order,
// when r is a table or view (a composite type's are not modeled).
func (in *inspector) addColumnSettings(r *relation, s ColumnSettings) {
	switch {
	case r.tableAt >= 0:
		t := &in.m.Tables[r.tableAt]
		t.ColumnSettings = append(t.ColumnSettings, s)
	case r.viewAt >= 0:
		v := &in.m.Views[r.viewAt]
		v.ColumnSettings = append(v.ColumnSettings, s)
	}
}

func (in *inspector) readConstraints() error {
	var oid, relid, index uint32
	var c Constraint
	var contype string
	var keys []int16
	var hasRef bool
	var ref ObjectName
	dest := []any{&oid, &relid, &index, &c.Schema, &c.Table, &c.Name, &contype, &c.Definition, &c.Deferrable, &c.Deferred,
		&keys, &hasRef, &ref.Schema, &ref.Name, &c.Invalid, &c.Parent, &c.Comment}
	return in.each("constraints", constraintsQuery, dest, func() error {
		c.Type = ConstraintType(contype)
		c.Columns = in.keyNames(relid, keys)
		c.RefTable = nil
		if hasRef {
			r := ref
			c.RefTable = &r
		}
		in.m.Constraints = append(in.m.Constraints, c)
		in.objects[catalogKey{"pg_constraint", oid}] = c.ID()
		// The index a constraint owns is the constraint: a foreign key
		// depends on the referenced key's index.
		if index != 0 {
			in.objects[catalogKey{"pg_class", index}] = c.ID()
		}
		return nil
	})
}

// systemColumns are the names of the system columns, by attnum: a CHECK
// constraint may use tableoid.
var systemColumns = map[int16]string{-1: "ctid", -2: "xmin", -3: "cmin", -4: "xmax", -5: "cmax", -6: "tableoid"}

// keyNames names a constraint's conkey attnums after the columns of table
// relid, read before; an attnum that names no column (an exclusion
// constraint's expression, 0) is left out, as a join with pg_attribute
// would. The list is never nil.
func (in *inspector) keyNames(relid uint32, keys []int16) []string {
	names := make([]string, 0, len(keys))
	r := in.rels[relid]
	for _, k := range keys {
		name, ok := systemColumns[k]
		if k > 0 && r != nil {
			name, ok = r.columns[k]
		}
		if ok {
			names = append(names, name)
		}
	}
	return names
}

func (in *inspector) readIndexes() error {
	var oid uint32
	var i Index
	var attached bool
	var parent ObjectName
	dest := []any{&oid, &i.Schema, &i.Table, &i.Name, &i.Definition, &i.Invalid, &attached, &parent.Schema, &parent.Name,
		&i.Columns, &i.Comment}
	return in.each("indexes", indexesQuery, dest, func() error {
		i.Parent = nil
		if attached {
			p := parent
			i.Parent = &p
		}
		in.m.Indexes = append(in.m.Indexes, i)
		in.newRelation(oid, i.ID())
		return nil
	})
}

func (in *inspector) readFunctions() error {
	var oid uint32
	var f Function
	dest := []any{&oid, &f.Schema, &f.Name, &f.Procedure, &f.Aggregate, &f.IdentityArgs, &f.Result, &f.Definition, &f.Comment}
	return in.each("functions", functionsQuery, dest, func() error {
		in.m.Functions = append(in.m.Functions, f)
		in.objects[catalogKey{"pg_proc", oid}] = f.ID()
		return nil
	})
}

func (in *inspector) readTriggers() error {
	var oid uint32
	var t Trigger
	dest := []any{&oid, &t.Schema, &t.Table, &t.Name, &t.Definition, &t.Enabled, &t.Comment}
	return in.each("triggers", triggersQuery, dest, func() error {
		in.m.Triggers = append(in.m.Triggers, t)
		in.objects[catalogKey{"pg_trigger", oid}] = t.ID()
		return nil
	})
}

func (in *inspector) readPolicies() error {
	var oid uint32
	var p Policy
	dest := []any{&oid, &p.Schema, &p.Table, &p.Name, &p.Permissive, &p.Command, &p.Roles, &p.Using, &p.Check, &p.Comment}
	return in.each("row-level security policies", policiesQuery, dest, func() error {
		// Sorted here rather than by the query's ORDER BY, whose order
		// would follow the database's collation.
		roles := slices.Clone(p.Roles)
		slices.Sort(roles)
		p.Roles = roles
		in.m.Policies = append(in.m.Policies, p)
		// What a policy's expressions use (columns, functions, other
		// tables), the policy depends on.
		in.objects[catalogKey{"pg_policy", oid}] = p.ID()
		return nil
	})
}

// nilIfEmpty keeps a model's empty lists nil, whichever way they were read.
func nilIfEmpty[T any](s []T) []T {
	if len(s) == 0 {
		return nil
	}
	return s
}

// defaultNotNullName is the name PostgreSQL gives an unnamed NOT NULL
// constraint on column col of table rel, or on domain rel when col is "":
// ChooseConstraintName's first choice, made by makeObjectName. (When that
// name is taken PostgreSQL appends a number; such a name is kept in the
// model as if it had been declared.)
func defaultNotNullName(rel, col string) string {
	if col == "" {
		return makeObjectName(rel, nil, "not_null")
	}
	return makeObjectName(rel, &col, "not_null")
}
