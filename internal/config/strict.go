package config

import (
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Strict decoding is done on the YAML node tree rather than by
// json.Decoder.DisallowUnknownFields alone, because the node tree still knows
// line numbers and the full path of the field: "ptah.yaml:9: unknown field
// spec.polcy" is something a person can act on; `json: unknown field "polcy"`
// is not.

// fieldProblem is an unknown or repeated field at a line.
type fieldProblem struct {
	line int
	msg  string
}

// declaredMeta is the metadata a document in ptah.yaml may give. The API
// types carry Kubernetes' whole ObjectMeta (uid, labels, ...), which in a
// cluster the API server owns or ptah would ignore here: a field that would
// be silently ignored is refused instead.
type declaredMeta struct {
	Name      string `json:"name"`
	Namespace string `json:"namespace"`
}

// checkDocument checks a document's top-level fields against t, the kind's
// API type, as it may be declared: status is ptah's to write (in a cluster
// the manager's, through the status subresource), never a person's, and
// metadata holds only declaredMeta.
func checkDocument(root *yaml.Node, t reflect.Type) []fieldProblem {
	root = resolveAlias(root)
	var problems []fieldProblem
	for i := 0; i+1 < len(root.Content); i += 2 {
		if key := root.Content[i]; key.Value == "status" {
			problems = append(problems, fieldProblem{key.Line, "status: written by ptah, never declared: remove it (ptah status NAME shows it)"})
		}
	}
	for _, p := range checkFields(root, t, "") {
		if !strings.HasPrefix(p.msg, "status.") && !strings.HasPrefix(p.msg, "metadata.") {
			problems = append(problems, p)
		}
	}
	if md := mappingNode(root, "metadata"); md != nil {
		problems = append(problems, checkFields(md, reflect.TypeOf(declaredMeta{}), "metadata")...)
	}
	slices.SortStableFunc(problems, func(a, b fieldProblem) int { return a.line - b.line })
	return problems
}

// checkFields walks a mapping node against the JSON shape of t and reports
// every field t does not have, and every field given twice.
func checkFields(n *yaml.Node, t reflect.Type, path string) []fieldProblem {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	n = resolveAlias(n)
	switch t.Kind() {
	case reflect.Struct:
		if n.Kind != yaml.MappingNode {
			return nil // a type error, reported by the decoder with its own words
		}
		fields := jsonFields(t)
		seen := map[string]int{}
		var problems []fieldProblem
		for i := 0; i+1 < len(n.Content); i += 2 {
			key, val := n.Content[i], n.Content[i+1]
			p := joinPath(path, key.Value)
			if first, dup := seen[key.Value]; dup {
				problems = append(problems, fieldProblem{key.Line, fmt.Sprintf("%s: field given twice (first at line %d)", p, first)})
				continue
			}
			seen[key.Value] = key.Line
			ft, ok := fields[key.Value]
			if !ok {
				problems = append(problems, fieldProblem{key.Line, fmt.Sprintf("%s: unknown field%s", p, suggest(key.Value, fields))})
				continue
			}
			problems = append(problems, checkFields(val, ft, p)...)
		}
		return problems
	case reflect.Slice:
		if n.Kind != yaml.SequenceNode {
			return nil
		}
		var problems []fieldProblem
		for i, item := range n.Content {
			problems = append(problems, checkFields(item, t.Elem(), fmt.Sprintf("%s[%d]", path, i))...)
		}
		return problems
	}
	return nil
}

// jsonFields maps the JSON names of t's fields to their types, promoting the
// fields of embedded structs the way encoding/json does.
func jsonFields(t reflect.Type) map[string]reflect.Type {
	out := map[string]reflect.Type{}
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" || (!f.IsExported() && !f.Anonymous) {
			continue
		}
		if f.Anonymous && name == "" && f.Type.Kind() == reflect.Struct {
			for k, v := range jsonFields(f.Type) {
				out[k] = v
			}
			continue
		}
		if name == "" {
			name = f.Name
		}
		out[name] = f.Type
	}
	return out
}

// suggest names the known field nearest to key: one differing only in case
// (allowdestructive), or within a couple of edits of it (allowDestrutive,
// urlform). Too far to guess, it names nothing.
func suggest(key string, fields map[string]reflect.Type) string {
	best, bestDist := "", 0
	for name := range fields {
		d := editDistance(strings.ToLower(key), strings.ToLower(name))
		if best == "" || d < bestDist || d == bestDist && name < best {
			best, bestDist = name, d
		}
	}
	if best == "" || bestDist > max(1, min(len(key), len(best))/4) {
		return ""
	}
	return fmt.Sprintf(" (did you mean %s?)", best)
}

// editDistance is the Levenshtein distance between a and b, in bytes.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

func joinPath(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

func resolveAlias(n *yaml.Node) *yaml.Node {
	for n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	return n
}

// lineOf returns the line of the deepest node on path ("spec.schemas[1]")
// that exists in the document, so an error about a field points at it, or at
// its nearest declared parent when the field is missing.
func lineOf(n *yaml.Node, path string) int {
	line := n.Line
	for _, step := range splitPath(path) {
		n = resolveAlias(n)
		var next *yaml.Node
		switch n.Kind {
		case yaml.SequenceNode:
			if i, err := strconv.Atoi(step); err == nil && i >= 0 && i < len(n.Content) {
				next = n.Content[i]
				line = next.Line
			}
		case yaml.MappingNode:
			for i := 0; i+1 < len(n.Content); i += 2 {
				if n.Content[i].Value == step {
					next = n.Content[i+1]
					line = n.Content[i].Line
					break
				}
			}
		}
		if next == nil {
			return line
		}
		n = next
	}
	return line
}

// splitPath turns "spec.schemas[1].x" into [spec schemas 1 x].
func splitPath(path string) []string {
	path = strings.NewReplacer("[", ".", "]", "").Replace(path)
	if path == "" {
		return nil
	}
	return strings.Split(path, ".")
}

// mappingValue returns the scalar value of key in a mapping node, and its line.
func mappingValue(n *yaml.Node, key string) (string, int, bool) {
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == key {
			v := resolveAlias(n.Content[i+1])
			return v.Value, n.Content[i].Line, v.Kind == yaml.ScalarNode
		}
	}
	return "", 0, false
}
