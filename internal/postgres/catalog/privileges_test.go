package catalog

import (
	"context"
	"encoding/json"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/ptah-run/ptah/internal/pgtest"
)

// ACL items become grants without the owner's and without grantors.
func TestNormalizeGrants(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		items []aclItem
		owner string
		want  []Grant
	}{
		{"nothing", nil, "app", nil},
		{"the owner's own are no grants", []aclItem{{"app", "SELECT", true}, {"app", "UPDATE", true}}, "app", nil},
		{"the same grant from two grantors is one", []aclItem{{"reader", "SELECT", false}, {"reader", "SELECT", false}}, "app",
			[]Grant{{Grantee: "reader", Privilege: "SELECT"}}},
		{"grantable if any grantor gave it so", []aclItem{{"reader", "SELECT", false}, {"reader", "SELECT", true}}, "app",
			[]Grant{{Grantee: "reader", Privilege: "SELECT", Grantable: true}}},
		{"sorted by grantee then privilege", []aclItem{{"b", "UPDATE", false}, {"PUBLIC", "EXECUTE", false}, {"b", "INSERT", false}, {"app", "EXECUTE", true}}, "app",
			[]Grant{{Grantee: "PUBLIC", Privilege: "EXECUTE"}, {Grantee: "b", Privilege: "INSERT"}, {Grantee: "b", Privilege: "UPDATE"}}},
	}
	for _, tt := range tests {
		if got := normalizeGrants(tt.items, tt.owner); !reflect.DeepEqual(got, tt.want) {
			t.Errorf("%s: normalizeGrants = %+v, want %+v", tt.name, got, tt.want)
		}
	}
}

// The statements that take one object's grants from have to want.
func TestGrantChanges(t *testing.T) {
	t.Parallel()
	g := func(grantee, priv string) Grant { return Grant{Grantee: grantee, Privilege: priv} }
	opt := func(grantee, priv string) Grant { return Grant{Grantee: grantee, Privilege: priv, Grantable: true} }
	tests := []struct {
		name       string
		column     string
		have, want []Grant
		sql        []string
	}{
		{"equal: nothing", "", []Grant{g("r", "SELECT")}, []Grant{g("r", "SELECT")}, nil},
		{"added, grouped by grantee", "", nil, []Grant{g("r", "SELECT"), g("r", "INSERT"), g("w", "UPDATE")},
			[]string{"GRANT INSERT, SELECT ON TABLE public.t TO r", "GRANT UPDATE ON TABLE public.t TO w"}},
		{"revoked, before what is granted", "", []Grant{g("PUBLIC", "SELECT"), g("r", "UPDATE")}, []Grant{g("w", "SELECT")},
			[]string{"REVOKE SELECT ON TABLE public.t FROM PUBLIC", "REVOKE UPDATE ON TABLE public.t FROM r", "GRANT SELECT ON TABLE public.t TO w"}},
		{"grant option added", "", []Grant{g("r", "SELECT")}, []Grant{opt("r", "SELECT")},
			[]string{"GRANT SELECT ON TABLE public.t TO r WITH GRANT OPTION"}},
		{"grant option removed, the privilege kept", "", []Grant{opt("r", "SELECT")}, []Grant{g("r", "SELECT")},
			[]string{"REVOKE GRANT OPTION FOR SELECT ON TABLE public.t FROM r"}},
		{"a grantable privilege revoked whole", "", []Grant{opt("r", "SELECT")}, nil,
			[]string{"REVOKE SELECT ON TABLE public.t FROM r"}},
		{"with and without grant option to one role", "", nil, []Grant{g("r", "INSERT"), opt("r", "SELECT")},
			[]string{"GRANT INSERT ON TABLE public.t TO r", "GRANT SELECT ON TABLE public.t TO r WITH GRANT OPTION"}},
		{"column privileges", "Body", []Grant{g("r", "UPDATE")}, []Grant{g("r", "SELECT"), g(`"Aud"`, "SELECT")},
			[]string{`REVOKE UPDATE ("Body") ON TABLE public.t FROM r`, `GRANT SELECT ("Body") ON TABLE public.t TO "Aud"`, `GRANT SELECT ("Body") ON TABLE public.t TO r`}},
	}
	for _, tt := range tests {
		if got := grantChanges("TABLE public.t", tt.column, tt.have, tt.want); !slices.Equal(got, tt.sql) {
			t.Errorf("%s:\ngot  %q\nwant %q", tt.name, got, tt.sql)
		}
	}
}

