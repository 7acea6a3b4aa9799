package catalog

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

// Row-level security on hand-built models: when a policy is altered in
// place and when it is made again, and where the switches go around the
// policies (diff_policy.go).
func TestDiffRowSecurity(t *testing.T) {
	t.Parallel()
	docs := tbl("docs", col("owner", "name"), col("archived", "boolean"))
	secured := docs
	secured.RowSecurity = true
	forced := secured
	forced.ForceRowSecurity = true
	owner := Policy{Schema: "public", Table: "docs", Name: "p_owner", Permissive: true, Command: "ALL", Roles: []string{"PUBLIC"},
		Using: "(owner = CURRENT_USER)"}
	ownerDep := Dep{Object: owner.ID(), RefObject: ColumnID("public", "docs", "owner")}
	tableDep := Dep{Object: owner.ID(), RefObject: docs.ID()}
	with := func(p Policy, edit func(*Policy)) Policy {
		edit(&p)
		return p
	}
	fn := func(name string) Function {
		return Function{Schema: "public", Name: name, Result: "text",
			Definition: "CREATE OR REPLACE FUNCTION public." + name + "()\n RETURNS text\nAS $$ select 'a' $$"}
	}
	usesFn := func(name string) Policy {
		return with(owner, func(p *Policy) { p.Using = "(owner = public." + name + "())" })
	}
	fnDep := func(name string) Dep {
		return Dep{Object: owner.ID(), RefObject: ID{Kind: KindFunction, Schema: "public", Name: name}}
	}

	tests := []struct {
		name          string
		live, desired Model
		want          []string
	}{
		{
			name:    "a new policy comes before the security that makes it count",
			live:    Model{Schemas: pub(), Tables: []Table{docs}},
			desired: Model{Schemas: pub(), Tables: []Table{forced}, Policies: []Policy{owner}, Deps: []Dep{ownerDep, tableDep}},
			want: []string{
				"CREATE POLICY p_owner ON public.docs AS PERMISSIVE FOR ALL TO PUBLIC USING ((owner = CURRENT_USER))",
				"ALTER TABLE ONLY public.docs ENABLE ROW LEVEL SECURITY",
				"ALTER TABLE ONLY public.docs FORCE ROW LEVEL SECURITY",
			},
		},
		{
			name:    "security goes off before the policies go",
			live:    Model{Schemas: pub(), Tables: []Table{forced}, Policies: []Policy{owner}, Deps: []Dep{ownerDep, tableDep}},
			desired: Model{Schemas: pub(), Tables: []Table{docs}},
			want: []string{
				"ALTER TABLE ONLY public.docs DISABLE ROW LEVEL SECURITY",
				"ALTER TABLE ONLY public.docs NO FORCE ROW LEVEL SECURITY",
				"DROP POLICY p_owner ON public.docs",
			},
		},
		{
			name: "roles and expressions are altered in place, both expressions set when one changes",
			live: Model{Schemas: pub(), Tables: []Table{secured}, Policies: []Policy{with(owner, func(p *Policy) { p.Check = "true" })}},
			desired: Model{Schemas: pub(), Tables: []Table{secured}, Policies: []Policy{with(owner, func(p *Policy) {
				p.Roles, p.Check = []string{`"Auditor"`, "reader"}, "(NOT archived)"
			})}},
			want: []string{`ALTER POLICY p_owner ON public.docs TO "Auditor", reader USING ((owner = CURRENT_USER)) WITH CHECK ((NOT archived))`},
		},
		{
			name:    "a policy made restrictive is made again",
			live:    Model{Schemas: pub(), Tables: []Table{secured}, Policies: []Policy{owner}},
			desired: Model{Schemas: pub(), Tables: []Table{secured}, Policies: []Policy{with(owner, func(p *Policy) { p.Permissive = false })}},
			want: []string{
				"DROP POLICY p_owner ON public.docs",
				"CREATE POLICY p_owner ON public.docs AS RESTRICTIVE FOR ALL TO PUBLIC USING ((owner = CURRENT_USER))",
			},
		},
		{
			name:    "a policy that loses its USING is made again",
			live:    Model{Schemas: pub(), Tables: []Table{secured}, Policies: []Policy{with(owner, func(p *Policy) { p.Check = "true" })}},
			desired: Model{Schemas: pub(), Tables: []Table{secured}, Policies: []Policy{with(owner, func(p *Policy) { p.Using, p.Check = "", "true" })}},
			want: []string{
				"DROP POLICY p_owner ON public.docs",
				"CREATE POLICY p_owner ON public.docs AS PERMISSIVE FOR ALL TO PUBLIC WITH CHECK (true)",
			},
		},
		{
			name: "a policy altered away from a function lets go of it before it is dropped",
			live: Model{Schemas: pub(), Tables: []Table{secured}, Functions: []Function{fn("f_old")}, Policies: []Policy{usesFn("f_old")},
				Deps: []Dep{fnDep("f_old")}},
			desired: Model{Schemas: pub(), Tables: []Table{secured}, Functions: []Function{fn("f_new")}, Policies: []Policy{usesFn("f_new")},
				Deps: []Dep{fnDep("f_new")}},
			want: []string{
				"CREATE OR REPLACE FUNCTION public.f_new()\n RETURNS text\nAS $$ select 'a' $$",
				"ALTER POLICY p_owner ON public.docs USING ((owner = public.f_new()))",
				"DROP FUNCTION public.f_old()",
			},
		},
		{
			name: "a policy whose text stays while its function goes is made again: the text may name another overload",
			live: Model{Schemas: pub(), Tables: []Table{secured}, Functions: []Function{overload(fn("f"), "integer")}, Policies: []Policy{usesFn("f")},
				Deps: []Dep{{Object: owner.ID(), RefObject: ID{Kind: KindFunction, Schema: "public", Name: "f", Sub: "integer"}}}},
			desired: Model{Schemas: pub(), Tables: []Table{secured}, Functions: []Function{fn("f")}, Policies: []Policy{usesFn("f")},
				Deps: []Dep{fnDep("f")}},
			want: []string{
				"DROP POLICY p_owner ON public.docs",
				"DROP FUNCTION public.f(integer)",
				"CREATE OR REPLACE FUNCTION public.f()\n RETURNS text\nAS $$ select 'a' $$",
				"CREATE POLICY p_owner ON public.docs AS PERMISSIVE FOR ALL TO PUBLIC USING ((owner = public.f()))",
			},
		},
		{
			name:    "the policies of a dropped table go with it",
			live:    Model{Schemas: pub(), Tables: []Table{forced}, Policies: []Policy{owner}, Deps: []Dep{ownerDep, tableDep}},
			desired: Model{Schemas: pub()},
			want:    []string{"DROP TABLE public.docs"},
		},
		{
			name:    "a policy's comment",
			live:    Model{Schemas: pub(), Tables: []Table{secured}, Policies: []Policy{owner}},
			desired: Model{Schemas: pub(), Tables: []Table{secured}, Policies: []Policy{with(owner, func(p *Policy) { p.Comment = "it's the owner's" })}},
			want:    []string{"COMMENT ON POLICY p_owner ON public.docs IS 'it''s the owner''s'"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := Diff(&tt.live, &tt.desired)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(sqls(got), tt.want) {
				t.Errorf("got:\n  %s\nwant:\n  %s", strings.Join(sqls(got), ";\n  "), strings.Join(tt.want, ";\n  "))
			}
			for _, s := range got {
				if len(s.Hazards) > 0 && !strings.HasPrefix(s.SQL, "DROP TABLE") {
					t.Errorf("%s: hazards %v, want none", s.SQL, s.Hazards)
				}
			}
		})
	}
}

// overload is f as the overload taking args.
func overload(f Function, args string) Function {
	f.IdentityArgs = args
	return f
}

// Row-level security came to the model after its first fingerprints: a
// schema that does not use it serialises as it did before.
func TestModelJSONWithoutRowSecurity(t *testing.T) {
	t.Parallel()
	b, err := json.Marshal(Model{Schemas: pub(), Tables: []Table{tbl("t", col("a", "integer"))}})
	if err != nil {
		t.Fatal(err)
	}
	for _, field := range []string{"Policies", "RowSecurity", "ForceRowSecurity"} {
		if strings.Contains(string(b), field) {
			t.Errorf("the JSON of a model without row-level security has %s: %s", field, b)
		}
	}
}
