package runner

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/ptah-run/ptah/internal/failpoint"
	"github.com/ptah-run/ptah/internal/postgres"
	api "github.com/ptah-run/ptah/pkg/api/v1alpha1"
)

// Crash and concurrency tests of the PtahMigration family, end to end: a
// real database, the pgstore, Runner.Run, and for crashes a child process
// that dies at a failpoint (crash_test.go). Every file writes rows to
// public.log, one per tag it names, so that a statement run a second time
// shows as a duplicate; the run journal shows the same from ptah's side.
//
// The seed, guarantee 3, for PtahMigration: "A dispatched Apply is never
// re-run"; its durable evidence is "status.unresolvedRun, which names the
// attempt, its Job, its plan and the database", "cleared by a person,
// after establishing what the run did", and meanwhile "the resource is
// Blocked; nothing runs until the record is cleared". Why: "a file that
// committed part of itself cannot be re-run, and no reading tells the
// operator which part committed".

// crashMig is a migration of files on a database of its own, with the
// log table its files write to, and a runner of the test's.
type crashMig struct {
	*migFixture
	r *Runner
}

func newCrashMig(t *testing.T, policy api.ApplyPolicy, files map[string]string) *crashMig {
	t.Helper()
	f := newMigFixture(t, files)
	f.res.Migration.Spec.Policy.Apply = policy
	if _, err := f.conn.Exec(f.ctx, "CREATE TABLE public.log (n serial PRIMARY KEY, tag text NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	return &crashMig{migFixture: f, r: f.runner()}
}

// logs is one statement per tag, each writing its tag to public.log.
func logs(tags ...string) string {
	var b strings.Builder
	for _, tag := range tags {
		fmt.Fprintf(&b, "INSERT INTO public.log (tag) VALUES ('%s');\n", tag)
	}
	return b.String()
}

const noTx = "-- ptah:no-transaction\n"

// logged fails unless public.log holds tags, in this order, each once:
// each file's statements ran in order, and none a second time.
func (c *crashMig) logged(tags ...string) {
	c.t.Helper()
	rows, err := c.conn.Query(c.ctx, "SELECT tag FROM public.log ORDER BY n")
	if err != nil {
		c.t.Fatal(err)
	}
	var got []string
	for rows.Next() {
		var tag string
		if err := rows.Scan(&tag); err != nil {
			c.t.Fatal(err)
		}
		got = append(got, tag)
	}
	if err := rows.Err(); err != nil {
		c.t.Fatal(err)
	}
	if !slices.Equal(got, tags) {
		c.t.Fatalf("public.log holds %q; want %q, each once", got, tags)
	}
}

// stored is the migration's status as the store holds it.
func (c *crashMig) stored() api.PtahMigrationStatus {
	c.t.Helper()
	_, st, err := c.r.migrationStatus(c.ctx, c.res)
	if err != nil {
		c.t.Fatal(err)
	}
	return st
}

// crash runs the migration in Apply mode in a child that dies at point,
// and returns the operation it dispatched, which the stored status names.
func (c *crashMig) crash(point string) api.Operation {
	c.t.Helper()
	crashChildAt(c.t, c.url, c.conn, point, c.res, Apply)
	return c.dispatchedClaim()
}

// dispatchedClaim is the stored claim, which must carry the dispatch
// marker.
func (c *crashMig) dispatchedClaim() api.Operation {
	c.t.Helper()
	st := c.stored()
	op := st.ActiveOperation
	if op == nil || op.DispatchedAt == nil || st.UnresolvedRun != nil {
		c.t.Fatalf("the dead run's claim must be stored with its dispatch marker, and nothing else: %+v", st)
	}
	return *op
}

// journal is the journal of operation op, nil when it has none.
func (c *crashMig) journal(op string) *postgres.Run {
	c.t.Helper()
	run, err := postgres.ReadRun(c.ctx, c.conn, op)
	if errors.Is(err, postgres.ErrRunNotFound) {
		return nil
	}
	if err != nil {
		c.t.Fatal(err)
	}
	return run
}

// runs are the operations the journal holds for the migration, oldest
// first.
func (c *crashMig) runs() []string {
	c.t.Helper()
	runs, err := postgres.ListRuns(c.ctx, c.conn, c.res.storeResource())
	if err != nil {
		c.t.Fatal(err)
	}
	out := []string{}
	for _, r := range runs {
		out = append(out, r.OperationID)
	}
	return out
}

// stepVersions are the versions of run's steps, with how each ended:
// "0001+" committed, "0001?" started and not committed.
func stepVersions(run *postgres.Run) []string {
	out := []string{}
	if run == nil {
		return out
	}
	for _, s := range run.Steps {
		mark := "?"
		if s.CommittedAt != nil {
			mark = "+"
		}
		out = append(out, s.Version+mark)
	}
	return out
}

// committedOnce fails if the journal shows a statement of a version
// committed by more than one run.
func (c *crashMig) committedOnce() {
	c.t.Helper()
	rows, err := c.conn.Query(c.ctx, `SELECT s.version, s.statement, count(DISTINCT s.operation_id)
		FROM ptah.run_steps s JOIN ptah.runs r USING (operation_id)
		WHERE r.resource = $1 AND s.committed_at IS NOT NULL
		GROUP BY 1, 2 HAVING count(DISTINCT s.operation_id) > 1`, c.res.storeResource())
	if err != nil {
		c.t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var version, statement string
		var n int
		if err := rows.Scan(&version, &statement, &n); err != nil {
			c.t.Fatal(err)
		}
		c.t.Errorf("statement %q of version %s committed in %d runs", statement, version, n)
	}
	if err := rows.Err(); err != nil {
		c.t.Fatal(err)
	}
}

// requireHistory fails unless the history is want ("0001:run", ...).
func (c *crashMig) requireHistory(want ...string) {
	c.t.Helper()
	if got := historyVersions(c.history()); !slices.Equal(got, want) {
		c.t.Fatalf("history %v; want %v", got, want)
	}
}

// ranBy fails unless the history rows of versions record that operation
// op ran them.
func (c *crashMig) ranBy(op string, versions ...string) {
	c.t.Helper()
	for _, row := range c.history() {
		if slices.Contains(versions, row.Version) && (row.How != postgres.HowRun || row.OperationID != op) {
			c.t.Fatalf("version %s must be recorded as run by operation %s: %+v", row.Version, op, row)
		}
	}
}

// lease is the lease row of the migration's database, nil when none.
func (c *crashMig) lease(digest string) *postgres.Lease {
	c.t.Helper()
	l, err := postgres.LeaseHolder(c.ctx, c.conn, digest)
	if err != nil {
		c.t.Fatal(err)
	}
	return l
}

// unresolved runs an apply pass, twice, after the run op died: each
// records it as unresolved, reported by the dispatch marker (the run never
// reported how it ended), with outcome (Partial when the journal shows a
// statement of it committed, else Unknown) and the writer session the
// journal names, Blocks, and dispatches nothing; the first gives the dead
// run's lease back, since its writer can no longer write.
func (c *crashMig) unresolved(op api.Operation, outcome string) api.UnresolvedRun {
	c.t.Helper()
	var u api.UnresolvedRun
	for range 2 {
		got := c.run(c.r, Apply)
		st := got.Migration.Status
		if st.Phase != api.PhaseBlocked || st.Reason != api.ReasonUnresolvedRun || len(got.Dispatched) != 0 || st.ActiveOperation != nil ||
			st.UnresolvedRun == nil || !strings.Contains(st.Message, op.ID) {
			c.t.Fatalf("after the run %s died: phase %s/%s (%s), dispatched %v, claim %+v, unresolved %+v; "+
				"want Blocked/UnresolvedRun naming it, nothing dispatched", op.ID, st.Phase, st.Reason, st.Message, got.Dispatched,
				st.ActiveOperation, st.UnresolvedRun)
		}
		u = *st.UnresolvedRun
		if u.OperationID != op.ID || u.Plan != op.Plan || u.Outcome != outcome || u.ReportedBy != api.ReportedByDispatch ||
			u.CoordinationDigest != op.CoordinationDigest || !u.Deadline.Time.Equal(op.Deadline.Time) || u.TargetIdentityDigest != c.identity ||
			u.Writer == nil || u.Writer.PID == 0 {
			c.t.Fatalf("unresolved run %+v; want operation %s of plan %s on database %s, outcome %s, reported by Dispatch, "+
				"naming the writer session", u, op.ID, op.Plan.Name, c.identity, outcome)
		}
		if st.OwedRelease != nil || c.lease(op.CoordinationDigest) != nil {
			c.t.Fatalf("the dead run's lease must be given back: owed %+v, lease %+v", st.OwedRelease, c.lease(op.CoordinationDigest))
		}
	}
	return u
}

// evidence reads the evidence of the unresolved run op.
func (c *crashMig) evidence(op string) *Evidence {
	c.t.Helper()
	ev, err := c.r.Evidence(c.ctx, c.res)
	if err != nil {
		c.t.Fatal(err)
	}
	if ev.Unresolved == nil || ev.Unresolved.OperationID != op || ev.Plan == nil || ev.WriterMayStillWrite {
		c.t.Fatalf("evidence of %s: %+v", op, ev)
	}
	return ev
}

// versionEvidence is what ev says of each version of the plan: "0001 2/2
// recorded" (statements started/committed, and whether the history holds
// it), with " in flight: SQL" for each statement in flight.
func versionEvidence(ev *Evidence) []string {
	var out []string
	for _, v := range ev.Versions {
		s := fmt.Sprintf("%s %d/%d", v.Version, v.Started, v.Committed)
		if v.Recorded {
			s += " recorded"
		}
		for _, f := range v.InFlight {
			s += " in flight: " + strings.TrimSpace(f.Statement)
		}
		out = append(out, s)
	}
	return out
}

// resolve acknowledges the unresolved run op, marking versions applied.
func (c *crashMig) resolve(op string, marks ...string) Acknowledged {
	c.t.Helper()
	ack, err := c.r.Acknowledge(c.ctx, c.res, AcknowledgeRequest{OperationID: op, By: "ana", Reason: "checked the database",
		MarkApplied: marks})
	if err != nil {
		c.t.Fatalf("acknowledging %s: %v", op, err)
	}
	return ack
}

// finish runs an apply pass after the acknowledgment ack of the dead run
// op: it settles op (ResolvedRun, the acknowledgment consumed), and runs
// what remains in one new operation, which succeeds and verifies. It
// returns that operation.
func (c *crashMig) finish(op string, ack Acknowledged) string {
	c.t.Helper()
	got := c.run(c.r, Apply)
	st := got.Migration.Status
	if st.Phase != api.PhaseInSync || len(got.Dispatched) != 1 || got.Dispatched[0] == op || st.UnresolvedRun != nil ||
		st.LastRun == nil || st.LastRun.OperationID != got.Dispatched[0] || st.LastRun.Outcome != api.OutcomeSucceeded {
		c.t.Fatalf("after the acknowledgment: phase %s/%s (%s), dispatched %v, unresolved %+v, last run %+v; "+
			"want one new operation to run the rest and reach InSync", st.Phase, st.Reason, st.Message, got.Dispatched, st.UnresolvedRun, st.LastRun)
	}
	if r := st.ResolvedRun; r == nil || r.OperationID != op || r.Acknowledgment.UID != ack.UID || r.By != "ana" {
		c.t.Fatalf("the status must record that ana resolved %s with %s: %+v", op, ack.Name, st.ResolvedRun)
	}
	if ds := c.decision(c.r, ack.UID); ds.Consumed == nil || ds.Consumed.OperationID != op {
		c.t.Fatalf("the acknowledgment must be consumed for %s: %+v", op, ds)
	}
	if l := c.lease(MigrationCoordinationDigest(c.res.Migration.Spec, c.identity)); l != nil {
		c.t.Fatalf("the lease must be given back: %+v", l)
	}
	return got.Dispatched[0]
}

// Kill between files: "Once an Apply Job may exist, the operator does not
// create another one under a fresh name. What that Job did becomes a
// question for the database." The run dies after its first file committed
// (failpoint between-phases): that file and its history row are in the
// database, the rest is not. The dispatch marker is durable and the run
// unfinished in the journal, so the next pass records it unresolved
// (Unknown, reported by Dispatch), blocks, and runs nothing again. The
// history already holds the committed file, so the person's
// acknowledgment marks nothing (and may not mark it); the pass after it
// runs the remaining files once, under a new operation.
func TestMigrationCrashBetweenFiles(t *testing.T) {
	t.Parallel()
	c := newCrashMig(t, api.ApplyAlways, map[string]string{
		"0001_a.sql": logs("0001") + "CREATE TABLE public.a (id int);\n",
		"0002_b.sql": logs("0002") + "CREATE TABLE public.b (id int);\n",
		"0003_c.sql": logs("0003"),
		"0004_d.sql": logs("0004"),
	})
	op := c.crash(failpoint.BetweenPhases)
	c.requireHistory("0001:run")
	c.logged("0001")
	crashed := c.journal(op.ID)
	if crashed == nil || !crashed.Unfinished() || !slices.Equal(stepVersions(crashed), []string{"0001+", "0001+"}) {
		t.Fatalf("the dead run's journal must be unfinished with the first file committed: %+v (steps %v)", crashed, stepVersions(crashed))
	}

	c.unresolved(op, api.OutcomePartial)
	c.logged("0001")
	ev := c.evidence(op.ID)
	if got, want := versionEvidence(ev), []string{"0001 2/2 recorded", "0002 0/0", "0003 0/0", "0004 0/0"}; !slices.Equal(got, want) {
		t.Fatalf("evidence %q; want %q", got, want)
	}
	if _, err := c.r.Acknowledge(c.ctx, c.res, AcknowledgeRequest{OperationID: op.ID, By: "ana", MarkApplied: []string{"0001"}}); !errors.Is(err, ErrNotMarkable) {
		t.Fatalf("marking a version the history holds: %v; want ErrNotMarkable", err)
	}

	ran := c.finish(op.ID, c.resolve(op.ID))
	c.requireHistory("0001:run", "0002:run", "0003:run", "0004:run")
	c.ranBy(op.ID, "0001")
	c.ranBy(ran, "0002", "0003", "0004")
	c.logged("0001", "0002", "0003", "0004")
	c.committedOnce()
	if got := c.journal(op.ID); !reflect.DeepEqual(got, crashed) {
		t.Fatalf("the dead run's journal changed: %+v, was %+v", got, crashed)
	}
}

// Kill inside a transactional file: the run dies after the file's first
// statement ran in its transaction (failpoint mid-plan), after a file run
// without a transaction committed. Nothing of the file it died in
// committed (its transaction, and its journal steps with it, rolled
// back); the file before it did, with its history row. The run is
// unresolved until a person acknowledges it, and then the file it died
// in runs once, whole, with the rest.
func TestMigrationCrashInsideATransactionalFile(t *testing.T) {
	t.Parallel()
	c := newCrashMig(t, api.ApplyAlways, map[string]string{
		"0001_a.sql": noTx + logs("0001") + "CREATE INDEX CONCURRENTLY log_tag ON public.log (tag);\n",
		"0002_b.sql": logs("0002") + "CREATE TABLE public.b (id int);\n" + logs("0002-end"),
		"0003_c.sql": logs("0003"),
	})
	op := c.crash(failpoint.MidPlan)
	c.requireHistory("0001:run")
	c.logged("0001")
	crashed := c.journal(op.ID)
	if c.exists("public.b") || crashed == nil || !crashed.Unfinished() || !slices.Equal(stepVersions(crashed), []string{"0001+", "0001+"}) {
		t.Fatalf("nothing of 0002 may have committed: table b %v, journal %+v (steps %v)", c.exists("public.b"), crashed, stepVersions(crashed))
	}

	c.unresolved(op, api.OutcomePartial)
	if got, want := versionEvidence(c.evidence(op.ID)), []string{"0001 2/2 recorded", "0002 0/0", "0003 0/0"}; !slices.Equal(got, want) {
		t.Fatalf("evidence %q; want %q", got, want)
	}
	ran := c.finish(op.ID, c.resolve(op.ID))
	c.requireHistory("0001:run", "0002:run", "0003:run")
	c.ranBy(op.ID, "0001")
	c.ranBy(ran, "0002", "0003")
	c.logged("0001", "0002", "0002-end", "0003")
	c.committedOnce()
	if !c.exists("public.b") || !c.exists("public.log_tag") {
		t.Fatal("the files' objects must exist")
	}
	if got := c.journal(op.ID); !reflect.DeepEqual(got, crashed) {
		t.Fatalf("the dead run's journal changed: %+v, was %+v", got, crashed)
	}
}

// Kill inside a file run without a transaction, after its first
// statement committed and the start of its second was journaled (failpoint
// mid-no-tx-phase): "a file that committed part of itself cannot be
// re-run, and no reading tells the operator which part committed". The
// run is unresolved, and its evidence shows the statement in flight. The
// person establishes that it did not take effect, completes the file by
// hand, and acknowledges the run marking the file's version applied: the
// history records it marked, with the checksum the plan ran, and the pass
// after runs the remaining files once.
func TestMigrationCrashInsideANoTransactionFile(t *testing.T) {
	t.Parallel()
	c := newCrashMig(t, api.ApplyAlways, map[string]string{
		"0001_a.sql": logs("0001"),
		"0002_b.sql": noTx + logs("0002-1", "0002-2") + "CREATE INDEX CONCURRENTLY log_tag ON public.log (tag);\n",
		"0003_c.sql": logs("0003"),
		"0004_d.sql": logs("0004"),
	})
	op := c.crash(failpoint.MidNoTxPhase)
	c.requireHistory("0001:run")
	c.logged("0001", "0002-1")
	crashed := c.journal(op.ID)
	if crashed == nil || !crashed.Unfinished() || !slices.Equal(stepVersions(crashed), []string{"0001+", "0002+", "0002?"}) {
		t.Fatalf("the journal must show 0002's first statement committed and its second started: %+v (steps %v)", crashed, stepVersions(crashed))
	}

	c.unresolved(op, api.OutcomePartial)
	ev := c.evidence(op.ID)
	want := []string{"0001 1/1 recorded", "0002 2/1 in flight: INSERT INTO public.log (tag) VALUES ('0002-2')", "0003 0/0", "0004 0/0"}
	if got := versionEvidence(ev); !slices.Equal(got, want) {
		t.Fatalf("evidence %q; want %q", got, want)
	}
	// Nothing runs until the person has acted: the unresolved run holds.
	c.unresolved(op, api.OutcomePartial)
	c.logged("0001", "0002-1")

	// The person: the statement in flight never took effect (no 0002-2
	// row); the file is completed by hand from there.
	file := c.file("0002")
	for _, s := range file.Statements[ev.Versions[1].Committed:] {
		if _, err := c.conn.Exec(c.ctx, s.SQL); err != nil {
			t.Fatalf("completing 0002 by hand: %v", err)
		}
	}
	ack := c.resolve(op.ID, "0002")
	ran := c.finish(op.ID, ack)
	c.requireHistory("0001:run", "0002:marked", "0003:run", "0004:run")
	c.ranBy(op.ID, "0001")
	c.ranBy(ran, "0003", "0004")
	c.logged("0001", "0002-1", "0002-2", "0003", "0004")
	c.committedOnce()
	planned := ev.Plan.Spec.Versions[1]
	for _, row := range c.history() {
		if row.Version == "0002" && (row.Checksum != planned.Checksum || row.OperationID != op.ID || row.AppliedBy != "ana") {
			t.Fatalf("0002 must be recorded as marked by ana for %s with the plan's checksum %s: %+v", op.ID, planned.Checksum, row)
		}
	}
	if !c.exists("public.log_tag") {
		t.Fatal("the index the person created is gone")
	}
	if got := c.journal(op.ID); !reflect.DeepEqual(got, crashed) {
		t.Fatalf("the dead run's journal changed: %+v, was %+v", got, crashed)
	}
}

// Kill while the writer waits on a lock: "A missing Job and an expired
// Lease are each insufficient proof that the old process stopped." ptah
// is killed while its writer session waits for a table lock another
// transaction holds, in the second file; the session outlives the
// process. While it may still write, the migration is Blocked
// (RunMayStillWrite) holding the claim, the lease stays with the dead
// process's operation, and there is nothing yet for a person to settle.
// Once the lock is granted the orphan cannot commit, and its session
// ends: the killed writer ran nothing of that file. The run is then
// unresolved, and after the acknowledgment the rest runs once.
func TestMigrationCrashWhileTheWriterWaitsOnALock(t *testing.T) {
	t.Parallel()
	c := newCrashMig(t, api.ApplyAlways, map[string]string{
		"0001_a.sql": logs("0001"),
		"0002_b.sql": logs("0002") + "ALTER TABLE public.users ADD COLUMN note text;\n",
		"0003_c.sql": logs("0003"),
	})
	c.res.Migration.Spec.Policy.LockTimeout = "5m"        // the orphaned writer keeps waiting,
	c.res.Migration.Spec.Policy.LockAttemptTimeout = "5m" // in one attempt
	if _, err := c.conn.Exec(c.ctx, "CREATE TABLE public.users (id int)"); err != nil {
		t.Fatal(err)
	}
	locker, writerPID := killWhileWriterWaitsOn(t, c.url, c.conn, "public.users", c.res)
	op := c.dispatchedClaim()
	for range 2 {
		got := c.run(c.r, Apply)
		st := got.Migration.Status
		if st.Phase != api.PhaseBlocked || st.Reason != api.ReasonRunMayStillWrite || len(got.Dispatched) != 0 ||
			st.ActiveOperation == nil || st.ActiveOperation.ID != op.ID || st.UnresolvedRun != nil {
			t.Fatalf("while the writer (pid %d) may run: %s/%s (%s), dispatched %v, unresolved %+v; want Blocked/RunMayStillWrite holding %s",
				writerPID, st.Phase, st.Reason, st.Message, got.Dispatched, st.UnresolvedRun, op.ID)
		}
		if l := c.lease(op.CoordinationDigest); l == nil || l.Holder != op.ID {
			t.Fatalf("the lease must still name operation %s: %+v", op.ID, l)
		}
	}
	// Nor is there anything yet for a person to settle.
	_, err := c.r.Acknowledge(c.ctx, c.res, AcknowledgeRequest{OperationID: op.ID, By: "ana"})
	if !errors.Is(err, ErrNothingUnresolved) && !errors.Is(err, ErrWriterMayStillWrite) {
		t.Fatalf("acknowledging a run whose writer may still write: %v; want it refused", err)
	}
	c.logged("0001")

	if err := locker.Commit(c.ctx); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the orphaned writer's session to end", func() bool {
		var gone bool
		err := c.conn.QueryRow(c.ctx, "SELECT NOT EXISTS (SELECT FROM pg_stat_activity WHERE pid = $1)", writerPID).Scan(&gone)
		return err == nil && gone
	})
	c.unresolved(op, api.OutcomePartial)
	c.requireHistory("0001:run")
	c.logged("0001")
	crashed := c.journal(op.ID)
	if c.hasColumn("users", "note") || !slices.Equal(stepVersions(crashed), []string{"0001+"}) {
		t.Fatalf("the killed writer ran something of 0002: column note %v, journal steps %v", c.hasColumn("users", "note"), stepVersions(crashed))
	}
	if got, want := versionEvidence(c.evidence(op.ID)), []string{"0001 1/1 recorded", "0002 0/0", "0003 0/0"}; !slices.Equal(got, want) {
		t.Fatalf("evidence %q; want %q", got, want)
	}

	ran := c.finish(op.ID, c.resolve(op.ID))
	c.requireHistory("0001:run", "0002:run", "0003:run")
	c.ranBy(op.ID, "0001")
	c.ranBy(ran, "0002", "0003")
	c.logged("0001", "0002", "0003")
	c.committedOnce()
	if !c.hasColumn("users", "note") {
		t.Fatal("0002 must have added users.note")
	}
}

