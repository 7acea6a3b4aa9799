package controller

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/ptah-run/ptah/internal/engine"
	"github.com/ptah-run/ptah/internal/postgres"
	"github.com/ptah-run/ptah/internal/runner"
	"github.com/ptah-run/ptah/internal/store"
	"github.com/ptah-run/ptah/internal/store/kubestore"
	api "github.com/ptah-run/ptah/pkg/api/v1alpha1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Tasks a Job's Pod carries out.
const (
	// TaskApply runs a claimed plan (the default).
	TaskApply = "apply"
	// TaskObserve reads the database and the declared files and returns
	// the bindings, and the statements in a transport plan object.
	TaskObserve = "observe"
	// TaskRederive reads them again for a claim, under its lease, and
	// returns the bindings alone.
	TaskRederive = "rederive"
)

// Payload is what a Job's Pod receives as its request (split into parts,
// see SplitPlan): for an apply, the plan instance the operation claimed
// and what the writer records it under; for a reading, the resource.
type Payload struct {
	OperationID string `json:"operationID"`
	// Task is one of the Task constants; empty: TaskApply.
	Task string `json:"task,omitempty"`
	// Resource is the PtahSchema's name; CoordinationDigest names the
	// database lease the writer takes.
	Resource           string              `json:"resource"`
	Namespace          string              `json:"namespace,omitempty"`
	ResourceUID        string              `json:"resourceUID,omitempty"`
	CoordinationDigest string              `json:"coordinationDigest,omitempty"`
	Plan               api.ObjectReference `json:"plan,omitempty"`
	// Schema is the plan's spec, whose fingerprint is checked before
	// anything runs (TaskApply).
	Schema *api.PtahSchemaPlanSpec `json:"schema,omitempty"`
	// SchemaSpec is the resource's spec (TaskObserve, TaskRederive).
	SchemaSpec *api.PtahSchemaSpec `json:"schemaSpec,omitempty"`
	// MigrationSpec is a PtahMigration's spec (every task: its apply
	// reads the files its plan names from the source).
	MigrationSpec *api.PtahMigrationSpec `json:"migrationSpec,omitempty"`
	// Runs are the records of the PtahMigration's status that stand for
	// runs, which a reading reads the journal against (TaskObserve,
	// TaskRederive).
	Runs *api.PtahMigrationStatus `json:"runs,omitempty"`
	// Migration is a PtahMigration's claimed plan (TaskApply), checked
	// against its fingerprint and its files against the source before
	// anything runs; Approver is recorded in the history rows.
	Migration *api.PtahMigrationPlanSpec `json:"migration,omitempty"`
	Approver  string                     `json:"approver,omitempty"`
	// CoordinationScope is what the spec's coordination key is scoped to
	// in the cluster: "namespace/NS", or "realm/NAME" for a key a
	// PtahRealm joins across namespaces.
	CoordinationScope string `json:"coordinationScope,omitempty"`
}

func (p Payload) task() string {
	if p.Task == "" {
		return TaskApply
	}
	return p.Task
}

// MaxResultBytes bounds the result ptah exec writes: a termination message
// holds at most 4 KiB.
const MaxResultBytes = 4096

// Outcomes of a run, as its result reports them.
const (
	OutcomeSucceeded = "Succeeded"
	OutcomeFailed    = "Failed"  // the plan failed; the journal says how far it got
	OutcomeRefused   = "Refused" // nothing ran: the plan or the request was not runnable
	OutcomeUnknown   = "Unknown" // the run's end could not be observed: read the journal
)

// Result is what ptah exec reports through the termination message,
// bound to the operation and the plan's digest, which the manager checks
// against its claim before it believes a word of it. It carries no SQL.
type Result struct {
	OperationID string `json:"operationID"`
	// Task is the request's task (empty: not read, or an apply).
	Task       string `json:"task,omitempty"`
	PlanDigest string `json:"planDigest"`
	Outcome    string `json:"outcome"`
	// Message is the first line of what went wrong, cut to fit.
	Message string `json:"message,omitempty"`
	// Observation is what a reading found (TaskObserve, TaskRederive).
	Observation *ObservationResult `json:"observation,omitempty"`
	// Run is how far a PtahMigration's apply got, from its journal.
	Run *RunReport `json:"run,omitempty"`
}

// RunReport is what a PtahMigration's apply tells of its run beyond its
// outcome (engine.MigrationRun, with the versions counted: those that
// committed are always the first Committed of the plan's).
type RunReport struct {
	Committed int                `json:"committed"`
	Failure   *api.RunFailure    `json:"failure,omitempty"`
	Partial   bool               `json:"partial,omitempty"`
	Writer    *api.WriterSession `json:"writer,omitempty"`
	// MayStillWrite: the run's outcome is unknown and its database
	// session may still be writing: the Lease is kept until its deadline.
	MayStillWrite bool `json:"mayStillWrite,omitempty"`
}

// ObservationResult is a reading's answer: its bindings, and for
// TaskObserve with statements to run, the transport plan object that
// holds them (a plan can be megabytes; a result holds 4 KiB). The manager
// checks the object against these bindings and its fingerprint, reads it,
// publishes its own plan from it, and deletes it.
type ObservationResult struct {
	Bindings   api.Bindings         `json:"bindings"`
	Statements int                  `json:"statements"`
	Transport  *api.ObjectReference `json:"transport,omitempty"`
	// Migration is a PtahMigration's reading; its pending versions are in
	// the transport object (Statements counts them).
	Migration *MigrationReading `json:"migration,omitempty"`
}

