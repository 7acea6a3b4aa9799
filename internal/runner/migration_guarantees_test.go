package runner

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/ptah-run/ptah/internal/engine"
	"github.com/ptah-run/ptah/internal/failpoint"
	"github.com/ptah-run/ptah/internal/pgtest"
	"github.com/ptah-run/ptah/internal/postgres"
	"github.com/ptah-run/ptah/internal/store"
	api "github.com/ptah-run/ptah/pkg/api/v1alpha1"
)

// The seed's guarantee tests for the PtahMigration family, end to end: a
// real database, the pgstore, the runner's one pass, and (for crashes) a
// child process that dies at a failpoint. Each quotes the sentence of the
// seed it proves.

// seqFiles are three transactional files, each creating one table.
var seqFiles = map[string]string{
	"0001_users.sql": "CREATE TABLE public.users (id int PRIMARY KEY);\nINSERT INTO public.users VALUES (1);\n",
	"0002_posts.sql": "CREATE TABLE public.posts (id int PRIMARY KEY);\n",
	"0003_tags.sql":  "CREATE TABLE public.tags (id int PRIMARY KEY);\n",
}

// Guarantee 1, "Only work a decision authorized executes": "A plan is
// executed only while the decision that authorized it still names the
// exact plan, and only once." A migration approval is bound to "the same
// [as a schema's], plus the history fingerprint the sequence was selected
// against", and "spent by consumeMigrationApproval at the dispatch
// boundary".
func TestMigrationApplyClaimsTheApprovedPlan(t *testing.T) {
	t.Parallel()
	t.Run("the claim runs the approved plan once, and spends the approval", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, "")
		res := f.migration("app", seqFiles, api.ApplyOnApproval)
		planned := f.runMigration(res, PlanOnly)
		plan := planned.Migration.Plan
		a := f.approveMigration(plan)
		spec := a.Spec.(api.PtahMigrationApprovalSpec)
		if spec.Plan.UID != plan.UID || spec.PlanFingerprint != plan.Spec.Fingerprint || spec.HistoryFingerprint == "" ||
			spec.HistoryFingerprint != plan.Spec.HistoryFingerprint {
			t.Fatalf("the approval must name the plan's UID, fingerprint and history fingerprint: %+v", spec)
		}
		done := f.runMigration(res, Apply)
		st := done.Migration.Status
		if st.Phase != api.PhaseInSync || len(done.Dispatched) != 1 || st.LastRun == nil || st.LastRun.Plan.UID != plan.UID {
			t.Fatalf("apply: %s (%s), dispatched %v, last run %+v", st.Phase, st.Message, done.Dispatched, st.LastRun)
		}
		op := done.Dispatched[0]
		if ds := f.decisionStatus(a.UID); ds.Consumed == nil || ds.Consumed.OperationID != op {
			t.Fatalf("the approval must be consumed by operation %s: %+v", op, ds)
		}
		if runs := f.runs(); len(runs) != 1 || runs[op] == nil || runs[op].PlanUID != plan.UID {
			t.Fatalf("one run, of the approved plan: %v", runs)
		}
		// A new file makes a new plan, which the spent approval does not
		// authorize.
		f.addFile(&res, "0004_more.sql", "CREATE TABLE public.more (id int);\n")
		next := f.runMigration(res, Apply)
		if s := next.Migration.Status; s.Phase != api.PhaseAwaitingApproval || len(next.Dispatched) != 0 || f.tableExists("more") {
			t.Fatalf("the next plan awaits its own approval: %s (%s), dispatched %v", s.Phase, s.Message, next.Dispatched)
		}
	})
	t.Run("an approval of a replaced plan of the same name authorizes nothing", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, "")
		res := f.migration("app", seqFiles, api.ApplyOnApproval)
		old := f.runMigration(res, PlanOnly).Migration.Plan
		a := f.approveMigration(old)
		// The plan object goes away and the pass publishes the same content
		// again: the same name, a new UID.
		if err := f.r.Store.Delete(context.Background(), api.KindPtahMigrationPlan, "default", old.Name, old.UID); err != nil {
			t.Fatal(err)
		}
		got := f.runMigration(res, Apply)
		st, plan := got.Migration.Status, got.Migration.Plan
		if plan == nil || plan.Name != old.Name || plan.UID == old.UID {
			t.Fatalf("want the same plan republished under a new UID: %+v (old %s)", plan, old.UID)
		}
		if st.Phase != api.PhaseAwaitingApproval || len(got.Dispatched) != 0 || f.tableExists("users") || !f.decisionStatus(a.UID).Stale {
			t.Fatalf("the old approval must authorize nothing (and be stale): %s (%s), dispatched %v, stale %v",
				st.Phase, st.Message, got.Dispatched, f.decisionStatus(a.UID).Stale)
		}
	})
	t.Run("an approval bound to another history authorizes nothing", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, "")
		res := f.migration("app", seqFiles, api.ApplyOnApproval)
		plan := f.runMigration(res, PlanOnly).Migration.Plan
		// An approval naming the exact plan, its fingerprint and every
		// binding but the history fingerprint.
		spec := api.PtahMigrationApprovalSpec{Plan: api.ObjectReference{Name: plan.Name, UID: plan.UID}, Migration: "app",
			PlanFingerprint: plan.Spec.Fingerprint, Bindings: plan.Spec.Bindings, Approver: "mallory", ApprovedAt: api.NewTime(time.Now())}
		spec.HistoryFingerprint = "sha256:another-history"
		f.createDecision(api.KindPtahMigrationApproval, "app-forged", spec)
		got := f.runMigration(res, Apply)
		if st := got.Migration.Status; st.Phase != api.PhaseAwaitingApproval || len(got.Dispatched) != 0 || f.tableExists("users") {
			t.Fatalf("want AwaitingApproval and nothing run: %s (%s), dispatched %v", st.Phase, st.Message, got.Dispatched)
		}
	})
}

