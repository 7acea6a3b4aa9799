package catalog

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/ptah-run/ptah/internal/postgres"
)

// These tests feed Diff hand-built models: they pin down the orderings and
// strategies that are easy to get wrong, without a database. The acceptance
// suite proves the same plans converge on a real server.

func col(name, typ string) Column { return Column{Name: name, Type: typ} }

func tbl(name string, cols ...Column) Table {
	return Table{Schema: "public", Name: name, Columns: cols}
}

func pub() []Schema { return []Schema{{Name: "public"}} }

func sqls(stmts []postgres.Statement) []string {
	out := make([]string, len(stmts))
	for i, s := range stmts {
		out[i] = s.SQL
	}
	return out
}

func TestDiffOrderings(t *testing.T) {
	t.Parallel()
	viewV := View{Schema: "public", Name: "v", Definition: " SELECT t.a\n   FROM public.t;", Columns: []ViewColumn{{Name: "a", Type: "integer"}}}
	viewDep := Dep{Object: viewV.ID(), RefObject: ColumnID("public", "t", "a")}
	pk := Constraint{Schema: "public", Table: "parent", Name: "parent_pkey", Type: PrimaryKey, Definition: "PRIMARY KEY (id)", Columns: []string{"id"}}
	fk := Constraint{Schema: "public", Table: "child", Name: "child_parent_fkey", Type: ForeignKey, Definition: "FOREIGN KEY (parent_id) REFERENCES public.parent(id)", Columns: []string{"parent_id"}, RefTable: &ObjectName{"public", "parent"}}
	fkDeps := []Dep{
		{Object: fk.ID(), RefObject: pk.ID()},
		{Object: fk.ID(), RefObject: ColumnID("public", "child", "parent_id")},
		{Object: pk.ID(), RefObject: ColumnID("public", "parent", "id")},
	}
	mood := Enum{Schema: "public", Name: "mood", Labels: []string{"sad", "ok", "happy"}}

	tests := []struct {
		name          string
		live, desired Model
		want          []string
	}{
		{
			name:    "a view over a column whose type changes is dropped first and recreated after",
			live:    Model{Schemas: pub(), Tables: []Table{tbl("t", col("a", "integer"))}, Views: []View{viewV}, Deps: []Dep{viewDep}},
			desired: Model{Schemas: pub(), Tables: []Table{tbl("t", col("a", "bigint"))}, Views: []View{viewV}, Deps: []Dep{viewDep}},
			want: []string{
				"DROP VIEW public.v",
				"ALTER TABLE public.t ALTER COLUMN a TYPE bigint USING a::bigint",
				"CREATE VIEW public.v AS\nSELECT t.a\n   FROM public.t",
			},
		},
		{
			name: "new tables come before the foreign key between them, which is added separately",
			live: Model{Schemas: pub()},
			desired: Model{
				Schemas:     pub(),
				Tables:      []Table{tbl("child", col("parent_id", "integer")), tbl("parent", col("id", "integer"))},
				Constraints: []Constraint{fk, pk},
				Deps:        fkDeps,
			},
			want: []string{
				"CREATE TABLE public.child (\n    parent_id integer\n)",
				"CREATE TABLE public.parent (\n    id integer\n)",
				"ALTER TABLE public.parent ADD CONSTRAINT parent_pkey PRIMARY KEY (id)",
				"ALTER TABLE public.child ADD CONSTRAINT child_parent_fkey FOREIGN KEY (parent_id) REFERENCES public.parent(id)",
			},
		},
		{
			name: "dropping both tables drops the foreign key first, then the referencing table",
			live: Model{
				Schemas:     pub(),
				Tables:      []Table{tbl("child", col("parent_id", "integer")), tbl("parent", col("id", "integer"))},
				Constraints: []Constraint{fk, pk},
				Deps:        fkDeps,
			},
			desired: Model{Schemas: pub()},
			want: []string{
				"ALTER TABLE public.child DROP CONSTRAINT child_parent_fkey",
				"DROP TABLE public.child",
				"DROP TABLE public.parent",
			},
		},
		{
			name:    "an enum that gains a value in the middle is altered in place",
			live:    Model{Schemas: pub(), Enums: []Enum{{Schema: "public", Name: "mood", Labels: []string{"sad", "happy"}}}},
			desired: Model{Schemas: pub(), Enums: []Enum{mood}},
			want:    []string{"ALTER TYPE public.mood ADD VALUE IF NOT EXISTS 'ok' AFTER 'sad'"},
		},
		{
			name:    "labels added before the first old one are placed before it, then after each other",
			live:    Model{Schemas: pub(), Enums: []Enum{{Schema: "public", Name: "mood", Labels: []string{"happy"}}}},
			desired: Model{Schemas: pub(), Enums: []Enum{mood}},
			want: []string{
				"ALTER TYPE public.mood ADD VALUE IF NOT EXISTS 'sad' BEFORE 'happy'",
				"ALTER TYPE public.mood ADD VALUE IF NOT EXISTS 'ok' AFTER 'sad'",
			},
		},
		{
			name:    "labels added to an enum that had none name no position for the first",
			live:    Model{Schemas: pub(), Enums: []Enum{{Schema: "public", Name: "mood"}}},
			desired: Model{Schemas: pub(), Enums: []Enum{mood}},
			want: []string{
				"ALTER TYPE public.mood ADD VALUE IF NOT EXISTS 'sad'",
				"ALTER TYPE public.mood ADD VALUE IF NOT EXISTS 'ok' AFTER 'sad'",
				"ALTER TYPE public.mood ADD VALUE IF NOT EXISTS 'happy' AFTER 'ok'",
			},
		},
		{
			name: "labels added to existing enums lead the plan, ahead of drops and of what uses them",
			live: Model{
				Schemas: pub(),
				Enums:   []Enum{{Schema: "public", Name: "mood", Labels: []string{"sad", "happy"}}, {Schema: "public", Name: "zeal", Labels: []string{"low"}}},
				Tables:  []Table{tbl("gone", col("a", "integer")), tbl("t", col("a", "integer"))},
			},
			desired: Model{
				Schemas: pub(),
				Enums:   []Enum{mood, {Schema: "public", Name: "zeal", Labels: []string{"low", "high"}}},
				Tables:  []Table{tbl("t", col("a", "integer"), Column{Name: "m", Type: "public.mood", Default: "'ok'::public.mood"})},
				Deps:    []Dep{{Object: ColumnID("public", "t", "m"), RefObject: mood.ID()}},
			},
			want: []string{
				"ALTER TYPE public.mood ADD VALUE IF NOT EXISTS 'ok' AFTER 'sad'",
				"ALTER TYPE public.zeal ADD VALUE IF NOT EXISTS 'high' AFTER 'low'",
				"DROP TABLE public.gone",
				"ALTER TABLE public.t ADD COLUMN m public.mood DEFAULT 'ok'::public.mood",
			},
		},
		{
			name: "an enum that loses a value is replaced and its column converted",
			live: Model{
				Schemas: pub(), Enums: []Enum{mood},
				Tables: []Table{tbl("t", col("m", "public.mood"))},
				Deps:   []Dep{{Object: ColumnID("public", "t", "m"), RefObject: mood.ID()}},
			},
			desired: Model{
				Schemas: pub(), Enums: []Enum{{Schema: "public", Name: "mood", Labels: []string{"sad", "happy"}}},
				Tables: []Table{tbl("t", col("m", "public.mood"))},
				Deps:   []Dep{{Object: ColumnID("public", "t", "m"), RefObject: mood.ID()}},
			},
			want: []string{
				"ALTER TYPE public.mood RENAME TO mood__ptah_old",
				"CREATE TYPE public.mood AS ENUM ('sad', 'happy')",
				"ALTER TABLE public.t ALTER COLUMN m TYPE public.mood USING m::text::public.mood",
				"DROP TYPE public.mood__ptah_old",
			},
		},
		{
			name: "a function whose result type changes is dropped and recreated with the view that uses it",
			live: Model{
				Schemas:   pub(),
				Functions: []Function{{Schema: "public", Name: "f", Result: "integer", Definition: "CREATE OR REPLACE FUNCTION public.f()\n RETURNS integer\nAS $$ select 1 $$"}},
				Views:     []View{{Schema: "public", Name: "fv", Definition: " SELECT public.f() AS f;"}},
				Deps:      []Dep{{Object: ID{Kind: KindView, Schema: "public", Name: "fv"}, RefObject: ID{Kind: KindFunction, Schema: "public", Name: "f"}}},
			},
			desired: Model{
				Schemas:   pub(),
				Functions: []Function{{Schema: "public", Name: "f", Result: "bigint", Definition: "CREATE OR REPLACE FUNCTION public.f()\n RETURNS bigint\nAS $$ select 1::bigint $$"}},
				Views:     []View{{Schema: "public", Name: "fv", Definition: " SELECT public.f() AS f;"}},
				Deps:      []Dep{{Object: ID{Kind: KindView, Schema: "public", Name: "fv"}, RefObject: ID{Kind: KindFunction, Schema: "public", Name: "f"}}},
			},
			want: []string{
				"DROP VIEW public.fv",
				"DROP FUNCTION public.f()",
				"CREATE OR REPLACE FUNCTION public.f()\n RETURNS bigint\nAS $$ select 1::bigint $$",
				"CREATE VIEW public.fv AS\nSELECT public.f() AS f",
			},
		},
		{
			name: "a serial column's sequence is created before the column and owned after it",
			live: Model{Schemas: pub(), Tables: []Table{tbl("t", col("a", "text"))}},
			desired: Model{
				Schemas:   pub(),
				Sequences: []Sequence{{Schema: "public", Name: "t_id_seq", Options: SequenceOptions{Type: "integer", Start: 1, Increment: 1, Min: 1, Max: 2147483647, Cache: 1}, OwnedBy: &ColumnRef{"public", "t", "id"}}},
				Tables:    []Table{tbl("t", col("a", "text"), Column{Name: "id", Type: "integer", NotNull: true, Default: "nextval('public.t_id_seq'::regclass)"})},
				Deps: []Dep{
					{Object: ColumnID("public", "t", "id"), RefObject: ID{Kind: KindSequence, Schema: "public", Name: "t_id_seq"}},
					{Object: ID{Kind: KindSequence, Schema: "public", Name: "t_id_seq"}, RefObject: ColumnID("public", "t", "id")},
				},
			},
			want: []string{
				"CREATE SEQUENCE public.t_id_seq AS integer INCREMENT BY 1 MINVALUE 1 MAXVALUE 2147483647 START WITH 1 CACHE 1 NO CYCLE",
				"ALTER TABLE public.t ADD COLUMN id integer DEFAULT nextval('public.t_id_seq'::regclass) NOT NULL",
				"ALTER SEQUENCE public.t_id_seq OWNED BY public.t.id",
			},
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
		})
	}
}

