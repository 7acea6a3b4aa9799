package controller

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"strings"
	"testing/fstest"

	"github.com/ptah-run/ptah/internal/config"
	"github.com/ptah-run/ptah/internal/engine"
	"github.com/ptah-run/ptah/internal/migrate"
	"github.com/ptah-run/ptah/internal/postgres"
	"github.com/ptah-run/ptah/internal/postgres/catalog"
	"github.com/ptah-run/ptah/internal/runner"
	"github.com/ptah-run/ptah/internal/source/oci"
	"github.com/ptah-run/ptah/internal/store"
	api "github.com/ptah-run/ptah/pkg/api/v1alpha1"
)

// LabelObservation marks a transport plan object with the reading that
// created it.
const LabelObservation = "ptah.run/observation"

// TransportName is the transport plan object of one reading.
func TransportName(resource, operationID string) string {
	sum := sha256.Sum256([]byte(operationID))
	return resource + "-reading-" + hex.EncodeToString(sum[:])[:10]
}

// observe is a reading's task: the same observation local mode takes, of
// the database and of the files mounted from the resource's source. It
// writes nothing to the database.
func observe(ctx context.Context, run ExecRun, p Payload, res Result) (Result, error) {
	fail := func(outcome string, err error) (Result, error) {
		res.Outcome, res.Message = outcome, err.Error()
		return res, err
	}
	if p.MigrationSpec != nil {
		return observeMigration(ctx, run, p, res)
	}
	if p.SchemaSpec == nil || p.SchemaSpec.Source.ConfigMap == nil && p.SchemaSpec.Source.OCI == nil {
		return fail(OutcomeRefused, fmt.Errorf("%w: the request names no PtahSchema with a ConfigMap or OCI source", ErrRefused))
	}
	var files []catalog.SourceFile
	var err error
	if src := p.SchemaSpec.Source; src.OCI != nil {
		files, err = pullFiles(ctx, src.OCI.Ref, run.RegistryConfig)
	} else {
		files, err = sourceFiles(run.SourceDir, src.ConfigMap.Name)
	}
	if err != nil {
		return fail(OutcomeFailed, err)
	}
	conn, err := postgres.Connect(ctx, run.DatabaseURL)
	if err != nil {
		return fail(OutcomeFailed, err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	s := &api.PtahSchema{Spec: *p.SchemaSpec}
	s.Spec.Target = scopedTarget(p, s.Spec.Target)
	s.Name, s.Namespace = p.Resource, p.Namespace
	r := &runner.Runner{Target: conn, Version: run.Version}
	obs, err := r.ObserveSchema(ctx, runner.Resource{Schema: s, TargetURL: run.DatabaseURL, Files: files})
	if err != nil {
		return fail(OutcomeFailed, err)
	}
	res.Observation = &ObservationResult{Bindings: obs.Bindings, Statements: len(obs.Statements)}
	if p.task() == TaskObserve && len(obs.Statements) > 0 {
		ref, err := publishTransport(ctx, run.Records, p, *obs)
		if err != nil {
			return fail(OutcomeFailed, err)
		}
		res.Observation.Transport = &ref
	}
	res.Outcome = OutcomeSucceeded
	return res, nil
}

// scopedTarget is the target as a reading in the cluster sees it: a
// coordination key is its namespace's, unless a PtahRealm joins several,
// so that a tenant cannot hold up another by naming the same key (the
// same database still conflicts wherever it is claimed, by its identity).
func scopedTarget(p Payload, t api.Target) api.Target {
	if k := t.CoordinationKey; k != "" {
		t.CoordinationKey = ScopedKey(cmp.Or(p.CoordinationScope, "namespace/"+p.Namespace), k)
	}
	return t
}

// migrationResource is the PtahMigration of the payload, with its source
// read from the ConfigMap mounted at run.SourceDir, or pulled from its OCI
// artifact: a source that cannot be read is the reading's answer
// (Blocked, SourceInvalid), and runs nothing.
func migrationResource(ctx context.Context, p Payload, run ExecRun) runner.Resource {
	m := &api.PtahMigration{Spec: *p.MigrationSpec}
	m.Spec.Target = scopedTarget(p, m.Spec.Target)
	m.Name, m.Namespace = p.Resource, p.Namespace
	res := runner.Resource{Migration: m, TargetURL: run.DatabaseURL}
	layout := migrate.Layout(m.Spec.Source.Layout)
	switch src := m.Spec.Source; {
	case src.OCI != nil:
		// Its layers are the directory: the versioned files (and
		// ptah.sum), each by its title.
		_, files, err := pullArtifact(ctx, src.OCI.Ref, run.RegistryConfig)
		if err != nil {
			res.SourceErr = err
			return res
		}
		fsys := fstest.MapFS{}
		for _, f := range files {
			fsys[f.Name] = &fstest.MapFile{Data: f.Data, Mode: 0o444}
		}
		res.Source, res.SourceErr = migrate.Read(fsys, layout)
	case run.SourceDir == "":
		res.SourceErr = errors.New("no source was mounted")
	default:
		res.Source, res.SourceErr = migrate.ReadDir(run.SourceDir, layout)
	}
	return res
}

// observeMigration is a PtahMigration's reading: its history and journal
// against its source, as local mode's pass reads them. Its pending
// versions go back in a transport plan object (a sequence can be
// thousands of files), the rest in the result.
func observeMigration(ctx context.Context, run ExecRun, p Payload, res Result) (Result, error) {
	fail := func(outcome string, err error) (Result, error) {
		res.Outcome, res.Message = outcome, err.Error()
		return res, err
	}
	if src := p.MigrationSpec.Source; src.ConfigMap == nil && src.OCI == nil {
		return fail(OutcomeRefused, fmt.Errorf("%w: the request names no PtahMigration with a ConfigMap or OCI source", ErrRefused))
	}
	conn, err := postgres.Connect(ctx, run.DatabaseURL)
	if err != nil {
		return fail(OutcomeFailed, err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var runs api.PtahMigrationStatus
	if p.Runs != nil {
		runs = *p.Runs
	}
	r := &runner.Runner{Target: conn, Version: run.Version}
	obs, err := r.ObserveMigration(ctx, migrationResource(ctx, p, run), runs)
	if err != nil {
		return fail(OutcomeFailed, err)
	}
	msg := obs.Message
	if len(msg) > 1000 {
		msg = msg[:1000] + "…"
	}
	res.Observation = &ObservationResult{Bindings: obs.Bindings, Statements: len(obs.Pending), Migration: &MigrationReading{
		History: obs.History, Blocked: obs.Blocked, Reason: obs.Reason, Message: msg, LockTimeout: obs.LockTimeout,
		LockAttemptTimeout: obs.LockAttemptTimeout, StatementTimeout: obs.StatementTimeout}}
	if p.task() == TaskObserve && len(obs.Pending) > 0 {
		spec := api.PtahMigrationPlanSpec{Migration: api.ObjectReference{Name: p.Resource, UID: p.ResourceUID}, Versions: obs.Pending,
			Baseline: obs.Baseline, LockTimeout: obs.LockTimeout, Bindings: obs.Bindings,
			LockAttemptTimeout: obs.LockAttemptTimeout, StatementTimeout: obs.StatementTimeout}
		spec.Fingerprint = engine.MigrationPlanFingerprint(spec)
		ref, err := createTransport(ctx, run.Records, p, api.KindPtahMigrationPlan, spec)
		if err != nil {
			return fail(OutcomeFailed, err)
		}
		res.Observation.Transport = &ref
	}
	res.Outcome = OutcomeSucceeded
	return res, nil
}

// applyMigration runs a PtahMigration's claimed plan (runner.ExecuteMigration):
// its files come from the mounted source, each checked against the
// plan's checksum; nothing runs if one differs.
func applyMigration(ctx context.Context, run ExecRun, p Payload, res Result) (Result, error) {
	out, err := runner.ExecuteMigration(ctx, runner.MigrationRunRequest{URL: run.DatabaseURL,
		Res:  migrationResource(ctx, p, run),
		Plan: engine.MigrationPlan{Name: p.Plan.Name, UID: p.Plan.UID, Spec: *p.Migration}, OperationID: run.OperationID,
		CoordinationDigest: p.CoordinationDigest, Deadline: run.Deadline, Approver: p.Approver})
	switch {
	case err == nil || out.Result == engine.RunSucceeded:
		res.Outcome = OutcomeSucceeded
	case errors.Is(err, postgres.ErrNotStarted):
		res.Outcome = OutcomeRefused
	case out.Result == engine.RunFailed:
		res.Outcome = OutcomeFailed
	default:
		res.Outcome = OutcomeUnknown
	}
	if err != nil {
		res.Message = err.Error()
	}
	res.Run = &RunReport{Committed: len(out.Versions), Failure: out.Failure, Partial: out.Partial, Writer: out.Writer,
		MayStillWrite: out.MayStillWrite}
	return res, err
}

// sourceFiles reads the declared files mounted from the ConfigMap name,
// each named name/key: the artifact digest covers these names.
func sourceFiles(dir, name string) ([]catalog.SourceFile, error) {
	files, err := config.ReadSQLDir(dir)
	if errors.Is(err, config.ErrNoSQLFiles) {
		return nil, fmt.Errorf("ConfigMap %s has no key ending in .sql: its keys are the declared files", name)
	}
	if err != nil {
		return nil, err
	}
	out := make([]catalog.SourceFile, len(files))
	for i, f := range files {
		out[i] = catalog.SourceFile{Name: name + "/" + path.Base(f.Name), SQL: f.SQL}
	}
	return out, nil
}

// pullFiles pulls the declared files of the artifact ref (pullArtifact).
// Each is named REF/TITLE: the artifact digest the plan binds covers the
// reference, and so the manifest's digest.
func pullFiles(ctx context.Context, ref string, registryConfig []byte) ([]catalog.SourceFile, error) {
	r, pulled, err := pullArtifact(ctx, ref, registryConfig)
	if err != nil {
		return nil, err
	}
	var files []catalog.SourceFile
	for _, f := range pulled {
		if strings.HasSuffix(f.Name, ".sql") {
			files = append(files, catalog.SourceFile{Name: r.String() + "/" + f.Name, SQL: string(f.Data)})
		}
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("%s has no layer titled *.sql: its layers are the declared files", r)
	}
	return files, nil
}

// pullArtifact pulls the files of the artifact ref (pinned by digest,
// verified), with the credentials of the dockerconfigjson registryConfig
// if any.
func pullArtifact(ctx context.Context, ref string, registryConfig []byte) (oci.Ref, []oci.File, error) {
	r, err := oci.ParseRef(ref)
	if err != nil {
		return r, nil, err
	}
	opts := oci.Options{PlainHTTP: oci.IsLoopback(r.Registry)}
	if len(registryConfig) > 0 {
		if opts.Credentials, err = oci.CredentialsFromDockerConfig(registryConfig, r.Registry); err != nil {
			return r, nil, err
		}
	}
	files, err := oci.Pull(ctx, r, opts)
	return r, files, err
}

// publishTransport stores the reading's plan, as the pass would publish
// it, in a plan object of its own for the manager to read.
func publishTransport(ctx context.Context, st store.Store, p Payload, obs engine.Observation) (api.ObjectReference, error) {
	spec := engine.NewSchemaPlanSpec(api.ObjectReference{Name: p.Resource, UID: p.ResourceUID}, obs)
	return createTransport(ctx, st, p, api.KindPtahSchemaPlan, spec)
}

// createTransport creates the reading's transport object of kind with
// spec, labeled with the reading.
func createTransport(ctx context.Context, st store.Store, p Payload, kind string, spec any) (api.ObjectReference, error) {
	if st == nil {
		return api.ObjectReference{}, errors.New("no access to the API to hand the reading's plan back")
	}
	raw, err := json.Marshal(spec)
	if err != nil {
		return api.ObjectReference{}, err
	}
	if len(raw) > MaxPlanObjectBytes {
		return api.ObjectReference{}, fmt.Errorf("%w: this one is %d bytes; split the change into smaller ones, or apply it with ptah apply (local mode)",
			ErrPlanObjectTooLarge, len(raw))
	}
	o, err := st.Create(ctx, store.Object{Kind: kind, Namespace: p.Namespace, Name: TransportName(p.Resource, p.OperationID),
		ContractVersion: api.ContractVersion, Immutable: true, Labels: map[string]string{LabelObservation: p.OperationID}, Spec: raw})
	if err != nil {
		return api.ObjectReference{}, fmt.Errorf("handing the reading's plan back: %w", err)
	}
	return api.ObjectReference{Name: o.Name, UID: o.UID}, nil
}

// ReadTransport reads back the plan a reading handed over in ref and
// returns the observation it carries, after checking that it is the
// reading's (label), of this resource (UID), with the bindings the
// reading reported, and whole (its fingerprint).
func ReadTransport(ctx context.Context, st store.Store, namespace, resourceUID, operationID string, r ObservationResult) (engine.Observation, error) {
	if r.Transport == nil {
		if r.Statements != 0 {
			return engine.Observation{}, fmt.Errorf("reading %s reported %d statements and no object holding them", operationID, r.Statements)
		}
		return engine.Observation{Bindings: r.Bindings}, nil
	}
	o, err := st.Get(ctx, api.KindPtahSchemaPlan, namespace, r.Transport.Name)
	if err != nil {
		return engine.Observation{}, fmt.Errorf("reading the statements of reading %s: %w", operationID, err)
	}
	plan := engine.Plan{Name: o.Name, UID: o.UID}
	if err := json.Unmarshal(o.Spec, &plan.Spec); err != nil {
		return engine.Observation{}, fmt.Errorf("decoding %s: %w", o.Name, err)
	}
	switch {
	case o.UID != r.Transport.UID || o.Labels[LabelObservation] != operationID:
		return engine.Observation{}, fmt.Errorf("%s is not the object reading %s created", o.Name, operationID)
	case plan.Spec.Schema.UID != resourceUID:
		return engine.Observation{}, fmt.Errorf("%s holds a plan of another resource (uid %s)", o.Name, plan.Spec.Schema.UID)
	case plan.Spec.Bindings != r.Bindings:
		return engine.Observation{}, fmt.Errorf("%s carries other bindings than reading %s reported", o.Name, operationID)
	case len(plan.Spec.Statements) != r.Statements:
		return engine.Observation{}, fmt.Errorf("%s holds %d statements, reading %s reported %d", o.Name, len(plan.Spec.Statements), operationID, r.Statements)
	}
	if err := engine.VerifyPlan(plan); err != nil {
		return engine.Observation{}, err
	}
	return engine.ObservationOf(plan.Spec), nil
}

// ReadMigrationTransport is ReadTransport for a PtahMigration's reading:
// the pending versions come from the transport object, checked as
// ReadTransport checks a PtahSchema's (label, UID, bindings, count,
// fingerprint); the rest from the result.
func ReadMigrationTransport(ctx context.Context, st store.Store, namespace, resourceUID, operationID string,
	r ObservationResult) (engine.MigrationObservation, error) {
	if r.Migration == nil {
		return engine.MigrationObservation{}, fmt.Errorf("reading %s reported no history", operationID)
	}
	m := r.Migration
	obs := engine.MigrationObservation{Bindings: r.Bindings, History: m.History, Blocked: m.Blocked, Reason: m.Reason, Message: m.Message,
		LockTimeout: m.LockTimeout, LockAttemptTimeout: m.LockAttemptTimeout, StatementTimeout: m.StatementTimeout}
	if r.Transport == nil {
		if r.Statements != 0 {
			return obs, fmt.Errorf("reading %s reported %d pending versions and no object holding them", operationID, r.Statements)
		}
		return obs, nil
	}
	o, err := st.Get(ctx, api.KindPtahMigrationPlan, namespace, r.Transport.Name)
	if err != nil {
		return obs, fmt.Errorf("reading the pending versions of reading %s: %w", operationID, err)
	}
	plan := engine.MigrationPlan{Name: o.Name, UID: o.UID}
	if err := json.Unmarshal(o.Spec, &plan.Spec); err != nil {
		return obs, fmt.Errorf("decoding %s: %w", o.Name, err)
	}
	switch {
	case o.UID != r.Transport.UID || o.Labels[LabelObservation] != operationID:
		return obs, fmt.Errorf("%s is not the object reading %s created", o.Name, operationID)
	case plan.Spec.Migration.UID != resourceUID:
		return obs, fmt.Errorf("%s holds a plan of another resource (uid %s)", o.Name, plan.Spec.Migration.UID)
	case plan.Spec.Bindings != r.Bindings:
		return obs, fmt.Errorf("%s carries other bindings than reading %s reported", o.Name, operationID)
	case len(plan.Spec.Versions) != r.Statements:
		return obs, fmt.Errorf("%s holds %d versions, reading %s reported %d", o.Name, len(plan.Spec.Versions), operationID, r.Statements)
	case plan.Spec.LockTimeout != m.LockTimeout || plan.Spec.LockAttemptTimeout != m.LockAttemptTimeout ||
		plan.Spec.StatementTimeout != m.StatementTimeout:
		return obs, fmt.Errorf("%s carries other lock or statement timeouts than reading %s reported", o.Name, operationID)
	}
	if err := engine.VerifyMigrationPlan(plan); err != nil {
		return obs, err
	}
	obs.Pending, obs.Baseline = plan.Spec.Versions, plan.Spec.Baseline
	return obs, nil
}
