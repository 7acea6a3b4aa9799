package catalog

import (
	"cmp"
	"slices"
	"strings"
)

// Privileges, when managed (spec.privileges: Managed, InspectOptions), are
// the grants on the managed schemas, tables, views, materialized views,
// their columns, sequences, functions and procedures. Types and domains
// keep theirs unmanaged (typacl is not read), and so do the sequences
// behind identity columns, which are part of their column in the model.
//
// A grant is compared by who holds which privilege and whether they may
// grant it on, never by who granted it: the dev database's objects are
// granted by whoever loaded the files, the target's by someone else. For
// the same reason the owner's own privileges are left out (ownership is
// not managed): an object's owner holds every privilege, whoever it is.
// A NULL ACL is PostgreSQL's default for the kind (acldefault), read as
// that default, so that an ACL that was never touched and one set back to
// the default compare equal, and REVOKE EXECUTE ... FROM PUBLIC on a
// function, which takes a default away, is seen.
//
// Roles are not managed: a grant names a role that must exist, in the
// dev database's server as in the target's.

// Grant is one privilege a role holds on an object.
type Grant struct {
	// Grantee is the role, as quote_ident prints its name; PUBLIC for
	// every role.
	Grantee string
	// Privilege is the privilege's keyword, e.g. "SELECT", "EXECUTE".
	Privilege string
	// Grantable: WITH GRANT OPTION.
	Grantable bool `json:",omitempty"`
}

// ObjectPrivileges are the grants on one object (a column's are its own,
// apart from its table's), sorted; an object whose grants are none besides
// its owner's is not listed.
type ObjectPrivileges struct {
	Object ID
	Grants []Grant
}

// stepGrants is the node that brings an object's grants to their desired
// state, once the object is there in its desired form.
const stepGrants = "grants"

// aclItem is one row of aclexplode, as the inspection reads it.
type aclItem struct {
	grantee, privilege string
	grantable          bool
}

// normalizeGrants turns an object's ACL items into its grants: the owner's
// own left out, the grantor forgotten (one grant per grantee and
// privilege, grantable if any grantor gave it so), sorted.
func normalizeGrants(items []aclItem, owner string) []Grant {
	byKey := map[[2]string]bool{}
	for _, it := range items {
		if it.grantee == owner {
			continue
		}
		k := [2]string{it.grantee, it.privilege}
		byKey[k] = byKey[k] || it.grantable
	}
	out := make([]Grant, 0, len(byKey))
	for k, g := range byKey {
		out = append(out, Grant{Grantee: k[0], Privilege: k[1], Grantable: g})
	}
	slices.SortFunc(out, compareGrants)
	return nilIfEmpty(out)
}

func compareGrants(a, b Grant) int {
	return cmp.Or(cmp.Compare(a.Grantee, b.Grantee), cmp.Compare(a.Privilege, b.Privilege))
}

// defaultGrants are the grants a new object of kind has besides its
// owner's (acldefault): EXECUTE for PUBLIC on a routine; none on the
// other kinds ptah manages the privileges of.
func defaultGrants(k Kind) []Grant {
	if k == KindFunction || k == KindProcedure || k == KindAggregate {
		return []Grant{{Grantee: "PUBLIC", Privilege: "EXECUTE"}}
	}
	return nil
}

// withoutGrantees is grants less those held by the roles in skip.
func withoutGrantees(grants []Grant, skip ...string) []Grant {
	return slices.DeleteFunc(slices.Clone(grants), func(g Grant) bool {
		return slices.Contains(skip, g.Grantee)
	})
}