func TestDiffIdenticalModelsPlanNothing(t *testing.T) {
	t.Parallel()
	m := Model{Schemas: pub(), Tables: []Table{tbl("t", col("a", "integer"))}, Enums: []Enum{{Schema: "public", Name: "e", Labels: []string{"x"}}}}
	got, err := Diff(&m, &m)
	if err != nil || len(got) != 0 {
		t.Fatalf("Diff(m, m) = %v, %v; want no statements", sqls(got), err)
	}
}

func TestDiffHazards(t *testing.T) {
	t.Parallel()
	live := Model{Schemas: pub(), Tables: []Table{tbl("t", col("a", "integer"), col("gone", "text"))}}
	desired := Model{Schemas: pub(), Tables: []Table{tbl("t", Column{Name: "a", Type: "integer", NotNull: true})}}
	got, err := Diff(&live, &desired)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][]postgres.Hazard{
		"ALTER TABLE public.t DROP COLUMN gone":            {postgres.HazardDeletesData},
		"ALTER TABLE public.t ALTER COLUMN a SET NOT NULL": {postgres.HazardMayFail, postgres.HazardScansTable, postgres.HazardBlocksReads, postgres.HazardBlocksWrites},
	}
	if len(got) != len(want) {
		t.Fatalf("got %v", sqls(got))
	}
	for _, s := range got {
		if !reflect.DeepEqual(s.Hazards, want[s.SQL]) {
			t.Errorf("%s: hazards %v, want %v", s.SQL, s.Hazards, want[s.SQL])
		}
	}
	if !postgres.Destructive(got) {
		t.Error("a plan that drops a column must be destructive")
	}
}

