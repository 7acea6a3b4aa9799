package catalog

import (
	"slices"
	"strings"

	"github.com/ptah-run/ptah/internal/postgres"
)

// Row-level security: a table's policies (CREATE POLICY) and its two
// switches, ENABLE and FORCE ROW LEVEL SECURITY.
//
// A policy is created, altered and dropped like a trigger: it lives on its
// table (dropped with it), and the dependency edges from pg_depend put it
// after the columns, functions and tables its expressions use, and drop it
// before they change or go; unless ALTER POLICY takes it off an object the
// plan drops for good, which it then does in place, first (see
// altersPolicyAway). PostgreSQL cannot change the type of a column a
// policy uses, so such a policy is dropped and created again around the
// change (see affects). Creating, altering or dropping a policy only
// changes the catalog: no row is read or written, and the plan marks no
// hazard.
//
// The switches do change what queries return, though no hazard kind says
// so: once row-level security is enabled, a role other than the table's
// owner (and, once forced, the owner too) sees and writes only the rows a
// policy allows, none when the table has no policy for the command. So
// the switches are ordered to keep that window closed where the plan can:
// a table's security is turned on after its desired policies are in place,
// and turned off before its old policies are dropped. (Superusers and
// roles with BYPASSRLS are never subject to it.)

// Steps of the nodes that turn a table's row-level security on and off.
const (
	stepSecurityOn  = "security on"
	stepSecurityOff = "security off"
)

// rowSecurity emits the switches that take table l to n; l is the zero
// Table when the plan creates n. Each statement says ONLY: the switches
// are each table's own, and PostgreSQL never passes them on to partitions.
func (d *differ) rowSecurity(l, n Table) {
	alter := "ALTER TABLE ONLY " + qname(n.Schema, n.Name)
	var on, off []postgres.Statement
	switch {
	case n.RowSecurity && !l.RowSecurity:
		on = append(on, stmt(alter+" ENABLE ROW LEVEL SECURITY"))
	case !n.RowSecurity && l.RowSecurity:
		off = append(off, stmt(alter+" DISABLE ROW LEVEL SECURITY"))
	}
	switch {
	case n.ForceRowSecurity && !l.ForceRowSecurity:
		on = append(on, stmt(alter+" FORCE ROW LEVEL SECURITY"))
	case !n.ForceRowSecurity && l.ForceRowSecurity:
		off = append(off, stmt(alter+" NO FORCE ROW LEVEL SECURITY"))
	}
	if len(on) > 0 {
		k := nodeKey{id: n.ID(), step: stepSecurityOn}
		d.add(k, on...)
		d.extra = append(d.extra, [2]nodeKey{fwdKey(n.ID()), k})
		for _, p := range d.desired.m.Policies {
			if p.Schema == n.Schema && p.Table == n.Name {
				d.extra = append(d.extra, [2]nodeKey{fwdKey(p.ID()), k})
			}
		}
	}
	if len(off) > 0 {
		k := nodeKey{id: n.ID(), step: stepSecurityOff}
		d.add(k, off...)
		for _, p := range d.live.m.Policies {
			if p.Schema == n.Schema && p.Table == n.Name {
				d.extra = append(d.extra, [2]nodeKey{k, dropKey(p.ID())})
			}
		}
	}
}

// createPolicy is CREATE POLICY p, every clause spelled out (the defaults
// too, AS PERMISSIVE, FOR ALL, TO PUBLIC), so that the statement says all
// the policy does.
func createPolicy(p Policy) string {
	s := "CREATE POLICY " + ident(p.Name) + " ON " + qname(p.Schema, p.Table) +
		" AS " + permissiveWord(p.Permissive) + " FOR " + p.Command + " TO " + policyRoles(p.Roles)
	if p.Using != "" {
		s += " USING (" + p.Using + ")"
	}
	if p.Check != "" {
		s += " WITH CHECK (" + p.Check + ")"
	}
	return s
}

// alterPolicy is the ALTER POLICY that takes l to n (which canAlterPolicy
// allows), "" when nothing it sets differs. When either expression
// changes, both are set: PostgreSQL records the dependencies of what it
// parses again, and keeps those of an expression left out, which may be
// on an object the plan drops (see altersPolicyAway).
func alterPolicy(l, n Policy) string {
	var clauses []string
	if !slices.Equal(l.Roles, n.Roles) {
		clauses = append(clauses, " TO "+policyRoles(n.Roles))
	}
	if l.Using != n.Using || l.Check != n.Check {
		if n.Using != "" {
			clauses = append(clauses, " USING ("+n.Using+")")
		}
		if n.Check != "" {
			clauses = append(clauses, " WITH CHECK ("+n.Check+")")
		}
	}
	if len(clauses) == 0 {
		return ""
	}
	return "ALTER POLICY " + ident(n.Name) + " ON " + qname(n.Schema, n.Table) + strings.Join(clauses, "")
}

// policyTarget names policy p after COMMENT ON.
func policyTarget(p Policy) string {
	return "POLICY " + ident(p.Name) + " ON " + qname(p.Schema, p.Table)
}

func permissiveWord(permissive bool) string {
	if permissive {
		return "PERMISSIVE"
	}
	return "RESTRICTIVE"
}

// policyRoles is the TO list of a policy: the roles as the model holds them
// (already quoted), PUBLIC for none, which the catalog never holds.
func policyRoles(roles []string) string {
	if len(roles) == 0 {
		return "PUBLIC"
	}
	return strings.Join(roles, ", ")
}