// Guarantee 2, "Inputs that moved do not execute": "Every claim records
// the fingerprint of the inputs it was decided from, and that fingerprint
// is compared again before dispatch"; for PtahMigration,
// "migrationInputFingerprint, re-derived each pass", failing with "the
// claim is discarded, or the plan dropped".
//
// The claim is left durable by a crash right after it; then the history
// or the source moves in a way that would not stop the claimed plan from
// running, so an implementation that skipped the comparison would run it.
func TestMigrationApplyDiscardsAPlanTheEvidenceNoLongerSupports(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		move func(f *fixture, res *Resource)
		// the versions of the fresh plan
		want []string
	}{
		{"the history moved", func(f *fixture, res *Resource) {
			// A person records version 0001 as applied (it was, by hand).
			f.exec("CREATE TABLE public.users (id int PRIMARY KEY)")
			f.markApplied(*res, "0001")
		}, []string{"0002", "0003"}},
		{"the source moved", func(f *fixture, res *Resource) {
			f.addFile(res, "0003_tags.sql", "CREATE TABLE public.tags (id int PRIMARY KEY, name text);\n")
		}, []string{"0001", "0002", "0003"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, "")
			res := f.migration("app", seqFiles, api.ApplyOnApproval)
			planned := f.runMigration(res, PlanOnly).Migration.Plan
			a := f.approveMigration(planned)
			f.crashAt(FailAfterClaim, res, Apply)
			op := f.migStatus(res).ActiveOperation
			if op == nil || op.DispatchedAt != nil || op.Plan.UID != planned.UID {
				t.Fatalf("after the crash the claim must be durable and undispatched: %+v", op)
			}

			tc.move(f, &res)
			got := f.runMigration(res, Apply)
			st := got.Migration.Status
			if st.ActiveOperation != nil || len(got.Dispatched) != 0 || len(f.runs()) != 0 || f.tableExists("posts") {
				t.Fatalf("the stale claim %s must not execute: claim %+v, dispatched %v, journal %v", op.ID, st.ActiveOperation, got.Dispatched, f.runs())
			}
			fresh := got.Migration.Plan
			if fresh == nil || fresh.UID == planned.UID || fmt.Sprint(planVersionList(fresh)) != fmt.Sprint(tc.want) {
				t.Fatalf("want a fresh plan of %v: %+v", tc.want, fresh)
			}
			if st.Phase != api.PhaseAwaitingApproval || f.decisionStatus(a.UID).Consumed != nil {
				t.Fatalf("the fresh plan awaits its own approval, the old one unspent by any run: %s (%s), %+v", st.Phase, st.Message, f.decisionStatus(a.UID))
			}
			f.approveMigration(fresh)
			done := f.runMigration(res, Apply)
			if s := done.Migration.Status; s.Phase != api.PhaseInSync || len(done.Dispatched) != 1 || done.Dispatched[0] == op.ID {
				t.Fatalf("the fresh plan, approved, runs under a new operation: %s (%s), dispatched %v", s.Phase, s.Message, done.Dispatched)
			}
		})
	}
}