func TestAddedLabels(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		l, n  []string
		added []string
		ok    bool
	}{
		{[]string{"a", "b"}, []string{"a", "b", "c"}, []string{"c"}, true},
		{[]string{"a", "b"}, []string{"x", "a", "b"}, []string{"x"}, true},
		{[]string{"a", "b"}, []string{"b", "a"}, nil, false},
		{[]string{"a", "b"}, []string{"a"}, nil, false},
	} {
		added, ok := addedLabels(tt.l, tt.n)
		if ok != tt.ok || (ok && !reflect.DeepEqual(added, tt.added)) {
			t.Errorf("addedLabels(%v, %v) = %v, %v", tt.l, tt.n, added, ok)
		}
	}
}

func TestIdentitySetOptions(t *testing.T) {
	t.Parallel()
	base := defaultSequenceOptions("integer")
	cycling := base
	cycling.Cycle = true
	all := SequenceOptions{Type: "bigint", Start: 2, Increment: 3, Min: 1, Max: 5000, Cache: 4}
	for _, tt := range []struct {
		l, n SequenceOptions
		want string
	}{
		{cycling, base, "SET NO CYCLE"},
		{base, cycling, "SET CYCLE"},
		{cycling, all, "SET INCREMENT BY 3 SET MAXVALUE 5000 SET START WITH 2 SET CACHE 4 SET NO CYCLE"},
	} {
		if got := identitySetOptions(tt.l, tt.n); got != tt.want {
			t.Errorf("identitySetOptions(%+v, %+v) = %q, want %q", tt.l, tt.n, got, tt.want)
		}
	}
}

