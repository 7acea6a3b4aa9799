package config

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/ptah-run/ptah/pkg/api/v1alpha1"
)

const good = `apiVersion: ptah.run/v1alpha1
kind: PtahSchema
metadata:
  name: app
spec:
  target:
    urlFrom: {env: APP_DATABASE_URL}
  source:
    path: ./schema
`

func TestParseValid(t *testing.T) {
	f, err := Parse("ptah.yaml", []byte(good))
	if err != nil {
		t.Fatal(err)
	}
	if len(f.Resources) != 1 {
		t.Fatalf("got %d resources, want 1", len(f.Resources))
	}
	r := f.Resources[0]
	want := v1alpha1.PtahSchemaSpec{
		Target:  v1alpha1.Target{Engine: "postgres", URLFrom: &v1alpha1.URLSource{Env: "APP_DATABASE_URL"}},
		Source:  v1alpha1.Source{Path: "./schema"},
		Schemas: []string{"public"},
		Policy:  v1alpha1.Policy{Apply: "OnApproval", LockTimeout: "5s"},
	}
	if !reflect.DeepEqual(r.Schema.Spec, want) {
		t.Errorf("spec = %+v, want %+v", r.Schema.Spec, want)
	}
	if r.Ref() != `PtahSchema "app"` || r.Line != 1 {
		t.Errorf("Ref() = %s, Line = %d", r.Ref(), r.Line)
	}
}

// spec.privileges is read from ptah.yaml; left out, it stays empty, which
// is Ignored.
func TestParsePrivileges(t *testing.T) {
	for _, tt := range []struct {
		yaml    string
		want    v1alpha1.PrivilegesMode
		managed bool
	}{
		{good, "", false},
		{good + "  privileges: Ignored\n", v1alpha1.PrivilegesIgnored, false},
		{good + "  privileges: Managed\n", v1alpha1.PrivilegesManaged, true},
	} {
		f, err := Parse("ptah.yaml", []byte(tt.yaml))
		if err != nil {
			t.Fatal(err)
		}
		spec := f.Resources[0].Schema.Spec
		if spec.Privileges != tt.want || spec.ManagesPrivileges() != tt.managed {
			t.Errorf("privileges = %q (managed %v), want %q (managed %v)", spec.Privileges, spec.ManagesPrivileges(), tt.want, tt.managed)
		}
	}
}

func TestParseMultipleDocuments(t *testing.T) {
	second := strings.ReplaceAll(good, "name: app", "name: billing")
	f, err := Parse("ptah.yaml", []byte("---\n"+good+"---\n# a comment only\n---\n"+second+"---\n"))
	if err != nil {
		t.Fatal(err)
	}
	if got := nameList(f.Resources); !reflect.DeepEqual(got, []string{"app", "billing"}) {
		t.Fatalf("names = %v", got)
	}
	if f.Resources[1].Line != 14 {
		t.Errorf("second document line = %d, want 14", f.Resources[1].Line)
	}
}

