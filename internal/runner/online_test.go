package runner

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/ptah-run/ptah/internal/failpoint"
	"github.com/ptah-run/ptah/internal/postgres"
	api "github.com/ptah-run/ptah/pkg/api/v1alpha1"
)

const (
	onlineLive = `CREATE TABLE accounts (id int PRIMARY KEY, email text NOT NULL);
		INSERT INTO accounts SELECT g, 'user' || g || '@example.com' FROM generate_series(1, 2000) g;
		CREATE INDEX accounts_email_idx ON accounts (email);`
	// The index changes (lower(email)), and a column is added.
	onlineDeclared = `CREATE TABLE accounts (id int PRIMARY KEY, email text NOT NULL, org int);
		CREATE INDEX accounts_email_idx ON accounts (lower(email));`
)

// An online plan replaces a changed index beside the old one, without a
// transaction; a run stopped dead between the new index's build and the
// old one's drop is settled by observing, and what is left is planned
// afresh: the old plan never runs again, and the fresh one converges,
// dropping the half-finished replacement's leftover.
func TestAnOnlinePlanStoppedMidPhaseIsObservedNotRerun(t *testing.T) {
	t.Parallel()
	f := newFixture(t, onlineLive)
	res := f.resource(api.ApplyOnApproval, onlineDeclared)
	planned := f.run(res, PlanOnly)
	p := planned.Plan
	if p == nil {
		t.Fatal("no plan published")
	}
	var online []api.PlanPhase
	for _, ph := range p.Spec.Phases {
		if ph.NoTransaction {
			online = append(online, ph)
		}
	}
	if len(online) != 1 || online[0].Statements != 2 || online[0].Reason != "online" {
		t.Fatalf("phases %+v, want one online phase of two statements (build, drop)", p.Spec.Phases)
	}
	if !strings.Contains(p.Spec.Statements[len(p.Spec.Statements)-1].SQL, "RENAME TO accounts_email_idx") {
		t.Fatalf("the plan does not end with the new index's rename:\n%v", p.Spec.Statements)
	}
	f.approve(p)

	f.crashAt(failpoint.MidNoTxPhase, res, Apply)
	if !f.indexExists("accounts_email_idx__ptah_new") || !f.indexExists("accounts_email_idx") {
		t.Fatal("the stop was to leave both indexes: the new one built, the old one not yet dropped")
	}
	op := f.stored(res).ActiveOperation
	if op == nil || op.DispatchedAt == nil {
		t.Fatalf("after the crash the claim must carry the dispatch marker: %+v", op)
	}
	before := f.runs()

	got := f.run(res, Apply)
	st := got.Status
	if a := st.Applied; a == nil || a.OperationID != op.ID || a.Outcome != api.OutcomeObserved {
		t.Fatalf("the run must be settled by observation: applied %+v", st.Applied)
	}
	f.requireNoRerun(before, op.ID, p.UID)
	if st.Phase != api.PhaseAwaitingApproval || got.Plan == nil || got.Plan.UID == p.UID {
		t.Fatalf("want a fresh plan of what is left: phase %s (%s)", st.Phase, st.Message)
	}
	f.approve(got.Plan)
	if done := f.run(res, Apply); done.Status.Phase != api.PhaseInSync {
		t.Fatalf("the fresh plan, approved, converges: phase %s (%s)", done.Status.Phase, done.Status.Message)
	}
	if f.indexExists("accounts_email_idx__ptah_new") {
		t.Error("the half-finished replacement's index is left behind")
	}
	var def string
	if err := f.r.Target.QueryRow(context.Background(), "SELECT pg_get_indexdef('public.accounts_email_idx'::regclass)").Scan(&def); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(def, "lower(email)") {
		t.Errorf("accounts_email_idx is %s, want the declared lower(email)", def)
	}
	f.requireNoRerun(before, op.ID, p.UID)
}

