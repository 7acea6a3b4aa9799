package controller_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ptah-run/ptah/internal/store"
	"github.com/ptah-run/ptah/internal/store/kubestore"
	api "github.com/ptah-run/ptah/pkg/api/v1alpha1"
)

// family is one kind of resource as the tests that hold for both drive
// it: "app" (a PtahSchema creating public.accounts) or "ledger" (a
// PtahMigration of ledgerFiles).
type family struct {
	kind, name, planKind, approvalKind, label string
	// declare creates the resource and its source.
	declare func(c *cluster)
	// converged: the database holds what the resource declares, and
	// only once.
	converged func(c *cluster) bool
}

var families = []family{
	{api.KindPtahSchema, "app", api.KindPtahSchemaPlan, api.KindPtahSchemaApproval, "ptah.run/schema",
		func(c *cluster) { c.declare(map[string]string{"01_accounts.sql": accountsSQL}, api.Policy{}) },
		func(c *cluster) bool { return c.tableExists("public.accounts") }},
	{api.KindPtahMigration, "ledger", api.KindPtahMigrationPlan, api.KindPtahMigrationApproval, "ptah.run/migration",
		func(c *cluster) { c.declareMigration(ledgerFiles) },
		func(c *cluster) bool {
			h := c.history()
			return len(h) == 2 && h["0001"] == "run" && h["0002"] == "run" && c.tableExists("public.ledger_entries")
		}},
}

// store is the test's view of the cluster as ptah's records.
func (c *cluster) store() store.Store { return kubestore.New(c.e.Client) }

// state is the run state of f's resource.
func (f family) state(c *cluster) api.RunState {
	c.t.Helper()
	o, err := c.store().Get(context.Background(), f.kind, c.ns, f.name)
	if err != nil {
		c.t.Fatal(err)
	}
	var rs api.RunState
	if len(o.Status) > 0 {
		if err := json.Unmarshal(o.Status, &rs); err != nil {
			c.t.Fatal(err)
		}
	}
	return rs
}