func TestParseErrors(t *testing.T) {
	tests := []struct {
		name string
		yaml string
		want []string // substrings of the error, all required
	}{
		{"invalid yaml", "apiVersion: ptah.run/v1alpha1\nkind: [PtahSchema\n",
			[]string{"ptah.yaml:", "invalid YAML"}},
		{"tab indentation", "apiVersion: x\n\tkind: y\n", []string{"ptah.yaml:2: invalid YAML"}},
		{"not a mapping", "- a\n- b\n", []string{"ptah.yaml:1: a document must be a mapping"}},
		{"empty file", "", []string{"ptah.yaml: no resources"}},
		{"only comments", "# nothing\n---\n", []string{"no resources"}},
		{"unknown kind", strings.Replace(good, "kind: PtahSchema", "kind: PtahScheme", 1),
			[]string{`ptah.yaml:2: unknown kind "PtahScheme"`, "PtahSchema"}},
		{"missing kind", strings.Replace(good, "kind: PtahSchema\n", "", 1), []string{"kind is required"}},
		{"wrong apiVersion", strings.Replace(good, "ptah.run/v1alpha1", "ptah.run/v1", 1),
			[]string{`ptah.yaml:1: apiVersion "ptah.run/v1" is not supported: use ptah.run/v1alpha1`}},
		{"missing apiVersion", strings.Replace(good, "apiVersion: ptah.run/v1alpha1\n", "", 1),
			[]string{`apiVersion "" is not supported`}},
		{"unknown field", good + "  polcy:\n    apply: Never\n",
			[]string{`ptah.yaml:10: PtahSchema "app": spec.polcy: unknown field`}},
		{"unknown nested field", strings.Replace(good, "path: ./schema", "path: ./schema\n    recursive: true", 1),
			[]string{`ptah.yaml:10: PtahSchema "app": spec.source.recursive: unknown field`}},
		{"unknown top-level field", good + "sepc: {}\n", []string{`ptah.yaml:10:`, "sepc: unknown field"}},
		{"status is ptah's", good + "status: {}\n", []string{`ptah.yaml:10:`, "status: written by ptah, never declared"}},
		{"metadata the API server owns", strings.Replace(good, "  name: app\n", "  name: app\n  uid: 1234\n", 1),
			[]string{`ptah.yaml:`, "metadata.uid: unknown field"}},
		{"case slip", good + "  policy:\n    allowdestructive: true\n",
			[]string{"spec.policy.allowdestructive: unknown field (did you mean allowDestructive?)"}},
		{"duplicate field", good + "  schemas: [a]\n  schemas: [b]\n", []string{"ptah.yaml:11:", "spec.schemas: field given twice (first at line 10)"}},
		{"type error", good + "  policy:\n    allowDestructive: maybe\n",
			[]string{`ptah.yaml:11: PtahSchema "app": spec.policy.allowDestructive: a string where a boolean (true or false) is expected`}},
		{"string for list", good + "  schemas: public\n", []string{"ptah.yaml:10:", "spec.schemas: a string where a list is expected"}},
		{"validation", good + "  policy:\n    apply: Sometimes\n",
			[]string{`ptah.yaml:11: PtahSchema "app": spec.policy.apply: "Sometimes" is not one of Never, OnApproval, Always`}},
		{"privileges not a mode", good + "  privileges: Sometimes\n",
			[]string{`ptah.yaml:10: PtahSchema "app": spec.privileges: "Sometimes" is not one of Ignored, Managed`}},
		{"privileges nested in policy", good + "  policy:\n    privileges: Managed\n",
			[]string{`spec.policy.privileges: unknown field`}},
		{"ptah schema", good + "  schemas: [public, ptah]\n",
			[]string{`ptah.yaml:10: PtahSchema "app": spec.schemas[1]: "ptah" holds ptah's own state`}},
		{"every validation problem", strings.Replace(good, "path: ./schema", "path: ''", 1) + "  policy: {lockTimeout: soon}\n",
			[]string{"spec.source.path: required", `spec.policy.lockTimeout: "soon"`}},
		{"a Secret is the cluster's", strings.Replace(good, "urlFrom: {env: APP_DATABASE_URL}", "urlFrom: {secretKeyRef: {name: db, key: url}}", 1),
			[]string{`PtahSchema "app": spec.target.urlFrom.secretKeyRef: a Secret is read by ptah serve`, "use urlFrom.env or urlFrom.file"}},
		{"a ConfigMap is the cluster's", strings.Replace(good, "path: ./schema", "configMap: {name: app-schema}", 1),
			[]string{`PtahSchema "app": spec.source.configMap: a ConfigMap is read by ptah serve`, "use spec.source.path"}},
		{"two sources", strings.Replace(good, "path: ./schema", "path: ./schema\n    configMap: {name: x}", 1),
			[]string{"spec.source: path, configMap and oci are mutually exclusive"}},
		{"an OCI artifact is the cluster's", strings.Replace(good, "path: ./schema", "oci: {ref: 'oci://r.example/s@sha256:"+strings.Repeat("a", 64)+"'}", 1),
			[]string{`spec.source.oci: an OCI artifact is read by ptah serve`}},
		{"a migration's OCI artifact is the cluster's", "apiVersion: ptah.run/v1alpha1\nkind: PtahMigration\nmetadata:\n  name: ledger\nspec:\n" +
			"  target:\n    urlFrom: {env: LEDGER_URL}\n  source:\n    oci: {ref: 'oci://r.example/m@sha256:" + strings.Repeat("b", 64) + "'}\n",
			[]string{`PtahMigration "ledger": spec.source.oci: an OCI artifact is read by ptah serve`}},
		{"interval too short", good + "  interval: 1s\n", []string{"spec.interval: 1s is shorter than the minimum 30s"}},
		{"interval not a duration", good + "  interval: often\n", []string{`spec.interval: "often" is not a duration`}},
		{"duplicate name", good + "---\n" + good, []string{`ptah.yaml:11: PtahSchema "app": declared twice (first at line 1)`}},
		{"problems in two documents", strings.Replace(good, "kind: PtahSchema", "kind: Nope", 1) + "---\n" + good + "  foo: 1\n",
			[]string{`unknown kind "Nope"`, "spec.foo: unknown field"}},
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
		})
	}
}