func (c *crashMig) hasColumn(table, column string) bool {
	c.t.Helper()
	var ok bool
	err := c.conn.QueryRow(c.ctx, `SELECT EXISTS (SELECT FROM information_schema.columns
		WHERE table_schema = 'public' AND table_name = $1 AND column_name = $2)`, table, column).Scan(&ok)
	if err != nil {
		c.t.Fatal(err)
	}
	return ok
}

// Crash right after the dispatch marker (failpoint after-dispatch-marker):
// the approval is "Spent by consumeMigrationApproval at the dispatch
// boundary", and the marker, the spent approval and the run's journal row
// commit together, before any statement. So after the crash all three
// stand and nothing ran. The next pass records the run unresolved (by
// Dispatch) and runs nothing. Once a person acknowledges it, the pass
// publishes a new plan of the same versions, which needs an approval of
// its own: "an approval for the previous one authorizes nothing", least
// of all a spent one. Approved, it runs each file once.
func TestMigrationCrashAfterTheDispatchMarker(t *testing.T) {
	t.Parallel()
	c := newCrashMig(t, api.ApplyOnApproval, map[string]string{
		"0001_a.sql": logs("0001"),
		"0002_b.sql": noTx + logs("0002"),
		"0003_c.sql": logs("0003"),
	})
	planned := c.run(c.r, PlanOnly).Migration.Plan
	approval := c.approve(c.r, planned)
	op := c.crash(failpoint.AfterDispatch)
	if op.Plan.UID != planned.UID || op.Approval == nil || op.Approval.UID != approval.UID {
		t.Fatalf("the claim must name the approved plan %s and approval %s: %+v", planned.UID, approval.UID, op)
	}
	if ds := c.decision(c.r, approval.UID); ds.Consumed == nil || ds.Consumed.OperationID != op.ID || ds.Stale {
		t.Fatalf("the approval must be consumed by %s together with the marker: %+v", op.ID, ds)
	}
	crashed := c.journal(op.ID)
	if crashed == nil || !crashed.Unfinished() || crashed.PlanUID != planned.UID || len(crashed.Steps) != 0 {
		t.Fatalf("the run's journal row must be committed with the marker, with no step: %+v", crashed)
	}
	c.requireHistory()
	c.logged()

	c.unresolved(op, api.OutcomeUnknown)
	if got, want := versionEvidence(c.evidence(op.ID)), []string{"0001 0/0", "0002 0/0", "0003 0/0"}; !slices.Equal(got, want) {
		t.Fatalf("evidence %q; want %q", got, want)
	}
	ack := c.resolve(op.ID)
	got := c.run(c.r, Apply)
	st := got.Migration.Status
	if st.Phase != api.PhaseAwaitingApproval || len(got.Dispatched) != 0 || got.Migration.Plan == nil || got.Migration.Plan.UID == planned.UID ||
		st.UnresolvedRun != nil || st.ResolvedRun == nil || st.ResolvedRun.OperationID != op.ID {
		t.Fatalf("after the acknowledgment: phase %s/%s (%s), dispatched %v, plan %+v, resolved %+v; "+
			"want a new plan (not %s) awaiting its own approval", st.Phase, st.Reason, st.Message, got.Dispatched, got.Migration.Plan,
			st.ResolvedRun, planned.UID)
	}
	c.logged()
	if ds := c.decision(c.r, approval.UID); ds.Consumed == nil || ds.Consumed.OperationID != op.ID {
		t.Fatalf("the spent approval must stay consumed by %s: %+v", op.ID, ds)
	}

	again := c.approve(c.r, got.Migration.Plan)
	ran := c.finish(op.ID, ack)
	if ds := c.decision(c.r, again.UID); ds.Consumed == nil || ds.Consumed.OperationID != ran {
		t.Fatalf("the new approval must be consumed by %s: %+v", ran, ds)
	}
	c.requireHistory("0001:run", "0002:run", "0003:run")
	c.ranBy(ran, "0001", "0002", "0003")
	c.logged("0001", "0002", "0003")
	c.committedOnce()
	if runs := c.runs(); !slices.Equal(runs, []string{op.ID, ran}) {
		t.Fatalf("journal %v; want the dead run %s and the new one %s", runs, op.ID, ran)
	}
	if got := c.journal(op.ID); !reflect.DeepEqual(got, crashed) {
		t.Fatalf("the dead run's journal changed: %+v, was %+v", got, crashed)
	}
}

