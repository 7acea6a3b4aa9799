package controller

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/ptah-run/ptah/internal/pgtest"

	coordinationv1 "k8s.io/api/coordination/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ptah-run/ptah/internal/engine"
	"github.com/ptah-run/ptah/internal/failpoint"
	"github.com/ptah-run/ptah/internal/kubetest"
	"github.com/ptah-run/ptah/internal/store/kubestore"
	api "github.com/ptah-run/ptah/pkg/api/v1alpha1"
)

// TestMain starts a control plane with ptah's CRDs, and the tests get
// their own databases from pgtest's throwaway server.
func TestMain(m *testing.M) {
	if os.Getenv(childManagerEnv) != "" {
		os.Exit(runChildManager())
	}
	stop, err := kubetest.StartShared()
	if err != nil {
		fmt.Fprintln(os.Stderr, "kubetest:", err)
		os.Exit(1)
	}
	pgtest.Main(m, stop)
}

// childManagerEnv makes this test binary a manager process of a crash
// test (ChildManager): it runs ptah serve's manager against the API server
// the variables name, until a failpoint stops it dead.
const childManagerEnv = "PTAH_TEST_CHILD_MANAGER"

func runChildManager() int {
	ca, err := base64.StdEncoding.DecodeString(os.Getenv("PTAH_TEST_CHILD_CA"))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	cfg := &rest.Config{Host: os.Getenv("PTAH_TEST_CHILD_HOST"), BearerToken: os.Getenv("PTAH_TEST_CHILD_TOKEN"),
		TLSClientConfig: rest.TLSClientConfig{CAData: ca}}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	err = Run(ctx, Options{Config: cfg, MetricsAddr: "0", ProbeAddr: "0", Logger: slog.New(slog.NewTextHandler(os.Stderr, nil)),
		Version: "test", Image: "ptah:test", Namespaces: []string{os.Getenv("PTAH_TEST_CHILD_NAMESPACE")}})
	fmt.Fprintln(os.Stderr, "the manager returned:", err)
	return 3
}

// ChildManager runs the manager of namespace in a process of its own, as cfg, stopping
// dead at the failpoint point; it returns the process, whose exit the
// test waits for.
func ChildManager(t *testing.T, cfg *rest.Config, namespace, point string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childManagerEnv+"=1", "PTAH_TEST_CHILD_HOST="+cfg.Host, "PTAH_TEST_CHILD_TOKEN="+cfg.BearerToken,
		"PTAH_TEST_CHILD_CA="+base64.StdEncoding.EncodeToString(cfg.CAData), "PTAH_TEST_CHILD_NAMESPACE="+namespace,
		failpoint.EnvVar+"="+point)
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("the child manager's output:\n%s", out.String())
		}
	})
	return cmd
}

func options(e *kubetest.Env, ns string) Options {
	return Options{Config: e.Config, LeaderElection: true, LeaderElectionNamespace: ns, MetricsAddr: "0", ProbeAddr: "0",
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Version: "test"}
}

// runFor runs the manager until it returns or the timeout passes.
func runFor(t *testing.T, o Options, timeout time.Duration) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	return Run(ctx, o)
}