func TestLoadMissingFile(t *testing.T) {
	_, err := Load(filepath.Join(t.TempDir(), "ptah.yaml"))
	if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "ptah.yaml: cannot read the file: no such file or directory") {
		t.Fatalf("Load = %v", err)
	}
}

func TestSelect(t *testing.T) {
	docs := good + "---\n" + strings.ReplaceAll(good, "name: app", "name: billing") +
		"---\n" + strings.ReplaceAll(good, "name: app", "name: app\n  namespace: team")
	f, err := Parse("ptah.yaml", []byte(docs))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		names []string
		want  []string // refs
		err   string
	}{
		{nil, []string{`PtahSchema "app"`, `PtahSchema "billing"`, `PtahSchema "team/app"`}, ""},
		{[]string{"billing"}, []string{`PtahSchema "billing"`}, ""},
		{[]string{"billing", "team/app", "billing"}, []string{`PtahSchema "billing"`, `PtahSchema "team/app"`}, ""},
		{[]string{"app"}, []string{`PtahSchema "app"`, `PtahSchema "team/app"`}, ""},
		{[]string{"nope"}, nil, `no resource named "nope"; available: app, billing, team/app`},
	}
	for _, tt := range tests {
		got, err := f.Select(tt.names)
		if tt.err != "" {
			if err == nil || !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("Select(%v) error = %v, want %q", tt.names, err, tt.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("Select(%v) = %v", tt.names, err)
			continue
		}
		var refs []string
		for _, r := range got {
			refs = append(refs, r.Ref())
		}
		if !reflect.DeepEqual(refs, tt.want) {
			t.Errorf("Select(%v) = %v, want %v", tt.names, refs, tt.want)
		}
	}
}

