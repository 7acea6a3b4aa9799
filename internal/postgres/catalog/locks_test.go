package catalog

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/ptah-run/ptah/internal/pgtest"
	"github.com/ptah-run/ptah/internal/postgres"
	"github.com/ptah-run/ptah/internal/schemagen"
)

const locksBase = `CREATE TABLE a (id bigint PRIMARY KEY, n integer, body text);
CREATE INDEX a_body ON a (body);
CREATE TABLE b (id bigint PRIMARY KEY, a_id bigint REFERENCES a, x text);
CREATE INDEX b_x ON b (x);`

// TestStatementLocks: each statement of a plan names what it locks: a new
// table its TOAST table too, an index its table, a foreign key both tables
// and the indexes its validation may open, a drop everything that goes
// with the table, a rewrite every index rebuilt.
func TestStatementLocks(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name          string
		live, desired string
		want          map[string][]string // a prefix of the statement: its locks
	}{
		{"from empty", "", locksBase + "\nCREATE VIEW v AS SELECT id, body FROM a;", map[string][]string{
			"CREATE TABLE public.a":                      {"public.a", "public.a (toast)", "public.a (toast index)"},
			"ALTER TABLE public.a ADD CONSTRAINT a_pkey": {"public.a", "public.a_pkey"},
			"CREATE INDEX a_body":                        {"public.a", "public.a_body"},
			"ALTER TABLE public.b ADD CONSTRAINT b_a_id_fkey": {"public.b", "public.a", "public.b_x", "public.b_pkey",
				"public.a_body", "public.a_pkey"},
			"CREATE VIEW public.v": {"public.v", "public.a"},
		}},
		{"a table dropped", locksBase, "CREATE TABLE a (id bigint PRIMARY KEY, n integer, body text); CREATE INDEX a_body ON a (body);", map[string][]string{
			"DROP TABLE public.b": {"public.b", "public.b (toast)", "public.b (toast index)", "public.b_x", "public.b_pkey", "public.a",
				"public.b (row type)", "public.b (array type)", "public.b (constraint b_pkey)", "public.b (constraint b_a_id_fkey)"},
		}},
		{"a column rewritten", locksBase, strings.Replace(locksBase, "n integer", "n bigint", 1), map[string][]string{
			"ALTER TABLE public.a ALTER COLUMN n TYPE bigint": {"public.a", "public.a (toast)", "public.a (toast index)", "public.a_body", "public.a_pkey"},
		}},
		{"a column added", locksBase, strings.Replace(locksBase, "n integer,", "n integer, m integer,", 1), map[string][]string{
			"ALTER TABLE public.a ADD COLUMN m": {"public.a"},
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			stmts, err := Diff(mustInspect(t, tt.live), mustInspect(t, tt.desired))
			if err != nil {
				t.Fatal(err)
			}
			for prefix, want := range tt.want {
				found := false
				for _, s := range stmts {
					if !strings.HasPrefix(s.SQL, prefix) {
						continue
					}
					found = true
					got := slices.Clone(s.LockKeys)
					slices.Sort(got)
					slices.Sort(want)
					if !slices.Equal(slices.Compact(got), want) {
						t.Errorf("%s locks %q, want %q", s.SQL, got, want)
					}
				}
				if !found {
					t.Errorf("no statement starts with %q", prefix)
				}
			}
		})
	}
}

// TestLockEstimateCoversWhatPostgreSQLTakes: a plan of many tables, run
// in one transaction, holds no more locks in the server's shared lock
// table than its phase's estimate says; nor far fewer, or the cut would
// waste transactions.
func TestLockEstimateCoversWhatPostgreSQLTakes(t *testing.T) {
	t.Parallel()
	ctx := loadCtx(t)
	var files []SourceFile
	for _, f := range schemagen.Default(60).Files() {
		files = append(files, SourceFile{Name: f.Name, SQL: f.SQL})
	}
	desired, err := LoadDesired(ctx, pgtest.BaseURL(t), files, []string{"public"})
	if err != nil {
		t.Fatal(err)
	}
	// Half of them exist: the plan adds the other half, and changes and
	// drops some of the first.
	live := mustInspect(t, schemagen.Default(30).SQL()+`
CREATE TABLE gone (id bigint PRIMARY KEY, body text);
CREATE INDEX gone_body ON gone (body);
ALTER TABLE t00001 ALTER COLUMN amount TYPE numeric(10,2);`)
	stmts, err := Diff(live, desired)
	if err != nil {
		t.Fatal(err)
	}
	phases := postgres.PlanPhases(stmts, 0)
	if len(phases) != 1 {
		t.Fatalf("phases = %+v, want one", phases)
	}

	url := pgtest.NewDB(t)
	pgtest.Exec(t, url, schemagen.Default(30).SQL()+`
CREATE TABLE gone (id bigint PRIMARY KEY, body text);
CREATE INDEX gone_body ON gone (body);
ALTER TABLE t00001 ALTER COLUMN amount TYPE numeric(10,2);`)
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(context.Background())
	if _, err := tx.Exec(ctx, "SET LOCAL check_function_bodies = false"); err != nil {
		t.Fatal(err)
	}
	for _, s := range stmts {
		if _, err := tx.Exec(ctx, s.SQL); err != nil {
			t.Fatalf("%s: %v", s.SQL, err)
		}
	}
	var held int
	if err := tx.QueryRow(ctx, `SELECT count(DISTINCT (locktype, database, relation, page, tuple, virtualxid,
		transactionid::text, classid, objid, objsubid)) FROM pg_locks WHERE pid = pg_backend_pid() AND NOT fastpath`).Scan(&held); err != nil {
		t.Fatal(err)
	}
	estimate := phases[0].Locks
	t.Logf("%d statements: estimated %d locks, PostgreSQL held %d", len(stmts), estimate, held)
	if estimate < held || estimate > 2*held {
		t.Errorf("estimated %d locks; PostgreSQL held %d in its shared table", estimate, held)
	}
}