// TestServeRefusesNewerStoredStateAtStartup: the fence runs before the
// manager starts, over every kind and the CRDs themselves; what a newer
// ptah wrote stops it, named, and nothing starts (no leader Lease).
func TestServeRefusesNewerStoredStateAtStartup(t *testing.T) {
	e := kubetest.Shared(t)
	ctx := context.Background()
	ns := e.Namespace(t)

	// An approval written by a newer ptah, among current objects.
	current := &api.PtahSchema{ObjectMeta: metav1.ObjectMeta{Name: "app", Namespace: ns,
		Annotations: map[string]string{kubestore.AnnotationContractVersion: fmt.Sprint(api.ContractVersion)}},
		Spec: api.PtahSchemaSpec{Source: api.Source{Path: "schema"}}}
	newer := &api.PtahMigrationApproval{ObjectMeta: metav1.ObjectMeta{Name: "a1", Namespace: ns,
		Annotations: map[string]string{kubestore.AnnotationContractVersion: fmt.Sprint(api.ContractVersion + 1)}},
		Spec: api.PtahMigrationApprovalSpec{Plan: api.ObjectReference{Name: "m-1", UID: "u"}, Migration: "m", PlanFingerprint: "f",
			Approver: "ana", ApprovedAt: api.NewTime(time.Now())}}
	for _, o := range []client.Object{current, newer} {
		if err := e.Client.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	err := runFor(t, options(e, ns), time.Minute)
	var future *engine.FutureStateError
	if !errors.As(err, &future) || !strings.Contains(err.Error(), "PtahMigrationApproval "+ns+"/a1") || strings.Contains(err.Error(), "PtahSchema "+ns) {
		t.Fatalf("serve over a newer approval: %v; want the fence to refuse it, naming only it", err)
	}
	noLease(t, e, ns)
	if err := e.Client.Delete(ctx, newer); err != nil {
		t.Fatal(err)
	}

	// A CRD a newer ptah installed.
	var crd apiextensionsv1.CustomResourceDefinition
	if err := e.Client.Get(ctx, client.ObjectKey{Name: "ptahschemaplans.ptah.run"}, &crd); err != nil {
		t.Fatal(err)
	}
	crd.Annotations[kubestore.AnnotationContractVersion] = fmt.Sprint(api.ContractVersion + 1)
	if err := e.Client.Update(ctx, &crd); err != nil {
		t.Fatal(err)
	}
	err = runFor(t, options(e, ns), time.Minute)
	crd.Annotations[kubestore.AnnotationContractVersion] = fmt.Sprint(api.ContractVersion)
	if uerr := e.Client.Update(ctx, &crd); uerr != nil {
		t.Fatal(uerr)
	}
	if !errors.As(err, &future) || !strings.Contains(err.Error(), "PtahSchemaPlan") {
		t.Fatalf("serve under a newer CRD: %v; want the fence to refuse it", err)
	}
	noLease(t, e, ns)
}

func noLease(t *testing.T, e *kubetest.Env, ns string) {
	t.Helper()
	var l coordinationv1.Lease
	if err := e.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: LeaderElectionID}, &l); err == nil {
		t.Fatalf("the refused manager took the leader Lease (held by %v)", l.Spec.HolderIdentity)
	}
}

func freePort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// TestServeLeadsAndServesProbesAndMetrics: over current state the manager
// is elected leader (its Lease names it), answers its probes and serves
// Prometheus metrics, and stops when told.
func TestServeLeadsAndServesProbesAndMetrics(t *testing.T) {
	e := kubetest.Shared(t)
	ns := e.Namespace(t)
	o := options(e, ns)
	o.MetricsAddr, o.ProbeAddr = freePort(t), freePort(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Run(ctx, o) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("the manager stopped with %v", err)
		}
	}()
	get := func(url string) (int, string) {
		resp, err := http.Get(url)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	deadline := time.Now().Add(3 * time.Minute)
	for {
		var l coordinationv1.Lease
		err := e.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: LeaderElectionID}, &l)
		code, _ := get("http://" + o.ProbeAddr + "/readyz")
		if err == nil && l.Spec.HolderIdentity != nil && *l.Spec.HolderIdentity != "" && code == http.StatusOK {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no leader Lease or not ready after a minute: %v, readyz %d", err, code)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if code, body := get("http://" + o.ProbeAddr + "/healthz"); code != http.StatusOK {
		t.Errorf("healthz: %d %s", code, body)
	}
	code, body := get("http://" + o.MetricsAddr + "/metrics")
	if code != http.StatusOK || !strings.Contains(body, "leader_election_master_status") {
		t.Errorf("metrics: %d, %d bytes; want Prometheus metrics with the leader election status", code, len(body))
	}
}
