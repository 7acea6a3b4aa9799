package cli

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/spf13/cobra"
	authenticationv1 "k8s.io/api/authentication/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ptah-run/ptah/internal/config"
	"github.com/ptah-run/ptah/internal/engine"
	"github.com/ptah-run/ptah/internal/postgres"
	"github.com/ptah-run/ptah/internal/runner"
	"github.com/ptah-run/ptah/internal/store"
	"github.com/ptah-run/ptah/internal/store/kubestore"
	api "github.com/ptah-run/ptah/pkg/api/v1alpha1"
)

// Cluster mode: with --cluster, the verbs that read or record decisions
// act on the custom resources of a Kubernetes cluster (where ptah serve
// converges them) instead of the databases ptah.yaml names. kubectl's
// flags pick the cluster: --kubeconfig (else $KUBECONFIG, else
// ~/.kube/config), --context, -n/--namespace.

// errClusterUnreachable: the kubeconfig cannot be read, or the API server
// cannot be reached or refuses the credentials.
var errClusterUnreachable = errors.New("cannot reach the cluster")

// errClusterConfig: what a Job's Pod needs is missing from its
// environment.
var errClusterConfig = errors.New("invalid configuration")

// clusterFlags are the root's persistent flags of cluster mode.
func clusterFlags(root *cobra.Command) {
	f := root.PersistentFlags()
	f.Bool("cluster", false, "act on a Kubernetes cluster's ptah resources (ptah serve converges them) instead of the databases ptah.yaml names")
	f.String("kubeconfig", "", "with --cluster: the kubeconfig file (default $KUBECONFIG, else ~/.kube/config)")
	f.String("context", "", "with --cluster: the kubeconfig context to use")
	f.StringP("namespace", "n", "", "with --cluster: the namespace (default: the context's)")
}

// clusterMode reports whether --cluster is set, refusing kubectl's flags
// without it: silently ignoring them would act on a database instead.
func (a *app) clusterMode() (bool, error) {
	on, err := a.settings.Bool("cluster")
	if err != nil {
		return false, err
	}
	if !on {
		for _, k := range []string{"kubeconfig", "context", "namespace"} {
			if a.settings.String(k) != "" {
				return false, usageErrorf("%s is for cluster mode: pass --cluster too", a.settings.origin(k))
			}
		}
	}
	return on, nil
}

// cluster is a connection to the API server as the person running ptah.
type cluster struct {
	client    client.Client
	store     *kubestore.Store
	namespace string
	// user is who the API server says the caller is: what an approval
	// records, and what the admission policy holds it to.
	user string
}

func (a *app) openCluster(ctx context.Context) (*cluster, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	if kc := a.settings.String("kubeconfig"); kc != "" {
		rules.ExplicitPath = kc
	}
	overrides := &clientcmd.ConfigOverrides{CurrentContext: a.settings.String("context")}
	overrides.Context.Namespace = a.settings.String("namespace")
	cc := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, overrides)
	cfg, err := cc.ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("%w: reading the kubeconfig: %v", errClusterUnreachable, err)
	}
	ns, _, err := cc.Namespace()
	if err != nil {
		return nil, fmt.Errorf("%w: reading the kubeconfig's namespace: %v", errClusterUnreachable, err)
	}
	scheme := k8sruntime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return nil, err
	}
	if err := api.AddToScheme(scheme); err != nil {
		return nil, err
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return nil, fmt.Errorf("%w: %v", errClusterUnreachable, err)
	}
	review := &authenticationv1.SelfSubjectReview{}
	if err := c.Create(ctx, review); err != nil {
		return nil, fmt.Errorf("%w: asking the API server who this is: %v", errClusterUnreachable, err)
	}
	user := review.Status.UserInfo.Username
	if user == "" {
		return nil, fmt.Errorf("%w: the API server does not say who this is", errClusterUnreachable)
	}
	return &cluster{client: c, store: kubestore.New(c).InNamespace(ns), namespace: ns, user: user}, nil
}

// clusterExitCode classifies the API server's refusals.
func clusterExitCode(err error) (int, bool) {
	switch {
	case errors.Is(err, errClusterUnreachable), apierrors.IsUnauthorized(err):
		return ExitCluster, true
	case apierrors.IsForbidden(err):
		return ExitForbidden, true
	}
	return 0, false
}

// clusterNow is the time a decision made here records. The API server
// stamps the object's creation time too; neither is trusted for more than
// audit.
func clusterNow(context.Context) (time.Time, error) { return time.Now().UTC(), nil }

