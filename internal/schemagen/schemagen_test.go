package schemagen

import (
	"strings"
	"testing"

	"github.com/ptah-run/ptah/internal/postgres/script"
)

func TestFiles(t *testing.T) {
	t.Parallel()
	files := Shape{Tables: 5, ViewEvery: 2, FunctionEvery: 2, TablesPerFile: 2}.Files()
	var names []string
	statements := 0
	for _, f := range files {
		names = append(names, f.Name)
		stmts, err := script.Split(f.SQL)
		if err != nil {
			t.Fatalf("%s: %v", f.Name, err)
		}
		statements += len(stmts)
	}
	if got := strings.Join(names, ","); got != "0001_tables.sql,0002_tables.sql,0003_tables.sql,0004_views_and_functions.sql" {
		t.Errorf("files = %s", got)
	}
	// 4 statements a table; a view and a function for tables 0, 2 and 4.
	if statements != 5*4+3+3 {
		t.Errorf("%d statements, want 26", statements)
	}
	shape := Default(250)
	shape.ExtraColumnEvery = 100
	changed := shape.SQL()
	if n := strings.Count(changed, "extra integer"); n != 3 {
		t.Errorf("%d tables of 250 have the extra column; want 3 (every 100th from the first)", n)
	}
	if Default(250).SQL() != strings.ReplaceAll(changed, "\n    extra integer,", "") {
		t.Error("the changed schema is more than the default one with the extra columns")
	}
	all := Default(40).SQL()
	for _, want := range []string{"BEGIN ATOMIC", "LANGUAGE plpgsql", "REFERENCES t00038 (id)", "CREATE VIEW t00030_with_parent"} {
		if !strings.Contains(all, want) {
			t.Errorf("the schema lacks %q", want)
		}
	}
}
