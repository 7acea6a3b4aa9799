package catalog

// The model is what Inspect reads out of a database's catalog, for the
// managed schemas only. Desired and live state are both models read by the
// same code (the desired one from the dev database), so every field holds the
// text PostgreSQL itself normalised (format_type, pg_get_expr, pg_get_*def):
// two models are compared field by field, never by parsing SQL.
//
// Identifiers in the model are raw (unquoted) names; the diff quotes them.
//
// A few fields are data, not schema (a sequence's last value): they inform
// hazards, are never compared, and are left out of the model's JSON, which
// fingerprints the schema.
//
// Properties that only some PostgreSQL majors have are fields with
// omitempty: a model read from an older server, or a schema that does not
// use them, serialises (and fingerprints) as it did before they existed.
// So are those ptah came to manage after the model's first fingerprints
// (row-level security), for the same reason.

// Kind names a kind of database object ptah manages.
type Kind string

const (
	KindSchema     Kind = "schema"
	KindExtension  Kind = "extension"
	KindEnum       Kind = "enum"
	KindDomain     Kind = "domain"
	KindComposite  Kind = "composite type"
	KindSequence   Kind = "sequence"
	KindTable      Kind = "table"
	KindColumn     Kind = "column"
	KindConstraint Kind = "constraint"
	KindIndex      Kind = "index"
	KindView       Kind = "view"
	KindMatView    Kind = "materialized view"
	KindFunction   Kind = "function"
	KindProcedure  Kind = "procedure"
	KindTrigger    Kind = "trigger"
	KindPolicy     Kind = "policy"
	KindAggregate  Kind = "aggregate"
	KindCollation  Kind = "collation"
	KindTSConfig   Kind = "text search configuration"
)

// ID identifies one object across two models. It is comparable and used as a
// map key. Schema is empty for schemas and extensions (whose Name is the
// object's own name). Sub is the column, constraint, trigger or policy name
// for objects that live on a table (Name is then the table), or the identity
// argument list of a function, procedure or aggregate (as
// pg_get_function_identity_arguments prints it).
type ID struct {
	Kind   Kind
	Schema string
	Name   string
	Sub    string
}

// Model is the managed part of one database.
type Model struct {
	Schemas     []Schema
	Extensions  []Extension
	Enums       []Enum
	Domains     []Domain
	Composites  []Composite
	Sequences   []Sequence
	Tables      []Table
	Constraints []Constraint
	Indexes     []Index
	Views       []View // views and materialized views
	Functions   []Function
	Triggers    []Trigger
	// Policies are the row-level security policies of the tables.
	Policies []Policy `json:",omitempty"`
	// Privileges are the grants on the managed objects (privileges.go),
	// read only when privileges are managed (PrivilegesRead): otherwise
	// the model, and its fingerprint, are what they were before ptah
	// could manage them.
	Privileges []ObjectPrivileges `json:",omitempty"`
	// PrivilegesRead: Privileges were read, so that Diff plans them (it
	// does only when both models were read with them). Owners are the
	// owners of the objects whose privileges were read, as quote_ident
	// prints them: ownership is not managed, and an owner's privileges
	// are nobody's grants.
	PrivilegesRead bool          `json:"-"`
	Owners         map[ID]string `json:"-"`
	// Collations and text search configurations (aggregates are
	// Functions).
	Collations []Collation `json:",omitempty"`
	TSConfigs  []TSConfig  `json:",omitempty"`
	// ServerVersion is the server_version_num of the server the model was
	// read from. Definitions are PostgreSQL's own text, which differs
	// between majors, so Diff refuses to compare models of two majors. It
	// is no part of the schema (nor of its fingerprint).
	ServerVersion int `json:"-"`
	// Deps are the dependencies between managed objects, from pg_depend,
	// normalised so both ends are IDs of objects in this model: a view's
	// rewrite rule is the view, a column default is its column, an index
	// that implements a constraint is the constraint. Dependencies on
	// objects outside the model (pg_catalog, other schemas) are dropped.
	Deps []Dep
	// Outside are the objects outside the managed schemas that depend on
	// an object of the model: ptah cannot drop or change such an object,
	// since PostgreSQL would refuse to (see Diff).
	Outside []OutsideDep
}