// clusterResources are the PtahSchema and PtahMigration resources of the
// namespace that names selects (all of them when it is empty; a name may
// be Kind/name), refusing a name that selects none.
func (c *cluster) resources(ctx context.Context, names []string) ([]runner.Resource, error) {
	var out []runner.Resource
	found := map[string]bool{}
	for _, kind := range []string{api.KindPtahSchema, api.KindPtahMigration} {
		objs, err := c.store.List(ctx, store.ListOptions{Kind: kind, MetadataOnly: true})
		if err != nil {
			return nil, err
		}
		for _, obj := range objs {
			if len(names) > 0 {
				var hit bool
				for _, n := range []string{obj.Name, obj.Kind + "/" + obj.Name} {
					if slices.Contains(names, n) {
						found[n], hit = true, true
					}
				}
				if !hit {
					continue
				}
			}
			meta := metav1.ObjectMeta{Name: obj.Name, Namespace: obj.Namespace}
			if kind == api.KindPtahMigration {
				out = append(out, runner.Resource{Migration: &api.PtahMigration{
					TypeMeta: metav1.TypeMeta{APIVersion: api.APIVersion, Kind: kind}, ObjectMeta: meta}})
			} else {
				out = append(out, runner.Resource{Schema: &api.PtahSchema{
					TypeMeta: metav1.TypeMeta{APIVersion: api.APIVersion, Kind: kind}, ObjectMeta: meta}})
			}
		}
	}
	for _, n := range names {
		if !found[n] {
			return nil, fmt.Errorf("%w: no PtahSchema or PtahMigration %q in namespace %s", runner.ErrNotRegistered, n, c.namespace)
		}
	}
	return out, nil
}

// clusterSelection connects to the cluster, fences its stored state and
// selects the resources names name (all of the namespace's when none).
func (a *app) clusterSelection(ctx context.Context, names []string) (*cluster, []runner.Resource, error) {
	c, err := a.openCluster(ctx)
	if err != nil {
		return nil, nil, err
	}
	if err := runner.FenceStore(ctx, c.store); err != nil {
		return nil, nil, err
	}
	resources, err := c.resources(ctx, names)
	return c, resources, err
}

// runPlanCluster shows the plans ptah serve published for the resources:
// in a cluster nothing is computed here, the manager plans.
func (a *app) runPlanCluster(ctx context.Context, o planOptions) error {
	if o.NoPublish || o.Baseline != "" || o.DevURL != "" {
		return usageErrorf("with --cluster, plan shows what ptah serve published: --no-publish, --baseline and --dev-url are local mode's")
	}
	c, resources, err := a.clusterSelection(ctx, o.Names)
	if err != nil {
		return err
	}
	var results []planResult
	for _, res := range resources {
		r, err := publishedIn(ctx, c.store, c.namespace, res)
		if err != nil {
			return fmt.Errorf("reading the plan of %s %s: %w", res.Kind(), res.Name(), err)
		}
		results = append(results, r)
	}
	if len(results) == 0 {
		_, err := fmt.Fprintf(a.stdout, "No PtahSchema or PtahMigration in namespace %s.\n", c.namespace)
		return err
	}
	return a.showPlans(results, o)
}

// publishedIn is res's current plan as st records it, ready to render. A
// stored plan that no longer matches its fingerprint is refused, not shown.
func publishedIn(ctx context.Context, st store.Store, ns string, res runner.Resource) (planResult, error) {
	r := planResult{Resource: &config.Resource{Schema: res.Schema, Migration: res.Migration}}
	obj, err := st.Get(ctx, res.Kind(), ns, res.Name())
	if err != nil {
		return r, err
	}
	current := func(kind string, ref *api.PlanReference, spec any) (*store.Object, error) {
		if ref == nil {
			return nil, nil
		}
		p, err := st.Get(ctx, kind, ns, ref.Name)
		if errors.Is(err, store.ErrNotFound) || err == nil && p.UID != ref.UID {
			return nil, fmt.Errorf("%w: plan %s was replaced since the status named it; run the command again", runner.ErrPlanNotCurrent, ref.Name)
		}
		if err != nil {
			return nil, err
		}
		if err := json.Unmarshal(p.Spec, spec); err != nil {
			return nil, fmt.Errorf("decoding plan %s: %w", p.Name, err)
		}
		return &p, nil
	}
	if res.Migration != nil {
		var status api.PtahMigrationStatus
		if err := decodeStored(obj.Status, &status); err != nil {
			return r, err
		}
		mp := &migrationPlan{Status: &status, Versions: []api.MigrationVersion{}}
		r.Migration = mp
		var spec api.PtahMigrationPlanSpec
		p, err := current(api.KindPtahMigrationPlan, status.Plan, &spec)
		if err != nil || p == nil {
			return r, err
		}
		if err := engine.VerifyMigrationPlan(engine.MigrationPlan{Name: p.Name, UID: p.UID, Spec: spec}); err != nil {
			return r, err
		}
		mp.Versions, mp.HistoryFingerprint, mp.LockTimeout, mp.Baseline = spec.Versions, spec.HistoryFingerprint, spec.LockTimeout, spec.Baseline
		r.Published = &publishedPlan{Name: p.Name, UID: p.UID, Fingerprint: spec.Fingerprint}
		return r, nil
	}
	var status api.PtahSchemaStatus
	if err := decodeStored(obj.Status, &status); err != nil {
		return r, err
	}
	r.Status, r.Plan = &status, &postgres.Plan{}
	var spec api.PtahSchemaPlanSpec
	p, err := current(api.KindPtahSchemaPlan, status.Plan, &spec)
	if err != nil || p == nil {
		return r, err
	}
	if err := engine.VerifyPlan(engine.Plan{Name: p.Name, UID: p.UID, Spec: spec}); err != nil {
		return r, err
	}
	r.Plan = runner.ToPlan(spec)
	r.Published = &publishedPlan{Name: p.Name, UID: p.UID, Fingerprint: spec.Fingerprint}
	return r, nil
}

func decodeStored(raw []byte, into any) error {
	if len(raw) == 0 {
		return nil
	}
	return json.Unmarshal(raw, into)
}
