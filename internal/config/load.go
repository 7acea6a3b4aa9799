// Package config reads ptah.yaml: one or more PtahSchema and PtahMigration
// documents, decoded strictly, defaulted and validated, and resolves what
// they point at (a schema's declared SQL files, the database URL; a
// migration's versioned files are read by the migration source, not here).
// Every problem unwraps to ErrInvalid and names the file, line and resource;
// none carries a connection URL.
package config

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"go.yaml.in/yaml/v3"

	"github.com/ptah-run/ptah/pkg/api/v1alpha1"
)

// File is a loaded configuration file. It may hold resources of both
// declarable kinds, PtahSchema and PtahMigration. Names are unique per kind,
// as in Kubernetes: a PtahSchema and a PtahMigration may share one.
type File struct {
	Path string
	// Resources are the PtahSchema resources, in document order: what the
	// commands that work on schemas only read.
	Resources []*Resource
	// Migrations are the PtahMigration resources, in document order.
	Migrations []*Resource
	// Documents are the resources of every kind, in document order.
	Documents []*Resource
}

// Resource is one validated, defaulted document of a File: exactly one of
// Schema and Migration is set.
type Resource struct {
	Schema    *v1alpha1.PtahSchema
	Migration *v1alpha1.PtahMigration
	File      string // the configuration file, as given
	Line      int    // where the document starts
	node      *yaml.Node
}

// Kind is the resource's kind: PtahSchema or PtahMigration.
func (r *Resource) Kind() string {
	if r.Migration != nil {
		return v1alpha1.KindPtahMigration
	}
	return v1alpha1.KindPtahSchema
}

// Name is the resource's metadata.name.
func (r *Resource) Name() string { return r.meta().Name }

// Namespace is the resource's metadata.namespace; empty when not given.
func (r *Resource) Namespace() string { return r.meta().Namespace }

// Target is the resource's spec.target.
func (r *Resource) Target() v1alpha1.Target {
	if r.Migration != nil {
		return r.Migration.Spec.Target
	}
	return r.Schema.Spec.Target
}

func (r *Resource) meta() metav1.ObjectMeta {
	if r.Migration != nil {
		return r.Migration.ObjectMeta
	}
	return r.Schema.ObjectMeta
}

// Ref names the resource the way errors and output show it.
func (r *Resource) Ref() string { return ref(r.Kind(), r.Namespace(), r.Name()) }

func ref(kind, namespace, name string) string {
	if namespace != "" {
		name = namespace + "/" + name
	}
	return fmt.Sprintf("%s %q", kind, name)
}

// errorf locates a problem at the field path of r's document.
func (r *Resource) errorf(field, format string, args ...any) error {
	return &Error{File: r.File, Line: lineOf(r.node, field), Resource: r.Ref(),
		Err: fmt.Errorf("%s: "+format, append([]any{field}, args...)...)}
}

// Load reads and validates the configuration file at path.
func Load(path string) (*File, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		var pe *fs.PathError
		if errors.As(err, &pe) {
			err = pe.Err // the path is already in the message
		}
		return nil, &Error{File: path, Err: fmt.Errorf("cannot read the file: %w", err)}
	}
	return Parse(path, data)
}

// Parse validates data as the configuration file path. It reports every
// problem it finds, not just the first, unless the YAML itself is broken.
func Parse(path string, data []byte) (*File, error) {
	f := &File{Path: path}
	var errs []error
	first := map[string]*Resource{} // kind/namespace/name -> first declaration
	dec := yaml.NewDecoder(bytes.NewReader(data))
	for {
		var doc yaml.Node
		err := dec.Decode(&doc)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			errs = append(errs, yamlError(path, err))
			break // the decoder cannot resynchronise after a syntax error
		}
		if len(doc.Content) == 0 || isNull(doc.Content[0]) {
			continue // an empty document, e.g. after a trailing ---
		}
		r, docErrs := decodeDocument(path, resolveAlias(doc.Content[0]))
		if len(docErrs) > 0 {
			errs = append(errs, docErrs...)
			continue
		}
		key := r.Kind() + "/" + r.Namespace() + "/" + r.Name()
		if prev, dup := first[key]; dup {
			errs = append(errs, &Error{File: path, Line: r.Line, Resource: r.Ref(),
				Err: fmt.Errorf("declared twice (first at line %d); names must be unique per kind", prev.Line)})
			continue
		}
		first[key] = r
		f.Documents = append(f.Documents, r)
		if r.Migration != nil {
			f.Migrations = append(f.Migrations, r)
		} else {
			f.Resources = append(f.Resources, r)
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	if len(f.Documents) == 0 {
		return nil, &Error{File: path, Err: errors.New("no resources: expected at least one document of kind " + strings.Join(declarable, " or "))}
	}
	return f, nil
}

var yamlLine = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)

func yamlError(path string, err error) error {
	e := &Error{File: path, Err: fmt.Errorf("invalid YAML: %s", err)}
	if m := yamlLine.FindStringSubmatch(err.Error()); m != nil {
		e.Line, _ = strconv.Atoi(m[1])
		e.Err = fmt.Errorf("invalid YAML: %s", m[2])
	}
	return e
}

func isNull(n *yaml.Node) bool {
	n = resolveAlias(n)
	return n.Kind == yaml.ScalarNode && n.Tag == "!!null"
}

// declarable are the kinds a configuration file declares, in the order
// messages list them.
var declarable = []string{v1alpha1.KindPtahSchema, v1alpha1.KindPtahMigration}

// document is what every declarable kind's type does.
type document interface {
	Default()
	Validate() error
}

