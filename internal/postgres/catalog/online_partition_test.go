package catalog

import (
	"fmt"
	"strings"
	"testing"

	"github.com/ptah-run/ptah/internal/postgres"
)

// TestOnlinePartitionedIndexPlans: an online plan builds a partitioned
// table's index ON ONLY it, each partition's concurrently (without a
// transaction) and attaches them; settles what a run cut short left
// without building anew what is built; and replaces a changed tree beside
// the old one. An offline plan builds each partition's index in its
// transaction, as before.
func TestOnlinePartitionedIndexPlans(t *testing.T) {
	t.Parallel()
	parent := Table{Schema: "public", Name: "m", Columns: []Column{col("id", "bigint"), col("k", "integer"), col("v", "text")}, PartitionKey: "LIST (k)"}
	part := func(name, bound string) Table {
		return Table{Schema: "public", Name: name, Columns: parent.Columns, PartitionOf: &ObjectName{"public", "m"}, PartitionBound: bound}
	}
	tables := []Table{parent, part("m1", "FOR VALUES IN (1)"), part("m2", "FOR VALUES IN (2)")}
	top := Index{Schema: "public", Table: "m", Name: "m_v_idx", Columns: []string{"v"},
		Definition: "CREATE INDEX m_v_idx ON ONLY public.m USING btree (v)"}
	leaf := func(table string) Index {
		return Index{Schema: "public", Table: table, Name: table + "_v_idx", Columns: []string{"v"}, Parent: &ObjectName{"public", "m_v_idx"},
			Definition: "CREATE INDEX " + table + "_v_idx ON public." + table + " USING btree (v)"}
	}
	desc := func(ix Index) Index {
		ix.Definition = strings.Replace(ix.Definition, "(v)", "(v DESC)", 1)
		return ix
	}
	invalid := func(ix Index) Index { ix.Invalid = true; return ix }
	detached := func(ix Index) Index { ix.Parent = nil; return ix }
	model := func(ix ...Index) Model {
		var deps []Dep
		for _, i := range ix {
			deps = append(deps, Dep{Object: i.ID(), RefObject: ColumnID("public", i.Table, "v")})
		}
		return Model{Schemas: pub(), Tables: tables, Indexes: ix, Deps: deps}
	}
	type want struct {
		sql     string
		noTx    bool
		hazards []postgres.Hazard
	}
	builds := []postgres.Hazard{postgres.HazardBuildsIndex}
	attach := func(p, c string) want {
		return want{"ALTER INDEX public." + p + " ATTACH PARTITION public." + c, false, nil}
	}
	tests := []struct {
		name        string
		live, desir Model
		online, off []want
	}{
		{
			name: "a new index: ON ONLY the parent, each partition's built concurrently and attached",
			live: model(), desir: model(top, leaf("m1"), leaf("m2")),
			online: []want{
				{top.Definition, false, nil},
				{"CREATE INDEX CONCURRENTLY m1_v_idx ON public.m1 USING btree (v)", true, builds},
				attach("m_v_idx", "m1_v_idx"),
				{"CREATE INDEX CONCURRENTLY m2_v_idx ON public.m2 USING btree (v)", true, builds},
				attach("m_v_idx", "m2_v_idx"),
			},
			off: []want{
				{top.Definition, false, nil},
				{leaf("m1").Definition, false, []postgres.Hazard{postgres.HazardBuildsIndex, postgres.HazardBlocksWrites}},
				attach("m_v_idx", "m1_v_idx"),
				{leaf("m2").Definition, false, []postgres.Hazard{postgres.HazardBuildsIndex, postgres.HazardBlocksWrites}},
				attach("m_v_idx", "m2_v_idx"),
			},
		},
		{
			name: "a run cut short: the parent's invalid index is kept, a built one attached, an invalid one built again",
			live: model(invalid(top), detached(leaf("m1")), invalid(detached(leaf("m2")))), desir: model(top, leaf("m1"), leaf("m2")),
			online: []want{
				{"DROP INDEX CONCURRENTLY public.m2_v_idx", true, nil},
				attach("m_v_idx", "m1_v_idx"),
				{"CREATE INDEX CONCURRENTLY m2_v_idx ON public.m2 USING btree (v)", true, builds},
				attach("m_v_idx", "m2_v_idx"),
			},
		},
		{
			name: "a changed index: a new tree beside the old one, swapped in at once",
			live: model(top, leaf("m1"), leaf("m2")), desir: model(desc(top), desc(leaf("m1")), desc(leaf("m2"))),
			online: []want{
				{"CREATE INDEX m_v_idx__ptah_new ON ONLY public.m USING btree (v DESC)", false, nil},
				{"CREATE INDEX CONCURRENTLY m1_v_idx__ptah_new ON public.m1 USING btree (v DESC)", true, builds},
				attach("m_v_idx__ptah_new", "m1_v_idx__ptah_new"),
				{"CREATE INDEX CONCURRENTLY m2_v_idx__ptah_new ON public.m2 USING btree (v DESC)", true, builds},
				attach("m_v_idx__ptah_new", "m2_v_idx__ptah_new"),
				{"DROP INDEX public.m_v_idx", false, nil},
				{"ALTER INDEX public.m_v_idx__ptah_new RENAME TO m_v_idx", false, nil},
				{"ALTER INDEX public.m1_v_idx__ptah_new RENAME TO m1_v_idx", false, nil},
				{"ALTER INDEX public.m2_v_idx__ptah_new RENAME TO m2_v_idx", false, nil},
			},
			off: []want{
				{"DROP INDEX public.m_v_idx", false, nil},
				{desc(top).Definition, false, nil},
				{desc(leaf("m1")).Definition, false, []postgres.Hazard{postgres.HazardBuildsIndex, postgres.HazardBlocksWrites}},
				attach("m_v_idx", "m1_v_idx"),
				{desc(leaf("m2")).Definition, false, []postgres.Hazard{postgres.HazardBuildsIndex, postgres.HazardBlocksWrites}},
				attach("m_v_idx", "m2_v_idx"),
			},
		},
		{
			name: "an invalid partition's index attached to the parent's: the tree is replaced",
			live: model(top, leaf("m1"), invalid(leaf("m2"))), desir: model(top, leaf("m1"), leaf("m2")),
			online: []want{
				{"CREATE INDEX m_v_idx__ptah_new ON ONLY public.m USING btree (v)", false, nil},
				{"CREATE INDEX CONCURRENTLY m1_v_idx__ptah_new ON public.m1 USING btree (v)", true, builds},
				attach("m_v_idx__ptah_new", "m1_v_idx__ptah_new"),
				{"CREATE INDEX CONCURRENTLY m2_v_idx__ptah_new ON public.m2 USING btree (v)", true, builds},
				attach("m_v_idx__ptah_new", "m2_v_idx__ptah_new"),
				{"DROP INDEX public.m_v_idx", false, nil},
				{"ALTER INDEX public.m_v_idx__ptah_new RENAME TO m_v_idx", false, nil},
				{"ALTER INDEX public.m1_v_idx__ptah_new RENAME TO m1_v_idx", false, nil},
				{"ALTER INDEX public.m2_v_idx__ptah_new RENAME TO m2_v_idx", false, nil},
			},
		},
		{
			name: "a dropped index: DROP INDEX on the parent's (PostgreSQL refuses it CONCURRENTLY)",
			live: model(top, leaf("m1"), leaf("m2")), desir: model(),
			online: []want{{"DROP INDEX public.m_v_idx", false, nil}},
			off:    []want{{"DROP INDEX public.m_v_idx", false, nil}},
		},
	}
	render := func(ws []want) string {
		var b strings.Builder
		for _, w := range ws {
			fmt.Fprintf(&b, "  %s  noTx=%v %v\n", w.sql, w.noTx, w.hazards)
		}
		return b.String()
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
				stmts, err := DiffWith(&tt.live, &tt.desir, DiffOptions{Online: mode.online})
				if err != nil {
					t.Fatal(err)
				}
				var got []want
				for _, s := range stmts {
					got = append(got, want{s.SQL, s.NoTransaction, s.Hazards})
				}
				if render(got) != render(mode.want) {
					t.Errorf("online=%v: got\n%swant\n%s", mode.online, render(got), render(mode.want))
				}
			}
		})
	}
}
