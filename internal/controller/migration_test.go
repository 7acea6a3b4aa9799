package controller_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/ptah-run/ptah/internal/cli"
	"github.com/ptah-run/ptah/internal/controller"
	"github.com/ptah-run/ptah/internal/kubetest"
	"github.com/ptah-run/ptah/internal/postgres"
	"github.com/ptah-run/ptah/internal/source/oci/ocitest"
	api "github.com/ptah-run/ptah/pkg/api/v1alpha1"
)

// ledgerFiles are a migration sequence of two versions.
var ledgerFiles = map[string]string{
	"0001_accounts.sql": "CREATE TABLE public.ledger_accounts (id bigint PRIMARY KEY, name text NOT NULL);\n",
	"0002_entries.sql":  "CREATE TABLE public.ledger_entries (id bigint PRIMARY KEY, account bigint REFERENCES public.ledger_accounts);\n",
}

// declareMigration writes the ConfigMap of versioned files and the
// PtahMigration "ledger" reading it, its target the test's database.
func (c *cluster) declareMigration(files map[string]string) *api.PtahMigration {
	c.t.Helper()
	ctx := context.Background()
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "ledger-migrations", Namespace: c.ns}, Data: files}
	if err := c.e.Client.Create(ctx, cm); err != nil {
		c.t.Fatal(err)
	}
	m := &api.PtahMigration{ObjectMeta: metav1.ObjectMeta{Name: "ledger", Namespace: c.ns}, Spec: api.PtahMigrationSpec{
		Target: api.Target{URLFrom: &api.URLSource{SecretKeyRef: &api.SecretKeyRef{Name: "app-db", Key: "url"}}},
		Source: api.MigrationSource{ConfigMap: &api.ConfigMapSource{Name: "ledger-migrations"}},
	}}
	if err := c.e.Client.Create(ctx, m); err != nil {
		c.t.Fatal(err)
	}
	return m
}