// Guarantee 3, "A dispatched Apply is never re-run": "Once an Apply Job
// may exist, the operator does not create another one under a fresh
// name." For PtahMigration the durable evidence is "status.unresolvedRun,
// which names the attempt, its Job, its plan and the database", "cleared
// by a person, after establishing what the run did"; "the resource is
// Blocked; nothing runs until the record is cleared", and "an unrelated
// refusal arriving later does not clear it: the record is a field, not a
// condition reason".
func TestMigrationApplyIsNeverRecreatedOnceDispatched(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		point    string
		outcome  string
		reported string
		// the person marks these applied (the run committed them, the
		// history lacks them)
		mark []string
	}{
		// The marker and the run's journal row committed; no statement ran.
		{point: FailAfterDispatch, outcome: api.OutcomeUnknown, reported: api.ReportedByDispatch},
		// A no-transaction file stopped part way: its first statement
		// committed, the second's start is journaled; the person finishes
		// the file by hand and marks it applied.
		{point: failpoint.MidNoTxPhase, outcome: api.OutcomePartial, reported: api.ReportedByDispatch, mark: []string{"0003"}},
	} {
		t.Run(tc.point, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, "")
			res := f.migration("app", threeFiles, api.ApplyOnApproval)
			f.approveMigration(f.runMigration(res, PlanOnly).Migration.Plan)
			f.crashAt(tc.point, res, Apply)
			op := f.migStatus(res).ActiveOperation
			if op == nil || op.DispatchedAt == nil {
				t.Fatalf("the crashed run's claim must carry the dispatch marker: %+v", op)
			}
			before := f.runs()

			blocked := func(what string) {
				t.Helper()
				got := f.runMigration(res, Apply)
				st := got.Migration.Status
				u := st.UnresolvedRun
				if u == nil || u.OperationID != op.ID || u.Plan.UID != op.Plan.UID || u.Outcome != tc.outcome || u.ReportedBy != tc.reported ||
					u.TargetIdentityDigest != f.identity() || u.Deadline.IsZero() {
					t.Fatalf("%s: the unresolved run must name operation %s and its plan %s: %+v", what, op.ID, op.Plan.UID, u)
				}
				if st.Phase != api.PhaseBlocked || st.Reason != api.ReasonUnresolvedRun || len(got.Dispatched) != 0 || st.ActiveOperation != nil {
					t.Fatalf("%s: want Blocked/UnresolvedRun and nothing dispatched: %s/%s (%s), dispatched %v", what, st.Phase, st.Reason,
						st.Message, got.Dispatched)
				}
				if fmt.Sprint(f.runs()) != fmt.Sprint(before) {
					t.Fatalf("%s: no run may start: journal %v, was %v", what, f.runs(), before)
				}
			}
			blocked("the next apply")
			blocked("again")

			// An unrelated refusal comes and goes: the record stays.
			rival := f.migration("rival", map[string]string{"0001_x.sql": "SELECT 1;\n"}, api.ApplyAlways)
			f.register(rival)
			if st := f.runMigration(res, Apply).Migration.Status; st.Reason != api.ReasonRealmConflict || st.UnresolvedRun == nil {
				t.Fatalf("under a realm conflict the record stays: %s (%s), %+v", st.Reason, st.Message, st.UnresolvedRun)
			}
			f.forget(rival)
			blocked("after the conflict cleared")

			// Only the person's acknowledgment of that exact operation
			// clears it.
			if _, err := f.r.Acknowledge(context.Background(), res, AcknowledgeRequest{OperationID: "op-other", By: "ana", Reason: "x"}); !errors.Is(err, ErrWrongOperation) {
				t.Fatalf("an acknowledgment of another operation: %v; want ErrWrongOperation", err)
			}
			if len(tc.mark) > 0 {
				f.exec("CREATE INDEX CONCURRENTLY posts_user ON public.posts (user_id)") // the person finishes the file
			}
			if _, err := f.r.Acknowledge(context.Background(), res, AcknowledgeRequest{OperationID: op.ID, By: "ana", Reason: "checked the journal",
				MarkApplied: tc.mark}); err != nil {
				t.Fatal(err)
			}
			got := f.runMigration(res, PlanOnly)
			st := got.Migration.Status
			if st.UnresolvedRun != nil || st.ResolvedRun == nil || st.ResolvedRun.OperationID != op.ID || st.ResolvedRun.By != "ana" {
				t.Fatalf("the acknowledgment clears the record: unresolved %+v, resolved %+v", st.UnresolvedRun, st.ResolvedRun)
			}
			if len(tc.mark) > 0 {
				if st.Phase != api.PhaseInSync {
					t.Fatalf("every version is recorded now: %s (%s)", st.Phase, st.Message)
				}
				if h := historyVersions(f.migHistory(res)); fmt.Sprint(h) != "[0001:run 0002:run 0003:marked]" {
					t.Fatalf("history %v", h)
				}
				return
			}
			// What remains is a new plan, for a new approval; it runs once.
			if st.Phase != api.PhaseAwaitingApproval || got.Migration.Plan == nil || got.Migration.Plan.UID == op.Plan.UID {
				t.Fatalf("want a new plan awaiting approval: %s (%s), %+v", st.Phase, st.Message, got.Migration.Plan)
			}
			f.approveMigration(got.Migration.Plan)
			done := f.runMigration(res, Apply)
			if s := done.Migration.Status; s.Phase != api.PhaseInSync || len(done.Dispatched) != 1 || done.Dispatched[0] == op.ID {
				t.Fatalf("after the resolution: %s (%s), dispatched %v", s.Phase, s.Message, done.Dispatched)
			}
			if r := f.runs()[op.ID]; fmt.Sprint(r) != fmt.Sprint(before[op.ID]) {
				t.Fatalf("the crashed run's journal is left as it was: %v, was %v", r, before[op.ID])
			}
		})
	}
}

