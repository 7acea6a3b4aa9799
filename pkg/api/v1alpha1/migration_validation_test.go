package v1alpha1

import (
	"reflect"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func validMigration() *PtahMigration {
	m := &PtahMigration{
		TypeMeta:   metav1.TypeMeta{APIVersion: APIVersion, Kind: KindPtahMigration},
		ObjectMeta: metav1.ObjectMeta{Name: "app"},
		Spec: PtahMigrationSpec{
			Target: Target{URLFrom: &URLSource{Env: "APP_DATABASE_URL"}},
			Source: MigrationSource{Path: "./migrations"},
		},
	}
	m.Default()
	return m
}

func TestDefaultMigration(t *testing.T) {
	m := &PtahMigration{}
	m.Default()
	want := PtahMigrationSpec{
		Target: Target{Engine: "postgres"},
		Policy: MigrationPolicy{Apply: ApplyOnApproval, LockTimeout: "5s"},
	}
	if !reflect.DeepEqual(m.Spec, want) {
		t.Fatalf("defaulted spec = %+v, want %+v", m.Spec, want)
	}

	declared := PtahMigrationSpec{
		Target: Target{Engine: "postgres"},
		Source: MigrationSource{Path: "m", Layout: LayoutFlyway},
		Policy: MigrationPolicy{Apply: ApplyNever, LockTimeout: "1s"},
	}
	m = &PtahMigration{Spec: declared}
	m.Default()
	if !reflect.DeepEqual(m.Spec, declared) {
		t.Fatalf("defaulting changed declared fields: %+v, want %+v", m.Spec, declared)
	}
}

// checkValidation checks that validate reports every wanted substring, as
// FieldErrors, or nothing when want is nil.
func checkValidation(t *testing.T, validate func() error, want []string) {
	t.Helper()
	err := validate()
	if want == nil {
		if err != nil {
			t.Fatalf("Validate() = %v, want nil", err)
		}
		return
	}
	if err == nil {
		t.Fatalf("Validate() = nil, want %q", want)
	}
	if _, ok := err.(FieldErrors); !ok {
		t.Errorf("Validate() returned %T, want FieldErrors", err)
	}
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("Validate() = %q, want it to contain %q", err, w)
		}
	}
}

func TestValidateMigration(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(*PtahMigration)
		want   []string
	}{
		{"valid", func(*PtahMigration) {}, nil},
		{"valid undefaulted", func(m *PtahMigration) { m.Spec.Policy, m.Spec.Target.Engine = MigrationPolicy{}, "" }, nil},
		{"valid native", func(m *PtahMigration) { m.Spec.Source.Layout = LayoutNative }, nil},
		{"valid golang-migrate", func(m *PtahMigration) { m.Spec.Source.Layout = LayoutGolangMigrate }, nil},
		{"valid flyway", func(m *PtahMigration) { m.Spec.Source.Layout = LayoutFlyway }, nil},
		{"valid policy", func(m *PtahMigration) { m.Spec.Policy = MigrationPolicy{Apply: ApplyAlways, LockTimeout: "250ms"} }, nil},
		{"valid namespace", func(m *PtahMigration) { m.Namespace = "team" }, nil},

		{"bad layout", func(m *PtahMigration) { m.Spec.Source.Layout = "goose" },
			[]string{`spec.source.layout: "goose" is not one of native, golang-migrate, flyway; leave it out to detect the layout from the file names`}},
		{"layout case", func(m *PtahMigration) { m.Spec.Source.Layout = "Flyway" },
			[]string{`spec.source.layout: "Flyway" is not one of`}},
		{"no source", func(m *PtahMigration) { m.Spec.Source.Path = "" },
			[]string{`spec.source.path: required: a directory of versioned .sql files`}},
		{"bad apply", func(m *PtahMigration) { m.Spec.Policy.Apply = "Sometimes" },
			[]string{`spec.policy.apply: "Sometimes" is not one of Never, OnApproval, Always`}},
		{"bad lock timeout", func(m *PtahMigration) { m.Spec.Policy.LockTimeout = "five" },
			[]string{`spec.policy.lockTimeout: "five" is not a duration`}},
		{"zero lock timeout", func(m *PtahMigration) { m.Spec.Policy.LockTimeout = "0s" },
			[]string{`spec.policy.lockTimeout: "0s" must be at least 1ms`}},
		{"valid statement limits", func(m *PtahMigration) {
			m.Spec.Policy.LockAttemptTimeout, m.Spec.Policy.StatementTimeout = "50ms", "10m"
		}, nil},
		{"bad lock attempt timeout", func(m *PtahMigration) { m.Spec.Policy.LockAttemptTimeout = "soon" },
			[]string{`spec.policy.lockAttemptTimeout: "soon" is not a duration`}},
		{"zero statement timeout", func(m *PtahMigration) { m.Spec.Policy.StatementTimeout = "0s" },
			[]string{`spec.policy.statementTimeout: "0s" must be at least 1ms; leave it out`}},
		{"no url", func(m *PtahMigration) { m.Spec.Target.URLFrom = nil },
			[]string{`spec.target: one of url and urlFrom is required`}},
		{"bad env name", func(m *PtahMigration) { m.Spec.Target.URLFrom = &URLSource{Env: "1-A"} },
			[]string{`spec.target.urlFrom.env: "1-A" is not a valid environment variable name`}},
		{"bad engine", func(m *PtahMigration) { m.Spec.Target.Engine = "mysql" },
			[]string{`spec.target.engine: "mysql" is not one of postgres`}},
		{"no name", func(m *PtahMigration) { m.Name = "" }, []string{`metadata.name: required`}},
		{"bad name", func(m *PtahMigration) { m.Name = "App_1" }, []string{`metadata.name: "App_1" must be lowercase`}},
		{"bad apiVersion", func(m *PtahMigration) { m.APIVersion = "ptah.run/v1" },
			[]string{`apiVersion: "ptah.run/v1" is not ptah.run/v1alpha1`}},
		{"schema kind", func(m *PtahMigration) { m.Kind = KindPtahSchema },
			[]string{`kind: "PtahSchema" is not PtahMigration`}},
		{"every problem at once", func(m *PtahMigration) {
			m.Spec.Source = MigrationSource{Layout: "x"}
			m.Spec.Policy.Apply = "y"
		}, []string{"spec.source.path:", "spec.source.layout:", "spec.policy.apply:"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := validMigration()
			tt.mutate(m)
			checkValidation(t, m.Validate, tt.want)
		})
	}
}

