package catalog

import (
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/ptah-run/ptah/internal/postgres"
)

// TestOnlineIndexPlans: an online plan builds, replaces and drops the
// indexes of tables that hold rows concurrently, each such statement run
// without a transaction, and leaves everything else as an offline plan has
// it.
func TestOnlineIndexPlans(t *testing.T) {
	t.Parallel()
	accounts := tbl("accounts", col("id", "bigint"), col("email", "text"), col("org", "bigint"))
	byEmail := Index{Schema: "public", Table: "accounts", Name: "accounts_email_idx", Columns: []string{"email"},
		Definition: "CREATE INDEX accounts_email_idx ON public.accounts USING btree (email)"}
	byEmailLower := byEmail
	byEmailLower.Definition = "CREATE UNIQUE INDEX accounts_email_idx ON public.accounts USING btree (lower(email))"
	invalid := byEmail
	invalid.Invalid = true
	onEmail := []Dep{{Object: byEmail.ID(), RefObject: ColumnID("public", "accounts", "email")}}
	withIndex := func(ix ...Index) Model {
		return Model{Schemas: pub(), Tables: []Table{accounts}, Indexes: ix, Deps: onEmail}
	}
	bare := Model{Schemas: pub(), Tables: []Table{accounts}}

	type want struct {
		sql     string
		noTx    bool
		hazards []postgres.Hazard
	}
	tests := []struct {
		name          string
		live, desired Model
		online, off   []want // the online plan, and the plan when online is false
	}{
		{
			name: "a new index on an existing table is built concurrently",
			live: bare, desired: withIndex(byEmail),
			online: []want{{"CREATE INDEX CONCURRENTLY accounts_email_idx ON public.accounts USING btree (email)", true, []postgres.Hazard{postgres.HazardBuildsIndex}}},
			off:    []want{{byEmail.Definition, false, []postgres.Hazard{postgres.HazardBuildsIndex, postgres.HazardBlocksWrites}}},
		},
		{
			name: "a new table's index is built in the plan's transaction",
			live: Model{Schemas: pub()}, desired: withIndex(byEmail),
			online: []want{{"CREATE TABLE public.accounts (\n    id bigint,\n    email text,\n    org bigint\n)", false, nil}, {byEmail.Definition, false, nil}},
		},
		{
			name: "an index no longer declared is dropped concurrently",
			live: withIndex(byEmail), desired: bare,
			online: []want{{"DROP INDEX CONCURRENTLY public.accounts_email_idx", true, nil}},
			off:    []want{{"DROP INDEX public.accounts_email_idx", false, nil}},
		},
		{
			name: "a changed index is built beside the old one and swapped in",
			live: withIndex(byEmail), desired: withIndex(byEmailLower),
			online: []want{
				{"CREATE UNIQUE INDEX CONCURRENTLY accounts_email_idx__ptah_new ON public.accounts USING btree (lower(email))", true, []postgres.Hazard{postgres.HazardBuildsIndex, postgres.HazardMayFail}},
				{"DROP INDEX CONCURRENTLY public.accounts_email_idx", true, nil},
				{"ALTER INDEX public.accounts_email_idx__ptah_new RENAME TO accounts_email_idx", false, nil},
			},
			off: []want{
				{"DROP INDEX public.accounts_email_idx", false, nil},
				{byEmailLower.Definition, false, []postgres.Hazard{postgres.HazardBuildsIndex, postgres.HazardMayFail, postgres.HazardBlocksWrites}},
			},
		},
		{
			name: "an invalid index, left by a failed concurrent build, is replaced online",
			live: withIndex(invalid), desired: withIndex(byEmail),
			online: []want{
				{"CREATE INDEX CONCURRENTLY accounts_email_idx__ptah_new ON public.accounts USING btree (email)", true, []postgres.Hazard{postgres.HazardBuildsIndex}},
				{"DROP INDEX CONCURRENTLY public.accounts_email_idx", true, nil},
				{"ALTER INDEX public.accounts_email_idx__ptah_new RENAME TO accounts_email_idx", false, nil},
			},
		},
		{
			name: "an index over a column whose type changes goes with it, as offline",
			live: withIndex(byEmail),
			desired: Model{Schemas: pub(), Tables: []Table{tbl("accounts", col("id", "bigint"), col("email", "varchar(200)"), col("org", "bigint"))},
				Indexes: []Index{byEmailLower}, Deps: onEmail},
			online: []want{
				{"DROP INDEX CONCURRENTLY public.accounts_email_idx", true, nil},
				{"ALTER TABLE public.accounts ALTER COLUMN email TYPE varchar(200) USING email::varchar(200)", false, []postgres.Hazard{postgres.HazardRewritesTable, postgres.HazardMayFail, postgres.HazardBlocksReads, postgres.HazardBlocksWrites}},
				{"CREATE UNIQUE INDEX CONCURRENTLY accounts_email_idx ON public.accounts USING btree (lower(email))", true, []postgres.Hazard{postgres.HazardBuildsIndex, postgres.HazardMayFail}},
			},
		},
	}
	child := tbl("child", col("id", "bigint"), col("parent_id", "bigint"), col("v", "integer"))
	parent := tbl("parent", col("id", "bigint"))
	pkey := Constraint{Schema: "public", Table: "parent", Name: "parent_pkey", Type: PrimaryKey, Definition: "PRIMARY KEY (id)", Columns: []string{"id"}}
	fk := Constraint{Schema: "public", Table: "child", Name: "child_parent_fkey", Type: ForeignKey,
		Definition: "FOREIGN KEY (parent_id) REFERENCES public.parent(id)", Columns: []string{"parent_id"}, RefTable: &ObjectName{"public", "parent"}}
	positive := Constraint{Schema: "public", Table: "child", Name: "child_v_check", Type: Check, Definition: "CHECK ((v > 0))", Columns: []string{"v"}}
	halfDone := positive
	halfDone.Definition += " NOT VALID"
	keyed := func(cs ...Constraint) Model {
		return Model{Schemas: pub(), Tables: []Table{child, parent}, Constraints: append([]Constraint{pkey}, cs...)}
	}
	tests = append(tests, []struct {
		name          string
		live, desired Model
		online, off   []want
	}{
		{
			name: "a foreign key on an existing table is added NOT VALID and validated on its own",
			live: keyed(), desired: keyed(fk),
			online: []want{
				{"ALTER TABLE public.child ADD CONSTRAINT child_parent_fkey FOREIGN KEY (parent_id) REFERENCES public.parent(id) NOT VALID", false, nil},
				{"ALTER TABLE public.child VALIDATE CONSTRAINT child_parent_fkey", true, []postgres.Hazard{postgres.HazardScansTable, postgres.HazardMayFail}},
			},
			off: []want{{"ALTER TABLE public.child ADD CONSTRAINT child_parent_fkey FOREIGN KEY (parent_id) REFERENCES public.parent(id)", false,
				[]postgres.Hazard{postgres.HazardScansTable, postgres.HazardMayFail, postgres.HazardBlocksWrites}}},
		},
		{
			name: "a check on an existing table is added NOT VALID and validated on its own",
			live: keyed(), desired: keyed(positive),
			online: []want{
				{"ALTER TABLE public.child ADD CONSTRAINT child_v_check CHECK ((v > 0)) NOT VALID", false, nil},
				{"ALTER TABLE public.child VALIDATE CONSTRAINT child_v_check", true, []postgres.Hazard{postgres.HazardScansTable, postgres.HazardMayFail}},
			},
		},
		{
			name: "a check left NOT VALID by a run cut short is validated, not added again",
			live: keyed(halfDone), desired: keyed(positive),
			online: []want{{"ALTER TABLE public.child VALIDATE CONSTRAINT child_v_check", true, []postgres.Hazard{postgres.HazardScansTable, postgres.HazardMayFail}}},
			off: []want{
				{"ALTER TABLE public.child DROP CONSTRAINT child_v_check", false, nil},
				{"ALTER TABLE public.child ADD CONSTRAINT child_v_check CHECK ((v > 0))", false, []postgres.Hazard{postgres.HazardScansTable, postgres.HazardMayFail, postgres.HazardBlocksReads, postgres.HazardBlocksWrites}},
			},
		},
		{
			name: "a check declared NOT VALID is added as declared",
			live: keyed(), desired: keyed(halfDone),
			online: []want{{"ALTER TABLE public.child ADD CONSTRAINT child_v_check CHECK ((v > 0)) NOT VALID", false, nil}},
		},
	}...)
	notNullEmail := tbl("accounts", col("id", "bigint"), Column{Name: "email", Type: "text", NotNull: true}, col("org", "bigint"))
	idNotNull := tbl("accounts", Column{Name: "id", Type: "bigint", NotNull: true}, col("email", "text"), col("org", "bigint"))
	unique := Constraint{Schema: "public", Table: "accounts", Name: "accounts_email_key", Type: Unique, Definition: "UNIQUE (email)", Columns: []string{"email"}}
	primary := Constraint{Schema: "public", Table: "accounts", Name: "accounts_pkey", Type: PrimaryKey, Definition: "PRIMARY KEY (id)", Columns: []string{"id"}}
	covering := unique
	covering.Definition = "UNIQUE (email) INCLUDE (org)"
	temporal := unique
	temporal.Definition = "UNIQUE (email, org WITHOUT OVERLAPS)"
	coveringPrimary := primary
	coveringPrimary.Definition = "PRIMARY KEY (id) INCLUDE (org)"
	tests = append(tests, []struct {
		name          string
		live, desired Model
		online, off   []want
	}{
		{
			name: "NOT NULL on an existing column is proved by a validated check, then set without a scan",
			live: bare, desired: Model{Schemas: pub(), Tables: []Table{notNullEmail}},
			online: []want{
				{"ALTER TABLE public.accounts ADD CONSTRAINT email_ptah_not_null CHECK (email IS NOT NULL) NOT VALID", false, nil},
				{"ALTER TABLE public.accounts VALIDATE CONSTRAINT email_ptah_not_null", true, []postgres.Hazard{postgres.HazardScansTable, postgres.HazardMayFail}},
				{"ALTER TABLE public.accounts ALTER COLUMN email SET NOT NULL", false, nil},
				{"ALTER TABLE public.accounts DROP CONSTRAINT email_ptah_not_null", false, nil},
			},
			off: []want{{"ALTER TABLE public.accounts ALTER COLUMN email SET NOT NULL", false, []postgres.Hazard{postgres.HazardMayFail, postgres.HazardScansTable, postgres.HazardBlocksReads, postgres.HazardBlocksWrites}}},
		},
		{
			name: "a unique key on an existing table is built as a unique index concurrently, then made the key",
			live: bare, desired: Model{Schemas: pub(), Tables: []Table{accounts}, Constraints: []Constraint{unique}},
			online: []want{
				{"CREATE UNIQUE INDEX CONCURRENTLY accounts_email_key ON public.accounts USING btree (email)", true, []postgres.Hazard{postgres.HazardBuildsIndex, postgres.HazardMayFail}},
				{"ALTER TABLE public.accounts ADD CONSTRAINT accounts_email_key UNIQUE USING INDEX accounts_email_key", false, nil},
			},
			off: []want{{"ALTER TABLE public.accounts ADD CONSTRAINT accounts_email_key UNIQUE (email)", false,
				[]postgres.Hazard{postgres.HazardBuildsIndex, postgres.HazardMayFail, postgres.HazardBlocksReads, postgres.HazardBlocksWrites}}},
		},
		{
			name: "a primary key over columns NOT NULL already is built concurrently too",
			live: Model{Schemas: pub(), Tables: []Table{idNotNull}}, desired: Model{Schemas: pub(), Tables: []Table{idNotNull}, Constraints: []Constraint{primary}},
			online: []want{
				{"CREATE UNIQUE INDEX CONCURRENTLY accounts_pkey ON public.accounts USING btree (id)", true, []postgres.Hazard{postgres.HazardBuildsIndex, postgres.HazardMayFail}},
				{"ALTER TABLE public.accounts ADD CONSTRAINT accounts_pkey PRIMARY KEY USING INDEX accounts_pkey", false, nil},
			},
		},
		{
			name: "a primary key over a column made NOT NULL in the same plan follows its online NOT NULL",
			live: bare, desired: Model{Schemas: pub(), Tables: []Table{idNotNull}, Constraints: []Constraint{primary}},
			online: []want{
				{"ALTER TABLE public.accounts ADD CONSTRAINT id_ptah_not_null CHECK (id IS NOT NULL) NOT VALID", false, nil},
				{"ALTER TABLE public.accounts VALIDATE CONSTRAINT id_ptah_not_null", true, []postgres.Hazard{postgres.HazardScansTable, postgres.HazardMayFail}},
				{"ALTER TABLE public.accounts ALTER COLUMN id SET NOT NULL", false, nil},
				{"ALTER TABLE public.accounts DROP CONSTRAINT id_ptah_not_null", false, nil},
				{"CREATE UNIQUE INDEX CONCURRENTLY accounts_pkey ON public.accounts USING btree (id)", true, []postgres.Hazard{postgres.HazardBuildsIndex, postgres.HazardMayFail}},
				{"ALTER TABLE public.accounts ADD CONSTRAINT accounts_pkey PRIMARY KEY USING INDEX accounts_pkey", false, nil},
			},
		},
		{
			name: "a primary key over a nullable column is added as offline: it would set NOT NULL under its lock",
			live: bare, desired: Model{Schemas: pub(), Tables: []Table{accounts}, Constraints: []Constraint{primary}},
			online: []want{
				{"ALTER TABLE public.accounts ADD CONSTRAINT accounts_pkey PRIMARY KEY (id)", false, []postgres.Hazard{postgres.HazardBuildsIndex, postgres.HazardMayFail, postgres.HazardBlocksReads, postgres.HazardBlocksWrites}},
			},
		},
		{
			name: "a key added as offline over a column made NOT NULL online comes after the column",
			live: bare, desired: Model{Schemas: pub(), Tables: []Table{idNotNull}, Constraints: []Constraint{coveringPrimary}},
			online: []want{
				{"ALTER TABLE public.accounts ADD CONSTRAINT id_ptah_not_null CHECK (id IS NOT NULL) NOT VALID", false, nil},
				{"ALTER TABLE public.accounts VALIDATE CONSTRAINT id_ptah_not_null", true, []postgres.Hazard{postgres.HazardScansTable, postgres.HazardMayFail}},
				{"ALTER TABLE public.accounts ALTER COLUMN id SET NOT NULL", false, nil},
				{"ALTER TABLE public.accounts DROP CONSTRAINT id_ptah_not_null", false, nil},
				{"ALTER TABLE public.accounts ADD CONSTRAINT accounts_pkey PRIMARY KEY (id) INCLUDE (org)", false,
					[]postgres.Hazard{postgres.HazardBuildsIndex, postgres.HazardMayFail, postgres.HazardBlocksReads, postgres.HazardBlocksWrites}},
			},
		},
		{
			name: "a temporal key (WITHOUT OVERLAPS, a GiST index) is added as offline",
			live: bare, desired: Model{Schemas: pub(), Tables: []Table{accounts}, Constraints: []Constraint{temporal}},
			online: []want{{"ALTER TABLE public.accounts ADD CONSTRAINT accounts_email_key UNIQUE (email, org WITHOUT OVERLAPS)", false,
				[]postgres.Hazard{postgres.HazardBuildsIndex, postgres.HazardMayFail, postgres.HazardBlocksReads, postgres.HazardBlocksWrites}}},
		},
		{
			name: "a key with INCLUDE columns is added as offline",
			live: bare, desired: Model{Schemas: pub(), Tables: []Table{accounts}, Constraints: []Constraint{covering}},
			online: []want{{"ALTER TABLE public.accounts ADD CONSTRAINT accounts_email_key UNIQUE (email) INCLUDE (org)", false,
				[]postgres.Hazard{postgres.HazardBuildsIndex, postgres.HazardMayFail, postgres.HazardBlocksReads, postgres.HazardBlocksWrites}}},
		},
	}...)
	render := func(ws []want) string {
		var b strings.Builder
		for _, w := range ws {
			fmt.Fprintf(&b, "  %s  noTx=%v %v\n", w.sql, w.noTx, w.hazards)
		}
		return b.String()
	}
	got := func(stmts []postgres.Statement) []want {
		var out []want
		for _, s := range stmts {
			out = append(out, want{s.SQL, s.NoTransaction, s.Hazards})
		}
		return out
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			for _, mode := range []struct {
				online bool
				want   []want
			}{{true, tt.online}, {false, tt.off}} {
				if mode.want == nil {
					continue
				}
				stmts, err := DiffWith(&tt.live, &tt.desired, DiffOptions{Online: mode.online})
				if err != nil {
					t.Fatal(err)
				}
				if g := got(stmts); !reflect.DeepEqual(render(g), render(mode.want)) {
					t.Errorf("online=%v: got\n%swant\n%s", mode.online, render(g), render(mode.want))
				}
			}
		})
	}
}