// Diff plans grants only between models both read with them; against the
// live grants of what it keeps, against the defaults of what it creates
// or creates again; never for what it drops; ignoring owners.
func TestDiffPrivileges(t *testing.T) {
	t.Parallel()
	docs := tbl("docs", col("id", "integer"), col("body", "text"))
	half := func(result string) Function {
		return Function{Schema: "public", Name: "half", IdentityArgs: "n integer", Result: result,
			Definition: "CREATE OR REPLACE FUNCTION public.half(n integer)\n RETURNS " + result + "\nAS $$ select 1 $$"}
	}
	halfID := half("integer").ID()
	reader := func(id ID, privs ...string) ObjectPrivileges {
		op := ObjectPrivileges{Object: id}
		for _, p := range privs {
			op.Grants = append(op.Grants, Grant{Grantee: "reader", Privilege: p})
		}
		return op
	}
	public := ObjectPrivileges{Object: halfID, Grants: []Grant{{Grantee: "PUBLIC", Privilege: "EXECUTE"}}}
	model := func(read bool, fn Function, privs ...ObjectPrivileges) Model {
		return Model{Schemas: pub(), Tables: []Table{docs}, Functions: []Function{fn}, Privileges: privs, PrivilegesRead: read,
			Owners: map[ID]string{docs.ID(): "app", halfID: "app"}}
	}
	tests := []struct {
		name          string
		live, desired Model
		want          []string
	}{
		{
			name:    "not read on one side: nothing",
			live:    model(false, half("integer"), public),
			desired: model(true, half("integer"), reader(docs.ID(), "SELECT")),
		},
		{
			name:    "a table's and a column's grants; PUBLIC's EXECUTE revoked",
			live:    model(true, half("integer"), public),
			desired: model(true, half("integer"), reader(docs.ID(), "SELECT"), reader(ColumnID("public", "docs", "body"), "UPDATE")),
			want: []string{
				"REVOKE EXECUTE ON FUNCTION public.half(n integer) FROM PUBLIC",
				"GRANT SELECT ON TABLE public.docs TO reader",
				"GRANT UPDATE (body) ON TABLE public.docs TO reader",
			},
		},
		{
			name:    "a function created again starts from the defaults",
			live:    model(true, half("integer"), reader(halfID, "EXECUTE")),
			desired: model(true, half("numeric"), reader(halfID, "EXECUTE")),
			want: []string{
				"DROP FUNCTION public.half(n integer)",
				"CREATE OR REPLACE FUNCTION public.half(n integer)\n RETURNS numeric\nAS $$ select 1 $$",
				"REVOKE EXECUTE ON FUNCTION public.half(n integer) FROM PUBLIC",
				"GRANT EXECUTE ON FUNCTION public.half(n integer) TO reader",
			},
		},
		{
			name: "the other side's owner's grants are not compared",
			live: func() Model {
				m := model(true, half("integer"), public)
				m.Owners = map[ID]string{docs.ID(): "reader", halfID: "app"}
				return m
			}(),
			desired: model(true, half("integer"), public, reader(docs.ID(), "SELECT")),
		},
		{
			name: "a dropped column's grants go with it",
			live: model(true, half("integer"), public, reader(ColumnID("public", "docs", "body"), "SELECT")),
			desired: func() Model {
				m := model(true, half("integer"), public)
				m.Tables = []Table{tbl("docs", col("id", "integer"))}
				return m
			}(),
			want: []string{"ALTER TABLE public.docs DROP COLUMN body"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			stmts, err := Diff(&tt.live, &tt.desired)
			if err != nil {
				t.Fatal(err)
			}
			if got := sqls(stmts); !slices.Equal(got, tt.want) {
				t.Errorf("plan:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tt.want, "\n"))
			}
		})
	}
}

// Inspect reads grants only when asked; a NULL ACL reads as the kind's
// default (defaultGrants), equal to the same default set explicitly; the
// owner's entries and the grantor are left out; a column's grants are its
// own.
func TestInspectPrivileges(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDB(t)
	pgtest.Exec(t, url, `
DO $$ BEGIN CREATE ROLE ptah_test_reader; EXCEPTION WHEN duplicate_object OR unique_violation THEN NULL; END $$;
CREATE TABLE docs (id int, body text);
GRANT SELECT ON docs TO ptah_test_reader WITH GRANT OPTION;
GRANT UPDATE (body) ON docs TO ptah_test_reader;
CREATE FUNCTION untouched() RETURNS int LANGUAGE sql AS $$ SELECT 1 $$;
CREATE FUNCTION reset() RETURNS int LANGUAGE sql AS $$ SELECT 1 $$;
REVOKE EXECUTE ON FUNCTION reset() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION reset() TO PUBLIC;
CREATE FUNCTION private() RETURNS int LANGUAGE sql AS $$ SELECT 1 $$;
REVOKE ALL ON FUNCTION private() FROM PUBLIC;
CREATE SEQUENCE ids;`)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)

	plain, err := Inspect(ctx, conn, []string{"public"})
	if err != nil {
		t.Fatal(err)
	}
	if plain.PrivilegesRead || plain.Privileges != nil || plain.Owners != nil {
		t.Errorf("Inspect without privileges read them: %+v", plain.Privileges)
	}
	m, err := InspectWith(ctx, conn, []string{"public"}, InspectOptions{Privileges: true})
	if err != nil {
		t.Fatal(err)
	}
	fn := func(name string) ID { return ID{Kind: KindFunction, Schema: "public", Name: name} }
	want := []ObjectPrivileges{
		{Object: fn("reset"), Grants: defaultGrants(KindFunction)},
		{Object: fn("untouched"), Grants: defaultGrants(KindFunction)},
		{Object: ID{Kind: KindTable, Schema: "public", Name: "docs"}, Grants: []Grant{{Grantee: "ptah_test_reader", Privilege: "SELECT", Grantable: true}}},
		{Object: ColumnID("public", "docs", "body"), Grants: []Grant{{Grantee: "ptah_test_reader", Privilege: "UPDATE"}}},
	}
	slices.SortFunc(want, func(a, b ObjectPrivileges) int { return compareIDs(a.Object, b.Object) })
	// The public schema's grants depend on the major (PUBLIC may CREATE in
	// it before 15): its USAGE for PUBLIC is there on all.
	var got []ObjectPrivileges
	for _, op := range m.Privileges {
		if op.Object == publicSchema() {
			if !slices.Contains(op.Grants, Grant{Grantee: "PUBLIC", Privilege: "USAGE"}) {
				t.Errorf("schema public's grants lack PUBLIC's USAGE: %+v", op.Grants)
			}
			continue
		}
		got = append(got, op)
	}
	if !m.PrivilegesRead || !reflect.DeepEqual(got, want) {
		g, _ := json.MarshalIndent(got, "", "  ")
		w, _ := json.MarshalIndent(want, "", "  ")
		t.Errorf("privileges:\n%s\nwant:\n%s", g, w)
	}
	var owner string
	if err := conn.QueryRow(ctx, "SELECT quote_ident(current_user)").Scan(&owner); err != nil {
		t.Fatal(err)
	}
	for _, id := range []ID{fn("private"), {Kind: KindSequence, Schema: "public", Name: "ids"}, publicSchema()} {
		if m.Owners[id] == "" {
			t.Errorf("no owner read for %s", describe(id))
		}
	}
	if m.Owners[fn("private")] != owner {
		t.Errorf("owner of private() = %q, want %q", m.Owners[fn("private")], owner)
	}
}