// waitForMigration polls the PtahMigration "ledger" until ok accepts its
// status.
func (c *cluster) waitForMigration(what string, ok func(api.PtahMigrationStatus) bool) api.PtahMigrationStatus {
	c.t.Helper()
	var m api.PtahMigration
	deadline := time.Now().Add(settleWithin)
	for {
		if err := c.e.Client.Get(context.Background(), client.ObjectKey{Namespace: c.ns, Name: "ledger"}, &m); err != nil {
			c.t.Fatal(err)
		}
		if ok(m.Status) {
			return m.Status
		}
		if time.Now().After(deadline) {
			c.dump()
			c.t.Fatalf("waiting for %s of ledger: the status is %s/%s: %s", what, m.Status.Phase, m.Status.Reason, m.Status.Message)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// history is the migration history ptah recorded for "ledger", version
// -> how it got there (none before ptah created its table).
func (c *cluster) history() map[string]string {
	c.t.Helper()
	h, err := c.readHistory()
	if err != nil {
		c.t.Fatal(err)
	}
	return h
}

func (c *cluster) readHistory() (map[string]string, error) {
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, c.url)
	if err != nil {
		return nil, err
	}
	defer conn.Close(ctx)
	out := map[string]string{}
	rows, err := conn.Query(ctx, "SELECT version, how FROM ptah.migration_history WHERE resource = $1", api.KindPtahMigration+"/"+c.ns+"/ledger")
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "42P01" {
		return out, nil
	}
	if err != nil {
		return nil, err
	}
	for rows.Next() {
		var v, how string
		if err := rows.Scan(&v, &how); err != nil {
			return nil, err
		}
		out[v] = how
	}
	return out, rows.Err()
}

// TestServeRunsAPtahMigrationThroughJobsInCluster is ptah serve's whole
// job for one PtahMigration: a reading Job compares the history with the
// files of the ConfigMap and publishes the pending versions, a person
// approves the plan's UID with ptah approve --cluster, the manager
// claims it, takes the Lease, re-derives, spends the approval and
// dispatches the apply Job, which runs the files it reads from the
// source, each checked against the plan's checksum, and records them in
// the history; the manager accounts for it and verifies: InSync.
func TestServeRunsAPtahMigrationThroughJobsInCluster(t *testing.T) {
	c := newCluster(t)
	ctx := context.Background()
	c.declareMigration(ledgerFiles)
	c.serve()

	st := c.waitForMigration("the plan", func(s api.PtahMigrationStatus) bool {
		return s.Phase == api.PhaseAwaitingApproval && s.Plan != nil
	})
	var plan api.PtahMigrationPlan
	if err := c.e.Client.Get(ctx, client.ObjectKey{Namespace: c.ns, Name: st.Plan.Name}, &plan); err != nil {
		t.Fatal(err)
	}
	if string(plan.UID) != st.Plan.UID || len(plan.Spec.Versions) != 2 || plan.Spec.Versions[0].Version != "0001" ||
		plan.Spec.Bindings.ArtifactDigest == "" || plan.Spec.Bindings.HistoryFingerprint == "" {
		t.Fatalf("the published plan %s: %+v", plan.Name, plan.Spec)
	}
	if c.tableExists("public.ledger_accounts") {
		t.Fatal("a version ran before anyone approved the plan")
	}
	// What a person reviews: ptah plan --cluster shows the published plan.
	if out := c.ptah(0, "plan", "ledger", "-o", "json"); !strings.Contains(out, st.Plan.UID) || !strings.Contains(out, "0002") {
		t.Errorf("ptah plan --cluster does not show plan %s and its versions:\n%s", st.Plan.UID, out)
	}

	c.approve(st.Plan)

	st = c.waitForMigration("InSync", func(s api.PtahMigrationStatus) bool { return s.Phase == api.PhaseInSync })
	if !c.tableExists("public.ledger_entries") {
		t.Fatal("InSync, and the last version's table does not exist")
	}
	if h := c.history(); len(h) != 2 || h["0001"] == "" || h["0002"] == "" {
		t.Errorf("history %v, want versions 0001 and 0002", h)
	}
	if r := st.LastRun; r == nil || r.Outcome != api.OutcomeSucceeded || r.Plan.UID != string(plan.UID) || len(r.Versions) != 2 {
		t.Errorf("last run: %+v; want plan %s succeeded with both versions", st.LastRun, plan.UID)
	}
	if st.History == nil || st.History.Applied != 2 {
		t.Errorf("status history %+v, want 2 applied", st.History)
	}
	if st.ActiveOperation != nil || st.OwedRelease != nil || st.UnresolvedRun != nil {
		t.Errorf("InSync with work on record: %+v", st)
	}
	var approvals api.PtahMigrationApprovalList
	if err := c.e.Client.List(ctx, &approvals, client.InNamespace(c.ns)); err != nil || len(approvals.Items) != 1 {
		t.Fatalf("approvals: %v", err)
	}
	if con := approvals.Items[0].Status.Consumed; con == nil || con.OperationID != st.LastRun.OperationID {
		t.Errorf("the approval is not consumed by the run that spent it: %+v", approvals.Items[0].Status)
	}
	c.noneLeft()
}

// noneLeft checks that no Lease and no Job of the test is left.
func (c *cluster) noneLeft() {
	c.t.Helper()
	ctx := context.Background()
	var leases coordinationv1.LeaseList
	if err := c.e.Client.List(ctx, &leases, client.InNamespace(c.ns)); err != nil || len(leases.Items) != 0 {
		c.t.Errorf("%d Leases left after the run, want none: %v", len(leases.Items), err)
	}
	var jobs batchv1.JobList
	if err := c.e.Client.List(ctx, &jobs, client.InNamespace(c.ns)); err != nil {
		c.t.Fatal(err)
	}
	for _, j := range jobs.Items {
		c.t.Errorf("Job %s (%s) left after the run", j.Name, j.Labels["app.kubernetes.io/component"])
	}
}

// TestUncertainMigrationApplyKeepsTheDatabaseWhileItsPodMayRunInCluster:
// the apply's Pod runs on after its Job is deleted without propagation (an
// orphan): the database's Lease stays held and nothing is decided while
// it may still write. Then it is killed (exit 137, no result) while it may
// have run part of the files. The manager never runs them again by itself
// and never creates the Job again: it records an unresolved run, by
// dispatch, releases the Lease now that the Pod has ended, and blocks. A
// person's acknowledgment of that exact operation settles it; the history
// is read again and what remains is planned anew, for a new approval (the
// first was spent).
func TestUncertainMigrationApplyKeepsTheDatabaseWhileItsPodMayRunInCluster(t *testing.T) {
	c := newCluster(t)
	ctx := context.Background()
	m := c.declareMigration(ledgerFiles)
	c.stall = func(job *batchv1.Job) bool { return job.Labels["app.kubernetes.io/component"] == controller.TaskApply }
	c.serve()
	first := c.waitForMigration("the plan", func(s api.PtahMigrationStatus) bool {
		return s.Phase == api.PhaseAwaitingApproval && s.Plan != nil
	})
	c.approve(first.Plan)
	st := c.waitForMigration("the dispatch", func(s api.PtahMigrationStatus) bool {
		return s.ActiveOperation != nil && s.ActiveOperation.DispatchedAt != nil
	})
	op := st.ActiveOperation
	job := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: c.ns, Name: controller.JobName(string(m.UID), op.ID)}}
	c.waitForPod(job.Name)
	if err := c.e.Client.Delete(ctx, job, client.PropagationPolicy(metav1.DeletePropagationOrphan)); err != nil {
		t.Fatal(err)
	}
	c.orphaned(job)
	time.Sleep(6 * time.Second) // a poll of the manager's
	st = c.waitForMigration("the dispatch", func(api.PtahMigrationStatus) bool { return true })
	if st.ActiveOperation == nil || st.ActiveOperation.ID != op.ID || st.UnresolvedRun != nil {
		t.Fatalf("with its Pod running, the run was settled: active %+v, unresolved %+v", st.ActiveOperation, st.UnresolvedRun)
	}
	var lease coordinationv1.Lease
	if err := c.e.Client.Get(ctx, client.ObjectKey{Namespace: c.ns, Name: controller.LeaseName(op.CoordinationDigest)}, &lease); err != nil ||
		lease.Spec.HolderIdentity == nil || *lease.Spec.HolderIdentity != op.ID {
		t.Fatalf("the Lease while the orphaned Pod runs: %+v, %v; want it held by %s", lease.Spec, err, op.ID)
	}
	c.endOrphan(job.Name, 137)

	st = c.waitForMigration("the unresolved run", func(s api.PtahMigrationStatus) bool { return s.UnresolvedRun != nil })
	u := st.UnresolvedRun
	if u.OperationID != op.ID || u.ReportedBy != api.ReportedByDispatch || u.Outcome != api.OutcomeUnknown ||
		st.Phase != api.PhaseBlocked || st.Reason != api.ReasonUnresolvedRun {
		t.Fatalf("status %s/%s, unresolved run %+v; want operation %s, by dispatch, Unknown", st.Phase, st.Reason, u, op.ID)
	}
	time.Sleep(6 * time.Second) // a poll of the manager's
	if n := c.runs(op.ID); n != 0 {
		t.Errorf("the killed operation's container ran %d times after it was killed, want never", n)
	}
	if c.jobExists(string(m.UID), op.ID) {
		// Removed or not, it is never created again: nothing else made it.
		t.Logf("the killed apply's Job is kept as evidence")
	}
	if st := c.waitForMigration("blocked", func(s api.PtahMigrationStatus) bool { return true }); st.UnresolvedRun == nil ||
		st.Phase != api.PhaseBlocked || st.ActiveOperation != nil {
		t.Fatalf("the unresolved run did not stay in place: %+v", st)
	}
	var leases coordinationv1.LeaseList
	if err := c.e.Client.List(ctx, &leases, client.InNamespace(c.ns)); err != nil || len(leases.Items) != 0 {
		t.Errorf("%d Leases once the killed Pod ended, want none (its release owed and done): %v", len(leases.Items), err)
	}

	// An acknowledgment of another operation settles nothing.
	c.acknowledge(m, "0000000000000000", "a guess")
	time.Sleep(3 * time.Second)
	if st := c.waitForMigration("still blocked", func(s api.PtahMigrationStatus) bool { return true }); st.UnresolvedRun == nil {
		t.Fatal("an acknowledgment of another operation settled the run")
	}

	c.acknowledge(m, op.ID, "the Pod never started its container: nothing ran")
	st = c.waitForMigration("a new plan", func(s api.PtahMigrationStatus) bool {
		return s.UnresolvedRun == nil && s.Phase == api.PhaseAwaitingApproval && s.Plan != nil
	})
	if r := st.ResolvedRun; r == nil || r.OperationID != op.ID || r.By != "alice" {
		t.Errorf("resolved run %+v, want operation %s by alice", st.ResolvedRun, op.ID)
	}
	if st.Plan.UID == first.Plan.UID {
		t.Error("the spent plan is current again")
	}
	if c.tableExists("public.ledger_accounts") {
		t.Error("a version ran with no approval")
	}
}