// Guarantee 4, "The database is held while a run may still write":
// "Coordination is released when the work that held it can no longer
// write"; for PtahMigration, "dispatchedApplyMayStillWrite deciding
// whether it is owed yet", held until "the dispatched Pod is gone or its
// absolute execution deadline has passed, and a run that may still be
// writing is never recorded as owed".
//
// The writer is killed's client side while its backend waits for a lock:
// the backend outlives the process and may still write once the lock is
// granted.
func TestUncertainMigrationApplyKeepsTheDatabaseWhileItsPodMayRun(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newFixture(t, "")
	res := f.migration("app", map[string]string{"0001_users.sql": "CREATE TABLE public.users (id int PRIMARY KEY);\n"}, api.ApplyAlways)
	res.Migration.Spec.Policy.LockTimeout = "5m"        // the orphaned writer keeps waiting,
	res.Migration.Spec.Policy.LockAttemptTimeout = "5m" // in one attempt
	if st := f.runMigration(res, Apply).Migration.Status; st.Phase != api.PhaseInSync {
		t.Fatalf("setup: %s (%s)", st.Phase, st.Message)
	}
	f.addFile(&res, "0002_name.sql", "ALTER TABLE public.users ADD COLUMN name text;\n")

	locker, writerPID := f.killWhileWriterWaits(res)
	op := f.migStatus(res).ActiveOperation
	if op == nil || op.DispatchedAt == nil {
		t.Fatalf("the killed child's claim must be dispatched: %+v", op)
	}
	for range 2 { // and again: nothing moves while the writer may run
		got := f.runMigration(res, Apply)
		st := got.Migration.Status
		if st.Phase != api.PhaseBlocked || st.Reason != api.ReasonRunMayStillWrite || len(got.Dispatched) != 0 {
			t.Fatalf("while the writer (pid %d) may run: %s/%s (%s); want Blocked RunMayStillWrite", writerPID, st.Phase, st.Reason, st.Message)
		}
		if st.OwedRelease != nil {
			t.Fatalf("a run that may still be writing is never recorded as owed: %+v", st.OwedRelease)
		}
		if l := f.lease(op.CoordinationDigest); l == nil || l.Holder != op.ID {
			t.Fatalf("the lease must still name operation %s: %+v", op.ID, l)
		}
	}
	if _, err := postgres.OpenWriter(ctx, f.url, op.CoordinationDigest, "op-intruder", "intruder", time.Now().Add(time.Hour)); !errors.Is(err, postgres.ErrLeaseHeld) {
		t.Fatalf("a second writer while the first may run: %v; want ErrLeaseHeld", err)
	}
	// Resolving is refused too: no one can establish yet what it did.
	if _, err := f.r.Acknowledge(ctx, res, AcknowledgeRequest{OperationID: op.ID, By: "ana", Reason: "x"}); err == nil {
		t.Fatal("an acknowledgment while the writer may still write must be refused")
	}

	// The lock is granted: the orphan runs its statement, cannot answer its
	// dead client, and its transaction rolls back with its session.
	if err := locker.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	f.waitForSessionEnd(writerPID)
	got := f.runMigration(res, Apply)
	st := got.Migration.Status
	if st.Phase != api.PhaseBlocked || st.Reason != api.ReasonUnresolvedRun || st.UnresolvedRun == nil || st.UnresolvedRun.OperationID != op.ID ||
		len(got.Dispatched) != 0 {
		t.Fatalf("once the writer is gone its run is unresolved, for a person: %s/%s (%s), %+v", st.Phase, st.Reason, st.Message, st.UnresolvedRun)
	}
	if st.OwedRelease != nil || f.lease(op.CoordinationDigest) != nil {
		t.Fatalf("once it can no longer write, the release is owed and completed: owed %+v, lease %+v", st.OwedRelease, f.lease(op.CoordinationDigest))
	}
}

