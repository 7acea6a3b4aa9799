package runner

import (
	"context"
	"testing"

	"github.com/ptah-run/ptah/internal/postgres/catalog"
	api "github.com/ptah-run/ptah/pkg/api/v1alpha1"
)

// countingCache is a DirCache that counts the entries it served.
type countingCache struct {
	catalog.DirCache
	hits int
}

func (c *countingCache) Get(ctx context.Context, key string) ([]byte, error) {
	data, err := c.DirCache.Get(ctx, key)
	if data != nil {
		c.hits++
	}
	return data, err
}

// A pass answered from the desired-state cache binds the plan to the same
// desired state as one that loaded the files: the published plan stays
// current (same UID), and applying it reaches InSync, where the next
// cached pass finds nothing to do.
func TestACachedDesiredStateKeepsThePublishedPlan(t *testing.T) {
	t.Parallel()
	f := newFixture(t, v1)
	cache := &countingCache{DirCache: catalog.DirCache{Dir: t.TempDir()}}
	f.r.Cache = cache
	res := f.resource(api.ApplyOnApproval, v2)

	first := f.run(res, PlanOnly)
	second := f.run(res, PlanOnly)
	if cache.hits != 1 {
		t.Fatalf("the second pass was answered from the cache %d times; want 1", cache.hits)
	}
	if first.Plan == nil || second.Plan == nil || second.Plan.UID != first.Plan.UID {
		t.Fatalf("the cached pass published another plan: %v then %v", first.Plan, second.Plan)
	}
	if _, err := f.r.Approve(context.Background(), ApproveRequest{PlanUID: first.Plan.UID, Fingerprint: first.Plan.Spec.Fingerprint, Approver: "ana"}); err != nil {
		t.Fatal(err)
	}
	if applied := f.run(res, Apply); applied.Status.Phase != api.PhaseInSync || !f.tableExists("posts") {
		t.Fatalf("after approve and apply: %s (%s)", applied.Status.Phase, applied.Status.Message)
	}
	if again := f.run(res, PlanOnly); again.Status.Phase != api.PhaseInSync || cache.hits < 3 {
		t.Fatalf("after the apply: %s, %d cache hits", again.Status.Phase, cache.hits)
	}
}
