package v1alpha1

// Family is a family of kinds, named by its resource kind: the resource a
// person declares, and the objects ptah and people write beside it.
type Family string

const (
	FamilySchema    Family = KindPtahSchema
	FamilyMigration Family = KindPtahMigration
)

// Kinds are every kind of stored object this API defines, family by family.
// A stored object of any other kind was written by a ptah that knows more.
var Kinds = []string{
	KindPtahSchema, KindPtahSchemaPlan, KindPtahSchemaApproval,
	KindPtahMigration, KindPtahMigrationPlan, KindPtahMigrationApproval, KindPtahMigrationRunAcknowledgment,
}

var families = map[string]Family{
	KindPtahSchema: FamilySchema, KindPtahSchemaPlan: FamilySchema, KindPtahSchemaApproval: FamilySchema,
	KindPtahMigration: FamilyMigration, KindPtahMigrationPlan: FamilyMigration,
	KindPtahMigrationApproval: FamilyMigration, KindPtahMigrationRunAcknowledgment: FamilyMigration,
}

// FamilyOf returns the family of kind, and false for a kind not in Kinds.
func FamilyOf(kind string) (Family, bool) {
	f, ok := families[kind]
	return f, ok
}

// RecordRole is what a durable record carries, named after the guarantee
// that depends on it (the numbers are docs/guarantees.md's and the seed's).
type RecordRole string

const (
	// RoleContractVersion (6): a field holding the contractVersion of the
	// ptah that wrote it. The fence reads the highest of them, and the
	// store record's own contract version, which every object carries
	// whatever its kind.
	RoleContractVersion RecordRole = "ContractVersion"
	// RoleBindings (1, 2): the inputs a plan was computed from, which an
	// approval repeats and a claim's input fingerprint covers: the spec
	// inlines Bindings.
	RoleBindings RecordRole = "Bindings"
	// RoleHistoryBinding (1): the history fingerprint a migration plan
	// and its approval also bind, by design; a schema's plan has none.
	RoleHistoryBinding RecordRole = "HistoryBinding"
	// RoleSpent (1): how a decision is spent so that it never takes effect
	// twice: a schema approval goes stale with its plan; a migration
	// approval is consumed at the dispatch boundary, an acknowledgment
	// when it clears the unresolved run.
	RoleSpent RecordRole = "Spent"
	// RoleClaim (1, 2): the operation recorded before any dispatch.
	RoleClaim RecordRole = "Claim"
	// RoleUncertainRun (3): a dispatched run whose outcome is unknown. A
	// schema's is settled by the observation it owes; a migration's only
	// by a person.
	RoleUncertainRun RecordRole = "UncertainRun"
	// RoleResolution (3): who settled a migration's uncertain run, and with
	// which acknowledgment.
	RoleResolution RecordRole = "Resolution"
	// RoleOwedRelease (4): a lease release owed once the run can no longer
	// write, completed before anything else in a later pass.
	RoleOwedRelease RecordRole = "OwedRelease"
)

// Record is one durable record a kind keeps.
type Record struct {
	Kind string
	// Field is the record's path in the stored object, by JSON names:
	// "status.unresolvedRun"; "spec" for what the spec itself inlines.
	Field string
	Role  RecordRole
}

// Records states, in one place, which family keeps which record: the
// seed's map of durable state, per kind. TestRecordsHoldToTheTypes holds it
// to the types both ways: each record is a field of the type its role
// needs, and each field of such a type is a record.
//
// Every status also holds the store's own contract version record
// ("status" itself, RunState.StoreContractVersion and
// DecisionStatus.StoreContractVersion), which only the cluster's store
// writes.
var Records = []Record{
	{KindPtahSchema, "status", RoleContractVersion},
	{KindPtahSchemaApproval, "status", RoleContractVersion},
	{KindPtahMigration, "status", RoleContractVersion},
	{KindPtahMigrationApproval, "status", RoleContractVersion},
	{KindPtahMigrationRunAcknowledgment, "status", RoleContractVersion},
	{KindPtahSchema, "status.executionBinding", RoleContractVersion},
	{KindPtahSchema, "status.activeOperation", RoleClaim},
	{KindPtahSchema, "status.pendingObservation", RoleUncertainRun},
	{KindPtahSchema, "status.owedRelease", RoleOwedRelease},
	{KindPtahSchemaPlan, "spec", RoleBindings},
	{KindPtahSchemaPlan, "spec.executionBinding", RoleContractVersion},
	{KindPtahSchemaApproval, "spec", RoleBindings},
	{KindPtahSchemaApproval, "spec.executionBinding", RoleContractVersion},
	{KindPtahSchemaApproval, "status.stale", RoleSpent},

	{KindPtahMigration, "status.executionBinding", RoleContractVersion},
	{KindPtahMigration, "status.activeOperation", RoleClaim},
	{KindPtahMigration, "status.unresolvedRun", RoleUncertainRun},
	{KindPtahMigration, "status.resolvedRun", RoleResolution},
	{KindPtahMigration, "status.owedRelease", RoleOwedRelease},
	{KindPtahMigrationPlan, "spec", RoleBindings},
	{KindPtahMigrationPlan, "spec.historyFingerprint", RoleHistoryBinding},
	{KindPtahMigrationPlan, "spec.executionBinding", RoleContractVersion},
	{KindPtahMigrationApproval, "spec", RoleBindings},
	{KindPtahMigrationApproval, "spec.historyFingerprint", RoleHistoryBinding},
	{KindPtahMigrationApproval, "spec.executionBinding", RoleContractVersion},
	{KindPtahMigrationApproval, "status.consumed", RoleSpent},
	{KindPtahMigrationRunAcknowledgment, "status.consumed", RoleSpent},
}

// RecordsOf returns the records of kind with role, in table order.
func RecordsOf(kind string, role RecordRole) []Record {
	var out []Record
	for _, r := range Records {
		if r.Kind == kind && r.Role == role {
			out = append(out, r)
		}
	}
	return out
}
