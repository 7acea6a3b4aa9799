package cli

import (
	"context"
	"os"
	"strings"
	"testing"

	"github.com/ptah-run/ptah/internal/pgtest"
	"github.com/ptah-run/ptah/internal/postgres"
	"github.com/ptah-run/ptah/internal/postgres/catalog"
)

// TestInitWritesNothingUnlessTheProofIsEmpty: ptah init keeps its files
// only when a plan of them against the source database has no changes; a
// plan with one leaves the directory as it was and is ptah's failure
// (exit 1), shown with the change. The plan is asked of the files init
// read back through the ptah.yaml it wrote, for the schemas it names.
func TestInitWritesNothingUnlessTheProofIsEmpty(t *testing.T) {
	src := pgtest.NewDB(t)
	pgtest.Exec(t, src, "CREATE TABLE notes (id int PRIMARY KEY, body text)")
	dir := t.TempDir()
	t.Chdir(dir)
	t.Setenv("PTAHTEST_INIT_URL", src)
	for _, k := range []string{"PTAH_FILE", "PTAH_OUTPUT", "PTAH_DEV_URL", "PTAH_CONFIG", "PTAH_FROM"} {
		t.Setenv(k, "")
	}
	changed := func(context.Context, catalog.PlanRequest) (*postgres.Plan, error) {
		return &postgres.Plan{Statements: []postgres.Statement{{SQL: "ALTER TABLE public.notes ADD COLUMN lost text"}}}, nil
	}
	res := runPtah(t, changed, "init", "--from-env", "PTAHTEST_INIT_URL")
	if res.code != ExitInternal {
		t.Fatalf("init with a proof that has changes: exit %d, want %d\n%s", res.code, ExitInternal, res.stderr)
	}
	for _, want := range []string{"do not rebuild the database they were read from", "ADD COLUMN lost", "nothing was written"} {
		if !strings.Contains(res.stderr, want) {
			t.Errorf("stderr lacks %q:\n%s", want, res.stderr)
		}
	}
	if len(res.reqs) != 1 {
		t.Fatalf("init asked for %d plans, want 1", len(res.reqs))
	}
	req := res.reqs[0]
	if req.TargetURL != src || strings.Join(req.Schemas, ",") != "public" || len(req.Files) == 0 ||
		!strings.Contains(req.Files[0].SQL, "CREATE TABLE public.notes") {
		t.Errorf("the proof planned %+v", req)
	}
	if entries, _ := os.ReadDir(dir); len(entries) > 0 {
		t.Errorf("init left %d entries behind, the first %s", len(entries), entries[0].Name())
	}

	res = runPtah(t, func(context.Context, catalog.PlanRequest) (*postgres.Plan, error) { return &postgres.Plan{}, nil },
		"init", "--from-env", "PTAHTEST_INIT_URL")
	if res.code != ExitOK {
		t.Fatalf("init with an empty proof: exit %d\n%s", res.code, res.stderr)
	}
	if _, err := os.Stat("schema"); err != nil {
		t.Errorf("init with an empty proof wrote no schema/: %v", err)
	}
}
