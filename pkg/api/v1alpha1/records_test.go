package v1alpha1

import (
	"reflect"
	"slices"
	"strings"
	"testing"
)

// kindTypes are each kind's Go type, and the type of its status where the
// document has no status field (a declared resource's status is stored
// beside it, never read from ptah.yaml).
var kindTypes = map[string]struct{ object, status reflect.Type }{
	KindPtahSchema:                     {reflect.TypeFor[PtahSchema](), reflect.TypeFor[PtahSchemaStatus]()},
	KindPtahSchemaPlan:                 {reflect.TypeFor[PtahSchemaPlan](), nil},
	KindPtahSchemaApproval:             {reflect.TypeFor[PtahSchemaApproval](), nil},
	KindPtahMigration:                  {reflect.TypeFor[PtahMigration](), reflect.TypeFor[PtahMigrationStatus]()},
	KindPtahMigrationPlan:              {reflect.TypeFor[PtahMigrationPlan](), nil},
	KindPtahMigrationApproval:          {reflect.TypeFor[PtahMigrationApproval](), nil},
	KindPtahMigrationRunAcknowledgment: {reflect.TypeFor[PtahMigrationRunAcknowledgment](), nil},
}

func TestKindsAreListedEverywhere(t *testing.T) {
	for _, kind := range Kinds {
		if _, ok := FamilyOf(kind); !ok {
			t.Errorf("%s has no family", kind)
		}
		kt, ok := kindTypes[kind]
		if !ok {
			t.Errorf("%s has no type in kindTypes", kind)
			continue
		}
		if kt.object.Name() != kind {
			t.Errorf("kind %s is served by type %s", kind, kt.object.Name())
		}
		if _, ok := deepCopiers[kind]; !ok {
			t.Errorf("%s has no DeepCopy under test", kind)
		}
		if kt.status != nil {
			if f, ok := kt.object.FieldByName("Status"); !ok || f.Type != kt.status {
				t.Errorf("%s has no Status field of type %s", kind, kt.status.Name())
			}
			if _, ok := deepCopiers[kt.status.Name()]; !ok {
				t.Errorf("%s has no DeepCopy under test", kt.status.Name())
			}
		}
		if len(recordsOfKind(kind)) == 0 {
			t.Errorf("%s keeps no record in Records", kind)
		}
	}
	if len(kindTypes) != len(Kinds) || len(families) != len(Kinds) {
		t.Errorf("kindTypes (%d) and families (%d) list kinds that Kinds (%d) does not", len(kindTypes), len(families), len(Kinds))
	}
	if f, _ := FamilyOf(KindPtahMigrationRunAcknowledgment); f != FamilyMigration {
		t.Errorf("FamilyOf(%s) = %q", KindPtahMigrationRunAcknowledgment, f)
	}
	if _, ok := FamilyOf("PtahSomethingElse"); ok {
		t.Error("FamilyOf knows a kind that does not exist")
	}
}

// recordsOfKind is every record of kind.
func recordsOfKind(kind string) []Record {
	var out []Record
	for _, r := range Records {
		if r.Kind == kind {
			out = append(out, r)
		}
	}
	return out
}

var (
	bindingsType       = reflect.TypeFor[Bindings]()
	decisionStatusType = reflect.TypeFor[DecisionStatus]()
	// recordTypes are the types a field of each role has; a field of one of
	// these types anywhere in a kind is a record of that role.
	recordTypes = map[reflect.Type]RecordRole{
		reflect.TypeFor[Operation]():          RoleClaim,
		reflect.TypeFor[PendingObservation](): RoleUncertainRun,
		reflect.TypeFor[UnresolvedRun]():      RoleUncertainRun,
		reflect.TypeFor[ResolvedRun]():        RoleResolution,
		reflect.TypeFor[LeaseRelease]():       RoleOwedRelease,
	}
)

// TestRecordsHoldToTheTypes holds Records to the types, both ways.
func TestRecordsHoldToTheTypes(t *testing.T) {
	seen := map[Record]bool{}
	for _, r := range Records {
		if seen[r] {
			t.Errorf("%+v is listed twice", r)
		}
		seen[r] = true
		if problem := checkRecord(r); problem != "" {
			t.Errorf("Records: %s %s (%s): %s", r.Kind, r.Field, r.Role, problem)
		}
	}

	for _, kind := range Kinds {
		for _, f := range discoverRecords(kind) {
			if !slices.ContainsFunc(RecordsOf(kind, f.role), func(r Record) bool { return f.matches(r) }) {
				t.Errorf("%s %s is a record of role %s that Records does not list", kind, f.path, f.role)
			}
		}
	}
}

