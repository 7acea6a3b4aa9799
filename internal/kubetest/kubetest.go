// Package kubetest starts a real Kubernetes control plane for tests: a
// kube-apiserver and an etcd built from their Go modules (make envtest,
// hack/), run by controller-runtime's envtest, with ptah's CRDs installed.
// There is no kubelet and no controller-manager: what those would do, a
// test does itself. There are no mocks of the API.
//
// One control plane serves a whole test binary (Main); tests isolate
// themselves by namespace (Namespace).
package kubetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	api "github.com/ptah-run/ptah/pkg/api/v1alpha1"
)

// Env is a running control plane.
type Env struct {
	env *envtest.Environment
	// Config reaches the API server as a cluster administrator.
	Config *rest.Config
	// Scheme knows Kubernetes' built-in types and ptah's.
	Scheme *k8sruntime.Scheme
	// Client is a client as the administrator.
	Client client.Client
}

var (
	shared  *Env
	nsCount atomic.Int64
)

// Option changes the control plane Start starts.
type Option func(*envtest.Environment)

// WithCRDs installs these CRDs instead of ptah's own (deploy/crds).
func WithCRDs(crds ...*apiextensionsv1.CustomResourceDefinition) Option {
	return func(e *envtest.Environment) {
		e.CRDDirectoryPaths = nil
		e.CRDs = crds
	}
}

// Main starts the control plane, runs the package's tests and stops it.
// Call it from TestMain. Without the binaries (make envtest) it fails with
// what to run, rather than skipping: a suite that silently skips proves
// nothing.
func Main(m *testing.M, opts ...Option) {
	env, err := Start(opts...)
	if err != nil {
		fmt.Fprintln(os.Stderr, "kubetest:", err)
		os.Exit(1)
	}
	shared = env
	code := m.Run()
	if err := env.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, "kubetest: stopping the control plane:", err)
	}
	os.Exit(code)
}

// StartShared starts the control plane Shared returns, for a TestMain that
// runs the tests itself (beside pgtest.Main, say); call stop when they end.
func StartShared(opts ...Option) (stop func(), err error) {
	env, err := Start(opts...)
	if err != nil {
		return nil, err
	}
	shared = env
	return func() { _ = env.Stop() }, nil
}

// Shared returns the control plane Main started.
func Shared(t testing.TB) *Env {
	t.Helper()
	if shared == nil {
		t.Fatal("kubetest: no control plane: call kubetest.Main from the package's TestMain")
	}
	return shared
}

// Start starts a control plane with ptah's CRDs installed.
func Start(opts ...Option) (*Env, error) {
	assets := os.Getenv("KUBEBUILDER_ASSETS")
	if assets == "" {
		assets = filepath.Join(repoRoot(), "bin", "envtest")
	}
	for _, bin := range []string{"kube-apiserver", "etcd"} {
		if _, err := os.Stat(filepath.Join(assets, bin)); err != nil {
			return nil, fmt.Errorf("%s is not built (%v): run make envtest, or set KUBEBUILDER_ASSETS to a folder holding kube-apiserver and etcd", bin, err)
		}
	}
	scheme := k8sruntime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return nil, err
	}
	if err := apiextensionsv1.AddToScheme(scheme); err != nil {
		return nil, err
	}
	if err := api.AddToScheme(scheme); err != nil {
		return nil, err
	}
	env := &envtest.Environment{
		BinaryAssetsDirectory:    assets,
		CRDDirectoryPaths:        []string{filepath.Join(repoRoot(), "deploy", "crds")},
		ErrorIfCRDPathMissing:    true,
		Scheme:                   scheme,
		ControlPlaneStartTimeout: 2 * time.Minute, // a loaded two-core machine
		ControlPlaneStopTimeout:  time.Minute,
	}
	for _, opt := range opts {
		opt(env)
	}
	apiServer := env.ControlPlane.GetAPIServer()
	// With no controller-manager the API server would try to publish its
	// own endpoint for the kubernetes Service, and on a loopback address it
	// refuses to start doing so.
	apiServer.Configure().Set("endpoint-reconciler-type", "none")
	cfg, err := env.Start()
	if err != nil {
		return nil, fmt.Errorf("starting the control plane: %w", err)
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		_ = env.Stop()
		return nil, err
	}
	return &Env{env: env, Config: cfg, Scheme: scheme, Client: c}, nil
}

// Stop stops the control plane.
func (e *Env) Stop() error { return e.env.Stop() }

// User returns a client configuration authenticated as name, in groups.
// The API server's RBAC authorizes it; a test grants what it needs.
func (e *Env) User(t testing.TB, name string, groups ...string) *rest.Config {
	t.Helper()
	u, err := e.env.AddUser(envtest.User{Name: name, Groups: groups}, rest.CopyConfig(e.Config))
	if err != nil {
		t.Fatalf("adding user %s: %v", name, err)
	}
	return u.Config()
}