// acknowledge records alice's acknowledgment of operation id of m's run.
func (c *cluster) acknowledge(m *api.PtahMigration, id, reason string) {
	c.t.Helper()
	a := &api.PtahMigrationRunAcknowledgment{ObjectMeta: metav1.ObjectMeta{GenerateName: "ledger-ack-", Namespace: c.ns,
		Labels: map[string]string{"ptah.run/migration": m.Name}},
		Spec: api.PtahMigrationRunAcknowledgmentSpec{Migration: api.ObjectReference{Name: m.Name, UID: string(m.UID)}, OperationID: id,
			By: "alice", At: api.NewTime(time.Now()), Reason: reason}}
	if err := c.e.Client.Create(context.Background(), a); err != nil {
		c.t.Fatal(err)
	}
}

// component is the task of the Job that runs operation id.
func (c *cluster) component(id string) string {
	var jobs batchv1.JobList
	if err := c.e.Client.List(context.Background(), &jobs, client.InNamespace(c.ns), client.MatchingLabels{controller.LabelOperation: id}); err != nil ||
		len(jobs.Items) == 0 {
		return ""
	}
	return jobs.Items[0].Labels["app.kubernetes.io/component"]
}

// TestAMigrationPodKilledPartWayIsResolvedByAPersonInCluster: the apply's
// Pod dies (exit 137, no result) after the first file committed and while
// the second runs. The manager records the run as unresolved, runs
// nothing more, and keeps it so until a person settles it; the
// acknowledgment of that operation settles it; the history (the first
// version, recorded by the run) is read again and only the second version
// is planned, for a new approval; it runs once, and the migration is
// InSync.
func TestAMigrationPodKilledPartWayIsResolvedByAPersonInCluster(t *testing.T) {
	c := newCluster(t)
	ctx := context.Background()
	files := map[string]string{
		"0001_accounts.sql": ledgerFiles["0001_accounts.sql"],
		"0002_slow.sql":     "SELECT pg_sleep(3);\nCREATE TABLE public.ledger_slow (id bigint);\n",
	}
	c.declareMigration(files)
	run := runPtah(t)
	var killedMu sync.Mutex
	var killedID string
	killed := func() string { killedMu.Lock(); defer killedMu.Unlock(); return killedID }
	c.instead = func(ct kubetest.Container) (int, bool) {
		id := argAfter(ct.Args, "--operation")
		if killed() != "" || c.component(id) != controller.TaskApply {
			return 0, false
		}
		killedMu.Lock()
		killedID = id
		killedMu.Unlock()
		// The Pod dies once the first version is in the history: its
		// session goes with it, and it leaves no result.
		runCtx, cancel := context.WithCancel(ctx)
		go func() {
			defer cancel()
			for range 300 {
				if h, err := c.readHistory(); err == nil && h["0001"] != "" {
					return
				}
				time.Sleep(50 * time.Millisecond)
			}
		}()
		run(runCtx, kubetest.Container{Args: ct.Args, Env: ct.Env, TerminationLog: filepath.Join(t.TempDir(), "lost")})
		return 137, true
	}
	c.serve()
	first := c.waitForMigration("the plan", func(s api.PtahMigrationStatus) bool {
		return s.Phase == api.PhaseAwaitingApproval && s.Plan != nil
	})
	c.approve(first.Plan)
	st := c.waitForMigration("the unresolved run", func(s api.PtahMigrationStatus) bool { return s.UnresolvedRun != nil })
	if st.UnresolvedRun.OperationID != killed() || st.Reason != api.ReasonUnresolvedRun {
		t.Fatalf("status %s/%s, unresolved %+v; want the killed operation %s", st.Phase, st.Reason, st.UnresolvedRun, killed())
	}
	if h := c.history(); h["0001"] == "" || h["0002"] != "" || c.tableExists("public.ledger_slow") {
		t.Fatalf("history %v: want the first version alone", h)
	}
	time.Sleep(6 * time.Second) // a poll of the manager's
	if n := c.runs(killed()); n != 1 {
		t.Errorf("the killed operation ran %d times, want once", n)
	}

	// The on-call engineer reads the evidence and settles the run, with
	// ptah resolve-run --cluster: the record from the cluster, the journal
	// and the history from the database.
	out := c.resolveRun(0, "ledger")
	for _, want := range []string{killed(), "0001", "0002"} {
		if !strings.Contains(out, want) {
			t.Errorf("ptah resolve-run shows no %q:\n%s", want, out)
		}
	}
	c.resolveRun(0, "ledger", "--operation", killed(), "--reason", "0001 is in the history; 0002 rolled back with the session")
	st = c.waitForMigration("a plan of what remains", func(s api.PtahMigrationStatus) bool {
		return s.UnresolvedRun == nil && s.Phase == api.PhaseAwaitingApproval && s.Plan != nil
	})
	if r := st.ResolvedRun; r == nil || r.OperationID != killed() || r.By != "alice" {
		t.Errorf("resolved run %+v, want the killed operation, by alice", st.ResolvedRun)
	}
	var plan api.PtahMigrationPlan
	if err := c.e.Client.Get(ctx, client.ObjectKey{Namespace: c.ns, Name: st.Plan.Name}, &plan); err != nil {
		t.Fatal(err)
	}
	if len(plan.Spec.Versions) != 1 || plan.Spec.Versions[0].Version != "0002" {
		t.Fatalf("the plan after the resolution: %+v, want version 0002 alone", plan.Spec.Versions)
	}
	c.approve(st.Plan)
	c.waitForMigration("InSync", func(s api.PtahMigrationStatus) bool { return s.Phase == api.PhaseInSync })
	if h := c.history(); len(h) != 2 || !c.tableExists("public.ledger_slow") {
		t.Errorf("history %v after the second run, want both versions", h)
	}
	c.noneLeft()
}

