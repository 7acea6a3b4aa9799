package runner

import (
	"context"
	"testing"
	"time"

	"github.com/ptah-run/ptah/internal/pgserver"
	"github.com/ptah-run/ptah/internal/pgtest"
	"github.com/ptah-run/ptah/internal/postgres"
	"github.com/ptah-run/ptah/internal/postgres/catalog"
	"github.com/ptah-run/ptah/internal/schemagen"
	api "github.com/ptah-run/ptah/pkg/api/v1alpha1"
)

// scaleResource declares shape for the database at url.
func scaleResource(url string, shape schemagen.Shape) Resource {
	s := &api.PtahSchema{Spec: api.PtahSchemaSpec{Schemas: []string{"public"},
		Policy: api.Policy{Apply: api.ApplyOnApproval, LockTimeout: "5s"}}}
	s.Name = "app"
	res := Resource{Schema: s, TargetURL: url}
	for _, f := range shape.Files() {
		res.Files = append(res.Files, catalog.SourceFile{Name: "schema/" + f.Name, SQL: f.SQL})
	}
	return res
}

// TestScaleOnAStockServer: a schema of 2,500 tables (9 columns, a primary
// key, 3 indexes and a foreign key each, with views and functions) plans
// from an empty database, applies, and plans again to no changes, on a
// server with PostgreSQL's default lock and connection limits. Its tables
// are declared in one file, as the loader once sent whole: the dev
// database then ran out of shared memory (SQLSTATE 53200), and so did
// applying the plan in one transaction.
func TestScaleOnAStockServer(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: a schema of 2,500 tables takes minutes")
	}
	t.Parallel()
	url := pgtest.NewDBOn(t, pgtest.NewServer(t, pgserver.StockLimits()))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	r, err := newRunner(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Target.Close(context.Background())
	shape := schemagen.Default(2500)
	shape.TablesPerFile = 2500
	res := scaleResource(url, shape)

	began := time.Now()
	planned, err := r.Run(ctx, res, PlanOnly)
	if err != nil {
		t.Fatalf("plan: %v", err)
	}
	p := planned.Plan
	if planned.Status.Phase != api.PhaseAwaitingApproval || p == nil {
		t.Fatalf("plan: phase %s (%s), want a plan awaiting approval", planned.Status.Phase, planned.Status.Message)
	}
	if c := p.Spec.LockCapacity; c == nil || c.MaxLocksPerTransaction != 64 || c.MaxConnections != 100 {
		t.Fatalf("the plan was cut for lock capacity %+v, want the stock server's", p.Spec.LockCapacity)
	}
	budget := postgres.LockCapacity(*p.Spec.LockCapacity).Budget()
	for i, ph := range p.Spec.Phases {
		if ph.Reason != postgres.PhaseLockBudget || ph.Locks > budget {
			t.Errorf("transaction %d/%d: %+v; want cut by the lock budget, within %d", i+1, len(p.Spec.Phases), ph, budget)
		}
	}
	t.Logf("plan from empty: %d statements in %d transactions, %v", len(p.Spec.Statements), len(p.Spec.Phases), time.Since(began))
	if len(p.Spec.Phases) < 2 {
		t.Fatalf("%d transactions; a plan of 2,500 tables cannot be one on a stock server", len(p.Spec.Phases))
	}

	f := &fixture{t: t, url: url, r: r}
	f.approve(p)
	began = time.Now()
	applied, err := r.Run(ctx, res, Apply)
	if err != nil {
		t.Fatalf("apply: %v", err)
	}
	// InSync only after a fresh plan came out empty.
	if st := applied.Status; st.Phase != api.PhaseInSync || st.Applied == nil || st.Applied.Outcome != api.OutcomeSucceeded {
		t.Fatalf("apply: phase %s (%s), applied %+v; want InSync after a successful run", st.Phase, st.Message, st.Applied)
	}
	run, err := postgres.ReadRun(ctx, r.Target, applied.Status.Applied.OperationID)
	if err != nil {
		t.Fatal(err)
	}
	if !run.Committed() || run.Phases != len(p.Spec.Phases) || len(run.Steps) != len(p.Spec.Statements) {
		t.Fatalf("run: outcome %q, %d phases, %d steps; want succeeded in %d phases", run.Outcome, run.Phases, len(run.Steps), len(p.Spec.Phases))
	}
	t.Logf("apply and verify: %v", time.Since(began))

	began = time.Now()
	again, err := r.Run(ctx, res, PlanOnly)
	if err != nil {
		t.Fatalf("plan again: %v", err)
	}
	if again.Status.Phase != api.PhaseInSync || again.Plan != nil {
		t.Fatalf("plan again: phase %s (%s); want no changes", again.Status.Phase, again.Status.Message)
	}
	t.Logf("plan again, no changes: %v", time.Since(began))
}