// TestPlanPhasesRunConcurrentStatementsWithoutATransaction: statements
// PostgreSQL refuses in a transaction block get phases of their own, in
// place, between the transactions around them.
func TestPlanPhasesRunConcurrentStatementsWithoutATransaction(t *testing.T) {
	t.Parallel()
	s := func(sql string, noTx bool) postgres.Statement {
		return postgres.Statement{SQL: sql, NoTransaction: noTx}
	}
	stmts := []postgres.Statement{
		s("ALTER TYPE public.e ADD VALUE 'x'", false),
		s("ALTER TABLE public.t ADD COLUMN b int", false),
		s("CREATE INDEX CONCURRENTLY i ON public.t (b)", true),
		s("CREATE INDEX CONCURRENTLY j ON public.t (a)", true),
		s("ALTER TABLE public.t ADD COLUMN c int", false),
		s("DROP INDEX CONCURRENTLY public.k", true),
	}
	var got []string
	for _, ph := range postgres.PlanPhases(stmts, 0) {
		got = append(got, fmt.Sprintf("%d %s noTx=%v", ph.Statements, ph.Reason, ph.NoTransaction))
	}
	want := []string{"1 enum-labels noTx=false", "1  noTx=false", "2 online noTx=true", "1  noTx=false", "1 online noTx=true"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("phases:\n  %s\nwant:\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}
}

// The differ takes statements run without a transaction last among those
// it may take next, so that the transactional ones around them share a
// transaction: a new column and a new view go together, and the index
// built concurrently after them, in two phases rather than three.
func TestOnlinePlansKeepTheirTransactionalStatementsTogether(t *testing.T) {
	t.Parallel()
	accounts := tbl("accounts", col("id", "bigint"), col("email", "text"))
	wider := tbl("accounts", col("id", "bigint"), col("email", "text"), col("org", "bigint"))
	ix := Index{Schema: "public", Table: "accounts", Name: "accounts_email_idx", Columns: []string{"email"},
		Definition: "CREATE INDEX accounts_email_idx ON public.accounts USING btree (email)"}
	v := View{Schema: "public", Name: "v", Definition: " SELECT 1 AS one;", Columns: []ViewColumn{{Name: "one", Type: "integer"}}}
	live := Model{Schemas: pub(), Tables: []Table{accounts}}
	desired := Model{Schemas: pub(), Tables: []Table{wider}, Indexes: []Index{ix}, Views: []View{v},
		Deps: []Dep{{Object: ix.ID(), RefObject: ColumnID("public", "accounts", "email")}}}
	stmts, err := DiffWith(&live, &desired, DiffOptions{Online: true})
	if err != nil {
		t.Fatal(err)
	}
	if phases := postgres.PlanPhases(stmts, 0); len(phases) != 2 || phases[0].NoTransaction || !phases[1].NoTransaction {
		t.Errorf("phases %+v of\n  %s\nwant a transaction, then the concurrent build", phases, strings.Join(sqls(stmts), ";\n  "))
	}
}