// TestMigrationApplyIsNeverRecreatedOnceDispatchedInCluster: the manager
// stops dead once the dispatch marker is durable (the approval spent
// before it) and before the apply Job exists. The next manager never
// creates that Job: the run may have happened as far as the record says,
// and a migration's files cannot be run again in part, so it is an
// unresolved run, reported by dispatch, for a person; nothing runs.
func TestMigrationApplyIsNeverRecreatedOnceDispatchedInCluster(t *testing.T) {
	c := newCluster(t)
	ctx := context.Background()
	m := c.declareMigration(ledgerFiles)
	uid := string(m.UID)
	c.crashAt(controller.FailAfterDispatchMarker, func() {
		st := c.waitForMigration("the plan", func(s api.PtahMigrationStatus) bool { return s.Phase == api.PhaseAwaitingApproval && s.Plan != nil })
		c.approve(st.Plan)
	})
	st := c.waitForMigration("the marker", func(api.PtahMigrationStatus) bool { return true })
	op := st.ActiveOperation
	if op == nil || op.DispatchedAt == nil {
		t.Fatalf("after the crash the status holds no dispatched claim: %+v", st)
	}
	if c.jobExists(uid, op.ID) {
		t.Fatal("the apply Job exists: the failpoint is after its creation")
	}
	var approvals api.PtahMigrationApprovalList
	if err := c.e.Client.List(ctx, &approvals, client.InNamespace(c.ns)); err != nil || len(approvals.Items) != 1 {
		t.Fatalf("approvals: %v", err)
	}
	if con := approvals.Items[0].Status.Consumed; con == nil || con.OperationID != op.ID {
		t.Errorf("the dispatch marker stands and the approval is not spent by its operation: %+v", approvals.Items[0].Status)
	}

	c.serve()
	st = c.waitForMigration("the unresolved run", func(s api.PtahMigrationStatus) bool { return s.UnresolvedRun != nil })
	if u := st.UnresolvedRun; u.OperationID != op.ID || u.ReportedBy != api.ReportedByDispatch || st.ActiveOperation != nil {
		t.Errorf("unresolved run %+v (active %+v); want operation %s, reported by dispatch", u, st.ActiveOperation, op.ID)
	}
	time.Sleep(6 * time.Second) // a poll of the manager's
	if n := c.runs(op.ID); n != 0 || c.jobExists(uid, op.ID) {
		t.Errorf("the dispatched operation ran %d times after the crash (Job exists: %v); want never", n, c.jobExists(uid, op.ID))
	}
	if h := c.history(); len(h) != 0 || c.tableExists("public.ledger_accounts") {
		t.Errorf("history %v: a version ran, yet no apply ever did", h)
	}
}

