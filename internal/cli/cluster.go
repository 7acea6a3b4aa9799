package cli

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"
	authenticationv1 "k8s.io/api/authentication/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

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
