// Package fingerprint hashes the inputs ptah binds its decisions to.
//
// A fingerprint is "sha256:" and the hex SHA-256 of a canonical encoding:
// each field, in the order the caller gives them (callers document that
// order and never change it), written as its name, its byte length and its
// value. Lengths make the encoding unambiguous: no two different field lists
// encode to the same bytes, whatever the values contain.
package fingerprint

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"hash"
	"strconv"
)

// Prefix marks the hash function, so a future change of function is visible.
const Prefix = "sha256:"

// Builder accumulates fields.
type Builder struct{ h hash.Hash }

// New starts a fingerprint. The domain names what is fingerprinted (e.g.
// "ptah.plan/v1"), so equal fields in different roles hash differently.
func New(domain string) *Builder {
	b := &Builder{h: sha256.New()}
	return b.String("domain", domain)
}

// String adds a text field.
func (b *Builder) String(name, value string) *Builder {
	fmt.Fprintf(b.h, "%s:%d:%s\n", name, len(value), value)
	return b
}

// Strings adds a list field: its length, then each element.
func (b *Builder) Strings(name string, values []string) *Builder {
	b.String(name+"#", strconv.Itoa(len(values)))
	for i, v := range values {
		b.String(name+"["+strconv.Itoa(i)+"]", v)
	}
	return b
}

// Bool adds a boolean field.
func (b *Builder) Bool(name string, v bool) *Builder { return b.String(name, strconv.FormatBool(v)) }

// Int adds an integer field.
func (b *Builder) Int(name string, v int64) *Builder { return b.String(name, strconv.FormatInt(v, 10)) }

// JSON adds v encoded by encoding/json, whose output is deterministic for
// structs and sorted for maps.
func (b *Builder) JSON(name string, v any) *Builder {
	data, err := json.Marshal(v)
	if err != nil {
		// Only unsupported types (channels, funcs) fail: a programming error.
		panic(fmt.Sprintf("fingerprint: encoding %s: %v", name, err))
	}
	return b.String(name, string(data))
}

// Sum returns the fingerprint.
func (b *Builder) Sum() string { return Prefix + hex.EncodeToString(b.h.Sum(nil)) }

// Short is the first 12 hex digits of a fingerprint, for names and display.
func Short(fp string) string {
	s := fp[len(Prefix):]
	if len(s) > 12 {
		s = s[:12]
	}
	return s
}
