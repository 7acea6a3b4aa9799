package store

import (
	"bytes"
	"crypto/rand"
	"encoding/json"
	"fmt"
)

// The helpers below are for implementations, so that every backend accepts
// and refuses exactly the same objects.

// CheckCreate returns why obj cannot be created (wrapping ErrInvalid), or
// nil: Check, and no Status (UpdateStatus writes it).
func CheckCreate(obj Object) error {
	if err := Check(obj); err != nil {
		return err
	}
	if NormalizeJSON(obj.Status) != nil {
		return fmt.Errorf("%w: a status is written by UpdateStatus, not Create", ErrInvalid)
	}
	return nil
}

// Check returns why obj cannot be stored (wrapping ErrInvalid), or nil.
func Check(obj Object) error {
	switch {
	case obj.Kind == "":
		return fmt.Errorf("%w: no kind", ErrInvalid)
	case obj.Name == "":
		return fmt.Errorf("%w: no name", ErrInvalid)
	case obj.ContractVersion < 1:
		// An object without a contract version would slip past the
		// stored-state fence of every older ptah.
		return fmt.Errorf("%w: contract version %d, want 1 or more", ErrInvalid, obj.ContractVersion)
	}
	for k := range obj.Labels {
		if k == "" {
			return fmt.Errorf("%w: empty label key", ErrInvalid)
		}
	}
	if err := checkJSON("spec", obj.Spec); err != nil {
		return err
	}
	return checkJSON("status", obj.Status)
}

func checkJSON(field string, raw json.RawMessage) error {
	if len(bytes.TrimSpace(raw)) == 0 || json.Valid(raw) {
		return nil
	}
	return fmt.Errorf("%w: %s is not valid JSON", ErrInvalid, field)
}

// NormalizeJSON returns nil for an empty value or JSON null, so that "no
// spec" has one representation in every backend, else raw unchanged.
func NormalizeJSON(raw json.RawMessage) json.RawMessage {
	t := bytes.TrimSpace(raw)
	if len(t) == 0 || bytes.Equal(t, []byte("null")) {
		return nil
	}
	return raw
}

// NewUID returns a random UUID version 4 in its text form.
func NewUID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])  // never fails: since Go 1.24 it crashes the program instead
	b[6] = b[6]&0x0f | 0x40 // version 4
	b[8] = b[8]&0x3f | 0x80 // RFC 4122 variant
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

// Ref names an object in messages: `Kind "namespace/name"`.
func Ref(kind, namespace, name string) string {
	if namespace == "" {
		return fmt.Sprintf("%s %q", kind, name)
	}
	return fmt.Sprintf("%s %q", kind, namespace+"/"+name)
}

// EmbeddedContractVersion returns the highest number-valued
// "contractVersion" member found at any depth of the JSON documents, 0 when
// there is none (see Object.EmbeddedContractVersion).
func EmbeddedContractVersion(docs ...json.RawMessage) int {
	values := make([]any, 0, len(docs))
	for _, d := range docs {
		var v any
		if len(d) > 0 && json.Unmarshal(d, &v) == nil {
			values = append(values, v)
		}
	}
	return EmbeddedContractVersionIn(values...)
}

// EmbeddedContractVersionIn is EmbeddedContractVersion of documents
// already decoded (maps, slices and numbers as encoding/json or an
// unstructured Kubernetes object holds them: float64, int64 or int), so a
// store that decoded them need not encode and decode them again.
func EmbeddedContractVersionIn(values ...any) int {
	highest := 0
	var walk func(v any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			for k, x := range v {
				if k == "contractVersion" {
					if n, ok := integer(x); ok && n > highest {
						highest = n
					}
				}
				walk(x)
			}
		case []any:
			for _, x := range v {
				walk(x)
			}
		}
	}
	for _, v := range values {
		walk(v)
	}
	return highest
}

// integer is a decoded JSON number as an int (truncated, as int(float64)).
func integer(v any) (int, bool) {
	switch n := v.(type) {
	case float64:
		return int(n), true
	case int64:
		return int(n), true
	case int:
		return n, true
	}
	return 0, false
}