// grantChanges returns the statements that take an object's grants from
// have to want: revocations first (whole privileges, then grant options
// alone), then grants, one statement per grantee (and grant option). on is
// the object, as GRANT names it ("TABLE s.t"); column, when not empty, is
// the column the privileges are on.
func grantChanges(on, column string, have, want []Grant) []string {
	type key struct {
		grantee   string
		grantable bool
	}
	haveSet := map[[2]string]bool{}
	for _, g := range have {
		haveSet[[2]string{g.Grantee, g.Privilege}] = g.Grantable
	}
	wantSet := map[[2]string]bool{}
	for _, g := range want {
		wantSet[[2]string{g.Grantee, g.Privilege}] = g.Grantable
	}
	revoke := map[string][]string{}       // grantee: privileges to take away
	revokeOption := map[string][]string{} // grantee: grant options to take away
	grant := map[key][]string{}
	for _, g := range have {
		k := [2]string{g.Grantee, g.Privilege}
		wg, kept := wantSet[k]
		switch {
		case !kept:
			revoke[g.Grantee] = append(revoke[g.Grantee], g.Privilege)
		case g.Grantable && !wg:
			revokeOption[g.Grantee] = append(revokeOption[g.Grantee], g.Privilege)
		}
	}
	for _, g := range want {
		hg, had := haveSet[[2]string{g.Grantee, g.Privilege}]
		if !had || (g.Grantable && !hg) {
			k := key{g.Grantee, g.Grantable}
			grant[k] = append(grant[k], g.Privilege)
		}
	}
	privs := func(ps []string) string {
		slices.Sort(ps)
		if column != "" {
			for i := range ps {
				ps[i] += " (" + ident(column) + ")"
			}
		}
		return strings.Join(ps, ", ")
	}
	var out []string
	for _, grantee := range sortedKeys(revoke) {
		out = append(out, "REVOKE "+privs(revoke[grantee])+" ON "+on+" FROM "+grantee)
	}
	for _, grantee := range sortedKeys(revokeOption) {
		out = append(out, "REVOKE GRANT OPTION FOR "+privs(revokeOption[grantee])+" ON "+on+" FROM "+grantee)
	}
	keys := make([]key, 0, len(grant))
	for k := range grant {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b key) int {
		if a.grantee != b.grantee {
			return cmp.Compare(a.grantee, b.grantee)
		}
		if a.grantable == b.grantable {
			return 0
		}
		if a.grantable {
			return 1
		}
		return -1
	})
	for _, k := range keys {
		s := "GRANT " + privs(grant[k]) + " ON " + on + " TO " + k.grantee
		if k.grantable {
			s += " WITH GRANT OPTION"
		}
		out = append(out, s)
	}
	return out
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// privilegeTarget is how GRANT names object id of model o ("" for a kind
// whose privileges are not managed). A column's is its relation's.
func privilegeTarget(o objects, id ID) string {
	switch id.Kind {
	case KindSchema:
		return "SCHEMA " + ident(id.Name)
	case KindTable, KindView, KindMatView, KindColumn:
		return "TABLE " + qname(id.Schema, id.Name)
	case KindSequence:
		return "SEQUENCE " + qname(id.Schema, id.Name)
	case KindFunction, KindProcedure:
		if f, ok := o.byID[id].(Function); ok {
			return routineWord(f) + " " + qname(f.Schema, f.Name) + "(" + f.IdentityArgs + ")"
		}
	case KindAggregate:
		// GRANT names an aggregate as a function, by all its argument
		// types: an ordered-set aggregate's direct ones, then the others.
		if f, ok := o.byID[id].(Function); ok {
			return "FUNCTION " + qname(f.Schema, f.Name) + "(" + strings.ReplaceAll(f.IdentityArgs, " ORDER BY ", ", ") + ")"
		}
	}
	return ""
}

// privilegeIndex is one model's grants and owners, by object.
type privilegeIndex struct {
	grants map[ID][]Grant
	owners map[ID]string
}

func indexPrivileges(m *Model) privilegeIndex {
	p := privilegeIndex{grants: map[ID][]Grant{}, owners: m.Owners}
	for _, op := range m.Privileges {
		p.grants[op.Object] = op.Grants
	}
	return p
}

// owner is the owner of id (of a column: its relation's), "" when unknown.
func (p privilegeIndex) owner(id ID) string {
	if id.Kind == KindColumn {
		for _, k := range []Kind{KindTable, KindView, KindMatView} {
			if o, ok := p.owners[ID{Kind: k, Schema: id.Schema, Name: id.Name}]; ok {
				return o
			}
		}
		return ""
	}
	return p.owners[id]
}

// columnRelation is the table, view or materialized view column id is of,
// in model o.
func columnRelation(o objects, id ID) (ID, bool) {
	for _, k := range []Kind{KindTable, KindView, KindMatView} {
		r := ID{Kind: k, Schema: id.Schema, Name: id.Name}
		if _, ok := o.byID[r]; ok {
			return r, true
		}
	}
	return ID{}, false
}

