package config

import (
	"errors"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/ptah-run/ptah/pkg/api/v1alpha1"
)

const goodMigration = `apiVersion: ptah.run/v1alpha1
kind: PtahMigration
metadata:
  name: app
spec:
  target:
    urlFrom: {env: APP_DATABASE_URL}
  source:
    path: ./migrations
`

func TestParseBothKinds(t *testing.T) {
	// A schema and a migration may share a name: names are unique per kind.
	f, err := Parse("deploy/ptah.yaml", []byte(good+"---\n"+goodMigration))
	if err != nil {
		t.Fatal(err)
	}
	if len(f.Resources) != 1 || f.Resources[0].Schema == nil || f.Resources[0].Migration != nil {
		t.Fatalf("Resources = %v, want the one PtahSchema", refs(f.Resources))
	}
	if len(f.Migrations) != 1 {
		t.Fatalf("Migrations = %v, want one", refs(f.Migrations))
	}
	if got, want := refs(f.Documents), []string{`PtahSchema "app"`, `PtahMigration "app"`}; !reflect.DeepEqual(got, want) {
		t.Errorf("Documents = %v, want %v", got, want)
	}

	m := f.Migrations[0]
	if m.Schema != nil || m.Kind() != v1alpha1.KindPtahMigration || m.Name() != "app" || m.Namespace() != "" || m.Line != 11 {
		t.Errorf("migration resource = kind %s name %q namespace %q line %d, schema %v", m.Kind(), m.Name(), m.Namespace(), m.Line, m.Schema)
	}
	want := v1alpha1.PtahMigrationSpec{
		Target: v1alpha1.Target{Engine: "postgres", URLFrom: &v1alpha1.URLSource{Env: "APP_DATABASE_URL"}},
		Source: v1alpha1.MigrationSource{Path: "./migrations"},
		Policy: v1alpha1.MigrationPolicy{Apply: "OnApproval", LockTimeout: "5s"},
	}
	if !reflect.DeepEqual(m.Migration.Spec, want) {
		t.Errorf("spec = %+v, want %+v", m.Migration.Spec, want)
	}
	if got := m.SourceDir(); got != "deploy/migrations" {
		t.Errorf("SourceDir = %q, want deploy/migrations (relative to the file)", got)
	}
	if got := m.Target(); !reflect.DeepEqual(got, want.Target) {
		t.Errorf("Target = %+v", got)
	}
	url, _, err := m.ResolveURL(func(string) string { return "postgres://db/app" }, nil)
	if err != nil || url != "postgres://db/app" {
		t.Errorf("ResolveURL = %q, %v", url, err)
	}
	if _, err := m.SQLFiles(); err == nil || !strings.Contains(err.Error(), `PtahMigration "app": SQLFiles reads the files of a PtahSchema`) {
		t.Errorf("SQLFiles of a migration = %v, want a refusal", err)
	}
}

