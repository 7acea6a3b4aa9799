package catalog

import (
	"strings"
)

// reserved holds the keywords that cannot be used as a bare identifier
// (PostgreSQL's "reserved" and "reserved (can be function or type)" sets).
var reserved = func() map[string]bool {
	m := map[string]bool{}
	for _, w := range strings.Fields(`all analyse analyze and any array as asc asymmetric
		authorization binary both case cast check collate collation column concurrently
		constraint create cross current_catalog current_date current_role current_schema
		current_time current_timestamp current_user default deferrable desc distinct do
		else end except false fetch for foreign freeze from full grant group having ilike
		in initially inner intersect into is isnull join lateral leading left like limit
		localtime localtimestamp natural not notnull null offset on only or order outer
		overlaps placing primary references returning right select session_user similar
		some symmetric system_user table tablesample then to trailing true union unique
		user using variadic verbose when where window with`) {
		m[w] = true
	}
	return m
}()

// ident quotes an identifier when PostgreSQL would not read it back as is.
func ident(s string) string {
	if s != "" && !reserved[s] && plainIdent(s) {
		return s
	}
	return `"` + strings.ReplaceAll(s, `"`, `""`) + `"`
}

func plainIdent(s string) bool {
	for i, r := range s {
		switch {
		case r >= 'a' && r <= 'z', r == '_':
		case (r >= '0' && r <= '9') || r == '$':
			if i == 0 {
				return false
			}
		default:
			return false
		}
	}
	return true
}

// qname is a schema-qualified, quoted name.
func qname(schema, name string) string { return ident(schema) + "." + ident(name) }

// literal quotes s as a string constant (standard_conforming_strings is on
// in every supported server version).
func literal(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }
