package runner

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ptah-run/ptah/internal/pgserver"
	"github.com/ptah-run/ptah/internal/pgtest"
	"github.com/ptah-run/ptah/internal/postgres"
	"github.com/ptah-run/ptah/internal/postgres/catalog"
	"github.com/ptah-run/ptah/internal/schemagen"
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

// BenchmarkScaleStockServer: a schema of 10,000 tables (schemagen.Default:
// 9 columns, a primary key, 3 indexes and a foreign key each, a view every
// 10 tables, a function every 20) on a server with PostgreSQL's default
// lock and connection limits. Each iteration starts from an empty database
// and reports, in seconds: plan-from-empty (a published plan), execute
// (the run, from its journal), apply (the run and the fresh plan that
// verifies it) and replan (a plan that finds no changes); and the plan's
// statements and transactions. PTAH_BENCH_TABLES changes the size.
func BenchmarkScaleStockServer(b *testing.B) {
	tables := 10000
	if n, err := strconv.Atoi(os.Getenv("PTAH_BENCH_TABLES")); err == nil && n > 0 {
		tables = n
	}
	base := pgtest.NewServer(b, pgserver.StockLimits())
	ctx := context.Background()
	var plan, execute, apply, replan time.Duration
	var statements, transactions int
	b.Run(fmt.Sprintf("tables=%d", tables), func(b *testing.B) {
		for b.Loop() {
			url := pgtest.NewDBOn(b, base)
			r, err := newRunner(ctx, url)
			if err != nil {
				b.Fatal(err)
			}
			res := scaleResource(url, schemagen.Default(tables))

			began := time.Now()
			planned, err := r.Run(ctx, res, PlanOnly)
			if err != nil || planned.Plan == nil {
				b.Fatalf("plan: %v (%s)", err, planned.Status.Message)
			}
			plan += time.Since(began)
			statements, transactions = len(planned.Plan.Spec.Statements), len(planned.Plan.Spec.Phases)
			if _, err := r.Approve(ctx, ApproveRequest{PlanUID: planned.Plan.UID, Fingerprint: planned.Plan.Spec.Fingerprint, Approver: "bench"}); err != nil {
				b.Fatal(err)
			}

			began = time.Now()
			applied, err := r.Run(ctx, res, Apply)
			if err != nil || applied.Status.Phase != api.PhaseInSync {
				b.Fatalf("apply: %v (%s %s)", err, applied.Status.Phase, applied.Status.Message)
			}
			apply += time.Since(began)
			run, err := postgres.ReadRun(ctx, r.Target, applied.Status.Applied.OperationID)
			if err != nil || run.FinishedAt == nil {
				b.Fatalf("reading the run: %v", err)
			}
			execute += run.FinishedAt.Sub(run.StartedAt)

			began = time.Now()
			again, err := r.Run(ctx, res, PlanOnly)
			if err != nil || again.Status.Phase != api.PhaseInSync {
				b.Fatalf("plan again: %v (%s)", err, again.Status.Message)
			}
			replan += time.Since(began)
			r.Target.Close(ctx)
		}
		n := float64(b.N)
		b.ReportMetric(plan.Seconds()/n, "plan-from-empty-s")
		b.ReportMetric(execute.Seconds()/n, "execute-s")
		b.ReportMetric(apply.Seconds()/n, "apply-s")
		b.ReportMetric(replan.Seconds()/n, "replan-s")
		b.ReportMetric(float64(statements), "statements")
		b.ReportMetric(float64(transactions), "transactions")
	})
}