// TestAnUnresolvedRunOutlivesARestoreWithoutStatusInCluster: a
// PtahMigration whose run is unresolved is deleted and restored from a
// backup that keeps its metadata and spec but not its status (as backup
// tools restore custom resources by default). The unresolved run, kept in
// the resource's annotation, comes back: nothing is planned or run until
// a person settles it. (The run never started: the database's journal
// has nothing that would block a new plan by itself.)
func TestAnUnresolvedRunOutlivesARestoreWithoutStatusInCluster(t *testing.T) {
	c := newCluster(t)
	ctx := context.Background()
	m := c.declareMigration(ledgerFiles)
	c.crashAt(controller.FailAfterDispatchMarker, func() {
		st := c.waitForMigration("the plan", func(s api.PtahMigrationStatus) bool { return s.Phase == api.PhaseAwaitingApproval && s.Plan != nil })
		c.approve(st.Plan)
	})
	c.serve()
	st := c.waitForMigration("the unresolved run", func(s api.PtahMigrationStatus) bool { return s.UnresolvedRun != nil })
	id := st.UnresolvedRun.OperationID
	if err := c.e.Client.Get(ctx, client.ObjectKeyFromObject(m), m); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(m.Annotations[controller.AnnotationUnresolvedRun], id) {
		t.Fatalf("the unresolved run %s is not kept on the resource: annotations %v", id, m.Annotations)
	}

	// The backup: metadata and spec, no status. Then the resource goes
	// (its finalizer lets it once nothing may still write) and comes back.
	backup := &api.PtahMigration{ObjectMeta: metav1.ObjectMeta{Name: m.Name, Namespace: m.Namespace, Labels: m.Labels,
		Annotations: m.Annotations}, Spec: m.Spec}
	if err := c.e.Client.Delete(ctx, m); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(settleWithin)
	for c.e.Client.Get(ctx, client.ObjectKeyFromObject(m), m) == nil {
		if time.Now().After(deadline) {
			t.Fatalf("the deleted resource stays: finalizers %v", m.Finalizers)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if err := c.e.Client.Create(ctx, backup); err != nil {
		t.Fatal(err)
	}

	st = c.waitForMigration("the restored record", func(s api.PtahMigrationStatus) bool { return s.Phase != "" })
	time.Sleep(3 * time.Second) // anything the manager would do next, it does now
	st = c.waitForMigration("the restored record", func(api.PtahMigrationStatus) bool { return true })
	if u := st.UnresolvedRun; u == nil || u.OperationID != id || st.Phase != api.PhaseBlocked || st.Reason != api.ReasonUnresolvedRun {
		t.Fatalf("after the restore: %s/%s, unresolved %+v; want run %s blocking it", st.Phase, st.Reason, st.UnresolvedRun, id)
	}
	if st.Plan != nil || st.ActiveOperation != nil {
		t.Errorf("after the restore a plan is current (%+v) or claimed (%+v)", st.Plan, st.ActiveOperation)
	}
	if h := c.history(); len(h) != 0 {
		t.Errorf("history %v: something ran", h)
	}
}

// resolveRun runs ptah resolve-run --cluster as alice, who may not read
// the database's Secret (its URL comes from the environment), and checks
// its exit code; it returns its output.
func (c *cluster) resolveRun(code int, args ...string) string {
	c.t.Helper()
	// The process's environment is every parallel test's: a variable of
	// this test's own.
	name := "LEDGER_URL_" + strings.ReplaceAll(strings.ToUpper(c.ns), "-", "_")
	if err := os.Setenv(name, c.url); err != nil {
		c.t.Fatal(err)
	}
	c.t.Cleanup(func() { _ = os.Unsetenv(name) })
	return c.ptah(code, append(append([]string{"resolve-run"}, args...), "--database-url-env", name)...)
}

// ptah runs ptah with args as alice against the test's namespace
// (--cluster), and checks its exit code; it returns its output.
func (c *cluster) ptah(code int, args ...string) string {
	c.t.Helper()
	if !c.aliceBound {
		c.e.Bind(c.t, c.ns, "alice", "ptah-approver", "ptah-viewer")
		c.aliceBound = true
	}
	var out, errs bytes.Buffer
	args = append(args, "--cluster", "--kubeconfig", c.e.Kubeconfig(c.t, "alice"), "-n", c.ns)
	if got := cli.Run(context.Background(), args, &out, &errs); got != code {
		c.t.Fatalf("ptah %s: exit %d, want %d: %s%s", strings.Join(args, " "), got, code, out.String(), errs.String())
	}
	return out.String()
}

// TestAFailedReadingIsTheResourcesReasonWithoutItsCredentialsInCluster:
// a database the reading cannot reach is the resource's Blocked
// (ReadingFailed), saying why, and nothing else starts; the URL's
// password appears nowhere in the status or the Events.
func TestAFailedReadingIsTheResourcesReasonWithoutItsCredentialsInCluster(t *testing.T) {
	c := newCluster(t)
	ctx := context.Background()
	bad := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "bad-db", Namespace: c.ns},
		Data: map[string][]byte{"url": []byte("postgres://ledger:hunter2-secret@127.0.0.1:1/ledger?connect_timeout=2")}}
	if err := c.e.Client.Create(ctx, bad); err != nil {
		t.Fatal(err)
	}
	m := c.declareMigration(ledgerFiles)
	m.Spec.Target.URLFrom.SecretKeyRef.Name = "bad-db"
	if err := c.e.Client.Update(ctx, m); err != nil {
		t.Fatal(err)
	}
	c.serve()
	st := c.waitForMigration("ReadingFailed", func(s api.PtahMigrationStatus) bool { return s.Reason == api.ReasonReadingFailed })
	if st.Phase != api.PhaseBlocked || !strings.Contains(st.Message, "reading the database") || st.Plan != nil || st.ActiveOperation != nil {
		t.Errorf("status %s/%s: %s (plan %+v)", st.Phase, st.Reason, st.Message, st.Plan)
	}
	var events eventsv1.EventList
	if err := c.e.Client.List(ctx, &events, client.InNamespace(c.ns)); err != nil {
		t.Fatal(err)
	}
	for _, text := range append([]string{st.Message}, eventNotes(events)...) {
		if strings.Contains(text, "hunter2") {
			t.Errorf("the password is shown: %q", text)
		}
	}
}