// MigrationReading is a PtahMigration's reading but for its pending
// versions (engine.MigrationObservation).
type MigrationReading struct {
	History     api.HistorySummary `json:"history"`
	Blocked     bool               `json:"blocked,omitempty"`
	Reason      string             `json:"reason,omitempty"`
	Message     string             `json:"message,omitempty"`
	LockTimeout string             `json:"lockTimeout,omitempty"`
	// LockAttemptTimeout and StatementTimeout are the policy's, when set.
	LockAttemptTimeout string `json:"lockAttemptTimeout,omitempty"`
	StatementTimeout   string `json:"statementTimeout,omitempty"`
}

// Encode returns the result's JSON, its message cut so that the whole
// fits in MaxResultBytes.
func (r Result) Encode() []byte {
	r.Message, _, _ = strings.Cut(r.Message, "\n") // the writer puts SQL after the first line
	for {
		b, _ := json.Marshal(r)
		if len(b) <= MaxResultBytes || r.Message == "" {
			return b
		}
		r.Message = r.Message[:len(r.Message)*3/4]
	}
}

// ExecRun is one ptah exec.
type ExecRun struct {
	OperationID, PlanDigest string
	// Parts is the folder of the plan's parts.
	Parts fs.FS
	// Deadline is the run's absolute deadline; the writer's session is
	// stopped on the database server's clock when it passes.
	Deadline    time.Time
	DatabaseURL string
	// SourceDir holds the declared files (a reading's task).
	SourceDir string
	// RegistryConfig is a dockerconfigjson with the registry's
	// credentials, for a reading of an OCI source.
	RegistryConfig []byte
	// Records is where a reading publishes its transport plan object
	// (TaskObserve): the API, as the planner's ServiceAccount.
	Records store.Store
	// Version is this ptah's version, bound into the readings.
	Version string
}

// ErrRefused wraps why ptah exec ran nothing.
var ErrRefused = errors.New("nothing was run")

// Exec runs the plan of one operation against the database, exactly as
// claimed: the parts must hash to the digest the manager dispatched, the
// payload must name the same operation, and the plan must match its
// fingerprint; otherwise nothing runs. The result is always returned, also
// with the error.
func Exec(ctx context.Context, run ExecRun) (Result, error) {
	res := Result{OperationID: run.OperationID, PlanDigest: run.PlanDigest}
	refuse := func(err error) (Result, error) {
		res.Outcome, res.Message = OutcomeRefused, err.Error()
		return res, fmt.Errorf("%w: %w", ErrRefused, err)
	}
	raw, err := AssemblePlan(run.Parts, run.PlanDigest)
	if err != nil {
		return refuse(err)
	}
	var p Payload
	if err := json.Unmarshal(raw, &p); err != nil {
		return refuse(fmt.Errorf("reading the plan: %w", err))
	}
	if p.task() != TaskApply {
		res.Task = p.task()
	}
	switch {
	case p.OperationID != run.OperationID:
		return refuse(fmt.Errorf("the plan was dispatched for operation %q, not %q", p.OperationID, run.OperationID))
	case p.task() == TaskObserve || p.task() == TaskRederive:
		return observe(ctx, run, p, res)
	case p.task() != TaskApply:
		return refuse(fmt.Errorf("task %q is not one this ptah runs", p.Task))
	case p.Migration != nil:
		return applyMigration(ctx, run, p, res)
	case p.Schema == nil:
		return refuse(errors.New("the payload holds no plan this ptah runs"))
	}
	plan := engine.Plan{Name: p.Plan.Name, UID: p.Plan.UID, Spec: *p.Schema}
	if err := engine.VerifyPlan(plan); err != nil {
		return refuse(err)
	}
	w, err := postgres.OpenWriter(ctx, run.DatabaseURL, p.CoordinationDigest, run.OperationID, p.Resource, run.Deadline)
	if err != nil {
		return refuse(err)
	}
	runErr := w.Execute(ctx, p.Plan.UID, runner.ToPlan(*p.Schema), nil)
	switch {
	case runErr == nil:
		res.Outcome = OutcomeSucceeded
	case errors.Is(runErr, postgres.ErrOutcomeUnknown):
		// Keep the lease row: the run's end is the journal's to tell.
		w.Abandon()
		res.Outcome, res.Message = OutcomeUnknown, runErr.Error()
		return res, runErr
	case errors.Is(runErr, postgres.ErrNotStarted):
		res.Outcome, res.Message = OutcomeRefused, runErr.Error()
	default:
		res.Outcome, res.Message = OutcomeFailed, runErr.Error()
	}
	if err := w.Release(context.WithoutCancel(ctx)); err != nil && runErr == nil {
		runErr = err
	}
	return res, runErr
}

// RecordsFromCredentials is the API as the Pod's ServiceAccount, from
// the token and CA certificate mounted in dir (as rest.InClusterConfig
// reads them, from a folder given rather than fixed).
func RecordsFromCredentials(dir string) (store.Store, error) {
	host, port := os.Getenv("KUBERNETES_SERVICE_HOST"), os.Getenv("KUBERNETES_SERVICE_PORT")
	if host == "" || port == "" {
		return nil, errors.New("KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT are not set: not in a Pod")
	}
	cfg := &rest.Config{Host: "https://" + net.JoinHostPort(host, port), BearerTokenFile: filepath.Join(dir, "token"),
		TLSClientConfig: rest.TLSClientConfig{CAFile: filepath.Join(dir, "ca.crt")}}
	scheme, err := Scheme()
	if err != nil {
		return nil, err
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return nil, fmt.Errorf("reaching the API server: %w", err)
	}
	return kubestore.New(c), nil
}