// hasColumn reports whether model o has column id, on a table or a view.
func hasColumn(o objects, id ID) bool {
	if _, ok := o.columns[id]; ok {
		return true
	}
	r, ok := columnRelation(o, id)
	if !ok {
		return false
	}
	if v, ok := o.byID[r].(View); ok {
		return slices.ContainsFunc(v.Columns, func(c ViewColumn) bool { return c.Name == id.Sub })
	}
	return false
}

// keeps reports whether the live object id stays as it is (altered in
// place, perhaps), and with it its grants; false when the plan creates it,
// or drops it and creates it again.
func (d *differ) keeps(id ID) bool {
	if id.Kind == KindColumn {
		r, ok := columnRelation(d.live, id)
		return ok && hasColumn(d.live, id) && !d.dropped[r] && !d.dropped[id]
	}
	_, ok := d.live.byID[id]
	return ok && !d.dropped[id] && !d.replaced[id]
}

// emitPrivileges plans the grants of every desired object whose privileges
// are managed, when both models were read with them: against the live
// grants of an object the plan keeps, against a new object's default
// grants otherwise (what dropping an object and creating it again leaves
// it). A dropped object's grants go with it.
func (d *differ) emitPrivileges() {
	if !d.live.m.PrivilegesRead || !d.desired.m.PrivilegesRead {
		return
	}
	live, desired := indexPrivileges(d.live.m), indexPrivileges(d.desired.m)
	ids := map[ID]bool{}
	m := d.desired.m
	for _, o := range m.Schemas {
		ids[o.ID()] = true
	}
	for _, o := range m.Tables {
		ids[o.ID()] = true
	}
	for _, o := range m.Views {
		ids[o.ID()] = true
	}
	for _, o := range m.Sequences {
		ids[o.ID()] = true
	}
	for _, o := range m.Functions {
		ids[o.ID()] = true
	}
	// Columns hold no grant by default: those with grants on either side.
	for _, p := range []privilegeIndex{live, desired} {
		for id := range p.grants {
			if id.Kind == KindColumn && hasColumn(d.desired, id) {
				ids[id] = true
			}
		}
	}
	for _, id := range d.sortedPrivilegeIDs(ids) {
		have := defaultGrants(id.Kind)
		liveOwner := ""
		if d.keeps(id) {
			have, liveOwner = live.grants[id], live.owner(id)
		}
		desiredOwner := desired.owner(id)
		have = withoutGrantees(have, liveOwner, desiredOwner)
		want := withoutGrantees(desired.grants[id], liveOwner, desiredOwner)
		column := ""
		if id.Kind == KindColumn {
			column = id.Sub
		}
		sqls := grantChanges(privilegeTarget(d.desired, id), column, have, want)
		if len(sqls) == 0 {
			continue
		}
		k := nodeKey{id: id, step: stepGrants}
		for _, s := range sqls {
			d.add(k, stmt(s))
		}
		// After the object is created or changed: a column's after its
		// relation too.
		d.extra = append(d.extra, [2]nodeKey{fwdKey(id), k})
		if id.Kind == KindColumn {
			if r, ok := columnRelation(d.desired, id); ok {
				d.extra = append(d.extra, [2]nodeKey{fwdKey(r), k})
			}
		}
	}
}

func (d *differ) sortedPrivilegeIDs(ids map[ID]bool) []ID {
	out := make([]ID, 0, len(ids))
	for id := range ids {
		out = append(out, id)
	}
	slices.SortFunc(out, compareIDs)
	return out
}

// privilegeLockKeys: GRANT and REVOKE on a relation or a column of it name
// the relation (the estimate errs on the large side).
func privilegeLockKeys(l *lockSet, id ID) {
	switch id.Kind {
	case KindTable, KindView, KindMatView, KindSequence, KindColumn:
		l.rel(id)
	}
}