// writeTree creates files (path -> content) under a new temp dir.
func writeTree(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for p, content := range files {
		full := filepath.Join(dir, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func TestSQLFiles(t *testing.T) {
	dir := writeTree(t, map[string]string{
		"deploy/ptah.yaml":              good,
		"deploy/schema/010_b.sql":       "b",
		"deploy/schema/002_a.sql":       "a",
		"deploy/schema/README.md":       "not sql",
		"deploy/schema/.#002_a.sql":     "editor lock",
		"deploy/schema/sub.sql/x.sql":   "a directory named .sql",
		"deploy/schema/nested/003.sql":  "not read",
		"deploy/schema/100_c.sql.orig":  "not sql",
		"deploy/empty/notes.txt":        "",
		"deploy/other/001_only.sql":     "x",
		"deploy/other/ignored/0001.sql": "",
	})
	f, err := Load(filepath.Join(dir, "deploy/ptah.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	r := f.Resources[0]
	files, err := r.SQLFiles()
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, f := range files {
		got = append(got, strings.TrimPrefix(f.Name, dir+"/")+"="+f.SQL)
	}
	want := []string{"deploy/schema/002_a.sql=a", "deploy/schema/010_b.sql=b"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("SQLFiles = %v, want %v", got, want)
	}

	r.Schema.Spec.Source.Path = "empty"
	_, err = r.SQLFiles()
	if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "spec.source.path: directory "+filepath.Join(dir, "deploy/empty")+" has no .sql files") {
		t.Errorf("empty dir: %v", err)
	}
	r.Schema.Spec.Source.Path = "missing"
	_, err = r.SQLFiles()
	if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "cannot read directory") || !strings.Contains(err.Error(), "no such file") {
		t.Errorf("missing dir: %v", err)
	}
	r.Schema.Spec.Source.Path = filepath.Join(dir, "deploy/other") // absolute paths are taken as they are
	if files, err := r.SQLFiles(); err != nil || len(files) != 1 {
		t.Errorf("absolute dir: %v %v", files, err)
	}
}

func TestSQLFileNamesRelativeToWorkingDirectory(t *testing.T) {
	f, err := Parse("ptah.yaml", []byte(good))
	if err != nil {
		t.Fatal(err)
	}
	if got := f.Resources[0].SourceDir(); got != "schema" {
		t.Errorf("SourceDir = %q, want schema", got)
	}
	f, err = Parse("deploy/ptah.yaml", []byte(good))
	if err != nil {
		t.Fatal(err)
	}
	if got := f.Resources[0].SourceDir(); got != "deploy/schema" {
		t.Errorf("SourceDir = %q, want deploy/schema", got)
	}
}

func TestResolveURL(t *testing.T) {
	const secret = "postgres://u:hunter2@db:5432/app"
	dir := writeTree(t, map[string]string{
		"secrets/url":   "  " + secret + "\n",
		"secrets/empty": "\n",
	})
	env := map[string]string{"APP_DATABASE_URL": secret, "BLANK": "  "}
	getenv := func(k string) string { return env[k] }
	tests := []struct {
		name    string
		target  string
		want    string
		warning bool
		err     string
	}{
		{"env", "urlFrom: {env: APP_DATABASE_URL}", secret, false, ""},
		{"missing env", "urlFrom: {env: NOPE_URL}", "", false, "spec.target.urlFrom.env: environment variable NOPE_URL is not set or empty"},
		{"blank env", "urlFrom: {env: BLANK}", "", false, "environment variable BLANK is not set or empty"},
		{"file", "urlFrom: {file: secrets/url}", secret, false, ""},
		{"missing file", "urlFrom: {file: secrets/nope}", "", false, "spec.target.urlFrom.file: cannot read " + filepath.Join(dir, "secrets/nope") + ": no such file"},
		{"empty file", "urlFrom: {file: secrets/empty}", "", false, "secrets/empty is empty"},
		{"literal", "url: " + secret, secret, true, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			doc := strings.Replace(good, "urlFrom: {env: APP_DATABASE_URL}", tt.target, 1)
			f, err := Parse(filepath.Join(dir, "ptah.yaml"), []byte(doc))
			if err != nil {
				t.Fatal(err)
			}
			url, warning, err := f.Resources[0].ResolveURL(getenv, nil)
			if tt.err != "" {
				if err == nil || !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("ResolveURL error = %v, want %q", err, tt.err)
				}
				if strings.Contains(err.Error(), "hunter2") {
					t.Fatalf("error leaks the password: %v", err)
				}
				return
			}
			if err != nil || url != tt.want {
				t.Fatalf("ResolveURL = %q, %v; want %q", url, err, tt.want)
			}
			if (warning != "") != tt.warning {
				t.Fatalf("warning = %q, want one: %v", warning, tt.warning)
			}
			if strings.Contains(warning, "hunter2") {
				t.Fatalf("warning leaks the password: %v", warning)
			}
		})
	}
}

func BenchmarkParse(b *testing.B) {
	var docs strings.Builder
	for i := range 50 {
		docs.WriteString(strings.ReplaceAll(good, "name: app", fmt.Sprintf("name: app-%d", i)) + "---\n")
	}
	data := []byte(docs.String())
	b.ResetTimer()
	for b.Loop() {
		if _, err := Parse("ptah.yaml", data); err != nil {
			b.Fatal(err)
		}
	}
}

func TestUnknownFieldsSuggestTheNearestKnownOne(t *testing.T) {
	t.Parallel()
	fields := jsonFields(reflect.TypeFor[v1alpha1.Policy]())
	for key, want := range map[string]string{
		"allowDestrutive":  " (did you mean allowDestructive?)",
		"allowdestructive": " (did you mean allowDestructive?)",
		"lock_timeout":     " (did you mean lockTimeout?)",
		"aply":             " (did you mean apply?)",
		"retries":          "",
		"x":                "",
	} {
		if got := suggest(key, fields); got != want {
			t.Errorf("suggest(%q) = %q, want %q", key, got, want)
		}
	}
}