func eventNotes(events eventsv1.EventList) []string {
	var out []string
	for _, ev := range events.Items {
		out = append(out, ev.Note)
	}
	return out
}

// waitForPod waits until the test kubelet has started the Pod of Job name.
func (c *cluster) waitForPod(name string) {
	c.t.Helper()
	deadline := time.Now().Add(settleWithin)
	for {
		var pod corev1.Pod
		err := c.e.Client.Get(context.Background(), client.ObjectKey{Namespace: c.ns, Name: name + "-pod"}, &pod)
		if err == nil && pod.Status.StartTime != nil {
			return
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("the Pod of Job %s did not start: %v", name, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// endOrphan ends the running Pod of the deleted Job name, with code and
// no result, as a node that killed it would.
func (c *cluster) endOrphan(name string, code int) {
	c.t.Helper()
	ctx := context.Background()
	var pod corev1.Pod
	if err := c.e.Client.Get(ctx, client.ObjectKey{Namespace: c.ns, Name: name + "-pod"}, &pod); err != nil {
		c.t.Fatal(err)
	}
	pod.Status.Phase = corev1.PodFailed
	pod.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: pod.Spec.Containers[0].Name, Image: pod.Spec.Containers[0].Image,
		State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: int32(code), Reason: "Error",
			StartedAt: *pod.Status.StartTime, FinishedAt: metav1.Now()}}}}
	if err := c.e.Client.Status().Update(ctx, &pod); err != nil {
		c.t.Fatal(err)
	}
}

