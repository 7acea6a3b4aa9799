package controller_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ptah-run/ptah/internal/controller"
	"github.com/ptah-run/ptah/internal/kubetest"
	api "github.com/ptah-run/ptah/pkg/api/v1alpha1"
)

// TestServeConvergesThroughAManagerRestartAtEveryStepInCluster runs a
// PtahSchema and a PtahMigration from creation to InSync with the manager
// stopped and started again every few hundred milliseconds, so that its
// stops fall between every two steps of the pass (a reading under way, a
// plan published, a claim, the Lease taken, a re-derivation, a dispatch,
// a run accounted for, a release owed): each resource's plan runs once,
// and only once, whatever the next manager finds.
func TestServeConvergesThroughAManagerRestartAtEveryStepInCluster(t *testing.T) {
	for _, f := range families {
		t.Run(f.kind, func(t *testing.T) {
			c := setupCluster(t)
			applies := map[string]bool{} // the apply operations run
			c.instead = func(ct kubetest.Container) (int, bool) {
				if id := argAfter(ct.Args, "--operation"); c.component(id) == controller.TaskApply {
					c.mu.Lock()
					applies[id] = true
					c.mu.Unlock()
				}
				return 0, false
			}
			f.declare(c)
			settled := map[string]bool{}
			inSync := func() bool {
				if f.kind == api.KindPtahMigration {
					// A stop between the dispatch marker and the Job's
					// creation leaves a migration's run unresolved: its Job
					// never existed, as the person settling it establishes.
					if u := c.waitForMigration("a status", func(api.PtahMigrationStatus) bool { return true }).UnresolvedRun; u != nil && !settled[u.OperationID] {
						if n := c.runs(u.OperationID); n != 0 {
							t.Fatalf("run %s is unresolved after its Pod ran %d times", u.OperationID, n)
						}
						var m api.PtahMigration
						if err := c.e.Client.Get(context.Background(), client.ObjectKey{Namespace: c.ns, Name: f.name}, &m); err != nil {
							t.Fatal(err)
						}
						c.acknowledge(&m, u.OperationID, "its Job was never created: nothing ran")
						settled[u.OperationID] = true
					}
				}
				rs := f.state(c)
				if rs.Phase == api.PhaseAwaitingApproval && rs.Plan != nil {
					if _, approved := f.approvals(c)[rs.Plan.UID]; !approved {
						c.approve(rs.Plan)
					}
				}
				return rs.Phase == api.PhaseInSync
			}
			// Stops at varying offsets (a stop waits for the manager to
			// return; a reconcile under way is cut off mid-step). A manager
			// that left nothing changed lived too short for this machine:
			// the next lives longer, until one gets a step further, so a
			// busy machine gets there too, only more slowly.
			lifetimes := []time.Duration{400, 900, 600, 1300, 300, 1000, 500, 1500}
			deadline := time.Now().Add(8 * time.Minute)
			restarts, stretch := 0, 1.0
			for i := 0; !inSync(); i++ {
				if time.Now().After(deadline) {
					c.dump()
					rs := f.state(c)
					t.Fatalf("not InSync after %d restarts: %s/%s: %s", restarts, rs.Phase, rs.Reason, rs.Message)
				}
				before := c.footprint(f.kind, f.name)
				stop := c.start()
				time.Sleep(time.Duration(float64(lifetimes[i%len(lifetimes)]*time.Millisecond) * stretch))
				stop()
				restarts++
				if c.footprint(f.kind, f.name) == before {
					stretch = min(stretch*1.5, 20)
				} else {
					stretch = 1
				}
			}
			t.Logf("InSync after %d restarts", restarts)
			c.mu.Lock()
			defer c.mu.Unlock()
			if len(applies) != 1 {
				t.Errorf("%d apply operations ran, want one: %v", len(applies), applies)
			}
			t.Logf("%d runs left unresolved by a stop, and settled", len(settled))
			for id := range applies {
				if n := c.ran[id]; n != 1 {
					t.Errorf("apply %s ran %d times, want once", id, n)
				}
			}
			if !f.converged(c) {
				t.Error("InSync, and the database does not hold what the resource declares")
			}
			c.noneLeft()
		})
	}
}

// footprint is what a manager's work leaves in the namespace: the
// resource's version (its status and annotations) and the Jobs there.
func (c *cluster) footprint(kind, name string) string {
	c.t.Helper()
	o, err := c.store().Get(context.Background(), kind, c.ns, name)
	if err != nil {
		c.t.Fatal(err)
	}
	var jobs batchv1.JobList
	if err := c.e.Client.List(context.Background(), &jobs, client.InNamespace(c.ns)); err != nil {
		c.t.Fatal(err)
	}
	fp := fmt.Sprint(o.ResourceVersion)
	for _, j := range jobs.Items {
		fp += " " + j.Name
	}
	return fp
}