// Eight processes apply one migration at once, each with its own runner
// and sessions: "A plan is executed only while the decision that
// authorized it still names the exact plan, and only once." Each call
// ends in success or in a busy refusal (another ptah runs the pass);
// exactly one operation is dispatched in all, each file runs once, and
// the history holds each version once, run. With policy OnApproval the
// one approval is spent by that operation.
func TestMigrationConcurrentAppliesRunEachFileOnce(t *testing.T) {
	t.Parallel()
	for _, policy := range []api.ApplyPolicy{api.ApplyAlways, api.ApplyOnApproval} {
		t.Run(string(policy), func(t *testing.T) {
			t.Parallel()
			c := newCrashMig(t, policy, map[string]string{
				"0001_a.sql": logs("0001") + "CREATE TABLE public.a (id int);\n",
				"0002_b.sql": logs("0002"),
				"0003_c.sql": noTx + logs("0003") + "CREATE INDEX CONCURRENTLY log_tag ON public.log (tag);\n",
				"0004_d.sql": logs("0004"),
				"0005_e.sql": logs("0005"),
			})
			var approval Approved
			if policy == api.ApplyOnApproval {
				approval = c.approve(c.r, c.run(c.r, PlanOnly).Migration.Plan)
			}
			const n = 8
			type outcome struct {
				res Result
				err error
			}
			outs := make([]outcome, n)
			start := make(chan struct{})
			var ready, done sync.WaitGroup
			for i := range n {
				ready.Add(1)
				done.Add(1)
				go func() {
					defer done.Done()
					r, err := newRunner(c.ctx, c.url)
					ready.Done()
					if err != nil {
						outs[i].err = fmt.Errorf("opening a runner: %w", err)
						return
					}
					defer r.Target.Close(context.Background())
					<-start
					outs[i].res, outs[i].err = r.Run(c.ctx, c.res, Apply)
				}()
			}
			ready.Wait()
			close(start)
			done.Wait()

			var dispatched []string
			succeeded := 0
			for i, o := range outs {
				switch {
				case o.err == nil:
					succeeded++
					dispatched = append(dispatched, o.res.Dispatched...)
					if st := o.res.Migration.Status; st.Phase != api.PhaseInSync {
						t.Errorf("call %d succeeded at phase %s/%s (%s); want InSync", i, st.Phase, st.Reason, st.Message)
					}
				case errors.Is(o.err, postgres.ErrPassBusy):
				default:
					t.Errorf("call %d: %v; want success or ErrPassBusy", i, o.err)
				}
			}
			t.Logf("%d of %d calls succeeded", succeeded, n)
			if succeeded == 0 || len(dispatched) != 1 {
				t.Fatalf("%d calls succeeded, dispatching %v; want exactly one operation dispatched", succeeded, dispatched)
			}
			op := dispatched[0]
			if runs := c.runs(); !slices.Equal(runs, []string{op}) {
				t.Fatalf("journal %v; want operation %s alone", runs, op)
			}
			if run := c.journal(op); !run.Committed() {
				t.Fatalf("operation %s: %+v; want it succeeded", op, run)
			}
			c.requireHistory("0001:run", "0002:run", "0003:run", "0004:run", "0005:run")
			c.logged("0001", "0002", "0003", "0004", "0005")
			c.committedOnce()
			if policy == api.ApplyOnApproval {
				if ds := c.decision(c.r, approval.UID); ds.Consumed == nil || ds.Consumed.OperationID != op {
					t.Fatalf("the approval must be consumed by %s: %+v", op, ds)
				}
			}
			if again := c.run(c.r, Apply); again.Migration.Status.Phase != api.PhaseInSync || len(again.Dispatched) != 0 {
				t.Fatalf("afterwards: phase %s (%s), dispatched %v; want InSync, nothing run", again.Migration.Status.Phase,
					again.Migration.Status.Message, again.Dispatched)
			}
		})
	}
}