// privilegesQuery reads the ACL items of the managed schemas, relations,
// columns and routines, a NULL ACL as the kind's default: the catalog and
// oid of the object, the column's name ("" but for a column), the owner
// and grantee as quote_ident prints them (PUBLIC for every role), the
// privilege and whether it is grantable. Extensions' members are left
// out, as the model leaves them.
var privilegesQuery = `
SELECT 'pg_namespace', n.oid, '', quote_ident(pg_get_userbyid(n.nspowner)),
	CASE WHEN a.grantee = 0 THEN 'PUBLIC' ELSE quote_ident(pg_get_userbyid(a.grantee)) END, a.privilege_type, a.is_grantable
FROM pg_namespace n, aclexplode(COALESCE(n.nspacl, acldefault('n', n.nspowner))) a
WHERE n.nspname = ANY($1)
UNION ALL
SELECT 'pg_class', c.oid, '', quote_ident(pg_get_userbyid(c.relowner)),
	CASE WHEN a.grantee = 0 THEN 'PUBLIC' ELSE quote_ident(pg_get_userbyid(a.grantee)) END, a.privilege_type, a.is_grantable
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace,
	aclexplode(COALESCE(c.relacl, acldefault(CASE WHEN c.relkind = 'S' THEN 's' ELSE 'r' END::"char", c.relowner))) a
WHERE n.nspname = ANY($1) AND c.relkind IN ('r', 'p', 'v', 'm', 'S') AND ` + notExtensionMember("pg_class", "c.oid") + `
UNION ALL
SELECT 'pg_class', c.oid, t.attname, quote_ident(pg_get_userbyid(c.relowner)),
	CASE WHEN a.grantee = 0 THEN 'PUBLIC' ELSE quote_ident(pg_get_userbyid(a.grantee)) END, a.privilege_type, a.is_grantable
FROM pg_attribute t JOIN pg_class c ON c.oid = t.attrelid JOIN pg_namespace n ON n.oid = c.relnamespace,
	aclexplode(t.attacl) a
WHERE n.nspname = ANY($1) AND c.relkind IN ('r', 'p', 'v', 'm') AND t.attnum > 0 AND NOT t.attisdropped
	AND t.attacl IS NOT NULL AND ` + notExtensionMember("pg_class", "c.oid") + `
UNION ALL
SELECT 'pg_proc', p.oid, '', quote_ident(pg_get_userbyid(p.proowner)),
	CASE WHEN a.grantee = 0 THEN 'PUBLIC' ELSE quote_ident(pg_get_userbyid(a.grantee)) END, a.privilege_type, a.is_grantable
FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace,
	aclexplode(COALESCE(p.proacl, acldefault('f', p.proowner))) a
WHERE n.nspname = ANY($1) AND p.prokind IN ('f', 'p', 'a') AND ` + notExtensionMember("pg_proc", "p.oid")

// readPrivileges reads the grants on the model's objects (see above), and
// their owners.
func (in *inspector) readPrivileges() error {
	var catalog, column, owner string
	var oid uint32
	var it aclItem
	items := map[ID][]aclItem{}
	in.m.Owners = map[ID]string{}
	dest := []any{&catalog, &oid, &column, &owner, &it.grantee, &it.privilege, &it.grantable}
	err := in.each("privileges", privilegesQuery, dest, func() error {
		var id ID
		switch catalog {
		case "pg_class":
			r, ok := in.rels[oid]
			if !ok {
				return nil
			}
			switch r.id.Kind {
			case KindTable, KindView, KindMatView:
			case KindSequence:
				if column != "" {
					return nil
				}
			default:
				return nil
			}
			id = r.id
			in.m.Owners[id] = owner
			if column != "" {
				id = ColumnID(id.Schema, id.Name, column)
			}
		default:
			var ok bool
			if id, ok = in.objects[catalogKey{catalog, oid}]; !ok {
				return nil
			}
			switch id.Kind {
			case KindSchema, KindFunction, KindProcedure, KindAggregate:
			default:
				return nil
			}
			in.m.Owners[id] = owner
		}
		if it.grantee != owner {
			items[id] = append(items[id], it)
		}
		return nil
	})
	if err != nil {
		return err
	}
	for id, its := range items {
		if grants := normalizeGrants(its, in.m.Owners[id]); len(grants) > 0 {
			in.m.Privileges = append(in.m.Privileges, ObjectPrivileges{Object: id, Grants: grants})
		}
	}
	slices.SortFunc(in.m.Privileges, func(a, b ObjectPrivileges) int { return compareIDs(a.Object, b.Object) })
	in.m.PrivilegesRead = true
	return nil
}