// OutsideDep says Object, which is outside the managed schemas (as
// PostgreSQL describes it, e.g. "view other.v"), depends on RefObject.
type OutsideDep struct {
	Object    string
	RefObject ID
}

// Dep says Object depends on RefObject: RefObject must exist before Object is
// created, and Object must be dropped before RefObject is.
type Dep struct {
	Object    ID
	RefObject ID
}

// Schema is a namespace in the managed scope.
type Schema struct {
	Name    string
	Comment string
}

// Extension is an installed extension whose schema is managed. Objects that
// belong to an extension are never part of the model.
type Extension struct {
	Name    string
	Schema  string
	Version string
	Comment string
}

// Enum is an enumerated type.
type Enum struct {
	Schema  string
	Name    string
	Labels  []string // in sort order
	Comment string
}

// Domain is a domain over a base type.
type Domain struct {
	Schema    string
	Name      string
	BaseType  string // format_type of the base type, e.g. "character varying(20)"
	Collation string // qualified collation name when not the base type's default, else ""
	Default   string // pg_get_expr, "" when none
	NotNull   bool
	// NotNullName is the name of the NOT NULL constraint (a catalog object
	// since PostgreSQL 17) when it is not the one PostgreSQL gives an
	// unnamed NOT NULL, "<domain>_not_null"; "" otherwise.
	NotNullName string             `json:",omitempty"`
	Constraints []DomainConstraint // by name
	Comment     string
}

// DomainConstraint is a CHECK constraint on a domain.
type DomainConstraint struct {
	Name       string
	Definition string // pg_get_constraintdef, e.g. "CHECK ((VALUE > 0))"
	Comment    string
}

// Composite is a free-standing composite type (CREATE TYPE ... AS (...)).
type Composite struct {
	Schema     string
	Name       string
	Attributes []Attribute
	Comment    string
}

// Attribute is one field of a composite type.
type Attribute struct {
	Name      string
	Type      string // format_type
	Collation string // qualified, "" when the type's default
	Comment   string
}

// Sequence is a sequence: standalone, or owned by a column (serial). The
// sequences behind identity columns are part of their column instead.
type Sequence struct {
	Schema   string
	Name     string
	Unlogged bool // UNLOGGED (PostgreSQL 15 on)
	Options  SequenceOptions
	OwnedBy  *ColumnRef // OWNED BY, nil when none
	Comment  string
	// LastValue is the value the sequence last handed out; nil when it has
	// handed out none yet, or it cannot be read (see lastValue).
	LastValue *int64 `json:"-"`
}

// SequenceOptions are the parameters of a sequence, as pg_sequence stores them.
type SequenceOptions struct {
	Type      string // "bigint", "integer" or "smallint"
	Start     int64
	Increment int64
	Min       int64
	Max       int64
	Cache     int64
	Cycle     bool
}

// ColumnRef names a column of a table.
type ColumnRef struct {
	Schema string
	Table  string
	Column string
}

// Table is an ordinary or partitioned table. Partitions are tables too, with
// PartitionOf set.
type Table struct {
	Schema         string
	Name           string
	Unlogged       bool
	Columns        []Column // in attnum order; a partition lists its parent's (see diff_partition.go)
	PartitionKey   string   // pg_get_partkeydef, "" when not partitioned, e.g. "RANGE (created_at)"
	PartitionOf    *ObjectName
	PartitionBound string // pg_get_expr(relpartbound), e.g. "FOR VALUES FROM ('2024-01-01') TO ('2025-01-01')" or "DEFAULT"
	// Options are the reloptions, e.g. "fillfactor=70", then those of the
	// table's TOAST table prefixed "toast.", e.g. "toast.autovacuum_enabled=false".
	Options []string
	// ReplicaIdentity is "" for DEFAULT, "FULL", "NOTHING" or "USING INDEX"
	// (ReplicaIndex names the index). An identity whose index was dropped
	// behaves as NOTHING and is read as NOTHING.
	ReplicaIdentity string
	ReplicaIndex    string
	ClusterOn       string // the index CLUSTER ON marked, "" when none
	// ColumnSettings are those of the columns whose settings are not the
	// defaults, in attnum order: a partition's inherited columns included,
	// since each partition keeps its own.
	ColumnSettings []ColumnSettings
	// RowSecurity: row-level security is enabled (ENABLE ROW LEVEL
	// SECURITY), so that the table's policies decide which rows a role
	// other than the owner sees and writes (none, without a policy).
	// ForceRowSecurity subjects the owner to them too (FORCE ROW LEVEL
	// SECURITY). Both are the table's own: a partition's are not its
	// parent's.
	RowSecurity      bool `json:",omitempty"`
	ForceRowSecurity bool `json:",omitempty"`
	Comment          string
}

