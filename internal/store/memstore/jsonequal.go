package memstore

import (
	"bytes"
	"encoding/json"
	"math/big"

	"github.com/ptah-run/ptah/internal/store"
)

// jsonEqual reports whether a and b are the same JSON value, the way
// PostgreSQL's jsonb equality sees it: object key order, whitespace and
// escapes do not matter, numbers compare by value (1.0 equals 1), and of
// duplicate keys the last wins. The generation must bump identically in
// every backend, and pgstore compares with jsonb.
func jsonEqual(a, b json.RawMessage) bool {
	a, b = store.NormalizeJSON(a), store.NormalizeJSON(b)
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	va, okA := decode(a)
	vb, okB := decode(b)
	if !okA || !okB {
		return bytes.Equal(a, b) // unreachable for checked objects
	}
	return valueEqual(va, vb)
}

func decode(raw json.RawMessage) (any, bool) {
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	var v any
	return v, d.Decode(&v) == nil
}

func valueEqual(a, b any) bool {
	switch a := a.(type) {
	case map[string]any:
		b, ok := b.(map[string]any)
		if !ok || len(a) != len(b) {
			return false
		}
		for k, va := range a {
			vb, ok := b[k]
			if !ok || !valueEqual(va, vb) {
				return false
			}
		}
		return true
	case []any:
		b, ok := b.([]any)
		if !ok || len(a) != len(b) {
			return false
		}
		for i := range a {
			if !valueEqual(a[i], b[i]) {
				return false
			}
		}
		return true
	case json.Number:
		b, ok := b.(json.Number)
		return ok && numberEqual(a, b)
	default: // string, bool, nil
		return a == b
	}
}

func numberEqual(a, b json.Number) bool {
	ra, okA := new(big.Rat).SetString(a.String())
	rb, okB := new(big.Rat).SetString(b.String())
	if !okA || !okB {
		return a == b
	}
	return ra.Cmp(rb) == 0
}
