package cli

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/ptah-run/ptah/internal/controller"
)

const serveLong = `Run ptah as a Kubernetes controller over the cluster's PtahSchema and
PtahMigration resources (deploy/ installs it). Before anything starts it
fences the cluster's stored state: a resource or CRD written by a newer
ptah stops it (exit 15), naming what is newer. With --leader-elect only the
elected replica works; the others wait to take over.

The manager serves Prometheus metrics (--metrics-bind-address) and the
/healthz and /readyz probes (--health-probe-bind-address), and logs as
JSON lines on stderr.

In a Pod it uses the Pod's ServiceAccount; elsewhere the kubeconfig
(--kubeconfig, else $KUBECONFIG, else ~/.kube/config) and --context.

Each PtahSchema and PtahMigration is read, planned and applied by Jobs
whose Pods run this same binary (--job-image): the manager never holds a
database credential. See the README's section on ptah serve.

`

type serveOptions struct {
	LeaderElect         bool
	LeaderElectionNS    string
	MetricsAddr         string
	ProbeAddr           string
	kubeconfig, context string
	image               string
	runTimeout          time.Duration
}

func (a *app) newServeCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "serve [flags]",
		Short: "Run the Kubernetes controller",
		Long:  serveLong + exitCodeHelp("serve"),
		Example: `  # In a Pod (deploy/manager/deployment.yaml)
  ptah serve --leader-elect

  # From a laptop, against the current kubeconfig context
  ptah serve --metrics-bind-address 127.0.0.1:8080`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			s := a.settings
			le, err := s.Bool("leader-elect")
			if err != nil {
				return err
			}
			o := serveOptions{LeaderElect: le, LeaderElectionNS: s.String("leader-election-namespace"),
				MetricsAddr: s.String("metrics-bind-address"), ProbeAddr: s.String("health-probe-bind-address"),
				kubeconfig: s.String("kubeconfig"), context: s.String("context"), image: s.String("job-image")}
			if o.image == "" {
				return usageErrorf("--job-image is required: the image whose ptah runs the Jobs (the manager's own; deploy/manager sets it)")
			}
			var err2 error
			if o.runTimeout, err2 = s.Duration("run-timeout"); err2 != nil {
				return err2
			}
			return a.runServe(cmd.Context(), o)
		},
	}
	f := cmd.Flags()
	f.Bool("leader-elect", false, "elect one active replica through a Lease (run several replicas with it)")
	f.String("leader-election-namespace", "", "the namespace of the election's Lease (default: the Pod's own)")
	f.String("metrics-bind-address", ":8080", `where to serve Prometheus metrics ("0": nowhere)`)
	f.String("health-probe-bind-address", ":8081", `where to serve /healthz and /readyz ("0": nowhere)`)
	f.String("job-image", "", "the image of the Jobs that read and change the databases (ptah itself)")
	f.Duration("run-timeout", time.Hour, "an apply's absolute deadline, from its claim")
	return cmd
}

func (a *app) runServe(ctx context.Context, o serveOptions) error {
	cfg, err := serveConfig(o)
	if err != nil {
		return err
	}
	return controller.Run(ctx, controller.Options{Config: cfg, LeaderElection: o.LeaderElect,
		LeaderElectionNamespace: o.LeaderElectionNS, MetricsAddr: o.MetricsAddr, ProbeAddr: o.ProbeAddr,
		Logger: slog.New(slog.NewJSONHandler(a.stderr, nil)), Version: versionString(), Image: o.image, RunTimeout: o.runTimeout})
}

// serveConfig is the Pod's ServiceAccount in a cluster, else the kubeconfig.
func serveConfig(o serveOptions) (*rest.Config, error) {
	if o.kubeconfig == "" && o.context == "" && os.Getenv("KUBERNETES_SERVICE_HOST") != "" {
		cfg, err := rest.InClusterConfig()
		if err != nil {
			return nil, fmt.Errorf("%w: the Pod's ServiceAccount: %v", errClusterUnreachable, err)
		}
		return cfg, nil
	}
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = o.kubeconfig
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{CurrentContext: o.context}).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("%w: reading the kubeconfig: %v", errClusterUnreachable, err)
	}
	return cfg, nil
}