// Guarantee 5, "One database has one writer": "More than one resource
// addressing the same database is refused unless every claimant declares
// the sharing", enforced for PtahMigration by "the same function [as for
// PtahSchema], in the same place", before any dispatch: one census spans
// both families.
func TestMigrationBlocksOnAContestedRealmWithoutDispatchingAJob(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name        string
		rivalSchema bool // the rival is a PtahSchema; else a PtahMigration
		share       bool // every claimant declares the sharing
	}{
		{name: "another migration"},
		{name: "a schema", rivalSchema: true},
		{name: "every claimant shares", rivalSchema: true, share: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, "")
			m := f.migration("app", seqFiles, api.ApplyAlways)
			m.Migration.Spec.Target.SharedRealm = tc.share
			rival := f.migration("rival", map[string]string{"0001_other.sql": "CREATE SCHEMA other;\n"}, api.ApplyAlways)
			if tc.rivalSchema {
				rival = f.schemaResource("other", "", tc.share)
			}
			f.register(m)
			f.register(rival)
			got := f.runMigration(m, Apply)
			st := got.Migration.Status
			if tc.share {
				if st.Phase != api.PhaseInSync || !f.tableExists("tags") {
					t.Fatalf("every claimant shares: the migration runs: %s (%s)", st.Phase, st.Message)
				}
				return
			}
			if st.Phase != api.PhaseBlocked || st.Reason != api.ReasonRealmConflict || !strings.Contains(st.Message, rival.Kind()+" default/"+rival.Name()) {
				t.Fatalf("want Blocked/RealmConflict naming %s %s: %s/%s (%s)", rival.Kind(), rival.Name(), st.Phase, st.Reason, st.Message)
			}
			if st.ActiveOperation != nil || len(got.Dispatched) != 0 || len(f.runs()) != 0 || f.tableExists("users") ||
				f.lease(m.coordination(f.identity())) != nil {
				t.Fatalf("nothing may be claimed, dispatched or locked: claim %+v, journal %v", st.ActiveOperation, f.runs())
			}
			// The rival, whatever its family, is refused by the same census.
			if tc.rivalSchema {
				if r := f.run(rival, Apply); r.Status.Reason != api.ReasonRealmConflict || !strings.Contains(r.Status.Message, "PtahMigration default/app") {
					t.Fatalf("the schema must be refused naming the migration: %s (%s)", r.Status.Reason, r.Status.Message)
				}
			}
		})
	}
}

// --- helpers for migrations on a fixture ---

// migration is a PtahMigration named name of files, on the fixture's
// database.
func (f *fixture) migration(name string, files map[string]string, policy api.ApplyPolicy) Resource {
	f.t.Helper()
	res := migResource(f.t, f.url, files)
	res.Migration.Name = name
	res.Migration.Spec.Policy.Apply = policy
	return res
}

func (f *fixture) runMigration(res Resource, mode Mode) Result {
	f.t.Helper()
	out, err := f.r.Run(context.Background(), res, mode)
	if err != nil {
		f.t.Fatalf("run: %v", err)
	}
	if out.Migration == nil {
		f.t.Fatalf("a PtahMigration's result carries no migration status: %+v", out)
	}
	return out
}

func (f *fixture) approveMigration(plan *engine.MigrationPlan) Approved {
	f.t.Helper()
	if plan == nil {
		f.t.Fatal("no plan to approve")
	}
	a, err := f.r.Approve(context.Background(), ApproveRequest{PlanUID: plan.UID, Fingerprint: plan.Spec.Fingerprint, Approver: "ana"})
	if err != nil {
		f.t.Fatal(err)
	}
	return a
}

func (f *fixture) migStatus(res Resource) api.PtahMigrationStatus {
	f.t.Helper()
	_, st, err := f.r.migrationStatus(context.Background(), res)
	if err != nil {
		f.t.Fatal(err)
	}
	return st
}

func (f *fixture) migHistory(res Resource) []postgres.HistoryRow {
	f.t.Helper()
	rows, err := postgres.ReadHistory(context.Background(), f.r.Target, res.storeResource())
	if err != nil {
		f.t.Fatal(err)
	}
	return rows
}

func (f *fixture) decisionStatus(uid string) api.DecisionStatus {
	f.t.Helper()
	return readDecision(f.t, f.r, uid)
}

func (f *fixture) createDecision(kind, name string, spec any) {
	f.t.Helper()
	raw, err := json.Marshal(spec)
	if err != nil {
		f.t.Fatal(err)
	}
	if _, err := f.r.Store.Create(context.Background(), store.Object{Kind: kind, Namespace: "default", Name: name,
		ContractVersion: api.ContractVersion, Immutable: true, Labels: map[string]string{LabelMigration: "app"}, Spec: raw}); err != nil {
		f.t.Fatal(err)
	}
}