// newDocument returns an empty object of a declarable kind, and a Resource
// holding it.
func newDocument(kind, path string, root *yaml.Node) (document, *Resource) {
	r := &Resource{File: path, Line: root.Line, node: root}
	switch kind {
	case v1alpha1.KindPtahSchema:
		r.Schema = &v1alpha1.PtahSchema{}
		return r.Schema, r
	case v1alpha1.KindPtahMigration:
		r.Migration = &v1alpha1.PtahMigration{}
		return r.Migration, r
	}
	return nil, nil
}

func decodeDocument(path string, root *yaml.Node) (*Resource, []error) {
	at := func(line int, resource string, err error) []error {
		return []error{&Error{File: path, Line: line, Resource: resource, Err: err}}
	}
	if root.Kind != yaml.MappingNode {
		return nil, at(root.Line, "", errors.New("a document must be a mapping with apiVersion, kind, metadata and spec"))
	}
	kind, kindLine, _ := mappingValue(root, "kind")
	apiVersion, apiLine, _ := mappingValue(root, "apiVersion")
	known := strings.Join(declarable, ", ")
	obj, r := newDocument(kind, path, root)
	switch {
	case kind == "":
		return nil, at(root.Line, "", errors.New("kind is required (one of: "+known+")"))
	case obj == nil && slices.Contains(v1alpha1.Kinds, kind):
		return nil, at(kindLine, "", fmt.Errorf("kind %q is written by ptah, not declared in a configuration file; declare one of: %s", kind, known))
	case obj == nil:
		return nil, at(kindLine, "", fmt.Errorf("unknown kind %q; known kinds: %s", kind, known))
	case apiVersion != v1alpha1.APIVersion:
		if apiLine == 0 {
			apiLine = root.Line
		}
		return nil, at(apiLine, "", fmt.Errorf("apiVersion %q is not supported: use %s", apiVersion, v1alpha1.APIVersion))
	}
	var name string
	if md := mappingNode(root, "metadata"); md != nil {
		name, _, _ = mappingValue(md, "name")
	}
	label := ref(kind, "", name)

	var errs []error
	for _, p := range checkDocument(root, reflect.TypeOf(obj)) {
		errs = append(errs, &Error{File: path, Line: p.line, Resource: label, Err: errors.New(p.msg)})
	}
	if len(errs) > 0 {
		return nil, errs
	}

	if err := decodeInto(root, obj); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) && te.Field != "" {
			return nil, at(lineOf(root, te.Field), label, fmt.Errorf("%s: a %s where a %s is expected%s",
				te.Field, yamlTerm(te.Value), goTypeTerm(te.Type), expectedForm(te.Field)))
		}
		return nil, at(root.Line, label, err)
	}
	obj.Default()
	if err := obj.Validate(); err != nil {
		var fes v1alpha1.FieldErrors
		if !errors.As(err, &fes) {
			return nil, at(root.Line, label, err)
		}
		for _, fe := range fes {
			errs = append(errs, &Error{File: path, Line: lineOf(root, fe.Field), Resource: r.Ref(), Err: fe})
		}
		return nil, errs
	}
	var source *v1alpha1.ConfigMapSource
	var oci *v1alpha1.OCISource
	if r.Schema != nil {
		source, oci = r.Schema.Spec.Source.ConfigMap, r.Schema.Spec.Source.OCI
	} else {
		source, oci = r.Migration.Spec.Source.ConfigMap, r.Migration.Spec.Source.OCI
	}
	for _, fe := range v1alpha1.ClusterOnly(r.Target(), source, oci) {
		errs = append(errs, &Error{File: path, Line: lineOf(root, fe.Field), Resource: r.Ref(), Err: &fe})
	}
	if len(errs) > 0 {
		return nil, errs
	}
	return r, nil
}

// decodeInto converts the node to JSON and decodes that, so the JSON tags on
// the API types are the only field names, as they are for the API server.
func decodeInto(n *yaml.Node, out any) error {
	var generic any
	if err := n.Decode(&generic); err != nil {
		return err
	}
	data, err := json.Marshal(generic)
	if err != nil {
		return fmt.Errorf("converting to JSON: %w", err)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	return dec.Decode(out)
}

func mappingNode(n *yaml.Node, key string) *yaml.Node {
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == key {
			if v := resolveAlias(n.Content[i+1]); v.Kind == yaml.MappingNode {
				return v
			}
		}
	}
	return nil
}

// forms says what a field's value looks like, where its type alone does
// not: a duration is a string, and 5 is not one.
var forms = map[string]string{
	"spec.policy.lockTimeout": `a duration such as "5s" or "1m30s"`,
	"spec.target.url":         "a PostgreSQL URL (better: urlFrom)",
	"spec.source.path":        "a directory, relative to this file",
	"spec.source.layout":      "one of native, golang-migrate, flyway; leave it out to detect",
	"spec.schemas":            "a list of schema names, such as [public]",
	"spec.privileges":         "Ignored or Managed",
}

// expectedForm is ": <form>" for a field with a known form, else "".
func expectedForm(field string) string {
	if f, ok := forms[field]; ok {
		return ": " + f
	}
	return ""
}

// yamlTerm and goTypeTerm put a JSON type error in the words of the YAML the
// person wrote.
func yamlTerm(jsonValue string) string {
	switch jsonValue {
	case "object":
		return "mapping"
	case "array":
		return "list"
	case "bool":
		return "boolean"
	}
	return jsonValue
}

func goTypeTerm(t reflect.Type) string {
	switch t.Kind() {
	case reflect.Bool:
		return "boolean (true or false)"
	case reflect.String:
		return "string"
	case reflect.Slice:
		return "list"
	case reflect.Struct, reflect.Map, reflect.Pointer:
		return "mapping"
	}
	return t.String()
}