// waitFor polls f's resource until ok accepts its run state.
func (f family) waitFor(c *cluster, what string, ok func(api.RunState) bool) api.RunState {
	c.t.Helper()
	deadline := time.Now().Add(settleWithin)
	for {
		rs := f.state(c)
		if ok(rs) {
			return rs
		}
		if time.Now().After(deadline) {
			c.dump()
			c.t.Fatalf("waiting for %s of %s %s: the status is %s/%s: %s", what, f.kind, f.name, rs.Phase, rs.Reason, rs.Message)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// touch changes f's spec in a way that plans nothing new (its interval),
// which wakes the manager.
func (f family) touch(c *cluster) {
	c.t.Helper()
	ctx := context.Background()
	var obj client.Object = &api.PtahSchema{}
	if f.kind == api.KindPtahMigration {
		obj = &api.PtahMigration{}
	}
	if err := c.e.Client.Get(ctx, client.ObjectKey{Namespace: c.ns, Name: f.name}, obj); err != nil {
		c.t.Fatal(err)
	}
	switch o := obj.(type) {
	case *api.PtahSchema:
		o.Spec.Schedule.Interval = "1m"
	case *api.PtahMigration:
		o.Spec.Schedule.Interval = "1m"
	}
	if err := c.e.Client.Update(ctx, obj); err != nil {
		c.t.Fatal(err)
	}
}

// planTerms are what an approval of a plan object binds.
type planTerms struct {
	Fingerprint string `json:"fingerprint"`
	api.Bindings
}

// approvals are f's approval objects, and what each approves (plan UID
// -> its status).
func (f family) approvals(c *cluster) map[string]api.DecisionStatus {
	c.t.Helper()
	objs, err := c.store().List(context.Background(), store.ListOptions{Kind: f.approvalKind, Namespace: c.ns})
	if err != nil {
		c.t.Fatal(err)
	}
	out := map[string]api.DecisionStatus{}
	for _, o := range objs {
		var spec struct {
			Plan api.ObjectReference `json:"plan"`
		}
		var st api.DecisionStatus
		if err := json.Unmarshal(o.Spec, &spec); err != nil {
			c.t.Fatal(err)
		}
		if len(o.Status) > 0 {
			if err := json.Unmarshal(o.Status, &st); err != nil {
				c.t.Fatal(err)
			}
		}
		out[spec.Plan.UID] = st
	}
	return out
}

// approveAs records an approval of the plan object name (uid, terms) as
// alice would, without the checks ptah approve makes first: the terms of
// an object that may be gone.
func (f family) approveAs(c *cluster, name, uid string, terms planTerms) {
	c.t.Helper()
	spec := map[string]any{"plan": api.ObjectReference{Name: name, UID: uid}, "planFingerprint": terms.Fingerprint,
		"approver": "alice", "approvedAt": api.NewTime(time.Now())}
	if f.kind == api.KindPtahSchema {
		spec["schema"] = f.name
	} else {
		spec["migration"] = f.name
	}
	raw, err := json.Marshal(terms.Bindings)
	if err != nil {
		c.t.Fatal(err)
	}
	var bindings map[string]any
	_ = json.Unmarshal(raw, &bindings)
	for k, v := range bindings {
		spec[k] = v
	}
	if raw, err = json.Marshal(spec); err != nil {
		c.t.Fatal(err)
	}
	if _, err := c.store().Create(context.Background(), store.Object{Kind: f.approvalKind, Namespace: c.ns, Name: f.name + "-by-hand",
		ContractVersion: api.ContractVersion, Immutable: true, Labels: map[string]string{f.label: f.name}, Spec: raw}); err != nil {
		c.t.Fatal(err)
	}
}

// TestRecordedApprovalStaleIgnoresSameNameReplacementUIDInCluster, for
// both families: the plan object an approval names is replaced by one of
// the same name and content (a new UID): the approval, bound to the old
// UID, authorizes nothing and goes stale; only an approval of the new UID
// runs it. (The seed's TestMigrationApplyClaimsTheApprovedPlan too.)
func TestRecordedApprovalStaleIgnoresSameNameReplacementUIDInCluster(t *testing.T) {
	for _, f := range families {
		t.Run(f.kind, func(t *testing.T) {
			c := newCluster(t)
			ctx := context.Background()
			f.declare(c)
			c.serve()
			first := f.waitFor(c, "the plan", func(rs api.RunState) bool { return rs.Phase == api.PhaseAwaitingApproval && rs.Plan != nil })
			old, err := c.store().Get(ctx, f.planKind, c.ns, first.Plan.Name)
			if err != nil {
				t.Fatal(err)
			}
			var terms planTerms
			if err := json.Unmarshal(old.Spec, &terms); err != nil {
				t.Fatal(err)
			}
			if err := c.store().Delete(ctx, f.planKind, c.ns, old.Name, old.UID); err != nil {
				t.Fatal(err)
			}
			// The manager publishes the same content again, under the same
			// name; a spec change wakes it at once.
			f.touch(c)
			second := f.waitFor(c, "the replacement", func(rs api.RunState) bool {
				return rs.Plan != nil && rs.Plan.UID != first.Plan.UID && rs.Phase == api.PhaseAwaitingApproval
			})
			if second.Plan.Name != first.Plan.Name {
				t.Fatalf("the replacement is named %s, want %s (same content)", second.Plan.Name, first.Plan.Name)
			}
			f.approveAs(c, old.Name, old.UID, terms)
			deadline := time.Now().Add(settleWithin)
			for !f.approvals(c)[old.UID].Stale {
				if time.Now().After(deadline) {
					t.Fatalf("the approval of the replaced plan is not stale: %+v", f.approvals(c)[old.UID])
				}
				time.Sleep(200 * time.Millisecond)
			}
			if rs := f.state(c); rs.Phase != api.PhaseAwaitingApproval || rs.ActiveOperation != nil || f.converged(c) {
				t.Fatalf("an approval of the replaced plan's UID authorized something: %s/%s, active %+v", rs.Phase, rs.Reason, rs.ActiveOperation)
			}

			c.approve(second.Plan)
			f.waitFor(c, "InSync", func(rs api.RunState) bool { return rs.Phase == api.PhaseInSync })
			if !f.converged(c) {
				t.Error("InSync after the approval of the current UID, and the database does not hold what it declares")
			}
		})
	}
}
