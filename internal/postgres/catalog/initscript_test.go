package catalog

import (
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/ptah-run/ptah/internal/pgtest"
	"github.com/ptah-run/ptah/internal/postgres"
)

// TestCreationScriptRebuildsTheSource: the creation script of a database
// (two schemas whose objects depend on each other's, partitions, views
// over views, functions, enums, domains, sequences, identity columns,
// foreign keys, comments), loaded file by file in its order into an empty
// database, builds a database the plan finds equal to the source; and each
// file holds one schema's objects of one kind.
func TestCreationScriptRebuildsTheSource(t *testing.T) {
	t.Parallel()
	ctx := loadCtx(t)
	source, err := os.ReadFile("testdata/initscript_source.sql")
	if err != nil {
		t.Fatal(err)
	}
	schemas := []string{"billing", "public"}
	src := pgtest.NewDB(t)
	pgtest.Exec(t, src, string(source))
	conn, err := postgres.Connect(ctx, src)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	live, err := Inspect(ctx, conn, schemas)
	if err != nil {
		t.Fatal(err)
	}
	empty, err := LoadDesired(ctx, pgtest.BaseURL(t), nil, schemas)
	if err != nil {
		t.Fatal(err)
	}
	files, err := CreationScript(empty, live)
	if err != nil {
		t.Fatal(err)
	}
	var loaded []SourceFile
	seen := map[string]bool{}
	for i, f := range files {
		name := fmt.Sprintf("%03d_%s_%s.sql", (i+1)*10, f.Schema, f.Kind)
		t.Logf("%s:\n%s", name, f.SQL())
		if seen[f.Schema+"/"+f.Kind] {
			t.Errorf("%s: a second file of %s's %s, where the files' dependencies leave no cycle", name, f.Schema, f.Kind)
		}
		seen[f.Schema+"/"+f.Kind] = true
		for _, s := range f.Statements {
			if f.Kind == "schema" && !strings.Contains(s, "SCHEMA") {
				t.Errorf("%s holds %q", name, s)
			}
		}
		loaded = append(loaded, SourceFile{Name: name, SQL: f.SQL()})
	}
	for _, want := range []string{"billing/schema", "public/types", "billing/types", "public/tables", "billing/tables", "billing/views", "public/views", "billing/functions", "public/extensions"} {
		if !seen[want] {
			t.Errorf("no file of %s", want)
		}
	}
	rebuilt, err := LoadDesired(ctx, pgtest.BaseURL(t), loaded, schemas)
	if err != nil {
		t.Fatal(err)
	}
	stmts, err := Diff(live, rebuilt)
	if err != nil {
		t.Fatal(err)
	}
	if len(stmts) > 0 {
		t.Errorf("the source and the database its script builds differ: %q", sqls(stmts))
	}
}

// TestCreationScriptStartsAFileAgainOnlyForACycle: public's tables need a
// function of billing that takes a row of another public table, so
// public's tables cannot be one file: the script starts their file again
// after billing's functions, and still loads.
func TestCreationScriptStartsAFileAgainOnlyForACycle(t *testing.T) {
	t.Parallel()
	ctx := loadCtx(t)
	schemas := []string{"billing", "public"}
	src := pgtest.NewDB(t)
	pgtest.Exec(t, src, `
CREATE SCHEMA billing;
CREATE TABLE public.rates (id int PRIMARY KEY, pct numeric NOT NULL);
CREATE FUNCTION billing.rate_pct(r public.rates) RETURNS numeric LANGUAGE sql IMMUTABLE RETURN r.pct;
CREATE TABLE public.prices (id int, base numeric, pct numeric DEFAULT billing.rate_pct(ROW(0, 0)::public.rates));
`)
	conn, err := postgres.Connect(ctx, src)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	live, err := Inspect(ctx, conn, schemas)
	if err != nil {
		t.Fatal(err)
	}
	empty, err := LoadDesired(ctx, pgtest.BaseURL(t), nil, schemas)
	if err != nil {
		t.Fatal(err)
	}
	files, err := CreationScript(empty, live)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	var loaded []SourceFile
	for i, f := range files {
		got = append(got, f.Schema+"/"+f.Kind)
		loaded = append(loaded, SourceFile{Name: fmt.Sprintf("%03d.sql", i), SQL: f.SQL()})
	}
	if want := "billing/schema public/tables billing/functions public/tables public/constraints"; strings.Join(got, " ") != want {
		t.Errorf("files %s, want %s", strings.Join(got, " "), want)
	}
	rebuilt, err := LoadDesired(ctx, pgtest.BaseURL(t), loaded, schemas)
	if err != nil {
		t.Fatal(err)
	}
	if stmts, err := Diff(live, rebuilt); err != nil || len(stmts) > 0 {
		t.Errorf("the source and the database its script builds differ: %q, %v", sqls(stmts), err)
	}
}
