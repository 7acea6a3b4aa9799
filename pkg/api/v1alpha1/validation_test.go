package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"
)

func valid() *PtahSchema {
	s := &PtahSchema{
		TypeMeta:   metav1.TypeMeta{APIVersion: APIVersion, Kind: KindPtahSchema},
		ObjectMeta: metav1.ObjectMeta{Name: "app"},
		Spec: PtahSchemaSpec{
			Target: Target{URLFrom: &URLSource{Env: "APP_DATABASE_URL"}},
			Source: Source{Path: "./schema"},
		},
	}
	s.Default()
	return s
}

func TestDefault(t *testing.T) {
	s := &PtahSchema{}
	s.Default()
	want := PtahSchemaSpec{
		Target:  Target{Engine: "postgres"},
		Schemas: []string{"public"},
		Policy:  Policy{Apply: ApplyOnApproval, LockTimeout: "5s"},
	}
	if !reflect.DeepEqual(s.Spec, want) {
		t.Fatalf("defaulted spec = %+v, want %+v", s.Spec, want)
	}

	// Defaulting never overrides what was declared.
	s = &PtahSchema{Spec: PtahSchemaSpec{Schemas: []string{"app"}, Policy: Policy{Apply: ApplyNever, LockTimeout: "1s"}}}
	s.Default()
	if s.Spec.Schemas[0] != "app" || s.Spec.Policy.Apply != ApplyNever || s.Spec.Policy.LockTimeout != "1s" {
		t.Fatalf("defaulting overrode declared fields: %+v", s.Spec)
	}
}