// addFile writes a file into res's source directory and reads it again.
func (f *fixture) addFile(res *Resource, name, sql string) {
	f.t.Helper()
	if err := os.WriteFile(filepath.Join(res.Migration.Spec.Source.Path, name), []byte(sql), 0o644); err != nil {
		f.t.Fatal(err)
	}
	res.ReadSource()
	if res.SourceErr != nil {
		f.t.Fatal(res.SourceErr)
	}
}

// markApplied records version of res's source in its history as a person
// marks it.
func (f *fixture) markApplied(res Resource, version string) {
	f.t.Helper()
	for _, file := range res.Source.Files {
		if file.Version.String() != version {
			continue
		}
		err := pgx.BeginFunc(context.Background(), f.r.Target, func(tx pgx.Tx) error {
			return postgres.RecordHistory(context.Background(), tx, res.storeResource(),
				[]postgres.HistoryRow{{Version: version, Name: file.Name, Checksum: file.Checksum, AppliedBy: "ana"}}, postgres.HowMarked)
		})
		if err != nil {
			f.t.Fatal(err)
		}
		return
	}
	f.t.Fatalf("no file of version %s", version)
}

func (f *fixture) exec(sql string) {
	f.t.Helper()
	pgtest.Exec(f.t, f.url, sql)
}

func (f *fixture) forget(res Resource) {
	f.t.Helper()
	if err := f.r.Store.Delete(context.Background(), res.Kind(), "default", res.Name(), ""); err != nil {
		f.t.Fatal(err)
	}
}

func planVersionList(p *engine.MigrationPlan) []string {
	out := []string{}
	for _, v := range p.Spec.Versions {
		out = append(out, v.Version)
	}
	return out
}

// Adopting an existing database: a baseline plan, checked against the
// target before it is published, records the versions as baselined (and
// runs none of them); what follows runs as usual. A target that is not
// what the files build, or a history that is not empty, blocks with the
// differences named, and records nothing.
func TestMigrationBaselineAdoptsAnExistingDatabaseOnlyWhenItMatches(t *testing.T) {
	t.Parallel()
	built := "CREATE TABLE public.users (id int PRIMARY KEY); INSERT INTO public.users VALUES (1); CREATE TABLE public.posts (id int PRIMARY KEY);"
	t.Run("matching", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, built)
		res := f.migration("app", seqFiles, api.ApplyOnApproval)
		res.Baseline = "0002"
		planned := f.runMigration(res, PlanOnly)
		plan := planned.Migration.Plan
		if plan == nil || !plan.Spec.Baseline || fmt.Sprint(planVersionList(plan)) != "[0001 0002]" || plan.Spec.ActualStateFingerprint == "" {
			t.Fatalf("want a baseline plan of 0001 and 0002 bound to the target's state: %s (%s) %+v",
				planned.Migration.Status.Phase, planned.Migration.Status.Message, plan)
		}
		f.approveMigration(plan)
		res.Baseline = "" // ptah apply names no baseline: it runs the approved plan
		got := f.runMigration(res, Apply)
		if h := historyVersions(f.migHistory(res)); fmt.Sprint(h) != "[0001:baseline 0002:baseline]" {
			t.Fatalf("history %v", h)
		}
		// All or none: the rows commit in one transaction, the run's only.
		if len(got.Dispatched) != 1 {
			t.Fatalf("one run records the baseline: %v", got.Dispatched)
		}
		if run, err := postgres.ReadRun(context.Background(), f.r.Target, got.Dispatched[0]); err != nil || run.Phases != 1 || len(run.Steps) != 0 {
			t.Fatalf("the baseline run: %v %+v", err, run)
		}
		st := got.Migration.Status
		if st.Phase != api.PhaseAwaitingApproval || got.Migration.Plan == nil || fmt.Sprint(planVersionList(got.Migration.Plan)) != "[0003]" ||
			got.Migration.Plan.Spec.Baseline {
			t.Fatalf("after the baseline, 0003 is planned as usual: %s (%s) %+v", st.Phase, st.Message, got.Migration.Plan)
		}
		f.approveMigration(got.Migration.Plan)
		if st := f.runMigration(res, Apply).Migration.Status; st.Phase != api.PhaseInSync || !f.tableExists("tags") {
			t.Fatalf("0003 runs: %s (%s)", st.Phase, st.Message)
		}
	})
	t.Run("a target the files do not build", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, "CREATE TABLE public.users (id int PRIMARY KEY);")
		res := f.migration("app", seqFiles, api.ApplyOnApproval)
		res.Baseline = "0002"
		got := f.runMigration(res, PlanOnly)
		st := got.Migration.Status
		if st.Phase != api.PhaseBlocked || st.Reason != api.ReasonBaselineMismatch || !strings.Contains(st.Message, "CREATE TABLE public.posts") ||
			got.Migration.Plan != nil {
			t.Fatalf("want Blocked/BaselineMismatch naming the missing table, and no plan: %s/%s (%s)", st.Phase, st.Reason, st.Message)
		}
		if len(f.migHistory(res)) != 0 {
			t.Fatal("a mismatching baseline records nothing")
		}
	})
	t.Run("a history that is not empty", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, built)
		res := f.migration("app", seqFiles, api.ApplyOnApproval)
		f.markApplied(res, "0001")
		res.Baseline = "0002"
		st := f.runMigration(res, PlanOnly).Migration.Status
		if st.Phase != api.PhaseBlocked || st.Reason != api.ReasonBaselineMismatch || !strings.Contains(st.Message, "history is empty") {
			t.Fatalf("want Blocked/BaselineMismatch: %s/%s (%s)", st.Phase, st.Reason, st.Message)
		}
	})
}