// ColumnSettings are the per-column settings of a table or materialized
// view column that change how its values are stored or estimated, not what
// they are (ALTER TABLE ... ALTER COLUMN ... SET STORAGE, SET COMPRESSION,
// SET STATISTICS, SET (...)).
type ColumnSettings struct {
	Column string
	// Storage is "PLAIN", "EXTERNAL", "MAIN" or "EXTENDED"; "" when it is
	// the type's default, DefaultStorage (what a new column of the type gets).
	Storage        string
	DefaultStorage string
	Compression    string   // "pglz" or "lz4"; "" for the default (default_toast_compression)
	Statistics     int      // the statistics target; -1 for the default
	Options        []string // attoptions, e.g. "n_distinct=100"
}

// ObjectName is a schema-qualified name.
type ObjectName struct {
	Schema string
	Name   string
}

// Column is one column of a table.
type Column struct {
	Name      string
	Type      string // format_type, e.g. "numeric(10,2)", "public.mood", "integer[]"
	Collation string // qualified collation name when not the type's default, else ""
	NotNull   bool
	// NotNullName is the name of the NOT NULL constraint (a catalog object
	// since PostgreSQL 18) when it is not the one PostgreSQL gives an
	// unnamed NOT NULL, "<table>_<column>_not_null"; "" otherwise, so that
	// an unnamed declaration and one naming the default are the same.
	NotNullName string `json:",omitempty"`
	Default     string // pg_get_expr of the default; "" when none; for a generated column, its expression
	Generated   bool   // GENERATED ALWAYS AS (Default), STORED unless Virtual
	// Virtual: a generated column computed when read, not stored
	// (PostgreSQL 18's VIRTUAL, its default kind of generated column).
	Virtual         bool             `json:",omitempty"`
	Identity        string           // "" , "a" (ALWAYS) or "d" (BY DEFAULT)
	IdentityOptions *SequenceOptions // the identity sequence's parameters, when Identity != ""
	Comment         string
	// IdentityLastValue is the identity sequence's LastValue.
	IdentityLastValue *int64 `json:"-"`
	// IdentitySequence names the identity sequence (in the table's
	// schema): what changing the identity locks. Not compared: PostgreSQL
	// names it.
	IdentitySequence string `json:"-"`
}

// ConstraintType is pg_constraint.contype.
type ConstraintType string

const (
	PrimaryKey ConstraintType = "p"
	Unique     ConstraintType = "u"
	Check      ConstraintType = "c"
	ForeignKey ConstraintType = "f"
	Exclusion  ConstraintType = "x"
)

// Constraint is a table constraint that is declared on the table itself
// (inherited copies on partitions are not listed). NOT NULL is a column
// property, not a constraint, in the model.
type Constraint struct {
	Schema     string
	Table      string
	Name       string
	Type       ConstraintType
	Definition string // pg_get_constraintdef, e.g. "FOREIGN KEY (a) REFERENCES t(id) ON DELETE CASCADE"
	Deferrable bool
	Deferred   bool
	// Columns are the constrained columns, for hazard wording and to tie the
	// constraint to its columns when they change.
	Columns []string
	// RefTable is the referenced table of a foreign key.
	RefTable *ObjectName
	// Parent is, for the key or exclusion constraint of a partition that is
	// attached to its parent's (conparentid), the name of the parent table's
	// constraint. Such a constraint is listed though it is not local: its
	// name is declared (pg_dump declares it).
	Parent string
	// Invalid: the index of a key or exclusion constraint is not valid
	// (pg_index.indisvalid), which only a failed or unfinished build leaves.
	Invalid bool
	Comment string
}