// An online plan builds an index on a table the application writes in a
// phase of its own, committed on its own: while the rest of the plan
// waits for a lock elsewhere (a trigger on another table, behind a
// transaction writing there), the indexed table is free, and an insert
// goes through at once. An offline plan builds it in its transaction,
// which holds the index's SHARE lock for as long as the plan runs: the
// insert waits for the whole wait elsewhere (here, it times out). (That
// writers go on during the build itself is
// TestAnOnlineIndexBuildLetsWritersThrough.)
func TestAnOnlineIndexBuildIsNotHeldByThePlansTransaction(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		online      bool
		writerWaits bool
	}{{true, false}, {false, true}} {
		t.Run(map[bool]string{true: "online", false: "offline"}[tt.online], func(t *testing.T) {
			t.Parallel()
			live := `CREATE TABLE accounts (id int PRIMARY KEY, email text NOT NULL);
				INSERT INTO accounts SELECT g, 'user' || g FROM generate_series(1, 2000) g;
				CREATE TABLE audit (id int);`
			f := newFixture(t, live)
			res := f.resource(api.ApplyAlways, `CREATE TABLE accounts (id int PRIMARY KEY, email text NOT NULL);
				CREATE INDEX accounts_email_idx ON accounts (email);
				CREATE TABLE audit (id int);
				CREATE FUNCTION noop() RETURNS trigger LANGUAGE plpgsql AS $$BEGIN RETURN NEW; END$$;
				CREATE TRIGGER audit_noop BEFORE INSERT ON audit FOR EACH ROW EXECUTE FUNCTION noop();`)
			res.Schema.Spec.Policy.Online = &tt.online
			ctx := context.Background()

			// A transaction under way on audit holds ROW EXCLUSIVE there
			// until it commits: CREATE TRIGGER waits for it.
			open := pgxConnect(t, f.url)
			tx, err := open.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := tx.Exec(ctx, "INSERT INTO public.audit VALUES (1)"); err != nil {
				t.Fatal(err)
			}
			// The plan waits for it before CREATE TRIGGER, which its
			// progress reports (Step.Waiting): it checks pg_locks from
			// its transaction and stays out of the lock queue.
			var waitingMu sync.Mutex
			var waitingFor string
			f.r.Progress = func(st postgres.Step) {
				if st.Waiting != "" && strings.HasPrefix(st.Statement.SQL, "CREATE TRIGGER") {
					waitingMu.Lock()
					waitingFor = st.Waiting
					waitingMu.Unlock()
				}
			}
			done := make(chan Result, 1)
			go func() {
				out, err := f.r.Run(ctx, res, Apply)
				if err != nil {
					t.Errorf("run: %v", err)
				}
				done <- out
			}()
			watcher := pgxConnect(t, f.url)
			waitFor(t, "the trigger to wait for the open transaction", func() bool {
				waitingMu.Lock()
				defer waitingMu.Unlock()
				return waitingFor != ""
			})
			// A writer of accounts, with a second to get through.
			writer := pgxConnect(t, f.url)
			if _, err := writer.Exec(ctx, "SET statement_timeout = '1s'"); err != nil {
				t.Fatal(err)
			}
			_, err = writer.Exec(ctx, "INSERT INTO public.accounts VALUES (100002, 'writer')")
			if waited := err != nil && strings.Contains(err.Error(), "statement timeout"); waited != tt.writerWaits || (err != nil && !waited) {
				t.Errorf("online %v: the insert into accounts: %v; want it to wait %v", tt.online, err, tt.writerWaits)
			}
			if err := tx.Commit(ctx); err != nil {
				t.Fatal(err)
			}
			out := <-done
			if out.Status.Phase != api.PhaseInSync {
				t.Fatalf("the plan does not converge once the transaction ends: %s (%s)", out.Status.Phase, out.Status.Message)
			}
			var valid bool
			if err := watcher.QueryRow(ctx, "SELECT indisvalid FROM pg_index WHERE indexrelid = 'public.accounts_email_idx'::regclass").Scan(&valid); err != nil || !valid {
				t.Errorf("accounts_email_idx valid %v (%v), want a valid index", valid, err)
			}
		})
	}
}

func pgxConnect(t *testing.T, url string) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

// A PtahSchema's lock attempt and statement timeouts are published with
// its plan, and the executor runs the plan under them.
func TestSchemaPlanCarriesItsStatementLimits(t *testing.T) {
	t.Parallel()
	f := newFixture(t, "")
	res := f.resource(api.ApplyOnApproval, "CREATE TABLE t (id int);")
	res.Schema.Spec.Policy.LockAttemptTimeout, res.Schema.Spec.Policy.StatementTimeout = "250ms", "10m"
	p := f.run(res, PlanOnly).Plan
	if p == nil || p.Spec.LockAttemptTimeout != "250ms" || p.Spec.StatementTimeout != "10m" {
		t.Fatalf("published plan %+v, want the policy's lock attempt and statement timeouts", p)
	}
	if plan := ToPlan(p.Spec); plan.LockAttempt != 250*time.Millisecond || plan.StatementTimeout != 10*time.Minute {
		t.Errorf("the executed plan: lock attempt %s, statement timeout %s", plan.LockAttempt, plan.StatementTimeout)
	}
}