// A PtahMigration's record cannot be forgotten while its run is
// unresolved: the record is the only evidence that a person owes an
// answer. Once resolved, it can; and ptah status's readings (Inspect,
// Registered) name it as a PtahMigration.
func TestMigrationRecordIsKeptWhileItsRunIsUnresolved(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newFixture(t, "")
	res := f.migration("app", seqFiles, api.ApplyAlways)
	f.crashAt(FailAfterDispatch, res, Apply)
	st := f.runMigration(res, Apply).Migration.Status
	if st.UnresolvedRun == nil {
		t.Fatalf("want an unresolved run: %s (%s)", st.Phase, st.Message)
	}
	if _, err := f.r.Forget(ctx, api.KindPtahMigration, "default", "app"); !errors.Is(err, ErrNotForgettable) {
		t.Fatalf("forgetting an unresolved run's record: %v; want ErrNotForgettable", err)
	}
	rep, err := f.r.Inspect(ctx, res)
	if err != nil || rep.Migration == nil || rep.Migration.Status.UnresolvedRun == nil || rep.Kind != api.KindPtahMigration {
		t.Fatalf("Inspect: %v %+v", err, rep)
	}
	if names, err := f.r.Registered(ctx); err != nil || fmt.Sprint(names) != "[PtahMigration default/app]" {
		t.Fatalf("Registered: %v %v", names, err)
	}
	if _, err := f.r.Acknowledge(ctx, res, AcknowledgeRequest{OperationID: st.UnresolvedRun.OperationID, By: "ana", Reason: "nothing ran"}); err != nil {
		t.Fatal(err)
	}
	f.runMigration(res, PlanOnly) // consumes the acknowledgment
	if _, err := f.r.Forget(ctx, api.KindPtahMigration, "default", "app"); err != nil {
		t.Fatalf("once resolved, the record can be forgotten: %v", err)
	}
}

// What a reading can settle is not left to a person: a run that died after
// its last file committed (the journal records it succeeded, in that
// file's transaction) is accounted as succeeded, and nothing runs again.
func TestMigrationRunTheJournalRecordsAsSucceededNeedsNoPerson(t *testing.T) {
	t.Parallel()
	f := newFixture(t, "")
	res := f.migration("app", seqFiles, api.ApplyAlways)
	f.crashAt(FailAfterExecution, res, Apply)
	op := f.migStatus(res).ActiveOperation
	if op == nil || op.DispatchedAt == nil {
		t.Fatalf("the crashed run's claim must be dispatched: %+v", op)
	}
	got := f.runMigration(res, Apply)
	st := got.Migration.Status
	if st.Phase != api.PhaseInSync || st.UnresolvedRun != nil || st.LastRun == nil || st.LastRun.OperationID != op.ID ||
		st.LastRun.Outcome != api.OutcomeSucceeded || len(got.Dispatched) != 0 || len(f.runs()) != 1 {
		t.Fatalf("want InSync with the run accounted as succeeded, nothing run again: %s (%s), last %+v, unresolved %+v, journal %v",
			st.Phase, st.Message, st.LastRun, st.UnresolvedRun, f.runs())
	}
	if h := historyVersions(f.migHistory(res)); fmt.Sprint(h) != "[0001:run 0002:run 0003:run]" || f.lease(op.CoordinationDigest) != nil {
		t.Fatalf("history %v, lease %+v", h, f.lease(op.CoordinationDigest))
	}
}