// A sequence's bounds that leave out the value it last handed out fail;
// with no value known, only narrower bounds may.
func TestDiffSequenceBoundsHazards(t *testing.T) {
	t.Parallel()
	v := func(n int64) *int64 { return &n }
	opts := func(typ string, max int64) SequenceOptions {
		o := defaultSequenceOptions(typ)
		o.Max = max
		return o
	}
	seq := func(o SequenceOptions, last *int64) Model {
		return Model{Schemas: pub(), Sequences: []Sequence{{Schema: "public", Name: "s", Options: o, LastValue: last}}}
	}
	ident := func(o SequenceOptions, last *int64) Model {
		c := Column{Name: "id", Type: "bigint", NotNull: true, Identity: "a", IdentityOptions: &o, IdentityLastValue: last}
		return Model{Schemas: pub(), Tables: []Table{tbl("t", c)}}
	}
	wide, narrow := opts("bigint", 100000), opts("bigint", 1000)
	for _, tt := range []struct {
		name          string
		live, desired Model
		mayFail       bool
	}{
		{"max below the last value", seq(wide, v(5000)), seq(narrow, nil), true},
		{"max above the last value", seq(wide, v(500)), seq(narrow, nil), false},
		{"type below the last value", seq(defaultSequenceOptions("bigint"), v(40000)), seq(defaultSequenceOptions("smallint"), nil), true},
		{"narrower, value unknown", seq(wide, nil), seq(narrow, nil), true},
		{"wider, value unknown", seq(narrow, nil), seq(wide, nil), false},
		{"identity max below the last value", ident(wide, v(5000)), ident(narrow, nil), true},
		{"identity max above the last value", ident(wide, v(10)), ident(narrow, nil), false},
	} {
		got, err := Diff(&tt.live, &tt.desired)
		if err != nil || len(got) != 1 {
			t.Fatalf("%s: Diff = %v, %v; want one statement", tt.name, sqls(got), err)
		}
		if mayFail := reflect.DeepEqual(got[0].Hazards, []postgres.Hazard{postgres.HazardMayFail}); mayFail != tt.mayFail {
			t.Errorf("%s: %s has hazards %v; want may-fail: %v", tt.name, got[0].SQL, got[0].Hazards, tt.mayFail)
		}
	}
}