// TestMigrationBlocksOnAContestedRealmWithoutDispatchingAJobInCluster: a
// PtahMigration on a database a PtahSchema of the cluster already claims
// is Blocked (RealmConflict) before anything is dispatched, even with
// policy Always: one census spans both families. Once both declare the
// sharing, it runs.
func TestMigrationBlocksOnAContestedRealmWithoutDispatchingAJobInCluster(t *testing.T) {
	c := newCluster(t)
	ctx := context.Background()
	c.serve()
	c.declareNamed("first", map[string]string{"01_a.sql": "CREATE SCHEMA shared_a;\nCREATE TABLE shared_a.a (id bigint);\n"},
		api.Target{}, api.Policy{Apply: api.ApplyNever}, "shared_a")
	c.waitForNamed("first", "its reading", func(s api.PtahSchemaStatus) bool { return s.Target != nil && s.Plan != nil })

	m := c.declareMigration(ledgerFiles)
	m.Spec.Policy.Apply = api.ApplyAlways
	if err := c.e.Client.Update(ctx, m); err != nil {
		t.Fatal(err)
	}
	st := c.waitForMigration("the census", func(s api.PtahMigrationStatus) bool { return s.Reason == api.ReasonRealmConflict })
	if !strings.Contains(st.Message, "first") {
		t.Errorf("the conflict does not name the rival: %s", st.Message)
	}
	if st.ActiveOperation != nil || st.LastRun != nil || len(c.history()) != 0 {
		t.Errorf("a contested migration claimed or ran: active %+v, last run %+v", st.ActiveOperation, st.LastRun)
	}
	var jobs batchv1.JobList
	if err := c.e.Client.List(ctx, &jobs, client.InNamespace(c.ns), client.MatchingLabels{"app.kubernetes.io/component": controller.TaskApply}); err != nil || len(jobs.Items) != 0 {
		t.Errorf("%d apply Jobs exist, want none: %v", len(jobs.Items), err)
	}

	var s api.PtahSchema
	if err := c.e.Client.Get(ctx, client.ObjectKey{Namespace: c.ns, Name: "first"}, &s); err != nil {
		t.Fatal(err)
	}
	s.Spec.Target.SharedRealm = true
	if err := c.e.Client.Update(ctx, &s); err != nil {
		t.Fatal(err)
	}
	if err := c.e.Client.Get(ctx, client.ObjectKeyFromObject(m), m); err != nil {
		t.Fatal(err)
	}
	m.Spec.Target.SharedRealm = true
	if err := c.e.Client.Update(ctx, m); err != nil {
		t.Fatal(err)
	}
	c.waitForMigration("InSync once shared", func(s api.PtahMigrationStatus) bool { return s.Phase == api.PhaseInSync })
	if len(c.history()) != 2 || c.tableExists("shared_a.a") {
		t.Error("sharing the database, the migration ran something else than its own files")
	}
}

// TestMigrationApplyDiscardsAPlanTheEvidenceNoLongerSupportsInCluster:
// while the manager re-derives an approved claim under the Lease, a
// person records the first version by hand. The history the plan was
// selected against moved: the claim is dropped before anything is
// dispatched, and the next plan holds the second version alone, for a new
// approval.
func TestMigrationApplyDiscardsAPlanTheEvidenceNoLongerSupportsInCluster(t *testing.T) {
	c := newCluster(t)
	ctx := context.Background()
	c.declareMigration(ledgerFiles)
	c.instead = func(ct kubetest.Container) (int, bool) {
		if strings.HasSuffix(argAfter(ct.Args, "--operation"), "-rederive") {
			c.recordByHand("0001", "accounts", ledgerFiles["0001_accounts.sql"])
		}
		return 0, false
	}
	c.serve()
	first := c.waitForMigration("the plan", func(s api.PtahMigrationStatus) bool { return s.Phase == api.PhaseAwaitingApproval && s.Plan != nil })
	c.approve(first.Plan)
	st := c.waitForMigration("a plan for the moved history", func(s api.PtahMigrationStatus) bool {
		return s.Phase == api.PhaseAwaitingApproval && s.Plan != nil && s.Plan.UID != first.Plan.UID
	})
	var plan api.PtahMigrationPlan
	if err := c.e.Client.Get(ctx, client.ObjectKey{Namespace: c.ns, Name: st.Plan.Name}, &plan); err != nil {
		t.Fatal(err)
	}
	if len(plan.Spec.Versions) != 1 || plan.Spec.Versions[0].Version != "0002" {
		t.Errorf("the new plan: %+v, want version 0002 alone", plan.Spec.Versions)
	}
	if st.LastRun != nil || c.tableExists("public.ledger_accounts") {
		t.Errorf("a run is on record (%+v), or a file ran: want the claim dropped before dispatch", st.LastRun)
	}
	var jobs batchv1.JobList
	if err := c.e.Client.List(ctx, &jobs, client.InNamespace(c.ns), client.MatchingLabels{"app.kubernetes.io/component": controller.TaskApply}); err != nil || len(jobs.Items) != 0 {
		t.Errorf("%d apply Jobs exist, want none: %v", len(jobs.Items), err)
	}
}

