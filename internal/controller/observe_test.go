package controller_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/ptah-run/ptah/internal/controller"
	"github.com/ptah-run/ptah/internal/engine"
	"github.com/ptah-run/ptah/internal/store"
	"github.com/ptah-run/ptah/internal/store/memstore"
	api "github.com/ptah-run/ptah/pkg/api/v1alpha1"
)

// TestATransportPlanIsAdoptedOnlyFromItsOwnReading: the manager takes the
// statements a reading hands back only from the object that reading
// created, for this resource, with the bindings the reading reported,
// all its statements, and a fingerprint that matches; anything else a
// holder of the planner's account could create is refused.
func TestATransportPlanIsAdoptedOnlyFromItsOwnReading(t *testing.T) {
	const ns, uid, reading = "billing", "uid-app", "reading-1"
	bindings := api.Bindings{ArtifactDigest: "sha256:a", CoordinationDigest: "sha256:c", TargetIdentityDigest: "sha256:t",
		ActualStateFingerprint: "sha256:s", DesiredStateFingerprint: "sha256:d", PolicyFingerprint: "sha256:p"}
	obs := engine.Observation{Bindings: bindings, Statements: []api.PlanStatement{{SQL: "CREATE TABLE public.t (id bigint)"}},
		Phases: []api.PlanPhase{{Statements: 1}}}
	good := engine.NewSchemaPlanSpec(api.ObjectReference{Name: "app", UID: uid}, obs)

	tests := []struct {
		name   string
		change func(spec *api.PtahSchemaPlanSpec, labels map[string]string, r *controller.ObservationResult)
		want   string // "" accepts
	}{
		{"its own", func(*api.PtahSchemaPlanSpec, map[string]string, *controller.ObservationResult) {}, ""},
		{"another reading's object", func(_ *api.PtahSchemaPlanSpec, l map[string]string, _ *controller.ObservationResult) {
			l[controller.LabelObservation] = "reading-0"
		}, "is not the object reading reading-1 created"},
		{"another resource's plan", func(s *api.PtahSchemaPlanSpec, _ map[string]string, _ *controller.ObservationResult) {
			s.Schema.UID = "uid-other"
			s.Fingerprint = engine.PlanFingerprint(*s)
		}, "holds a plan of another resource"},
		{"other bindings", func(s *api.PtahSchemaPlanSpec, _ map[string]string, _ *controller.ObservationResult) {
			s.Bindings.ActualStateFingerprint = "sha256:elsewhere"
			s.Fingerprint = engine.PlanFingerprint(*s)
		}, "carries other bindings"},
		{"a statement more", func(s *api.PtahSchemaPlanSpec, _ map[string]string, _ *controller.ObservationResult) {
			s.Statements = append(s.Statements, api.PlanStatement{SQL: "DROP TABLE public.important"})
			s.Phases = []api.PlanPhase{{Statements: 2}}
			s.Fingerprint = engine.PlanFingerprint(*s)
		}, "holds 2 statements, reading reading-1 reported 1"},
		{"statements changed under the fingerprint", func(s *api.PtahSchemaPlanSpec, _ map[string]string, _ *controller.ObservationResult) {
			s.Statements = []api.PlanStatement{{SQL: "DROP TABLE public.important"}}
		}, "fingerprint"},
		{"no object, yet statements", func(_ *api.PtahSchemaPlanSpec, _ map[string]string, r *controller.ObservationResult) {
			r.Transport = nil
		}, "reported 1 statements and no object holding them"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			st := memstore.New()
			spec, labels := good, map[string]string{controller.LabelObservation: reading}
			res := controller.ObservationResult{Bindings: bindings, Statements: 1, Transport: &api.ObjectReference{}}
			tt.change(&spec, labels, &res)
			raw, _ := json.Marshal(spec)
			o, err := st.Create(ctx, store.Object{Kind: api.KindPtahSchemaPlan, Namespace: ns, Name: controller.TransportName("app", reading),
				ContractVersion: api.ContractVersion, Immutable: true, Labels: labels, Spec: raw})
			if err != nil {
				t.Fatal(err)
			}
			if tt.name != "no object, yet statements" {
				res.Transport = &api.ObjectReference{Name: o.Name, UID: o.UID}
			}
			got, err := controller.ReadTransport(ctx, st, ns, uid, reading, res)
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("refused its own reading's plan: %v", err)
			case tt.want == "" && (len(got.Statements) != 1 || got.Bindings != bindings):
				t.Fatalf("adopted %+v", got)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Fatalf("ReadTransport = %v; want an error containing %q", err, tt.want)
			}
		})
	}
}
