package postgres

import (
	"strings"
	"testing"
	"time"

	"github.com/ptah-run/ptah/internal/pgtest"
)

func TestScriptOfOneTransaction(t *testing.T) {
	t.Parallel()
	p := &Plan{LockTimeout: 5 * time.Second, Destructive: true, Statements: []Statement{
		{SQL: "CREATE TABLE public.a (id integer)"},
		{SQL: "DROP TABLE public.b", Hazards: []Hazard{HazardDeletesData}},
	}}
	want := `-- ptah plan: 2 statement(s), destructive
SET lock_timeout = '5000ms';
SET check_function_bodies = false;
BEGIN;

-- 1/2
CREATE TABLE public.a (id integer);

-- 2/2 hazards: deletes-data
DROP TABLE public.b;
COMMIT;
`
	if got := p.Script(); got != want {
		t.Errorf("Script:\n%s\nwant:\n%s", got, want)
	}
}

func TestScriptOfSeveralTransactions(t *testing.T) {
	t.Parallel()
	p := &Plan{LockTimeout: time.Second, Statements: []Statement{
		{SQL: "ALTER TYPE public.mood ADD VALUE 'ok'"},
		{SQL: "CREATE TABLE public.a (m public.mood DEFAULT 'ok')"},
		{SQL: "CREATE TABLE public.b (id integer)"},
	},
		Phases:       []Phase{{Statements: 1, Reason: PhaseEnumLabels}, {Statements: 1, Locks: 3000, Reason: PhaseLockBudget}, {Statements: 1, Locks: 2000, Reason: PhaseLockBudget}},
		LockCapacity: LockCapacity{MaxLocksPerTransaction: 64, MaxConnections: 100},
	}
	want := `-- ptah plan: 3 statement(s) in 3 transactions
-- Statement 1 adds an enum label and commits first, on its own: PostgreSQL cannot use a label in the transaction that adds it.
-- The plan locks about 5000 objects; one transaction may hold 3200 on this server (half its lock table: max_locks_per_transaction 64 x (max_connections 100 + max_prepared_transactions 0)), so it commits in 2 parts.
-- If a transaction fails, it rolls back, and those before it stay committed.
SET lock_timeout = '1000ms';
SET check_function_bodies = false;

-- transaction 1/3: statement 1 (enum-labels)
BEGIN;

-- 1/3
ALTER TYPE public.mood ADD VALUE 'ok';
COMMIT;

-- transaction 2/3: statement 2 (lock-budget)
BEGIN;

-- 2/3
CREATE TABLE public.a (m public.mood DEFAULT 'ok');
COMMIT;

-- transaction 3/3: statement 3 (lock-budget)
BEGIN;

-- 3/3
CREATE TABLE public.b (id integer);
COMMIT;
`
	if got := p.Script(); got != want {
		t.Errorf("Script:\n%s\nwant:\n%s", got, want)
	}
}

// TestScriptRunsInItsTransactions: the script is SQL PostgreSQL runs as
// it stands, one transaction per phase. Sent whole (one implicit
// transaction but for its own BEGIN and COMMIT), a plan that adds a label
// and uses it only works because the label commits first.
func TestScriptRunsInItsTransactions(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDB(t)
	conn := dial(t, url)
	execSQL(t, conn, "CREATE TYPE public.mood AS ENUM ('sad')")
	p := &Plan{LockTimeout: time.Second, Statements: []Statement{
		{SQL: "ALTER TYPE public.mood ADD VALUE 'ok'"},
		{SQL: "CREATE TABLE public.a (m public.mood DEFAULT 'ok')"},
	}}
	if _, err := conn.Exec(testCtx(t), p.Script()); err != nil {
		t.Fatalf("running the script: %v\n%s", err, p.Script())
	}
	if got := strings.Join(relations(t, conn), ","); got != "a" {
		t.Errorf("tables after the script: %s", got)
	}
}

// TestScriptOfANoTransactionPhase: a phase run without a transaction is
// not wrapped in BEGIN and COMMIT, and the note says what that means.
func TestScriptOfANoTransactionPhase(t *testing.T) {
	t.Parallel()
	p := &Plan{LockTimeout: time.Second, Statements: []Statement{
		{SQL: "CREATE TABLE public.a (id integer)"},
		{SQL: "CREATE INDEX CONCURRENTLY a_id ON public.a (id)"},
	},
		Phases:  []Phase{{Statements: 1}, {Statements: 1, NoTransaction: true, History: &HistoryRow{Version: "2", Checksum: "sum2"}}},
		History: &PlanHistory{Resource: "PtahMigration/default/app"},
	}
	want := `-- ptah plan: 2 statement(s) in 2 phases
-- Statement 2 runs without a transaction, one at a time (PostgreSQL refuses some statements, such as CREATE INDEX CONCURRENTLY, in one): each commits on its own.
-- If a transaction fails, it rolls back, and what committed before it stays committed.
-- If a statement run without a transaction fails, the statements before it stay committed; if it is cut short, it may or may not have taken effect.
SET lock_timeout = '1000ms';
SET check_function_bodies = false;

-- phase 1/2: statement 1
BEGIN;

-- 1/2
CREATE TABLE public.a (id integer);
COMMIT;

-- phase 2/2: statement 2, without a transaction, version 2

-- 2/2
CREATE INDEX CONCURRENTLY a_id ON public.a (id);
`
	if got := p.Script(); got != want {
		t.Errorf("Script:\n%s\nwant:\n%s", got, want)
	}
}