// Index is an index that does not implement a constraint (those belong to
// their Constraint). The index of a partition that is attached to its
// parent's index is listed too, with Parent set: its name and storage
// parameters are its own.
type Index struct {
	Schema     string
	Table      string // the table or materialized view it is on
	Name       string
	Definition string // pg_get_indexdef, e.g. "CREATE UNIQUE INDEX i ON public.t USING btree (a) WHERE (b > 0)"
	// Parent is the partitioned index this one is attached to, nil when none.
	Parent *ObjectName
	// Columns are the index's own column names (a table column's name, or
	// one PostgreSQL made up for an expression, e.g. "lower" or "expr"),
	// included columns too: what PostgreSQL names the copies it makes of a
	// partitioned index after.
	Columns []string
	// Invalid: pg_index.indisvalid is false, as a failed CREATE INDEX
	// CONCURRENTLY leaves an index. Queries do not use it and a unique one
	// enforces nothing; a declared index is never invalid.
	Invalid bool
	Comment string
}

// View is a view or a materialized view.
type View struct {
	Schema       string
	Name         string
	Materialized bool
	Definition   string   // pg_get_viewdef, the SELECT
	Options      []string // reloptions, e.g. "security_barrier=true"; a materialized view's TOAST table's are prefixed "toast."
	Columns      []ViewColumn
	// Of a materialized view only: not populated (WITH NO DATA), the index
	// CLUSTER ON marked, and the settings of its columns (see Table).
	WithNoData     bool
	ClusterOn      string
	ColumnSettings []ColumnSettings
	Comment        string
}

// ViewColumn records a view's output columns, whose comments are managed.
type ViewColumn struct {
	Name    string
	Type    string
	Comment string
}

// Function is a function, procedure or aggregate.
type Function struct {
	Schema    string
	Name      string
	Procedure bool
	// Aggregate is "" for a function or procedure; for an aggregate, its
	// kind: "normal", "ordered-set" or "hypothetical-set", which CREATE OR
	// REPLACE AGGREGATE cannot change.
	Aggregate string `json:",omitempty"`
	// IdentityArgs is pg_get_function_identity_arguments: what tells overloads apart.
	IdentityArgs string
	// Result is pg_get_function_result ("" for a procedure): a change needs a
	// drop, CREATE OR REPLACE cannot change it.
	Result string
	// Definition is pg_get_functiondef: a complete CREATE OR REPLACE
	// statement. PostgreSQL prints no definition of an aggregate: its
	// CREATE OR REPLACE AGGREGATE statement is written from pg_aggregate
	// by the catalog query (aggregateDefinition), every option it sets
	// spelled out the same way, so that two texts are equal exactly when
	// the aggregates are.
	Definition string
	Comment    string
}

// Trigger is a trigger on a table (internal triggers, such as those behind
// foreign keys, are not listed; nor are clones on partitions).
type Trigger struct {
	Schema     string
	Table      string
	Name       string
	Definition string // pg_get_triggerdef
	// Enabled is how ALTER TABLE last set it: "" (ENABLE, the default),
	// "DISABLE", "ENABLE REPLICA" or "ENABLE ALWAYS". Its clones on
	// partitions follow it.
	Enabled string
	Comment string
}

// Policy is a row-level security policy on a table (CREATE POLICY).
type Policy struct {
	Schema string
	Table  string
	Name   string
	// Permissive is AS PERMISSIVE (the default); false is AS RESTRICTIVE.
	Permissive bool
	// Command is what the policy applies to: "ALL", "SELECT", "INSERT",
	// "UPDATE" or "DELETE".
	Command string
	// Roles are the roles it applies to, as quote_ident prints their names,
	// sorted; "PUBLIC" for every role (PostgreSQL keeps nothing else beside
	// it). Roles are cluster-wide: the dev database's server must have them.
	Roles []string
	// Using and Check are the USING and WITH CHECK expressions
	// (pg_get_expr), "" when the policy has none.
	Using   string
	Check   string
	Comment string
}

