package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ptah-run/ptah/internal/config"
	"github.com/ptah-run/ptah/internal/postgres"
	"github.com/ptah-run/ptah/internal/runner"
	api "github.com/ptah-run/ptah/pkg/api/v1alpha1"
)

// resolve-run --cluster: the record of the run (status.unresolvedRun, the
// plan it names, the resource's UID) is the cluster's, and the
// acknowledgment is created there; what the run did (the journal, the
// history, whether its writer may still write) is in the database, which
// the person reads with their own access to its URL. Runner.Evidence and
// Runner.Acknowledge do the work, on a runner whose store is the cluster's.

// errNoDatabaseURL: cluster mode cannot find the database URL of the
// migration (no Secret named, the Secret or its key absent, the
// --database-url-env variable unset).
var errNoDatabaseURL = errors.New("cannot find the database URL")

// errSecretForbidden marks the API server's refusal to let the person read
// the URL's Secret; the refusal itself is wrapped too (exit 24).
var errSecretForbidden = errors.New("cannot read the database URL")

// hintDatabaseURL is the remedy for both.
const hintDatabaseURL = "the journal and the history are in the database: resolve-run --cluster reads the URL from the Secret key " +
	"spec.target.urlFrom.secretKeyRef names, with your own permissions; without them, put the URL in an environment variable " +
	"and pass its name: --database-url-env VAR (never the URL itself)"

// acknowledgmentResource is the API resource of a run acknowledgment.
var acknowledgmentResource = schema.GroupResource{Group: api.Group, Resource: "ptahmigrationrunacknowledgments"}

// clusterResolve is what resolve-run --cluster works with.
type clusterResolve struct {
	c   *cluster
	r   *runner.Runner
	in  runner.Resource
	res *config.Resource
}

func (cr *clusterResolve) close() { _ = cr.r.Target.Close(context.Background()) }

func (a *app) runResolveCluster(ctx context.Context, o resolveOptions) error {
	cr, err := a.openClusterResolve(ctx, o)
	if err != nil {
		return err
	}
	defer cr.close()
	if o.Operation == "" {
		return a.showEvidenceCluster(ctx, o, cr)
	}
	return a.recordResolutionCluster(ctx, o, cr)
}

// openClusterResolve reads the PtahMigration from the cluster, finds its
// database's URL and connects to it.
func (a *app) openClusterResolve(ctx context.Context, o resolveOptions) (*clusterResolve, error) {
	c, err := a.openCluster(ctx)
	if err != nil {
		return nil, err
	}
	if err := runner.FenceStore(ctx, c.store); err != nil {
		return nil, err
	}
	m := &api.PtahMigration{}
	err = c.client.Get(ctx, client.ObjectKey{Namespace: c.namespace, Name: o.Name}, m)
	if apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("%w: no PtahMigration %q in namespace %s", runner.ErrNotRegistered, o.Name, c.namespace)
	}
	if err != nil {
		return nil, fmt.Errorf("reading PtahMigration %s/%s: %w", c.namespace, o.Name, err)
	}
	m.APIVersion, m.Kind = api.APIVersion, api.KindPtahMigration
	res := &config.Resource{Migration: m}
	url, err := a.clusterDatabaseURL(ctx, c, m, o.DatabaseURLEnv)
	if err != nil {
		return nil, err
	}
	conn, err := postgres.Connect(ctx, url)
	if err != nil {
		return nil, fmt.Errorf("connecting to the database of %s: %w", res.Ref(), err)
	}
	r := &runner.Runner{Store: c.store, Target: conn, Version: versionString(), NewID: newID}
	in := runner.Resource{Migration: m, TargetURL: url, SourceErr: runner.ErrSourceElsewhere}
	return &clusterResolve{c: c, r: r, in: in, res: res}, nil
}

// clusterDatabaseURL is the URL of m's database: the --database-url-env
// variable's, else the Secret key the resource names, read as the person
// running ptah. It is registered with the redactor before anything can
// print it; no message here holds it.
func (a *app) clusterDatabaseURL(ctx context.Context, c *cluster, m *api.PtahMigration, envVar string) (string, error) {
	what := fmt.Sprintf("PtahMigration %s/%s", m.Namespace, m.Name)
	if envVar != "" {
		url := strings.TrimSpace(os.Getenv(envVar))
		a.secrets.addURL(url)
		if url == "" {
			return "", fmt.Errorf("%w of %s: the environment variable %s (--database-url-env) is not set", errNoDatabaseURL, what, envVar)
		}
		if err := postgres.CheckURL(url); err != nil {
			return "", fmt.Errorf("%w of %s: the environment variable %s (--database-url-env) does not hold a PostgreSQL connection URL: %v",
				errNoDatabaseURL, what, envVar, err)
		}
		return url, nil
	}
	var ref *api.SecretKeyRef
	if from := m.Spec.Target.URLFrom; from != nil {
		ref = from.SecretKeyRef
	}
	if ref == nil {
		return "", fmt.Errorf("%w of %s: it names no Secret key (spec.target.urlFrom.secretKeyRef, what ptah serve's Jobs read); "+
			"pass --database-url-env VAR, the name of an environment variable holding the URL", errNoDatabaseURL, what)
	}
	secret := &corev1.Secret{}
	err := c.client.Get(ctx, client.ObjectKey{Namespace: m.Namespace, Name: ref.Name}, secret)
	switch {
	case apierrors.IsForbidden(err), apierrors.IsUnauthorized(err):
		return "", fmt.Errorf("%w: %s may not read Secret %s (spec.target.urlFrom.secretKeyRef of %s), which holds the database URL; "+
			"pass --database-url-env VAR, the name of an environment variable holding the URL: %w", errSecretForbidden, c.user, ref.Name, what, err)
	case apierrors.IsNotFound(err):
		return "", fmt.Errorf("%w of %s: Secret %s (spec.target.urlFrom.secretKeyRef) does not exist in namespace %s; "+
			"pass --database-url-env VAR, the name of an environment variable holding the URL", errNoDatabaseURL, what, ref.Name, m.Namespace)
	case err != nil:
		return "", fmt.Errorf("reading Secret %s (the database URL of %s): %w", ref.Name, what, err)
	}
	url := strings.TrimSpace(string(secret.Data[ref.Key]))
	a.secrets.addURL(url)
	if url == "" {
		return "", fmt.Errorf("%w of %s: Secret %s has no key %s (spec.target.urlFrom.secretKeyRef), or it is empty; "+
			"pass --database-url-env VAR, the name of an environment variable holding the URL", errNoDatabaseURL, what, ref.Name, ref.Key)
	}
	if err := postgres.CheckURL(url); err != nil {
		return "", fmt.Errorf("%w of %s: key %s of Secret %s does not hold a PostgreSQL connection URL: %v", errNoDatabaseURL, what, ref.Key, ref.Name, err)
	}
	return url, nil
}

