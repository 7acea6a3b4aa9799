package catalog

import (
	"reflect"
	"strings"
	"testing"
)

func TestDiffSettings(t *testing.T) {
	t.Parallel()
	part := func(name string, settings ...ColumnSettings) Table {
		return Table{Schema: "public", Name: name, PartitionOf: &ObjectName{"public", "m"},
			PartitionBound: "FOR VALUES IN (1)", ColumnSettings: settings}
	}
	parent := func(settings ...ColumnSettings) Table {
		t := tbl("m", col("id", "integer"), col("body", "text"))
		t.PartitionKey, t.ColumnSettings = "LIST (id)", settings
		return t
	}
	main := ColumnSettings{Column: "body", Storage: "MAIN", DefaultStorage: "EXTENDED", Statistics: -1}
	idx := Index{Schema: "public", Table: "t", Name: "t_a", Definition: "CREATE INDEX t_a ON public.t USING btree (a)"}
	idx2 := idx
	idx2.Definition = "CREATE INDEX t_a ON public.t USING btree (a, b)"
	clustered := func(ix Index) Model {
		tb := tbl("t", col("a", "integer"), col("b", "integer"))
		tb.ClusterOn = "t_a"
		return Model{Schemas: pub(), Tables: []Table{tb}, Indexes: []Index{ix}}
	}

	tests := []struct {
		name          string
		live, desired Model
		want          []string
	}{
		{
			name:    "a new partition gets its parent's storage back to the default, which it inherited",
			live:    Model{Schemas: pub(), Tables: []Table{parent(main)}},
			desired: Model{Schemas: pub(), Tables: []Table{parent(main), part("m1")}},
			want: []string{
				"CREATE TABLE public.m1 PARTITION OF public.m FOR VALUES IN (1)",
				"ALTER TABLE ONLY public.m1 ALTER COLUMN body SET STORAGE EXTENDED",
			},
		},
		{
			name:    "a new partition gets its storage whatever its parent's was when it is created",
			live:    Model{Schemas: pub(), Tables: []Table{parent()}},
			desired: Model{Schemas: pub(), Tables: []Table{parent(main), part("m1", main)}},
			want: []string{
				"ALTER TABLE ONLY public.m ALTER COLUMN body SET STORAGE MAIN",
				"CREATE TABLE public.m1 PARTITION OF public.m FOR VALUES IN (1)",
				"ALTER TABLE ONLY public.m1 ALTER COLUMN body SET STORAGE MAIN",
			},
		},
		{
			name:    "a clustered index that is rebuilt is marked again, after it is built",
			live:    clustered(idx),
			desired: clustered(idx2),
			want: []string{
				"DROP INDEX public.t_a",
				"CREATE INDEX t_a ON public.t USING btree (a, b)",
				"ALTER TABLE public.t CLUSTER ON t_a",
			},
		},
		{
			name:    "identical settings plan nothing",
			live:    clustered(idx),
			desired: clustered(idx),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := Diff(&tt.live, &tt.desired)
			if err != nil {
				t.Fatal(err)
			}
			if g := sqls(got); !reflect.DeepEqual(g, tt.want) && (len(g) > 0 || len(tt.want) > 0) {
				t.Errorf("got:\n  %s\nwant:\n  %s", strings.Join(g, ";\n  "), strings.Join(tt.want, ";\n  "))
			}
		})
	}
}