// A sequence's last value is data: two databases with the same schema
// fingerprint the same (the model's JSON) whatever their sequences handed out.
func TestModelJSONLeavesOutLastValues(t *testing.T) {
	t.Parallel()
	v := int64(42)
	o := defaultSequenceOptions("integer")
	used := Model{Sequences: []Sequence{{Schema: "public", Name: "s", Options: o, LastValue: &v}},
		Tables: []Table{tbl("t", Column{Name: "id", Type: "integer", Identity: "a", IdentityOptions: &o, IdentityLastValue: &v})}}
	fresh := Model{Sequences: []Sequence{{Schema: "public", Name: "s", Options: o}},
		Tables: []Table{tbl("t", Column{Name: "id", Type: "integer", Identity: "a", IdentityOptions: &o})}}
	a, err := json.Marshal(used)
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(fresh)
	if err != nil {
		t.Fatal(err)
	}
	if string(a) != string(b) {
		t.Errorf("the JSON of a model differs with its sequences' last values:\n%s\n%s", a, b)
	}
}

// autoName is PostgreSQL's choice of name for the copy of a partitioned
// index it makes on a new partition (checked against PostgreSQL 15).
func TestAutoName(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("t", 58) + "_part"
	longCol := strings.Repeat("a", 61)
	for _, tt := range []struct {
		table   string
		columns []string
		label   string
		taken   []string
		want    string
	}{
		{"q_part", []string{"kind"}, "idx", nil, "q_part_kind_idx"},
		{"q_part", []string{"kind"}, "idx", []string{"q_part_kind_idx"}, "q_part_kind_idx1"},
		{"q_part", []string{"lower", "upper"}, "idx", nil, "q_part_lower_upper_idx"},
		{"q_part", nil, "pkey", nil, "q_part_pkey"},
		{"q_part", []string{"id", "at"}, "key", nil, "q_part_id_at_key"},
		{long, []string{"expr", "expr1"}, "idx", nil, strings.Repeat("t", 48) + "_expr_expr1_idx"},
		{long, []string{"kind", "b"}, "idx", nil, strings.Repeat("t", 52) + "_kind_b_idx"},
		{long, []string{longCol, "kind"}, "idx", nil, strings.Repeat("t", 29) + "_" + strings.Repeat("a", 29) + "_idx"},
		{"q_part", []string{longCol, "kind"}, "idx", nil, "q_part_" + strings.Repeat("a", 52) + "_idx"},
	} {
		taken := map[string]bool{}
		for _, n := range tt.taken {
			taken[n] = true
		}
		if got := autoName(tt.table, tt.columns, tt.label, taken); got != tt.want {
			t.Errorf("autoName(%s, %v, %s) = %s, want %s", tt.table, tt.columns, tt.label, got, tt.want)
		}
	}
}

// Definitions are each server's own text: a model read on one major is not
// compared with one read on another (a --dev-url server of another major).
func TestDiffRefusesModelsOfTwoMajors(t *testing.T) {
	t.Parallel()
	live := Model{ServerVersion: 170004, Schemas: pub()}
	desired := Model{ServerVersion: 180001, Schemas: pub()}
	if _, err := Diff(&live, &desired); err == nil || !strings.Contains(err.Error(), "PostgreSQL 17") || !strings.Contains(err.Error(), "PostgreSQL 18") {
		t.Fatalf("Diff of a PostgreSQL 17 and an 18 model: %v, want an error naming both", err)
	}
	desired.ServerVersion = 170010
	if _, err := Diff(&live, &desired); err != nil {
		t.Fatalf("two minor releases of one major: %v", err)
	}
}
