package controller_test

import (
	"context"
	"testing"
	"time"

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
	for _, kind := range []string{api.KindPtahSchema, api.KindPtahMigration} {
		t.Run(kind, func(t *testing.T) {
			c := newCluster(t)
			applies := map[string]bool{} // the apply operations run
			c.instead = func(ct kubetest.Container) (int, bool) {
				if id := argAfter(ct.Args, "--operation"); c.component(id) == controller.TaskApply {
					c.mu.Lock()
					applies[id] = true
					c.mu.Unlock()
				}
				return 0, false
			}
			inSync := func() bool {
				var st api.RunState
				if kind == api.KindPtahSchema {
					st = c.status().RunState
				} else {
					st = c.waitForMigration("a status", func(api.PtahMigrationStatus) bool { return true }).RunState
				}
				if st.Phase == api.PhaseAwaitingApproval && st.Plan != nil && !c.approved(kind, st.Plan.UID) {
					c.approve(st.Plan)
				}
				return st.Phase == api.PhaseInSync
			}
			if kind == api.KindPtahSchema {
				c.declare(map[string]string{"01_accounts.sql": accountsSQL}, api.Policy{})
			} else {
				c.declareMigration(ledgerFiles)
			}
			// Stops at varying offsets (a stop waits for the manager to
			// return; a reconcile under way is cut off mid-step).
			lifetimes := []time.Duration{400, 900, 600, 1300, 300, 1000, 500, 1500}
			deadline := time.Now().Add(3 * time.Minute)
			restarts := 0
			for i := 0; !inSync(); i++ {
				if time.Now().After(deadline) {
					c.dump()
					t.Fatalf("not InSync after %d restarts", restarts)
				}
				stop := c.start()
				time.Sleep(lifetimes[i%len(lifetimes)] * time.Millisecond)
				stop()
				restarts++
			}
			t.Logf("InSync after %d restarts", restarts)
			c.mu.Lock()
			defer c.mu.Unlock()
			if len(applies) != 1 {
				t.Errorf("%d apply operations ran, want one: %v", len(applies), applies)
			}
			for id := range applies {
				if n := c.ran[id]; n != 1 {
					t.Errorf("apply %s ran %d times, want once", id, n)
				}
			}
			if kind == api.KindPtahSchema && !c.tableExists("public.accounts") {
				t.Error("InSync without the table")
			}
			if kind == api.KindPtahMigration {
				if h := c.history(); len(h) != 2 || h["0001"] != "run" || h["0002"] != "run" {
					t.Errorf("history %v, want both versions run once", h)
				}
			}
			c.noneLeft()
		})
	}
}

// approved reports whether an approval of the plan uid exists.
func (c *cluster) approved(kind, uid string) bool {
	c.t.Helper()
	ctx := context.Background()
	if kind == api.KindPtahSchema {
		var list api.PtahSchemaApprovalList
		if err := c.e.Client.List(ctx, &list, client.InNamespace(c.ns)); err != nil {
			c.t.Fatal(err)
		}
		for _, a := range list.Items {
			if a.Spec.Plan.UID == uid {
				return true
			}
		}
		return false
	}
	var list api.PtahMigrationApprovalList
	if err := c.e.Client.List(ctx, &list, client.InNamespace(c.ns)); err != nil {
		c.t.Fatal(err)
	}
	for _, a := range list.Items {
		if a.Spec.Plan.UID == uid {
			return true
		}
	}
	return false
}
