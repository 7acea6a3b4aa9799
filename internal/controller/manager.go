package controller

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/labels"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/go-logr/logr"

	"github.com/ptah-run/ptah/internal/store/kubestore"
	api "github.com/ptah-run/ptah/pkg/api/v1alpha1"
)

func namespaces(names []string) map[string]cache.Config {
	if len(names) == 0 {
		return nil
	}
	out := map[string]cache.Config{}
	for _, n := range names {
		out[n] = cache.Config{}
	}
	return out
}

// cacheOptions shape the manager's caches, which serve its watches and a
// pass's fence only (a pass reads the API server itself for everything
// else): the fence's, of each object its identity and contract version
// (cachedFence); of Jobs, only ptah's, and of those only what a watch
// looks at (owner, labels, status), not their Pod templates, which carry
// a plan of up to InlinePlanBytes; of every object, no managed fields.
func cacheOptions(names []string) cache.Options {
	strip := cache.TransformStripManagedFields()
	byObject := map[client.Object]cache.ByObject{}
	// The fence's caches (see cachedFence), one per kind.
	for _, kind := range api.Kinds {
		byObject[fenceObject(kind)] = cache.ByObject{Transform: fenceTransform(strip)}
	}
	byObject[&batchv1.Job{}] = cache.ByObject{
		Label: labels.SelectorFromSet(labels.Set{"app.kubernetes.io/name": "ptah"}),
		Transform: func(in any) (any, error) {
			out, err := strip(in)
			if job, ok := out.(*batchv1.Job); ok {
				job.Spec = batchv1.JobSpec{}
			}
			return out, err
		},
	}
	return cache.Options{DefaultNamespaces: namespaces(names), DefaultTransform: strip, ByObject: byObject}
}

// LeaderElectionID names the Lease the managers of one installation elect
// their leader with.
const LeaderElectionID = "ptah-manager.ptah.run"

// Options configure the manager.
type Options struct {
	// Config reaches the API server as the manager's ServiceAccount.
	Config *rest.Config
	// LeaderElection: only the elected replica reconciles; the others wait.
	LeaderElection bool
	// LeaderElectionNamespace holds the election's Lease ("" in a Pod: its
	// own namespace).
	LeaderElectionNamespace string
	// MetricsAddr serves Prometheus metrics ("0": off); ProbeAddr serves
	// /healthz and /readyz ("0": off).
	MetricsAddr, ProbeAddr string
	// Logger receives the manager's structured logs.
	Logger *slog.Logger
	// Version is this ptah's version, for the logs and the plans.
	Version string
	// Image runs ptah exec in the Jobs.
	Image string
	// Namespaces, when set, are the only namespaces whose resources the
	// manager reconciles; empty: all.
	Namespaces []string
	// Namespace is the manager's own (default: $POD_NAMESPACE, else
	// ptah-system): the Leases of keys a PtahRealm joins live there.
	Namespace string
	// RunTimeout bounds an apply, ReadTimeout a reading (defaults: 1h,
	// 10m).
	RunTimeout, ReadTimeout time.Duration
}

// Scheme knows Kubernetes' built-in types, the CRD type and ptah's.
func Scheme() (*k8sruntime.Scheme, error) {
	s := k8sruntime.NewScheme()
	for _, add := range []func(*k8sruntime.Scheme) error{clientgoscheme.AddToScheme, apiextensionsv1.AddToScheme, api.AddToScheme} {
		if err := add(s); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// Run fences the cluster's stored state, then runs the manager until ctx
// ends. It returns the fence's refusal (wrapping store.ErrNewerContract or
// an engine.FutureStateError) without starting anything.
func Run(ctx context.Context, o Options) error {
	if o.Config == nil {
		return errors.New("no cluster configuration")
	}
	scheme, err := Scheme()
	if err != nil {
		return err
	}
	// client-go's default of 5 requests a second, bursts of 10, throttles
	// a manager bringing a few hundred resources in at once: each reading
	// and apply is a Job, its plan parts and their removal (make bench's
	// controller section measures it).
	if o.Config.QPS == 0 && o.Config.Burst == 0 {
		o.Config = rest.CopyConfig(o.Config)
		o.Config.QPS, o.Config.Burst = 50, 100
	}
	logger := logr.FromSlogHandler(o.Logger.Handler())
	log.SetLogger(logger)
	// The fence reads the API server directly: the manager's caches are not
	// started yet, and nothing may start before it passes.
	direct, err := client.New(o.Config, client.Options{Scheme: scheme})
	if err != nil {
		return fmt.Errorf("connecting to the API server: %w", err)
	}
	if err := VerifyStoredControllerState(ctx, direct); err != nil {
		return err
	}
	mgr, err := ctrl.NewManager(o.Config, manager.Options{
		Scheme:                        scheme,
		Logger:                        logger,
		LeaderElection:                o.LeaderElection,
		LeaderElectionID:              LeaderElectionID,
		LeaderElectionNamespace:       o.LeaderElectionNamespace,
		LeaderElectionReleaseOnCancel: true,
		Metrics:                       metricsserver.Options{BindAddress: o.MetricsAddr},
		HealthProbeBindAddress:        o.ProbeAddr,
		Cache:                         cacheOptions(o.Namespaces),
	})
	if err != nil {
		return fmt.Errorf("creating the manager: %w", err)
	}
	// The fence's caches start, and fill, with the manager's, before any
	// reconcile (an informer made at first use would start a pass waiting).
	for _, kind := range api.Kinds {
		if _, err := mgr.GetCache().GetInformer(ctx, fenceObject(kind)); err != nil {
			return fmt.Errorf("caching the stored %s objects for the fence: %w", kind, err)
		}
	}
	for _, kind := range []string{api.KindPtahSchema, api.KindPtahMigration} {
		r := &Reconciler{Kind: kind, Client: direct, Store: kubestore.New(direct), Image: o.Image, Version: o.Version,
			Now: time.Now, NewID: NewOperationID, RunTimeout: cmp.Or(o.RunTimeout, time.Hour), ReadTimeout: cmp.Or(o.ReadTimeout, 10*time.Minute),
			Events: mgr.GetEventRecorder("ptah"), Namespace: cmp.Or(o.Namespace, os.Getenv("POD_NAMESPACE"), "ptah-system"),
			Fence: cachedFence{cache: mgr.GetCache()}}
		if err := r.SetupWithManager(mgr); err != nil {
			return fmt.Errorf("registering the %s reconciler: %w", kind, err)
		}
	}
	if err := mgr.AddHealthzCheck("ping", healthz.Ping); err != nil {
		return err
	}
	if err := mgr.AddReadyzCheck("ping", healthz.Ping); err != nil {
		return err
	}
	o.Logger.Info("ptah serve starting", "version", o.Version, "contractVersion", api.ContractVersion, "leaderElection", o.LeaderElection)
	return mgr.Start(ctx)
}