// Collation is a collation (CREATE COLLATION). Its version (collversion)
// is the server's library's, not the schema's, and is not compared.
type Collation struct {
	Schema string
	Name   string
	// Provider is "libc", "icu" or (PostgreSQL 17 on) "builtin".
	Provider string
	// Locale is the ICU or builtin provider's locale; LcCollate and
	// LcCtype are the libc provider's ("" for the others).
	Locale    string
	LcCollate string
	LcCtype   string
	// Deterministic is false for a nondeterministic collation (ICU), which
	// compares strings that differ in bytes as equal.
	Deterministic bool
	// Rules are an ICU collation's tailoring rules (PostgreSQL 16 on).
	Rules   string `json:",omitempty"`
	Comment string
}

// TSConfig is a text search configuration: its parser, and which
// dictionaries each token type goes through. CREATE TEXT SEARCH
// CONFIGURATION ... (COPY = ...) is read as the parser and mappings it
// copied.
type TSConfig struct {
	Schema string
	Name   string
	// Parser is the parser's qualified name as it is spliced after
	// PARSER =, e.g. pg_catalog."default".
	Parser string
	// Mappings are in the parser's token type order; token types with no
	// mapping are not listed.
	Mappings []TSMapping
	Comment  string
}

// TSMapping sends a token type (by the parser's alias for it, e.g.
// "asciiword") through dictionaries, qualified as spliced, in order.
type TSMapping struct {
	Token        string
	Dictionaries []string
}

// ObjectID returns the IDs the model uses for each object; a convenience for
// the diff and for tests.
func (s Schema) ID() ID    { return ID{Kind: KindSchema, Name: s.Name} }
func (e Extension) ID() ID { return ID{Kind: KindExtension, Name: e.Name} }
func (e Enum) ID() ID      { return ID{Kind: KindEnum, Schema: e.Schema, Name: e.Name} }
func (d Domain) ID() ID    { return ID{Kind: KindDomain, Schema: d.Schema, Name: d.Name} }
func (c Composite) ID() ID { return ID{Kind: KindComposite, Schema: c.Schema, Name: c.Name} }
func (s Sequence) ID() ID  { return ID{Kind: KindSequence, Schema: s.Schema, Name: s.Name} }
func (t Table) ID() ID     { return ID{Kind: KindTable, Schema: t.Schema, Name: t.Name} }
func (i Index) ID() ID     { return ID{Kind: KindIndex, Schema: i.Schema, Name: i.Name} }
func (c Constraint) ID() ID {
	return ID{Kind: KindConstraint, Schema: c.Schema, Name: c.Table, Sub: c.Name}
}
func (t Trigger) ID() ID { return ID{Kind: KindTrigger, Schema: t.Schema, Name: t.Table, Sub: t.Name} }
func (p Policy) ID() ID  { return ID{Kind: KindPolicy, Schema: p.Schema, Name: p.Table, Sub: p.Name} }
func (v View) ID() ID {
	k := KindView
	if v.Materialized {
		k = KindMatView
	}
	return ID{Kind: k, Schema: v.Schema, Name: v.Name}
}
func (c Collation) ID() ID { return ID{Kind: KindCollation, Schema: c.Schema, Name: c.Name} }
func (c TSConfig) ID() ID  { return ID{Kind: KindTSConfig, Schema: c.Schema, Name: c.Name} }
func (f Function) ID() ID {
	k := KindFunction
	switch {
	case f.Procedure:
		k = KindProcedure
	case f.Aggregate != "":
		k = KindAggregate
	}
	return ID{Kind: k, Schema: f.Schema, Name: f.Name, Sub: f.IdentityArgs}
}

// ColumnID is the ID of column col of table t.
func ColumnID(schema, table, col string) ID {
	return ID{Kind: KindColumn, Schema: schema, Name: table, Sub: col}
}
