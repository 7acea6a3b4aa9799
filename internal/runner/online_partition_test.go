package runner

import (
	"context"
	"strings"
	"testing"

	"github.com/ptah-run/ptah/internal/failpoint"
	api "github.com/ptah-run/ptah/pkg/api/v1alpha1"
)

// An online plan that indexes a partitioned table creates the parent's
// index ON ONLY it in a first phase, then builds each partition's
// concurrently and attaches it. A run stopped dead after the first phase
// leaves the parent's index invalid, with no partition's attached: the
// run is settled by observing, and the fresh plan keeps the parent's
// index (no DROP INDEX, which would lock every partition ACCESS
// EXCLUSIVE) and builds and attaches the partitions' indexes, which makes
// it valid.
func TestAPartitionedIndexBuildStoppedBetweenPhasesIsObservedAndFinished(t *testing.T) {
	t.Parallel()
	const table = `CREATE TABLE events (id bigint NOT NULL, payload text NOT NULL) PARTITION BY HASH (id);
		CREATE TABLE events_0 PARTITION OF events FOR VALUES WITH (MODULUS 3, REMAINDER 0);
		CREATE TABLE events_1 PARTITION OF events FOR VALUES WITH (MODULUS 3, REMAINDER 1);
		CREATE TABLE events_2 PARTITION OF events FOR VALUES WITH (MODULUS 3, REMAINDER 2);`
	f := newFixture(t, table+`
		INSERT INTO events SELECT g, md5(g::text) FROM generate_series(1, 3000) g;`)
	res := f.resource(api.ApplyOnApproval, table+`
		CREATE INDEX events_payload_idx ON events (payload);`)
	p := f.run(res, PlanOnly).Plan
	if p == nil {
		t.Fatal("no plan published")
	}
	if first := p.Spec.Phases[0]; first.NoTransaction || first.Statements != 1 || !strings.Contains(p.Spec.Statements[0].SQL, " ON ONLY ") {
		t.Fatalf("want a first phase creating the parent's index ON ONLY it; phases %+v, statements %v", p.Spec.Phases, p.Spec.Statements)
	}
	f.approve(p)

	f.crashAt(failpoint.BetweenPhases, res, Apply)
	ctx := context.Background()
	var valid bool
	var attached int
	if err := f.r.Target.QueryRow(ctx, `SELECT i.indisvalid, (SELECT count(*) FROM pg_inherits h WHERE h.inhparent = i.indexrelid)
		FROM pg_index i WHERE i.indexrelid = 'public.events_payload_idx'::regclass`).Scan(&valid, &attached); err != nil {
		t.Fatal(err)
	}
	if valid || attached != 0 {
		t.Fatalf("the stop was to leave the parent's index invalid, nothing attached: valid %v, %d attached", valid, attached)
	}
	before := f.runs()
	op := f.stored(res).ActiveOperation

	got := f.run(res, Apply)
	if a := got.Status.Applied; a == nil || a.Outcome != api.OutcomeObserved {
		t.Fatalf("the run must be settled by observation: applied %+v", got.Status.Applied)
	}
	f.requireNoRerun(before, op.ID, p.UID)
	fresh := got.Plan
	if got.Status.Phase != api.PhaseAwaitingApproval || fresh == nil || fresh.UID == p.UID {
		t.Fatalf("want a fresh plan of what is left: phase %s (%s)", got.Status.Phase, got.Status.Message)
	}
	var builds, attaches int
	for _, s := range fresh.Spec.Statements {
		switch {
		case strings.HasPrefix(s.SQL, "DROP "), strings.Contains(s.SQL, " ON ONLY "):
			t.Errorf("the fresh plan builds the parent's index anew: %s", s.SQL)
		case strings.HasPrefix(s.SQL, "CREATE INDEX CONCURRENTLY "):
			builds++
		case strings.Contains(s.SQL, " ATTACH PARTITION "):
			attaches++
		}
	}
	if builds != 3 || attaches != 3 {
		t.Errorf("the fresh plan builds %d and attaches %d partitions' indexes, want 3 and 3:\n%v", builds, attaches, fresh.Spec.Statements)
	}
	f.approve(fresh)
	if done := f.run(res, Apply); done.Status.Phase != api.PhaseInSync {
		t.Fatalf("the fresh plan, approved, converges: phase %s (%s)", done.Status.Phase, done.Status.Message)
	}
	if err := f.r.Target.QueryRow(ctx, `SELECT i.indisvalid, (SELECT count(*) FROM pg_inherits h WHERE h.inhparent = i.indexrelid)
		FROM pg_index i WHERE i.indexrelid = 'public.events_payload_idx'::regclass`).Scan(&valid, &attached); err != nil {
		t.Fatal(err)
	}
	if !valid || attached != 3 {
		t.Errorf("events_payload_idx: valid %v, %d attached; want valid, the three partitions' attached", valid, attached)
	}
}