// A file the run stopped part way must be accounted for by the person who
// resolves the run: marked applied (finished by hand), or named to run
// again (its committed part undone by hand). An acknowledgment that does
// neither is refused and records nothing, since the next run would repeat
// what committed.
func TestMigrationResolutionAccountsForAFileStoppedPartWay(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newFixture(t, "")
	res := f.migration("app", threeFiles, api.ApplyAlways)
	f.crashAt(failpoint.MidNoTxPhase, res, Apply)
	ev, err := f.r.Evidence(ctx, res) // settles the dead claim into an unresolved run first
	if err != nil || ev.Unresolved == nil {
		t.Fatalf("evidence: %v %+v", err, ev)
	}
	op := ev.Unresolved.OperationID
	var partial VersionEvidence
	for _, v := range ev.Versions {
		if v.Version == "0003" {
			partial = v
		}
	}
	if partial.Recorded || partial.Committed != 1 || partial.Started != 2 || len(partial.InFlight) != 1 ||
		!strings.Contains(partial.InFlight[0].Statement, "posts_user") {
		t.Fatalf("the evidence of 0003: %+v", partial)
	}
	for _, req := range []AcknowledgeRequest{
		{OperationID: op, By: "ana", Reason: "x"},
		{OperationID: op, By: "ana", Reason: "x", Rerun: []string{"0002"}},
		{OperationID: op, By: "ana", Reason: "x", Rerun: []string{"0003"}, MarkApplied: []string{"0003"}},
	} {
		if _, err := f.r.Acknowledge(ctx, res, req); !errors.Is(err, ErrUnaccounted) {
			t.Fatalf("%+v: %v; want ErrUnaccounted", req, err)
		}
	}
	if got := f.migStatus(res).UnresolvedRun; got == nil || got.OperationID != op {
		t.Fatalf("a refused acknowledgment records nothing: %+v", got)
	}
	f.exec("DROP INDEX public.users_email") // the person undoes what committed
	if _, err := f.r.Acknowledge(ctx, res, AcknowledgeRequest{OperationID: op, By: "ana", Reason: "undid users_email", Rerun: []string{"0003"}}); err != nil {
		t.Fatal(err)
	}
	got := f.runMigration(res, Apply)
	if st := got.Migration.Status; st.Phase != api.PhaseInSync || len(got.Dispatched) != 1 || !f.indexExists("users_email") || !f.indexExists("posts_user") {
		t.Fatalf("0003 runs again, whole, once: %s (%s), dispatched %v", st.Phase, st.Message, got.Dispatched)
	}
}

// A status never carries SQL: a hand-written file may hold anything, a
// password included. A failed file's record names its version, its
// statement's position and PostgreSQL's words; the journal, in the
// database, keeps the statement.
func TestMigrationFailureRecordsNoSQLInStatus(t *testing.T) {
	t.Parallel()
	f := newFixture(t, "")
	res := f.migration("app", map[string]string{
		"0001_ok.sql":  "CREATE TABLE public.t (v text);\n",
		"0002_bad.sql": "INSERT INTO public.t VALUES ('ok');\nINSERT INTO public.missing VALUES ('hunter2-secret');\n",
	}, api.ApplyAlways)
	st := f.runMigration(res, Apply).Migration.Status
	if st.Phase != api.PhaseFailed || st.LastRun == nil || st.LastRun.Failure == nil || st.LastRun.Failure.Version != "0002" ||
		st.LastRun.Failure.Statement != 2 || !strings.Contains(st.LastRun.Message, "missing") {
		t.Fatalf("want Failed at 0002 statement 2 with PostgreSQL's words: %s (%s), %+v", st.Phase, st.Message, st.LastRun)
	}
	if h := st.History; h == nil || h.Applied != 1 || h.LastApplied != "0001" {
		t.Fatalf("the status shows the history as the failed run left it: %+v", h)
	}
	raw, err := json.Marshal(f.migStatus(res))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(raw), "hunter2") || strings.Contains(string(raw), "INSERT INTO") {
		t.Fatalf("the status carries SQL: %s", raw)
	}
}

// policy.statementTimeout bounds each statement of the run, and is part
// of the plan: a file that runs past it fails, and rolls back.
func TestPolicyStatementTimeoutBoundsEachStatement(t *testing.T) {
	t.Parallel()
	f := newFixture(t, "")
	res := f.migration("app", map[string]string{"0001_slow.sql": "CREATE TABLE public.slow (id int);\nSELECT pg_sleep(3);\n"}, api.ApplyAlways)
	res.Migration.Spec.Policy.StatementTimeout = "300ms"
	f.runMigration(res, Apply)
	st := f.migStatus(res)
	if st.Phase != api.PhaseFailed || !strings.Contains(st.Message, "statement timeout (300ms)") {
		t.Fatalf("the slow file: phase %s (%s), want Failed past the statement timeout", st.Phase, st.Message)
	}
	if f.tableExists("slow") {
		t.Error("the file's transaction did not roll back")
	}
}
