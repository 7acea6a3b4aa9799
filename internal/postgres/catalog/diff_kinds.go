package catalog

import (
	"github.com/ptah-run/ptah/internal/postgres"

	"slices"
	"strings"
)

// Collations and text search configurations. (Aggregates are Functions:
// created, replaced and dropped as they are, see canReplaceFunction.)

// sameCollation: a collation's definition cannot change in place (ALTER
// COLLATION only renames it, moves it or refreshes its version), so any
// difference but the comment means dropping and creating it again.
func sameCollation(l, n Collation) bool {
	l.Comment, n.Comment = "", ""
	return l == n
}

// createCollation is the CREATE COLLATION statement of c. A libc
// collation whose two locales are one says so with locale.
func createCollation(c Collation) string {
	opts := []string{"provider = " + c.Provider}
	switch {
	case c.Provider != "libc":
		opts = append(opts, "locale = "+literal(c.Locale))
	case c.LcCollate == c.LcCtype:
		opts = append(opts, "locale = "+literal(c.LcCollate))
	default:
		opts = append(opts, "lc_collate = "+literal(c.LcCollate), "lc_ctype = "+literal(c.LcCtype))
	}
	if c.Rules != "" {
		opts = append(opts, "rules = "+literal(c.Rules))
	}
	if !c.Deterministic {
		opts = append(opts, "deterministic = false")
	}
	return "CREATE COLLATION " + qname(c.Schema, c.Name) + " (" + strings.Join(opts, ", ") + ")"
}

func sameMapping(a, b TSMapping) bool {
	return a.Token == b.Token && slices.Equal(a.Dictionaries, b.Dictionaries)
}

// alterMappings are the ALTER TEXT SEARCH CONFIGURATION statements that
// take l's mappings to n's (l is empty for a new configuration): one DROP
// MAPPING for the token types n no longer maps, then one ADD or ALTER
// MAPPING per list of dictionaries, for the token types that list is new
// to, in n's token type order.
func alterMappings(l, n TSConfig) []postgres.Statement {
	name := "ALTER TEXT SEARCH CONFIGURATION " + qname(n.Schema, n.Name)
	old := map[string][]string{}
	for _, m := range l.Mappings {
		old[m.Token] = m.Dictionaries
	}
	kept := map[string]bool{}
	for _, m := range n.Mappings {
		kept[m.Token] = true
	}
	var stmts []postgres.Statement
	var dropped []string
	for _, m := range l.Mappings {
		if !kept[m.Token] {
			dropped = append(dropped, ident(m.Token))
		}
	}
	if len(dropped) > 0 {
		stmts = append(stmts, stmt(name+" DROP MAPPING FOR "+strings.Join(dropped, ", ")))
	}
	// Token types grouped by verb and dictionary list, groups in the
	// order of their first token type.
	type group struct {
		verb, dicts string
		tokens      []string
	}
	var groups []*group
	byKey := map[[2]string]*group{}
	for _, m := range n.Mappings {
		dicts, had := old[m.Token]
		if had && slices.Equal(dicts, m.Dictionaries) {
			continue
		}
		verb := "ADD"
		if had {
			verb = "ALTER"
		}
		key := [2]string{verb, strings.Join(m.Dictionaries, ", ")}
		g := byKey[key]
		if g == nil {
			g = &group{verb: key[0], dicts: key[1]}
			byKey[key] = g
			groups = append(groups, g)
		}
		g.tokens = append(g.tokens, ident(m.Token))
	}
	for _, g := range groups {
		stmts = append(stmts, stmt(name+" "+g.verb+" MAPPING FOR "+strings.Join(g.tokens, ", ")+" WITH "+g.dicts))
	}
	return stmts
}

// affectsRemapped: when a text search configuration's mappings change,
// what it computed before is stale. Indexes, stored generated columns,
// materialized views and check constraints that use it hold (or checked)
// its old output, and are built again after the change; views, defaults
// and routines compute anew each time, and are left alone.
func (d *differ) affectsRemapped(x ID, mark func(map[ID]bool, ID) bool) bool {
	switch x.Kind {
	case KindIndex, KindMatView, KindConstraint:
		return mark(d.dropped, x)
	case KindColumn:
		if c := d.live.columns[x]; c.Generated && !c.Virtual {
			return mark(d.dropped, x)
		}
	}
	return false
}

// replacesAggregateAway says whether x is an aggregate that CREATE OR
// REPLACE AGGREGATE takes to its desired form, and so lets go of y (a
// support function), which the plan drops for good: the aggregate, and
// the views that use it, then stay in place. Its definition must read
// differently, for the statement to be written at all: the same text may
// name another function of y's name (an overload), which only creating
// the aggregate again resolves, and CREATE OR REPLACE records the
// dependencies anew.
func (d *differ) replacesAggregateAway(x, y ID) bool {
	if x.Kind != KindAggregate {
		return false
	}
	if _, kept := d.desired.byID[y]; kept {
		return false
	}
	l, ok1 := d.live.byID[x].(Function)
	n, ok2 := d.desired.byID[x].(Function)
	return ok1 && ok2 && canReplaceFunction(l, n) && l.Definition != n.Definition
}

// checkCollationsInUse refuses a plan that must drop and create again a
// collation (its definition changes) that a column it keeps uses:
// PostgreSQL refuses to drop a collation a column uses, and has no other
// way to change one.
func (d *differ) checkCollationsInUse() error {
	var refused []string
	for _, dep := range d.live.deps {
		col, coll := dep.Object, dep.RefObject
		if coll.Kind != KindCollation || col.Kind != KindColumn || d.dropped[col] || !d.dropped[coll] {
			continue
		}
		if _, kept := d.desired.byID[coll]; kept {
			refused = append(refused, describe(col)+" uses "+describe(coll)+", whose definition changes")
		}
	}
	return refusePlan(refused, "PostgreSQL cannot change a collation's definition in place, nor drop a collation a column uses, "+
		"so the plan cannot change these collations. Declare the new definition under a new name and move the columns to it "+
		"(COLLATE in their declaration), or move the columns off the collation first; then plan again")
}