func TestValidate(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(*PtahSchema)
		want   []string // each must appear in the error; none: valid
	}{
		{"valid", func(*PtahSchema) {}, nil},
		{"valid file url", func(s *PtahSchema) { s.Spec.Target.URLFrom = &URLSource{File: "secret/url"} }, nil},
		{"valid literal url", func(s *PtahSchema) { s.Spec.Target.URLFrom, s.Spec.Target.URL = nil, "postgres://x" }, nil},
		{"valid policy", func(s *PtahSchema) { s.Spec.Policy = Policy{Apply: ApplyAlways, LockTimeout: "1.5s"} }, nil},
		{"valid dotted name", func(s *PtahSchema) { s.Name = "billing.app-2" }, nil},
		{"valid undefaulted", func(s *PtahSchema) { s.Spec.Schemas, s.Spec.Policy, s.Spec.Target.Engine = nil, Policy{}, "" }, nil},

		{"privileges managed", func(s *PtahSchema) { s.Spec.Privileges = PrivilegesManaged }, nil},
		{"privileges ignored", func(s *PtahSchema) { s.Spec.Privileges = PrivilegesIgnored }, nil},
		{"bad privileges", func(s *PtahSchema) { s.Spec.Privileges = "managed" },
			[]string{`spec.privileges: "managed" is not one of Ignored, Managed`}},
		{"bad apply", func(s *PtahSchema) { s.Spec.Policy.Apply = "Sometimes" },
			[]string{`spec.policy.apply: "Sometimes" is not one of Never, OnApproval, Always`}},
		{"ptah schema", func(s *PtahSchema) { s.Spec.Schemas = []string{"public", "ptah"} },
			[]string{`spec.schemas[1]: "ptah" holds ptah's own state`}},
		{"system schema", func(s *PtahSchema) { s.Spec.Schemas = []string{"pg_catalog"} },
			[]string{`spec.schemas[0]: "pg_catalog" is a system schema`}},
		{"information_schema", func(s *PtahSchema) { s.Spec.Schemas = []string{"information_schema"} },
			[]string{`spec.schemas[0]: "information_schema" is a system schema`}},
		{"duplicate schema", func(s *PtahSchema) { s.Spec.Schemas = []string{"a", "a"} },
			[]string{`spec.schemas[1]: "a" is listed twice`}},
		{"empty schema", func(s *PtahSchema) { s.Spec.Schemas = []string{""} },
			[]string{`spec.schemas[0]: empty schema name`}},
		{"long schema", func(s *PtahSchema) { s.Spec.Schemas = []string{strings.Repeat("s", 64)} },
			[]string{`spec.schemas[0]:`, `63-byte`}},
		{"bad lock timeout", func(s *PtahSchema) { s.Spec.Policy.LockTimeout = "five" },
			[]string{`spec.policy.lockTimeout: "five" is not a duration`}},
		{"zero lock timeout", func(s *PtahSchema) { s.Spec.Policy.LockTimeout = "0s" },
			[]string{`spec.policy.lockTimeout: "0s" must be at least 1ms`}},
		{"negative lock timeout", func(s *PtahSchema) { s.Spec.Policy.LockTimeout = "-1s" },
			[]string{`spec.policy.lockTimeout: "-1s" must be at least 1ms`}},
		{"no url", func(s *PtahSchema) { s.Spec.Target.URLFrom = nil },
			[]string{`spec.target: one of url and urlFrom is required`}},
		{"url and urlFrom", func(s *PtahSchema) { s.Spec.Target.URL = "postgres://x" },
			[]string{`spec.target: url and urlFrom are mutually exclusive`}},
		{"empty urlFrom", func(s *PtahSchema) { s.Spec.Target.URLFrom = &URLSource{} },
			[]string{`spec.target.urlFrom: one of env, file and secretKeyRef is required`}},
		{"env and file", func(s *PtahSchema) { s.Spec.Target.URLFrom = &URLSource{Env: "A", File: "f"} },
			[]string{`spec.target.urlFrom: env, file and secretKeyRef are mutually exclusive`}},
		{"bad env name", func(s *PtahSchema) { s.Spec.Target.URLFrom = &URLSource{Env: "1-A"} },
			[]string{`spec.target.urlFrom.env: "1-A" is not a valid environment variable name`}},
		{"secret without key", func(s *PtahSchema) { s.Spec.Target.URLFrom = &URLSource{SecretKeyRef: &SecretKeyRef{Name: "db"}} },
			[]string{`spec.target.urlFrom.secretKeyRef: both name and key are required`}},
		{"env and secret", func(s *PtahSchema) {
			s.Spec.Target.URLFrom = &URLSource{Env: "A", SecretKeyRef: &SecretKeyRef{Name: "db", Key: "url"}}
		}, []string{`spec.target.urlFrom: env, file and secretKeyRef are mutually exclusive`}},
		{"configMap without name", func(s *PtahSchema) { s.Spec.Source = Source{ConfigMap: &ConfigMapSource{}} },
			[]string{`spec.source.configMap.name: required`}},
		{"oci by tag", func(s *PtahSchema) { s.Spec.Source = Source{OCI: &OCISource{Ref: "oci://r.example/schemas:v1"}} },
			[]string{`spec.source.oci.ref: "oci://r.example/schemas:v1" is not an artifact pinned by digest`}},
		{"oci and path", func(s *PtahSchema) {
			s.Spec.Source.OCI = &OCISource{Ref: "oci://r.example/s@sha256:" + strings.Repeat("a", 64)}
		}, []string{`spec.source: path, configMap and oci are mutually exclusive`}},
		{"interval too short", func(s *PtahSchema) { s.Spec.Interval = "10s" },
			[]string{`spec.interval: 10s is shorter than the minimum 30s`}},
		{"bad engine", func(s *PtahSchema) { s.Spec.Target.Engine = "mysql" },
			[]string{`spec.target.engine: "mysql" is not one of postgres`}},
		{"no source", func(s *PtahSchema) { s.Spec.Source.Path = "" },
			[]string{`spec.source.path: required`}},
		{"no name", func(s *PtahSchema) { s.Name = "" },
			[]string{`metadata.name: required`}},
		{"bad name", func(s *PtahSchema) { s.Name = "App_1" },
			[]string{`metadata.name: "App_1" must be lowercase`}},
		{"bad namespace", func(s *PtahSchema) { s.Namespace = "a.b" },
			[]string{`metadata.namespace: "a.b" must be`}},
		{"bad apiVersion", func(s *PtahSchema) { s.APIVersion = "ptah.run/v1" },
			[]string{`apiVersion: "ptah.run/v1" is not ptah.run/v1alpha1`}},
		{"bad kind", func(s *PtahSchema) { s.Kind = "PtahMigration" },
			[]string{`kind: "PtahMigration" is not PtahSchema`}},
		{"every problem at once", func(s *PtahSchema) {
			s.Spec.Policy.Apply, s.Spec.Source.Path = "x", ""
		}, []string{"spec.policy.apply:", "spec.source.path:"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := valid()
			tt.mutate(s)
			err := s.Validate()
			if tt.want == nil {
				if err != nil {
					t.Fatalf("Validate() = %v, want nil", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("Validate() = nil, want %q", tt.want)
			}
			if _, ok := err.(FieldErrors); !ok {
				t.Errorf("Validate() returned %T, want FieldErrors", err)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Validate() = %q, want it to contain %q", err, w)
				}
			}
		})
	}
}

func TestLockTimeoutDuration(t *testing.T) {
	for in, want := range map[string]time.Duration{"": 5 * time.Second, "250ms": 250 * time.Millisecond, "2m": 2 * time.Minute} {
		if got := (Policy{LockTimeout: in}).LockTimeoutDuration(); got != want {
			t.Errorf("LockTimeoutDuration(%q) = %v, want %v", in, got, want)
		}
	}
}

func TestDeepCopyIsIndependent(t *testing.T) {
	s := valid()
	c := s.DeepCopy()
	c.Spec.Schemas[0] = "other"
	c.Spec.Target.URLFrom.Env = "OTHER"
	if s.Spec.Schemas[0] != "public" || s.Spec.Target.URLFrom.Env != "APP_DATABASE_URL" {
		t.Fatal("DeepCopy shares memory with the original")
	}
}

// The shared run state is inline: a status serialises with its fields at
// the top level, as it did before the families shared it.
func TestRunStateIsInline(t *testing.T) {
	st := PtahSchemaStatus{RunState: RunState{Phase: PhaseInSync, Plan: &PlanReference{Fingerprint: "f"}}}
	raw, err := json.Marshal(st)
	if err != nil {
		t.Fatal(err)
	}
	var flat map[string]any
	if err := json.Unmarshal(raw, &flat); err != nil {
		t.Fatal(err)
	}
	if flat["phase"] != "InSync" || flat["plan"] == nil || flat["RunState"] != nil {
		t.Fatalf("status JSON: %s", raw)
	}
}
