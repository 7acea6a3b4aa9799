package controller

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"time"

	"github.com/ptah-run/ptah/internal/engine"
	"github.com/ptah-run/ptah/internal/postgres"
	"github.com/ptah-run/ptah/internal/runner"
	api "github.com/ptah-run/ptah/pkg/api/v1alpha1"
)

// Payload is what a Job's Pod receives as its plan (split into parts, see
// SplitPlan): the plan instance the operation claimed, and what the writer
// records it under.
type Payload struct {
	OperationID string `json:"operationID"`
	// Resource is the PtahSchema's name; CoordinationDigest names the
	// database lease the writer takes.
	Resource           string              `json:"resource"`
	CoordinationDigest string              `json:"coordinationDigest"`
	Plan               api.ObjectReference `json:"plan"`
	// Schema is the plan's spec, whose fingerprint is checked before
	// anything runs.
	Schema *api.PtahSchemaPlanSpec `json:"schema,omitempty"`
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
	PlanDigest  string `json:"planDigest"`
	Outcome     string `json:"outcome"`
	// Message is the first line of what went wrong, cut to fit.
	Message string `json:"message,omitempty"`
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
	switch {
	case p.OperationID != run.OperationID:
		return refuse(fmt.Errorf("the plan was dispatched for operation %q, not %q", p.OperationID, run.OperationID))
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