// ServiceAccount returns a client configuration authenticated as the
// ServiceAccount ns/name (which must exist), with a token from the
// TokenRequest API: what a Pod running as that account gets.
func (e *Env) ServiceAccount(t testing.TB, ns, name string) *rest.Config {
	t.Helper()
	cfg, err := e.ServiceAccountConfig(context.Background(), ns, name)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// ServiceAccountConfig is ServiceAccount for code that is not a test.
func (e *Env) ServiceAccountConfig(ctx context.Context, ns, name string) (*rest.Config, error) {
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}}
	tr := &authenticationv1.TokenRequest{}
	if err := e.Client.SubResource("token").Create(ctx, sa, tr); err != nil {
		return nil, fmt.Errorf("a token for ServiceAccount %s/%s: %w", ns, name, err)
	}
	cfg := rest.AnonymousClientConfig(e.Config)
	cfg.BearerToken = tr.Status.Token
	return cfg, nil
}

// Namespace creates a namespace for one test, with the default
// ServiceAccount that a controller-manager would have created (Pods are
// refused without it). There is no namespace controller to delete it
// again, so it is left behind: names never repeat within a run.
func (e *Env) Namespace(t testing.TB) string {
	t.Helper()
	name := fmt.Sprintf("t%d-%s", nsCount.Add(1), sanitize(t.Name()))
	ctx := context.Background()
	if err := e.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}); err != nil {
		t.Fatalf("creating namespace %s: %v", name, err)
	}
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default", Namespace: name}}
	if err := e.Client.Create(ctx, sa); err != nil {
		t.Fatalf("creating the default ServiceAccount of %s: %v", name, err)
	}
	return name
}

// sanitize makes a test name fit a namespace name (a DNS label of at most
// 63 characters, with the prefix).
func sanitize(s string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(s) {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9':
			b.WriteRune(r)
		default:
			b.WriteByte('-')
		}
	}
	out := strings.Trim(b.String(), "-")
	if len(out) > 50 {
		out = strings.TrimRight(out[:50], "-")
	}
	return out
}

// repoRoot is the module's root, found from this file's location.
func repoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}

// Kubeconfig writes a kubeconfig file authenticating as name, in groups,
// and returns its path: what a person's ptah reads.
func (e *Env) Kubeconfig(t testing.TB, name string, groups ...string) string {
	t.Helper()
	u, err := e.env.AddUser(envtest.User{Name: name, Groups: groups}, rest.CopyConfig(e.Config))
	if err != nil {
		t.Fatalf("adding user %s: %v", name, err)
	}
	b, err := u.KubeConfig()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), sanitize(name)+".kubeconfig")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// Apply applies the YAML files' objects for real (server-side apply), in
// order: policies, roles, namespaces.
func (e *Env) Apply(t testing.TB, files ...string) {
	t.Helper()
	if err := e.ApplyFiles(context.Background(), files...); err != nil {
		t.Fatal(err)
	}
}

// ApplyFiles is Apply for code that is not a test.
func (e *Env) ApplyFiles(ctx context.Context, files ...string) error {
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return err
		}
		dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(b), 4096)
		for {
			var o unstructured.Unstructured
			if err := dec.Decode(&o.Object); err != nil {
				if !errors.Is(err, io.EOF) {
					return fmt.Errorf("reading %s: %w", f, err)
				}
				break
			}
			if len(o.Object) == 0 {
				continue
			}
			if err := e.Client.Apply(ctx, client.ApplyConfigurationFromUnstructured(&o),
				client.FieldOwner("kubetest"), client.ForceOwnership); err != nil {
				return fmt.Errorf("applying %s %s from %s: %w", o.GetKind(), o.GetName(), f, err)
			}
		}
	}
	return nil
}

// Bind grants user the ClusterRoles in namespace ns, as an administrator
// binding ptah's roles (deploy/rbac) to a person would.
func (e *Env) Bind(t testing.TB, ns, user string, roles ...string) {
	t.Helper()
	for _, role := range roles {
		rb := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: role + "-" + sanitize(user), Namespace: ns},
			RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: role},
			Subjects: []rbacv1.Subject{{APIGroup: "rbac.authorization.k8s.io", Kind: "User", Name: user}}}
		if err := e.Client.Create(context.Background(), rb); err != nil {
			t.Fatalf("binding %s to %s in %s: %v", role, user, ns, err)
		}
	}
}

// RepoRoot is the module's root folder.
func RepoRoot() string { return repoRoot() }
