package runner

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ptah-run/ptah/internal/pgtest"
	"github.com/ptah-run/ptah/internal/postgres"
	api "github.com/ptah-run/ptah/pkg/api/v1alpha1"
)

// BenchmarkPlanPass puts the cost of the governed plan beside the read-only
// one over the same 50-table database, one table short of its declaration:
// "read-only" is postgres.PlanSchema (ptah plan --no-publish), "published"
// a plan-only pass (ptah plan): fence, census, observation, and the status
// write, with the plan already current so nothing is republished.
func BenchmarkPlanPass(b *testing.B) {
	var live, declared strings.Builder
	for i := range 50 {
		fmt.Fprintf(&live, "CREATE TABLE t%d (id bigint PRIMARY KEY, name text NOT NULL, created timestamptz DEFAULT now());\n", i)
		fmt.Fprintf(&live, "CREATE INDEX t%d_name ON t%d (name);\n", i, i)
	}
	declared.WriteString(live.String())
	declared.WriteString("CREATE TABLE extra (id int PRIMARY KEY);\n")

	url := pgtest.NewDB(b)
	pgtest.Exec(b, url, live.String())
	ctx := context.Background()
	r, err := newRunner(ctx, url)
	if err != nil {
		b.Fatal(err)
	}
	defer r.Target.Close(ctx)
	s := &api.PtahSchema{Spec: api.PtahSchemaSpec{Schemas: []string{"public"}, Policy: api.Policy{Apply: api.ApplyOnApproval, LockTimeout: "5s"}}}
	s.Name = "app"
	res := Resource{Schema: s, TargetURL: url, Files: []postgres.SourceFile{{Name: "schema.sql", SQL: declared.String()}}}

	b.Run("read-only", func(b *testing.B) {
		for b.Loop() {
			p, err := postgres.PlanSchema(ctx, postgres.PlanRequest{TargetURL: url, Files: res.Files, Schemas: s.Spec.Schemas, LockTimeout: 5 * time.Second})
			if err != nil || len(p.Statements) == 0 {
				b.Fatalf("plan: %v", err)
			}
		}
	})
	b.Run("published", func(b *testing.B) {
		first, err := r.Run(ctx, res, PlanOnly)
		if err != nil || first.Plan == nil {
			b.Fatalf("first pass: %v", err)
		}
		for b.Loop() {
			out, err := r.Run(ctx, res, PlanOnly)
			if err != nil || out.Plan == nil || out.Plan.UID != first.Plan.UID {
				b.Fatalf("pass: %v; the unchanged plan must stay current", err)
			}
		}
	})
}