func validAcknowledgment() *PtahMigrationRunAcknowledgment {
	return &PtahMigrationRunAcknowledgment{
		TypeMeta:   metav1.TypeMeta{APIVersion: APIVersion, Kind: KindPtahMigrationRunAcknowledgment},
		ObjectMeta: metav1.ObjectMeta{Name: "app-op1"},
		Spec: PtahMigrationRunAcknowledgmentSpec{
			Migration:   ObjectReference{Name: "app", UID: "0b5e"},
			OperationID: "op1",
			By:          "alice",
			At:          NewTime(time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)),
			Reason:      "journal shows 0003 committed its first two statements; the index exists",
			MarkedApplied: []MarkedVersion{
				{Version: "0003", Checksum: "sha256:3"},
			},
		},
	}
}

func TestValidateAcknowledgment(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(*PtahMigrationRunAcknowledgment)
		want   []string
	}{
		{"valid", func(*PtahMigrationRunAcknowledgment) {}, nil},
		{"valid without marks", func(a *PtahMigrationRunAcknowledgment) { a.Spec.MarkedApplied = nil }, nil},

		{"no migration", func(a *PtahMigrationRunAcknowledgment) { a.Spec.Migration = ObjectReference{} },
			[]string{"spec.migration.name: required", "spec.migration.uid: required: an acknowledgment is bound to one instance"}},
		{"no uid", func(a *PtahMigrationRunAcknowledgment) { a.Spec.Migration.UID = "" },
			[]string{"spec.migration.uid: required"}},
		{"no operation", func(a *PtahMigrationRunAcknowledgment) { a.Spec.OperationID = "" },
			[]string{"spec.operationID: required: the operation ID of the unresolved run (ptah resolve-run NAME shows it)"}},
		{"no one", func(a *PtahMigrationRunAcknowledgment) { a.Spec.By = " " }, []string{"spec.by: required"}},
		{"no time", func(a *PtahMigrationRunAcknowledgment) { a.Spec.At = NewTime(time.Time{}) }, []string{"spec.at: required"}},
		{"no reason", func(a *PtahMigrationRunAcknowledgment) { a.Spec.Reason = "" },
			[]string{"spec.reason: required: what established the run's outcome"}},
		{"mark without version", func(a *PtahMigrationRunAcknowledgment) { a.Spec.MarkedApplied[0].Version = "" },
			[]string{"spec.markedApplied[0].version: required"}},
		{"mark without checksum", func(a *PtahMigrationRunAcknowledgment) { a.Spec.MarkedApplied[0].Checksum = "" },
			[]string{"spec.markedApplied[0].checksum: required"}},
		{"mark twice", func(a *PtahMigrationRunAcknowledgment) {
			a.Spec.MarkedApplied = append(a.Spec.MarkedApplied, a.Spec.MarkedApplied[0])
		}, []string{`spec.markedApplied[1].version: "0003" is listed twice`}},
		{"wrong kind", func(a *PtahMigrationRunAcknowledgment) { a.Kind = KindPtahMigrationApproval },
			[]string{`kind: "PtahMigrationApproval" is not PtahMigrationRunAcknowledgment`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := validAcknowledgment()
			tt.mutate(a)
			checkValidation(t, a.Validate, tt.want)
		})
	}
}

func TestMigrationLockTimeoutDuration(t *testing.T) {
	for in, want := range map[string]time.Duration{"": 5 * time.Second, "250ms": 250 * time.Millisecond} {
		if got := (MigrationPolicy{LockTimeout: in}).LockTimeoutDuration(); got != want {
			t.Errorf("LockTimeoutDuration(%q) = %v, want %v", in, got, want)
		}
	}
}