// A transactional file that fails is a known outcome, not an uncertain
// one: the failed file rolled back whole, the files before it committed
// with their history rows. status.lastRun is Failed and names the file
// and the statement, nothing is unresolved, and the database is given
// back. The spent approval authorizes nothing more: the failed file does
// not run again until its fix is approved, and then it and the file after
// it run once.
func TestMigrationFailedFileIsRecordedAndRunsOnceFixed(t *testing.T) {
	t.Parallel()
	c := newCrashMig(t, api.ApplyOnApproval, map[string]string{
		"0001_a.sql": logs("0001"),
		"0002_b.sql": logs("0002"),
		"0003_c.sql": logs("0003") + "INSERT INTO public.missing VALUES (1);\n",
		"0004_d.sql": logs("0004"),
	})
	planned := c.run(c.r, PlanOnly).Migration.Plan
	approval := c.approve(c.r, planned)
	got := c.run(c.r, Apply)
	st := got.Migration.Status
	if st.Phase != api.PhaseFailed || st.Reason != api.ReasonApplyFailed || len(got.Dispatched) != 1 || st.UnresolvedRun != nil ||
		st.ActiveOperation != nil {
		t.Fatalf("after the failure: phase %s/%s (%s), dispatched %v, unresolved %+v; want Failed, nothing unresolved",
			st.Phase, st.Reason, st.Message, got.Dispatched, st.UnresolvedRun)
	}
	op := got.Dispatched[0]
	if r := st.LastRun; r == nil || r.OperationID != op || r.Outcome != api.OutcomeFailed || r.Plan.UID != planned.UID ||
		!slices.Equal(r.Versions, []string{"0001", "0002"}) || r.Failure == nil || *r.Failure != (api.RunFailure{Version: "0003", Statement: 2}) ||
		!strings.Contains(r.Message, "public.missing") {
		t.Fatalf("last run %+v (failure %+v); want operation %s failed at statement 2 of 0003, after 0001 and 0002", r, r.Failure, op)
	}
	c.requireHistory("0001:run", "0002:run")
	c.logged("0001", "0002")
	if ds := c.decision(c.r, approval.UID); ds.Consumed == nil || ds.Consumed.OperationID != op {
		t.Fatalf("the approval must be consumed by %s: %+v", op, ds)
	}
	if l := c.lease(planned.Spec.Bindings.CoordinationDigest); l != nil || st.OwedRelease != nil {
		t.Fatalf("the database must be given back: lease %+v, owed %+v", l, st.OwedRelease)
	}

	// Unfixed, nothing runs without a new approval.
	retry := c.run(c.r, Apply)
	if rs := retry.Migration.Status; rs.Phase != api.PhaseAwaitingApproval || len(retry.Dispatched) != 0 || retry.Migration.Plan == nil ||
		retry.Migration.Plan.UID == planned.UID {
		t.Fatalf("after the failure, unapproved: phase %s (%s), dispatched %v; want a new plan awaiting approval", rs.Phase, rs.Message, retry.Dispatched)
	}
	c.logged("0001", "0002")

	fixed := logs("0003") + "CREATE TABLE public.c (id int);\n"
	if err := os.WriteFile(filepath.Join(c.res.Migration.Spec.Source.Path, "0003_c.sql"), []byte(fixed), 0o644); err != nil {
		t.Fatal(err)
	}
	c.res.ReadSource()
	if c.res.SourceErr != nil {
		t.Fatal(c.res.SourceErr)
	}
	plan := c.run(c.r, PlanOnly).Migration.Plan
	if plan == nil || len(plan.Spec.Versions) != 2 || plan.Spec.Versions[0].Checksum != c.file("0003").Checksum {
		t.Fatalf("the plan of the fixed source must run the fixed 0003 and 0004: %+v", plan)
	}
	again := c.approve(c.r, plan)
	done := c.run(c.r, Apply)
	if ds := done.Migration.Status; ds.Phase != api.PhaseInSync || len(done.Dispatched) != 1 || ds.LastRun.Outcome != api.OutcomeSucceeded ||
		!slices.Equal(ds.LastRun.Versions, []string{"0003", "0004"}) {
		t.Fatalf("after the fix: phase %s (%s), dispatched %v, last run %+v", ds.Phase, ds.Message, done.Dispatched, ds.LastRun)
	}
	if ds := c.decision(c.r, again.UID); ds.Consumed == nil || ds.Consumed.OperationID != done.Dispatched[0] {
		t.Fatalf("the new approval must be consumed by %s: %+v", done.Dispatched[0], ds)
	}
	c.requireHistory("0001:run", "0002:run", "0003:run", "0004:run")
	c.logged("0001", "0002", "0003", "0004")
	c.committedOnce()
	for _, row := range c.history() {
		if row.Version == "0003" && row.Checksum != c.file("0003").Checksum {
			t.Fatalf("0003 must be recorded with the fixed file's checksum: %+v", row)
		}
	}
}
