package runner

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ptah-run/ptah/internal/pgtest"
	"github.com/ptah-run/ptah/internal/postgres/catalog"
	"github.com/ptah-run/ptah/internal/store"
	api "github.com/ptah-run/ptah/pkg/api/v1alpha1"
)

// BenchmarkPlanPass puts the cost of the governed plan beside the read-only
// one over the same 50-table database, one table short of its declaration:
// "read-only" is catalog.PlanSchema (ptah plan --no-publish), "published"
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
	res := Resource{Schema: s, TargetURL: url, Files: []catalog.SourceFile{{Name: "schema.sql", SQL: declared.String()}}}

	b.Run("read-only", func(b *testing.B) {
		for b.Loop() {
			p, err := catalog.PlanSchema(ctx, catalog.PlanRequest{TargetURL: url, Files: res.Files, Schemas: s.Spec.Schemas, LockTimeout: 5 * time.Second})
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

// BenchmarkPlanPassHistory measures a plan-only pass over a store that has
// accumulated history: N earlier plans of 20 statements each, with an
// approval apiece, as a long-lived database collects them.
func BenchmarkPlanPassHistory(b *testing.B) {
	for _, n := range []int{0, 500} {
		b.Run(fmt.Sprintf("plans=%d", n), func(b *testing.B) {
			url := pgtest.NewDB(b)
			pgtest.Exec(b, url, "CREATE TABLE users (id int PRIMARY KEY);")
			ctx := context.Background()
			r, err := newRunner(ctx, url)
			if err != nil {
				b.Fatal(err)
			}
			defer r.Target.Close(ctx)
			var stmts []api.PlanStatement
			for i := range 20 {
				stmts = append(stmts, api.PlanStatement{SQL: fmt.Sprintf("ALTER TABLE public.users ADD COLUMN c%d text NOT NULL DEFAULT 'some default value'", i), Hazards: []string{}})
			}
			for i := range n {
				spec, _ := json.Marshal(api.PtahSchemaPlanSpec{Schema: api.ObjectReference{Name: "app", UID: "old"}, Statements: stmts, LockTimeout: "5s"})
				if _, err := r.Store.Create(ctx, store.Object{Kind: api.KindPtahSchemaPlan, Namespace: "default", Name: fmt.Sprintf("app-old%d", i),
					ContractVersion: api.ContractVersion, Immutable: true, Labels: map[string]string{LabelSchema: "app"}, Spec: spec}); err != nil {
					b.Fatal(err)
				}
				aspec, _ := json.Marshal(api.PtahSchemaApprovalSpec{Plan: api.ObjectReference{Name: fmt.Sprintf("app-old%d", i), UID: "x"}, Schema: "app", Approver: "ana"})
				if _, err := r.Store.Create(ctx, store.Object{Kind: api.KindPtahSchemaApproval, Namespace: "default", Name: fmt.Sprintf("app-old%d-a", i),
					ContractVersion: api.ContractVersion, Immutable: true, Labels: map[string]string{LabelSchema: "app"}, Spec: aspec,
					Status: json.RawMessage(`{"stale":true}`)}); err != nil {
					b.Fatal(err)
				}
			}
			s := &api.PtahSchema{Spec: api.PtahSchemaSpec{Schemas: []string{"public"}, Policy: api.Policy{Apply: api.ApplyOnApproval, LockTimeout: "5s"}}}
			s.Name = "app"
			res := Resource{Schema: s, TargetURL: url, Files: []catalog.SourceFile{{Name: "schema.sql", SQL: "CREATE TABLE users (id int PRIMARY KEY); CREATE TABLE posts (id int);"}}}
			if _, err := r.Run(ctx, res, PlanOnly); err != nil {
				b.Fatal(err)
			}
			for b.Loop() {
				if _, err := r.Run(ctx, res, PlanOnly); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