// TestBothFamiliesKeepTheSameRecords: the families keep the same records,
// kind for kind, except where they differ by design: what a migration
// approval also binds, who settles a migration's uncertain run, and the
// acknowledgment that a person's settling is.
func TestBothFamiliesKeepTheSameRecords(t *testing.T) {
	byDesign := map[RecordRole]bool{RoleHistoryBinding: true, RoleResolution: true}
	count := map[Family]map[RecordRole]int{FamilySchema: {}, FamilyMigration: {}}
	for _, r := range Records {
		if r.Kind == KindPtahMigrationRunAcknowledgment {
			continue
		}
		f, _ := FamilyOf(r.Kind)
		count[f][r.Role]++
	}
	roles := []RecordRole{RoleContractVersion, RoleBindings, RoleHistoryBinding, RoleSpent, RoleClaim, RoleUncertainRun, RoleResolution, RoleOwedRelease}
	for _, role := range roles {
		s, m := count[FamilySchema][role], count[FamilyMigration][role]
		switch {
		case byDesign[role] && (s != 0 || m == 0):
			t.Errorf("%s: the schema family keeps %d, the migration family %d; by design only the migration family keeps it", role, s, m)
		case !byDesign[role] && (s != m || s == 0):
			t.Errorf("%s: the schema family keeps %d, the migration family %d; they should keep the same", role, s, m)
		}
	}
	for _, c := range count {
		for role := range c {
			if !slices.Contains(roles, role) {
				t.Errorf("role %s is missing from this test's list", role)
			}
		}
	}
	if got := RecordsOf(KindPtahMigration, RoleUncertainRun); len(got) != 1 || got[0].Field != "status.unresolvedRun" {
		t.Errorf("the migration's uncertain run is %v, want status.unresolvedRun", got)
	}
}

// checkRecord says what is wrong with r, or "".
func checkRecord(r Record) string {
	if _, ok := FamilyOf(r.Kind); !ok {
		return "not a kind of Kinds"
	}
	ft, parent, ok := resolveField(r.Kind, r.Field)
	if !ok {
		return "no such field"
	}
	ft = deref(ft)
	switch r.Role {
	case RoleContractVersion:
		f, ok := jsonFieldsOf(ft)["contractVersion"]
		if !ok || f.Kind() != reflect.Int {
			return "has no integer contractVersion field"
		}
	case RoleBindings:
		if !embeds(ft, bindingsType) {
			return "does not inline Bindings"
		}
	case RoleHistoryBinding:
		if !strings.HasSuffix(r.Field, ".historyFingerprint") || ft.Kind() != reflect.String || !embeds(parent, bindingsType) {
			return "is not the historyFingerprint of inlined Bindings"
		}
	case RoleSpent:
		if parent != decisionStatusType {
			return "is not a field of a DecisionStatus"
		}
	default:
		if recordTypes[ft] != r.Role {
			return "is a " + ft.Name() + ", not a type of this role"
		}
	}
	return ""
}

// resolveField returns the type of the field at path (JSON names), and the
// type of the struct holding it.
func resolveField(kind, path string) (field, parent reflect.Type, ok bool) {
	kt := kindTypes[kind]
	cur := kt.object
	for i, step := range strings.Split(path, ".") {
		parent = deref(cur)
		fields := jsonFieldsOf(parent)
		if i == 0 && step == "status" && kt.status != nil {
			fields["status"] = kt.status
		}
		next, found := fields[step]
		if !found {
			return nil, nil, false
		}
		cur = next
	}
	return cur, parent, true
}

// discovered is a field found by its type to be a record.
type discovered struct {
	path string
	role RecordRole
}

func (d discovered) matches(r Record) bool {
	if d.role == RoleSpent {
		// the record names the field of the DecisionStatus that spends it
		return strings.HasPrefix(r.Field, d.path+".")
	}
	return r.Field == d.path
}

// discoverRecords walks a kind's types and returns every field whose type
// makes it a record.
func discoverRecords(kind string) []discovered {
	kt := kindTypes[kind]
	var out []discovered
	walkRecords(kt.object, "", &out) // the object holds its status
	return out
}

func walkRecords(t reflect.Type, path string, out *[]discovered) {
	t = deref(t)
	for t.Kind() == reflect.Slice {
		t = deref(t.Elem())
	}
	if t.Kind() != reflect.Struct || t == timeType {
		return
	}
	if t == decisionStatusType {
		*out = append(*out, discovered{path, RoleSpent})
	}
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		name, inline := jsonName(f)
		switch {
		case name == "-" || (!f.IsExported() && !f.Anonymous):
			continue
		case inline:
			if f.Type == bindingsType {
				*out = append(*out, discovered{path, RoleBindings})
			}
			walkRecords(f.Type, path, out)
			continue
		}
		p := name
		if path != "" {
			p = path + "." + name
		}
		if name == "contractVersion" {
			*out = append(*out, discovered{path, RoleContractVersion})
		}
		if role, ok := recordTypes[deref(f.Type)]; ok {
			*out = append(*out, discovered{p, role})
		}
		walkRecords(f.Type, p, out)
	}
}

// jsonFieldsOf maps the JSON names of t's fields to their types, promoting
// the fields of inlined structs as encoding/json does.
func jsonFieldsOf(t reflect.Type) map[string]reflect.Type {
	out := map[string]reflect.Type{}
	if t.Kind() != reflect.Struct {
		return out
	}
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		name, inline := jsonName(f)
		switch {
		case name == "-" || (!f.IsExported() && !f.Anonymous):
		case inline:
			for k, v := range jsonFieldsOf(f.Type) {
				out[k] = v
			}
		default:
			out[name] = f.Type
		}
	}
	return out
}

// jsonName is f's JSON name, and whether its fields are promoted instead.
func jsonName(f reflect.StructField) (string, bool) {
	name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
	if f.Anonymous && name == "" && f.Type.Kind() == reflect.Struct {
		return "", true
	}
	if name == "" {
		name = f.Name
	}
	return name, false
}

func embeds(t, inner reflect.Type) bool {
	for i := 0; t.Kind() == reflect.Struct && i < t.NumField(); i++ {
		if f := t.Field(i); f.Anonymous && f.Type == inner {
			return true
		}
	}
	return false
}

func deref(t reflect.Type) reflect.Type {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	return t
}