func TestParseMigrationOnly(t *testing.T) {
	doc := strings.Replace(goodMigration, "path: ./migrations", "path: db\n    layout: flyway\n  policy:\n    apply: Always\n    lockTimeout: 2s", 1)
	f, err := Parse("ptah.yaml", []byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	if len(f.Resources) != 0 || len(f.Migrations) != 1 {
		t.Fatalf("Resources = %v, Migrations = %v", refs(f.Resources), refs(f.Migrations))
	}
	spec := f.Migrations[0].Migration.Spec
	if spec.Source.Layout != v1alpha1.LayoutFlyway || spec.Policy.Apply != v1alpha1.ApplyAlways || spec.Policy.LockTimeout != "2s" {
		t.Errorf("declared fields were not kept: %+v", spec)
	}
}

func TestParseMigrationErrors(t *testing.T) {
	tests := []struct {
		name string
		yaml string
		want []string
	}{
		{"unknown field", goodMigration + "  retries: 3\n",
			[]string{`ptah.yaml:10: PtahMigration "app": spec.retries: unknown field`}},
		{"schemas are a schema's", goodMigration + "  schemas: [public]\n",
			[]string{`ptah.yaml:10: PtahMigration "app": spec.schemas: unknown field`}},
		{"allowDestructive is a schema's", goodMigration + "  policy:\n    allowDestructive: true\n",
			[]string{`ptah.yaml:11: PtahMigration "app": spec.policy.allowDestructive: unknown field`}},
		{"layout misspelled", strings.Replace(goodMigration, "path: ./migrations", "path: ./migrations\n    layot: flyway", 1),
			[]string{`ptah.yaml:10: PtahMigration "app": spec.source.layot: unknown field (did you mean layout?)`}},
		{"bad layout", strings.Replace(goodMigration, "path: ./migrations", "path: ./migrations\n    layout: goose", 1),
			[]string{`ptah.yaml:10: PtahMigration "app": spec.source.layout: "goose" is not one of native, golang-migrate, flyway; leave it out to detect the layout from the file names`}},
		{"layout of the wrong type", strings.Replace(goodMigration, "path: ./migrations", "path: ./migrations\n    layout: 5", 1),
			[]string{`ptah.yaml:10: PtahMigration "app": spec.source.layout: a number where a string is expected: one of native, golang-migrate, flyway; leave it out to detect`}},
		{"bad policy", goodMigration + "  policy:\n    apply: Sometimes\n",
			[]string{`ptah.yaml:11: PtahMigration "app": spec.policy.apply: "Sometimes" is not one of Never, OnApproval, Always`}},
		{"bad lock timeout", goodMigration + "  policy: {lockTimeout: soon}\n",
			[]string{`ptah.yaml:10: PtahMigration "app": spec.policy.lockTimeout: "soon" is not a duration such as 5s or 500ms`}},
		{"no source path", strings.Replace(goodMigration, "path: ./migrations", "layout: native", 1),
			[]string{`ptah.yaml:8: PtahMigration "app": spec.source.path: required: a directory of versioned .sql files`}},
		{"status is not declared", goodMigration + "status: {}\n",
			[]string{`ptah.yaml:10: PtahMigration "app": status: written by ptah, never declared`}},
		{"every problem", goodMigration + "  policy: {apply: x, lockTimeout: y}\n",
			[]string{"spec.policy.apply:", "spec.policy.lockTimeout:"}},
		{"a plan is not declared", strings.Replace(goodMigration, "kind: PtahMigration", "kind: PtahMigrationPlan", 1),
			[]string{`ptah.yaml:2: kind "PtahMigrationPlan" is written by ptah, not declared in a configuration file; declare one of: PtahSchema, PtahMigration`}},
		{"an acknowledgment is not declared", strings.Replace(goodMigration, "kind: PtahMigration", "kind: PtahMigrationRunAcknowledgment", 1),
			[]string{`kind "PtahMigrationRunAcknowledgment" is written by ptah`}},
		{"unknown kind lists both", strings.Replace(goodMigration, "kind: PtahMigration", "kind: PtahMigrations", 1),
			[]string{`ptah.yaml:2: unknown kind "PtahMigrations"; known kinds: PtahSchema, PtahMigration`}},
		{"duplicate migration", goodMigration + "---\n" + goodMigration,
			[]string{`ptah.yaml:11: PtahMigration "app": declared twice (first at line 1); names must be unique per kind`}},
		{"duplicate beside a schema of that name", goodMigration + "---\n" + good + "---\n" + goodMigration,
			[]string{`ptah.yaml:21: PtahMigration "app": declared twice (first at line 1)`}},
		{"a bad migration beside a good schema", good + "---\n" + goodMigration + "  foo: 1\n",
			[]string{`ptah.yaml:20: PtahMigration "app": spec.foo: unknown field`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse("ptah.yaml", []byte(tt.yaml))
			if err == nil {
				t.Fatalf("Parse succeeded, want an error containing %q", tt.want)
			}
			if !errors.Is(err, ErrInvalid) {
				t.Errorf("error does not unwrap to ErrInvalid: %v", err)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q\ndoes not contain %q", err, w)
				}
			}
			if n := strings.Count(err.Error(), "declared twice"); strings.HasPrefix(tt.name, "duplicate") && n != 1 {
				t.Errorf("%d duplicates reported, want 1: %v", n, err)
			}
		})
	}
}

