// What each family adds to the cluster's pass (reconciler.go): how its
// spec is read, what a reading and an apply are sent, and how their
// answers come back. Its records and decisions are the runner's and the
// engine's, shared with local mode (runner.Records).

package controller

import (
	"context"
	"encoding/json"
	"fmt"

	"k8s.io/apimachinery/pkg/types"

	"github.com/ptah-run/ptah/internal/engine"
	"github.com/ptah-run/ptah/internal/runner"
	"github.com/ptah-run/ptah/internal/store"
	api "github.com/ptah-run/ptah/pkg/api/v1alpha1"
)

// family is one kind of resource, as the cluster's pass serves it.
type family interface {
	// kind is the resource's kind; planKind its plans'.
	kind() string
	planKind() string
	// decode reads obj's spec (defaulted) into the resource the records
	// are kept for, and the parts of it the pass reads.
	decode(obj store.Object) (runner.Resource, specView, error)
	// reading completes a reading's payload: the resource's spec, and
	// what else the reading reads it against.
	reading(p *Payload, res runner.Resource, rs runState)
	// adopt turns a reading's answer into the pass's observation
	// (*engine.Observation or *engine.MigrationObservation), reading back
	// and checking the transport object it names, if any.
	adopt(ctx context.Context, st store.Store, namespace, uid, operationID string, r ObservationResult) (any, error)
	// apply completes an apply's payload with the claimed plan.
	apply(p *Payload, res runner.Resource, plan api.ObjectReference, spec any, approver string) error
	// readsSourceToApply: the apply's Job mounts the source too (a
	// migration's plan names its files by version and checksum; their
	// SQL is the source's).
	readsSourceToApply() bool
}

// specView is what the pass reads of a spec beyond its records: the
// target, the schedule, and where the source comes from in the cluster.
type specView struct {
	Target    api.Target
	Schedule  api.Schedule
	ConfigMap *api.ConfigMapSource
	OCI       *api.OCISource
	// Invalid: the spec is not valid as local mode holds it.
	Invalid error
}

func familyOf(kind string) family {
	if kind == api.KindPtahMigration {
		return migrationFamily{}
	}
	return schemaFamily{}
}

func objectMeta(obj store.Object) (name, namespace string, uid types.UID, generation int64) {
	return obj.Name, obj.Namespace, types.UID(obj.UID), obj.Generation
}

// schemaFamily: a PtahSchema's reading hands back a plan's statements;
// its apply runs them.
type schemaFamily struct{}

func (schemaFamily) kind() string             { return api.KindPtahSchema }
func (schemaFamily) planKind() string         { return api.KindPtahSchemaPlan }
func (schemaFamily) readsSourceToApply() bool { return false }

func (schemaFamily) decode(obj store.Object) (runner.Resource, specView, error) {
	s := &api.PtahSchema{}
	if err := json.Unmarshal(obj.Spec, &s.Spec); err != nil {
		return runner.Resource{}, specView{}, fmt.Errorf("decoding %s: %w", obj.Name, err)
	}
	s.Default()
	s.APIVersion, s.Kind = api.APIVersion, api.KindPtahSchema
	s.Name, s.Namespace, s.UID, s.Generation = objectMeta(obj)
	v := specView{Target: s.Spec.Target, Schedule: s.Spec.Schedule, ConfigMap: s.Spec.Source.ConfigMap, OCI: s.Spec.Source.OCI,
		Invalid: s.Validate()}
	return runner.Resource{Schema: s}, v, nil
}

func (schemaFamily) reading(p *Payload, res runner.Resource, _ runState) {
	p.SchemaSpec = &res.Schema.Spec
}

func (schemaFamily) adopt(ctx context.Context, st store.Store, namespace, uid, id string, r ObservationResult) (any, error) {
	obs, err := ReadTransport(ctx, st, namespace, uid, id, r)
	if err != nil {
		return nil, err
	}
	return &obs, nil
}

func (schemaFamily) apply(p *Payload, _ runner.Resource, plan api.ObjectReference, spec any, _ string) error {
	s, ok := spec.(*api.PtahSchemaPlanSpec)
	if !ok {
		return fmt.Errorf("a PtahSchema's plan is a PtahSchemaPlan, not %T", spec)
	}
	p.Plan, p.Schema = plan, s
	return nil
}

// migrationFamily: a PtahMigration's reading compares its history with
// its source and hands back the pending versions; its apply runs their
// files, read from the source and checked against the plan's checksums.
type migrationFamily struct{}

func (migrationFamily) kind() string             { return api.KindPtahMigration }
func (migrationFamily) planKind() string         { return api.KindPtahMigrationPlan }
func (migrationFamily) readsSourceToApply() bool { return true }

func (migrationFamily) decode(obj store.Object) (runner.Resource, specView, error) {
	m := &api.PtahMigration{}
	if err := json.Unmarshal(obj.Spec, &m.Spec); err != nil {
		return runner.Resource{}, specView{}, fmt.Errorf("decoding %s: %w", obj.Name, err)
	}
	m.Default()
	m.APIVersion, m.Kind = api.APIVersion, api.KindPtahMigration
	m.Name, m.Namespace, m.UID, m.Generation = objectMeta(obj)
	v := specView{Target: m.Spec.Target, Schedule: m.Spec.Schedule, ConfigMap: m.Spec.Source.ConfigMap, OCI: m.Spec.Source.OCI,
		Invalid: m.Validate()}
	return runner.Resource{Migration: m}, v, nil
}

// reading: the history is read against the records that stand for runs
// (observeMigration's holds), which the payload carries.
func (migrationFamily) reading(p *Payload, res runner.Resource, rs runState) {
	p.MigrationSpec = &res.Migration.Spec
	p.Runs = rs.migration
}

func (migrationFamily) adopt(ctx context.Context, st store.Store, namespace, uid, id string, r ObservationResult) (any, error) {
	obs, err := ReadMigrationTransport(ctx, st, namespace, uid, id, r)
	if err != nil {
		return nil, err
	}
	return &obs, nil
}

func (migrationFamily) apply(p *Payload, res runner.Resource, plan api.ObjectReference, spec any, approver string) error {
	s, ok := spec.(*api.PtahMigrationPlanSpec)
	if !ok {
		return fmt.Errorf("a PtahMigration's plan is a PtahMigrationPlan, not %T", spec)
	}
	p.Plan, p.Migration, p.MigrationSpec, p.Approver = plan, s, &res.Migration.Spec, approver
	return nil
}

// runOf is how an apply's result becomes the run the engine accounts
// for: its outcome, and for a PtahMigration's Pod, its report (how many
// of the plan's versions, which are planned, committed: a prefix of
// them).
func runOf(res *Result, planned []api.MigrationVersion) engine.MigrationRun {
	run := engine.MigrationRun{Result: engine.RunUncertain, Message: res.Message}
	switch res.Outcome {
	case OutcomeSucceeded:
		run.Result = engine.RunSucceeded
	case OutcomeFailed, OutcomeRefused:
		run.Result = engine.RunFailed // rolled back, or never started
	}
	rep := res.Run
	if rep == nil {
		if run.Result == engine.RunSucceeded {
			rep = &RunReport{Committed: len(planned)}
		} else {
			return run
		}
	}
	for _, v := range planned[:min(max(rep.Committed, 0), len(planned))] {
		run.Versions = append(run.Versions, v.Version)
	}
	run.Failure, run.Partial, run.Writer, run.MayStillWrite = rep.Failure, rep.Partial, rep.Writer, rep.MayStillWrite
	return run
}