// recordByHand records version of "ledger" in the history as a person
// marking it applied would, with the checksum of its file's text.
func (c *cluster) recordByHand(version, name, text string) {
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, c.url)
	if err != nil {
		c.t.Error(err)
		return
	}
	defer conn.Close(ctx)
	sum := sha256.Sum256([]byte(text))
	err = pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		return postgres.RecordHistory(ctx, tx, api.KindPtahMigration+"/"+c.ns+"/ledger", []postgres.HistoryRow{{Version: version, Name: name,
			Checksum: "sha256:" + hex.EncodeToString(sum[:]), AppliedBy: "bob"}}, postgres.HowMarked)
	})
	if err != nil {
		c.t.Error(err)
	}
}

// orphaned waits for what the garbage collector (the test kubelet's, see
// kubetest.Kubelet) does for a Job deleted with orphan propagation: the
// Job goes and its Pod stays, owned by nothing.
func (c *cluster) orphaned(job *batchv1.Job) {
	c.t.Helper()
	ctx := context.Background()
	deadline := time.Now().Add(settleWithin)
	for {
		var pod corev1.Pod
		podErr := c.e.Client.Get(ctx, client.ObjectKey{Namespace: job.Namespace, Name: job.Name + "-pod"}, &pod)
		jobErr := c.e.Client.Get(ctx, client.ObjectKeyFromObject(job), &batchv1.Job{})
		if podErr != nil {
			c.t.Fatalf("the orphaned Pod of Job %s: %v", job.Name, podErr)
		}
		if apierrors.IsNotFound(jobErr) && len(pod.OwnerReferences) == 0 {
			return
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("Job %s deleted with orphan propagation: still there (%v), its Pod owned by %+v", job.Name, jobErr, pod.OwnerReferences)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestServeRunsAPtahMigrationFromAnOCIArtifactInCluster: the versioned
// files come from an OCI artifact pinned by digest, from a registry that
// wants credentials: the reading and the apply each pull it (the pull
// Secret reaches their Pods, never the manager), and the plan binds it.
func TestServeRunsAPtahMigrationFromAnOCIArtifactInCluster(t *testing.T) {
	c := newCluster(t)
	ctx := context.Background()
	reg := ocitest.StartWithAuth(t, "ci", "s3cret-token")
	pull := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "registry-creds", Namespace: c.ns}, Type: corev1.SecretTypeDockerConfigJson,
		Data: map[string][]byte{corev1.DockerConfigJsonKey: reg.DockerConfig("ci", "s3cret-token")}}
	if err := c.e.Client.Create(ctx, pull); err != nil {
		t.Fatal(err)
	}
	ref := reg.Push(t, "acme/ledger-migrations", ledgerFiles)
	m := &api.PtahMigration{ObjectMeta: metav1.ObjectMeta{Name: "ledger", Namespace: c.ns}, Spec: api.PtahMigrationSpec{
		Target: api.Target{URLFrom: &api.URLSource{SecretKeyRef: &api.SecretKeyRef{Name: "app-db", Key: "url"}}},
		Source: api.MigrationSource{OCI: &api.OCISource{Ref: ref, PullSecret: "registry-creds"}},
	}}
	if err := c.e.Client.Create(ctx, m); err != nil {
		t.Fatal(err)
	}
	c.serve()
	st := c.waitForMigration("the plan", func(s api.PtahMigrationStatus) bool { return s.Phase == api.PhaseAwaitingApproval && s.Plan != nil })
	var plan api.PtahMigrationPlan
	if err := c.e.Client.Get(ctx, client.ObjectKey{Namespace: c.ns, Name: st.Plan.Name}, &plan); err != nil {
		t.Fatal(err)
	}
	if len(plan.Spec.Versions) != 2 || plan.Spec.Bindings.ArtifactDigest == "" {
		t.Fatalf("the plan of the artifact: %+v", plan.Spec)
	}
	c.approve(st.Plan)
	c.waitForMigration("InSync", func(s api.PtahMigrationStatus) bool { return s.Phase == api.PhaseInSync })
	if h := c.history(); len(h) != 2 || !c.tableExists("public.ledger_entries") {
		t.Errorf("history %v after the run of the artifact's files, want both versions", h)
	}
}