func TestSelectAcrossKinds(t *testing.T) {
	docs := good + "---\n" + goodMigration + "---\n" +
		strings.ReplaceAll(goodMigration, "name: app", "name: jobs") + "---\n" +
		strings.ReplaceAll(goodMigration, "name: app", "name: app\n  namespace: team")
	f, err := Parse("ptah.yaml", []byte(docs))
	if err != nil {
		t.Fatal(err)
	}
	all := []string{`PtahSchema "app"`, `PtahMigration "app"`, `PtahMigration "jobs"`, `PtahMigration "team/app"`}
	tests := []struct {
		name   string
		sel    func([]string) ([]*Resource, error)
		names  []string
		want   []string
		errMsg string
	}{
		{"schemas only", f.Select, nil, []string{`PtahSchema "app"`}, ""},
		{"schema by a name both kinds have", f.Select, []string{"app"}, []string{`PtahSchema "app"`}, ""},
		{"schema by kind", f.Select, []string{"PtahSchema/app"}, []string{`PtahSchema "app"`}, ""},
		{"schema select refuses a migration's name", f.Select, []string{"jobs"}, nil,
			`no resource named "jobs"; available: app (jobs is a PtahMigration, which this command does not work on)`},
		{"schema select refuses the migration kind", f.Select, []string{"PtahMigration/app"}, nil,
			`no resource named "PtahMigration/app"; available: app (PtahMigration/app is a PtahMigration`},

		{"migrations only", f.SelectMigrations, nil, all[1:], ""},
		{"migrations by name", f.SelectMigrations, []string{"app"}, []string{`PtahMigration "app"`, `PtahMigration "team/app"`}, ""},
		{"migration by namespace", f.SelectMigrations, []string{"PtahMigration/team/app"}, []string{`PtahMigration "team/app"`}, ""},
		{"migration select refuses nothing known", f.SelectMigrations, []string{"nope"}, nil,
			`no resource named "nope"; available: app, jobs, team/app`},

		{"all", f.SelectAll, nil, all, ""},
		{"all by a shared name", f.SelectAll, []string{"app"}, []string{`PtahSchema "app"`, `PtahMigration "app"`, `PtahMigration "team/app"`}, ""},
		{"all by kind", f.SelectAll, []string{"PtahMigration/app", "PtahSchema/app"},
			[]string{`PtahMigration "app"`, `PtahMigration "team/app"`, `PtahSchema "app"`}, ""},
		{"all in the order named", f.SelectAll, []string{"jobs", "app", "jobs"},
			[]string{`PtahMigration "jobs"`, `PtahSchema "app"`, `PtahMigration "app"`, `PtahMigration "team/app"`}, ""},
		{"a kind qualifier is not a namespace", f.SelectAll, []string{"PtahSchema/team/app"}, nil,
			`no resource named "PtahSchema/team/app"; available: app, jobs, team/app`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tt.sel(tt.names)
			if tt.errMsg != "" {
				if err == nil || !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tt.errMsg) {
					t.Fatalf("error = %v, want %q", err, tt.errMsg)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(refs(got), tt.want) {
				t.Errorf("selected %v, want %v", refs(got), tt.want)
			}
		})
	}
}

func TestSelectAKindTheFileDoesNotDeclare(t *testing.T) {
	migrations, err := Parse("ptah.yaml", []byte(goodMigration))
	if err != nil {
		t.Fatal(err)
	}
	// A command that works on schemas refuses a file of migrations rather
	// than doing nothing and succeeding.
	if _, err := migrations.Select(nil); err == nil || !errors.Is(err, ErrInvalid) ||
		!strings.Contains(err.Error(), "ptah.yaml: declares no PtahSchema; this command works on PtahSchema resources only") {
		t.Errorf("Select on a file of migrations = %v", err)
	}
	schemas, err := Parse("ptah.yaml", []byte(good))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := schemas.SelectMigrations(nil); err == nil || !strings.Contains(err.Error(), "declares no PtahMigration") {
		t.Errorf("SelectMigrations on a file of schemas = %v", err)
	}
	if got, err := schemas.SelectAll(nil); err != nil || len(got) != 1 {
		t.Errorf("SelectAll on a file of schemas = %v, %v", refs(got), err)
	}
}

func TestMigrationSourceDirIsRelativeToTheFile(t *testing.T) {
	dir := writeTree(t, map[string]string{"deploy/ptah.yaml": goodMigration})
	f, err := Load(filepath.Join(dir, "deploy/ptah.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	// The directory does not exist: config does not read it.
	if got, want := f.Migrations[0].SourceDir(), filepath.Join(dir, "deploy/migrations"); got != want {
		t.Errorf("SourceDir = %q, want %q", got, want)
	}
}

func refs(rs []*Resource) []string {
	var out []string
	for _, r := range rs {
		out = append(out, r.Ref())
	}
	return out
}