// showEvidenceCluster is resolve-run --cluster without --operation.
func (a *app) showEvidenceCluster(ctx context.Context, o resolveOptions, cr *clusterResolve) error {
	out := evidenceOutput{Resource: refOf(cr.res)}
	ev, err := cr.r.Evidence(ctx, cr.in)
	if err != nil {
		return fmt.Errorf("reading the evidence of %s: %w", cr.res.Ref(), err)
	}
	if ev.Unresolved == nil {
		st := cr.res.Migration.Status
		out.ResolvedRun = st.ResolvedRun
		if st.Phase != "" {
			out.Status = &evidenceStatusDigest{Phase: st.Phase, Reason: st.Reason}
		}
	} else {
		out = evidenceOf(cr.res, cr.in, ev)
		out.Next.Command = a.clusterResolveCommand(o, cr.c.namespace, ev.Unresolved.OperationID)
	}
	if o.Output == outputJSON {
		return writeJSON(a.stdout, out)
	}
	return a.renderEvidence(out, cr.in)
}

// clusterResolveCommand is the command that records an acknowledgment of
// operation op; REASON stands for the person's.
func (a *app) clusterResolveCommand(o resolveOptions, namespace, op string) string {
	cmd := fmt.Sprintf("ptah resolve-run %s --cluster -n %s", o.Name, namespace)
	if ctx := a.settings.String("context"); ctx != "" {
		cmd += " --context " + ctx
	}
	if o.DatabaseURLEnv != "" {
		cmd += " --database-url-env " + o.DatabaseURLEnv
	}
	return cmd + fmt.Sprintf(" --operation %s --reason REASON", op)
}

// recordResolutionCluster is resolve-run --cluster --operation: it records
// the acknowledgment in the name of the authenticated user; ptah serve's
// next pass consumes it.
func (a *app) recordResolutionCluster(ctx context.Context, o resolveOptions, cr *clusterResolve) error {
	// The versions marked applied are committed to the history before the
	// acknowledgment is created (Runner.Acknowledge): make sure the API
	// server will take the acknowledgment first, so that a person it would
	// refuse records nothing at all.
	if err := cr.c.mayCreate(ctx, acknowledgmentResource); err != nil {
		return fmt.Errorf("resolving operation %s of %s: %w; nothing was recorded", o.Operation, cr.res.Ref(), err)
	}
	ack, err := cr.r.Acknowledge(ctx, cr.in, runner.AcknowledgeRequest{OperationID: o.Operation, By: cr.c.user, Reason: o.Reason,
		MarkApplied: o.MarkApplied, Rerun: o.Rerun})
	if errors.Is(err, runner.ErrNotMarkable) || errors.Is(err, runner.ErrUnaccounted) {
		return fmt.Errorf("resolving operation %s of %s: %w", o.Operation, cr.res.Ref(), err)
	}
	if err != nil {
		return err
	}
	out := resolvedOutput{Acknowledgment: approvalItem{Metadata: jsonMeta{Name: ack.Name, UID: ack.UID}, Spec: ack.Spec}}
	if o.Output == outputJSON {
		return writeJSON(a.stdout, out)
	}
	if err := a.renderResolved(ack, o.Rerun, out, planResult{}, false); err != nil {
		return err
	}
	_, err = fmt.Fprintf(a.stdout, "ptah serve consumes it in its next pass: it clears the run (status.resolvedRun says who settled it), "+
		"reads the history again and publishes the plan of what remains (ptah plan %s --cluster -n %s shows it).\n", o.Name, cr.c.namespace)
	return err
}

// mayCreate refuses, as the API server would, when the caller may not
// create objects of gr in the namespace.
func (c *cluster) mayCreate(ctx context.Context, gr schema.GroupResource) error {
	review := &authorizationv1.SelfSubjectAccessReview{Spec: authorizationv1.SelfSubjectAccessReviewSpec{
		ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: c.namespace, Verb: "create", Group: gr.Group, Resource: gr.Resource}}}
	if err := c.client.Create(ctx, review); err != nil {
		return fmt.Errorf("%w: asking the API server whether %s may create %s: %v", errClusterUnreachable, c.user, gr.Resource, err)
	}
	if !review.Status.Allowed {
		return apierrors.NewForbidden(gr, "", fmt.Errorf("user %q may not create them in namespace %s (the ptah-approver role grants it)",
			c.user, c.namespace))
	}
	return nil
}
