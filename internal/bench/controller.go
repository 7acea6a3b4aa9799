package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/ptah-run/ptah/internal/controller"
	"github.com/ptah-run/ptah/internal/kubetest"
	api "github.com/ptah-run/ptah/pkg/api/v1alpha1"
)

// ControllerResources is how many resources of each family the controller
// section creates.
var ControllerResources = 100

// controllerNamespace holds the section's resources.
const controllerNamespace = "bench"

// Controller measures ptah serve from cold: a control plane (envtest's
// kube-apiserver and etcd, make envtest) with ptah's CRDs and deploy/'s
// RBAC, ControllerResources PtahSchema and as many PtahMigration
// resources, each on a database of its own with policy Always, and the
// manager (a ptah serve process, as its ServiceAccount) started before
// any of them exists. A stand-in kubelet runs the Jobs' Pods as ptah
// processes, several at once. Measured: the time from creating the
// resources to every one InSync; the manager's reconciles
// (controller_runtime_reconcile_total from its /metrics) and its and the
// Jobs' writes to the API server (from the API server's own audit log)
// per resource; the manager's peak resident set (VmHWM).
func Controller(ctx context.Context, env *Env) ([]Row, error) {
	dir := filepath.Join(env.Work, "controller")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	audit := filepath.Join(dir, "audit.log")
	policy := filepath.Join(dir, "audit-policy.yaml")
	if err := os.WriteFile(policy, []byte(auditPolicy), 0o644); err != nil {
		return nil, err
	}
	env.Logf("controller: starting a control plane")
	kube, err := kubetest.Start(func(e *envtest.Environment) {
		e.ControlPlane.GetAPIServer().Configure().Set("audit-log-path", audit).Set("audit-policy-file", policy)
	})
	if err != nil {
		return nil, err
	}
	defer kube.Stop()
	kubeconfig, err := installController(ctx, kube, dir)
	if err != nil {
		return nil, err
	}

	n := ControllerResources
	env.Logf("controller: %d databases", 2*n)
	names := make([]string, 0, 2*n)
	for i := range n {
		names = append(names, fmt.Sprintf("s%03d", i), fmt.Sprintf("m%03d", i))
	}
	for _, name := range names {
		if err := env.CreateDB(ctx, "ctl_"+name, "template0"); err != nil {
			return nil, err
		}
		secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name + "-db", Namespace: controllerNamespace},
			Data: map[string][]byte{"url": []byte(env.Server.URL("ctl_" + name))}}
		if err := kube.Client.Create(ctx, secret); err != nil {
			return nil, err
		}
	}
	defer func() {
		for _, name := range names {
			_ = env.DropDB(context.Background(), "ctl_"+name)
		}
	}()

	mgr, err := startManager(ctx, env, kubeconfig, filepath.Join(dir, "manager.log"))
	if err != nil {
		return nil, err
	}
	defer mgr.stop()

	kctx, stopKubelet := context.WithCancel(ctx)
	var kubeletDone sync.WaitGroup
	var podErr error
	var podMu sync.Mutex
	pods := 0
	kubelet := &kubetest.Kubelet{Env: kube, Namespace: controllerNamespace, Parallel: 2 * runtime.NumCPU(),
		Run: func(ctx context.Context, c kubetest.Container) int {
			podMu.Lock()
			pods++
			podMu.Unlock()
			return runPod(ctx, env.Ptah, c, filepath.Join(dir, "pods.log"))
		}}
	kubeletDone.Add(1)
	go func() {
		defer kubeletDone.Done()
		kubelet.Serve(kctx, func(err error) {
			podMu.Lock()
			podErr = errors.Join(podErr, err)
			podMu.Unlock()
		})
	}()
	defer func() { stopKubelet(); kubeletDone.Wait() }()

	env.Logf("controller: creating %d PtahSchema and %d PtahMigration resources", n, n)
	began := time.Now()
	for i := range n {
		if err := declareControllerResources(ctx, kube.Client, i); err != nil {
			return nil, err
		}
	}
	took, err := waitInSync(ctx, kube.Client, 2*n, began, env)
	if err != nil {
		podMu.Lock()
		err = errors.Join(err, podErr)
		podMu.Unlock()
		return nil, fmt.Errorf("%w (the manager's log: %s)", err, mgr.log)
	}
	reconciles, err := mgr.counter("controller_runtime_reconcile_total")
	if err != nil {
		return nil, err
	}
	rss, err := mgr.peakRSS()
	if err != nil {
		return nil, err
	}
	cpu, err := mgr.cpu()
	if err != nil {
		return nil, err
	}
	writes, err := countWrites(audit)
	if err != nil {
		return nil, err
	}
	if err := checkControllerDatabases(ctx, env, n); err != nil {
		return nil, err
	}

	total := float64(2 * n)
	managerWrites, jobWrites := writes.by[managerUser], writes.by[plannerUser]
	perResource := float64(managerWrites+jobWrites) / total
	env.Logf("controller: the manager's writes by resource: %s; the Jobs': %s", writes.kinds[managerUser], writes.kinds[plannerUser])
	env.Logf("controller: the manager's reads by resource: %s", writes.readKinds[managerUser])
	what := fmt.Sprintf("%d resources (%d PtahSchema, %d PtahMigration)", 2*n, n, n)
	return []Row{
		{Section: "controller", What: what + " cold to InSync", Value: Seconds(took),
			Target: fmt.Sprintf("(%d Pods, %d at once)", pods, kubelet.Parallel)},
		{Section: "controller", What: "reconciles per resource", Value: fmt.Sprintf("%.1f", reconciles/total)},
		{Section: "controller", What: "API writes per resource, creation to InSync (manager + Jobs)",
			Value:  fmt.Sprintf("%.1f (%.1f + %.1f)", perResource, float64(managerWrites)/total, float64(jobWrites)/total),
			Target: "<= 10", Met: Met(perResource <= 10)},
		{Section: "controller", What: "API reads per resource (manager)", Value: fmt.Sprintf("%.1f", float64(writes.reads[managerUser])/total)},
		{Section: "controller", What: "manager CPU time per resource", Value: fmt.Sprintf("%.0f ms", cpu.Seconds()*1000/total)},
		{Section: "controller", What: "manager peak RSS", Value: MiB(rss), Target: "<= 64 MiB", Met: Met(rss <= 64<<20)},
	}, nil
}

// auditPolicy records the requests of the manager and of the Jobs' Pods
// (every verb but watch) at the Metadata level (who, what verb, which
// object), and nothing else.
var auditPolicy = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
- level: Metadata
  users: ["` + managerUser + `", "` + plannerUser + `"]
  verbs: ["get", "list", "create", "update", "patch", "delete", "deletecollection"]
- level: None
`

var (
	managerUser = "system:serviceaccount:ptah-system:ptah-manager"
	plannerUser = "system:serviceaccount:" + controllerNamespace + ":" + controller.PlannerServiceAccount
)

// installController installs what deploy/ installs (the manager's
// namespace, ServiceAccount and roles; the planner's role) and the
// section's namespace with its planner account, and writes the kubeconfig
// the manager runs with: its ServiceAccount's token, with deploy/rbac's
// least privilege.
func installController(ctx context.Context, kube *kubetest.Env, dir string) (string, error) {
	root := kubetest.RepoRoot()
	if err := kube.ApplyFiles(ctx, filepath.Join(root, "deploy", "namespace.yaml"), filepath.Join(root, "deploy", "rbac", "manager.yaml"),
		filepath.Join(root, "deploy", "rbac", "planner.yaml")); err != nil {
		return "", err
	}
	for _, o := range []client.Object{
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: controllerNamespace}},
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default", Namespace: controllerNamespace}},
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: controller.PlannerServiceAccount, Namespace: controllerNamespace}},
		&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "ptah-planner", Namespace: controllerNamespace},
			RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "ptah-planner"},
			Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: controller.PlannerServiceAccount, Namespace: controllerNamespace}}},
	} {
		if err := kube.Client.Create(ctx, o); err != nil {
			return "", err
		}
	}
	cfg, err := kube.ServiceAccountConfig(ctx, "ptah-system", "ptah-manager")
	if err != nil {
		return "", err
	}
	path := filepath.Join(dir, "manager.kubeconfig")
	return path, writeKubeconfig(cfg, path)
}

func writeKubeconfig(cfg *rest.Config, path string) error {
	kc := clientcmdapi.NewConfig()
	kc.Clusters["envtest"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: cfg.CAData}
	kc.AuthInfos["manager"] = &clientcmdapi.AuthInfo{Token: cfg.BearerToken}
	kc.Contexts["envtest"] = &clientcmdapi.Context{Cluster: "envtest", AuthInfo: "manager"}
	kc.CurrentContext = "envtest"
	return clientcmd.WriteToFile(*kc, path)
}

// The declared files of every PtahSchema and every PtahMigration: a few
// tables each, the shape of a small service.
var (
	controllerSchema = map[string]string{
		"schema.sql": `CREATE TABLE public.accounts (id bigint PRIMARY KEY, name text NOT NULL, created timestamptz NOT NULL DEFAULT now());
CREATE TABLE public.entries (id bigint PRIMARY KEY, account bigint NOT NULL REFERENCES public.accounts, amount numeric(12,2) NOT NULL);
CREATE INDEX entries_account ON public.entries (account);
`,
	}
	controllerMigrations = map[string]string{
		"0001_accounts.sql": "CREATE TABLE public.accounts (id bigint PRIMARY KEY, name text NOT NULL);\n",
		"0002_entries.sql":  "CREATE TABLE public.entries (id bigint PRIMARY KEY, account bigint NOT NULL REFERENCES public.accounts);\n",
		"0003_seed.sql":     "INSERT INTO public.accounts VALUES (1, 'cash'), (2, 'bank'), (3, 'sales');\n",
	}
)

// declareControllerResources creates resource i of each family: its
// ConfigMap of files and the resource, policy Always.
func declareControllerResources(ctx context.Context, c client.Client, i int) error {
	s, m := fmt.Sprintf("s%03d", i), fmt.Sprintf("m%03d", i)
	url := func(name string) api.Target {
		return api.Target{URLFrom: &api.URLSource{SecretKeyRef: &api.SecretKeyRef{Name: name + "-db", Key: "url"}}}
	}
	for _, o := range []client.Object{
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: s + "-schema", Namespace: controllerNamespace}, Data: controllerSchema},
		&api.PtahSchema{ObjectMeta: metav1.ObjectMeta{Name: s, Namespace: controllerNamespace}, Spec: api.PtahSchemaSpec{
			Target: url(s), Source: api.Source{ConfigMap: &api.ConfigMapSource{Name: s + "-schema"}},
			Policy: api.Policy{Apply: api.ApplyAlways}}},
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: m + "-migrations", Namespace: controllerNamespace}, Data: controllerMigrations},
		&api.PtahMigration{ObjectMeta: metav1.ObjectMeta{Name: m, Namespace: controllerNamespace}, Spec: api.PtahMigrationSpec{
			Target: url(m), Source: api.MigrationSource{ConfigMap: &api.ConfigMapSource{Name: m + "-migrations"}},
			Policy: api.MigrationPolicy{Apply: api.ApplyAlways}}},
	} {
		if err := c.Create(ctx, o); err != nil {
			return err
		}
	}
	return nil
}

// waitInSync polls until want resources of the namespace are InSync, and
// returns how long after began the last one got there. A Failed or
// Blocked resource ends the wait with its reason.
func waitInSync(ctx context.Context, c client.Client, want int, began time.Time, env *Env) (time.Duration, error) {
	deadline := began.Add(30 * time.Minute)
	last := -1
	for {
		var schemas api.PtahSchemaList
		var migrations api.PtahMigrationList
		if err := c.List(ctx, &schemas, client.InNamespace(controllerNamespace)); err != nil {
			return 0, err
		}
		if err := c.List(ctx, &migrations, client.InNamespace(controllerNamespace)); err != nil {
			return 0, err
		}
		now := time.Now()
		states := make([]api.RunState, 0, want)
		for _, s := range schemas.Items {
			states = append(states, s.Status.RunState)
		}
		for _, m := range migrations.Items {
			states = append(states, m.Status.RunState)
		}
		insync := 0
		for _, st := range states {
			switch st.Phase {
			case api.PhaseInSync:
				insync++
			case api.PhaseFailed, api.PhaseBlocked:
				return 0, fmt.Errorf("a resource is %s: %s: %s", st.Phase, st.Reason, st.Message)
			}
		}
		if insync == want {
			return now.Sub(began), nil
		}
		if insync != last && (insync == 0 || insync%20 == 0) {
			env.Logf("controller: %d of %d InSync after %s", insync, want, Seconds(now.Sub(began)))
			last = insync
		}
		if now.After(deadline) {
			return 0, fmt.Errorf("%d of %d resources InSync after %s", insync, want, now.Sub(began))
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// runPod runs a Pod's container as a ptah process with the container's
// environment only (and PATH), its output appended to logPath.
func runPod(ctx context.Context, ptah string, c kubetest.Container, logPath string) int {
	cmd := exec.CommandContext(ctx, ptah, append(slices.Clone(c.Args), "--termination-log", c.TerminationLog)...)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME")}
	for k, v := range c.Env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	code := 0
	if err != nil {
		code = 1
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			code = exit.ExitCode()
		}
	}
	if code != 0 {
		if f, err := os.OpenFile(logPath, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644); err == nil {
			fmt.Fprintf(f, "exit %d: %s\n", code, out.String())
			f.Close()
		}
	}
	return code
}

// manager is a running ptah serve process.
type manager struct {
	cmd     *exec.Cmd
	metrics string
	log     string
	done    chan struct{}
}

// startManager starts ptah serve as the manager's ServiceAccount and
// waits until it is ready.
func startManager(ctx context.Context, env *Env, kubeconfig, logPath string) (*manager, error) {
	metrics, err := freeAddr()
	if err != nil {
		return nil, err
	}
	probes, err := freeAddr()
	if err != nil {
		return nil, err
	}
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(env.Ptah, "serve", "--kubeconfig", kubeconfig, "--job-image", "ptah:bench",
		"--metrics-bind-address", metrics, "--health-probe-bind-address", probes)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME"), "POD_NAMESPACE=ptah-system"}
	// The Go runtime's settings and the profiles ptah writes reach it, for
	// experiments with its memory and time.
	for _, name := range []string{"GOGC", "GOMEMLIMIT", "GODEBUG", "PTAH_MEMPROFILE", "PTAH_CPUPROFILE"} {
		if v, ok := os.LookupEnv(name); ok {
			cmd.Env = append(cmd.Env, name+"="+v)
		}
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, err
	}
	m := &manager{cmd: cmd, metrics: "http://" + metrics + "/metrics", log: logPath, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); logf.Close(); close(m.done) }()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		resp, err := http.Get("http://" + probes + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return m, nil
			}
		}
		select {
		case <-m.done:
			return nil, fmt.Errorf("ptah serve exited before it was ready (its log: %s)", logPath)
		case <-ctx.Done():
			m.stop()
			return nil, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			m.stop()
			return nil, fmt.Errorf("ptah serve not ready after 2 minutes (its log: %s)", logPath)
		}
	}
}

func (m *manager) stop() {
	select {
	case <-m.done:
		return
	default:
	}
	_ = m.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-m.done:
	case <-time.After(30 * time.Second):
		_ = m.cmd.Process.Kill()
		<-m.done
	}
}

// peakRSS is the manager's peak resident set so far (VmHWM).
func (m *manager) peakRSS() (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", m.cmd.Process.Pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			return kb << 10, err
		}
	}
	return 0, errors.New("no VmHWM in the manager's /proc status")
}

// cpu is the CPU time the manager has used so far (user and system).
func (m *manager) cpu() (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", m.cmd.Process.Pid))
	if err != nil {
		return 0, err
	}
	// The fields after the command's name (which is in parentheses):
	// utime and stime are the 12th and 13th, in clock ticks (100 a second
	// on Linux).
	_, rest, ok := strings.Cut(string(b), ") ")
	fields := strings.Fields(rest)
	if !ok || len(fields) < 13 {
		return 0, errors.New("the manager's /proc stat is not as expected")
	}
	var ticks int64
	for _, f := range fields[11:13] {
		n, err := strconv.ParseInt(f, 10, 64)
		if err != nil {
			return 0, err
		}
		ticks += n
	}
	return time.Duration(ticks) * 10 * time.Millisecond, nil
}

// counter sums a counter's samples, every label set, on the manager's
// /metrics.
func (m *manager) counter(name string) (float64, error) {
	resp, err := http.Get(m.metrics)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	return sumCounter(resp.Body, name)
}

// sumCounter sums the samples of counter name in a Prometheus text
// exposition.
func sumCounter(r io.Reader, name string) (float64, error) {
	var sum float64
	found := false
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, name+"{") && !strings.HasPrefix(line, name+" ") {
			continue
		}
		fields := strings.Fields(line)
		v, err := strconv.ParseFloat(fields[len(fields)-1], 64)
		if err != nil {
			return 0, fmt.Errorf("metric line %q: %w", line, err)
		}
		sum += v
		found = true
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	if !found {
		return 0, fmt.Errorf("no %s on the manager's /metrics", name)
	}
	return sum, nil
}

// writes are the API server's audited writes, counted by user and, per
// user, by resource and verb (kinds); reads its reads (get, list) by user,
// and per user by resource and verb (readKinds).
type writes struct {
	by        map[string]int
	reads     map[string]int
	kinds     map[string]string
	readKinds map[string]string
}

// countWrites reads the audit log: each write's ResponseComplete event.
func countWrites(path string) (writes, error) {
	f, err := os.Open(path)
	if err != nil {
		return writes{}, err
	}
	defer f.Close()
	w := writes{by: map[string]int{}, reads: map[string]int{}, kinds: map[string]string{}, readKinds: map[string]string{}}
	detail, readDetail := map[string]map[string]int{}, map[string]map[string]int{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		var ev struct {
			Stage string `json:"stage"`
			Verb  string `json:"verb"`
			User  struct {
				Username string `json:"username"`
			} `json:"user"`
			ObjectRef struct {
				Resource    string `json:"resource"`
				Subresource string `json:"subresource"`
			} `json:"objectRef"`
		}
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			return writes{}, fmt.Errorf("the audit log: %w", err)
		}
		if ev.Stage != "ResponseComplete" {
			continue
		}
		u := ev.User.Username
		what := ev.Verb + " " + ev.ObjectRef.Resource
		if ev.ObjectRef.Subresource != "" {
			what += "/" + ev.ObjectRef.Subresource
		}
		counts, d := w.by, detail
		if ev.Verb == "get" || ev.Verb == "list" {
			counts, d = w.reads, readDetail
		}
		counts[u]++
		if d[u] == nil {
			d[u] = map[string]int{}
		}
		d[u][what]++
	}
	summarize := func(detail map[string]map[string]int, into map[string]string) {
		for u, d := range detail {
			var parts []string
			for what, n := range d {
				parts = append(parts, fmt.Sprintf("%s %d", what, n))
			}
			slices.Sort(parts)
			into[u] = strings.Join(parts, ", ")
		}
	}
	summarize(detail, w.kinds)
	summarize(readDetail, w.readKinds)
	return w, sc.Err()
}

// checkControllerDatabases checks what InSync claims: every PtahSchema's
// database has its tables, every PtahMigration's its seeded rows.
func checkControllerDatabases(ctx context.Context, env *Env, n int) error {
	for i := range n {
		for _, c := range []struct {
			name, query string
			want        int
		}{
			{fmt.Sprintf("s%03d", i), "SELECT count(*) FROM pg_indexes WHERE tablename = 'entries' AND indexname = 'entries_account'", 1},
			{fmt.Sprintf("m%03d", i), "SELECT count(*) FROM public.accounts", 3},
		} {
			conn, err := pgx.Connect(ctx, env.Server.URL("ctl_"+c.name))
			if err != nil {
				return err
			}
			var got int
			err = conn.QueryRow(ctx, c.query).Scan(&got)
			conn.Close(context.Background())
			if err != nil {
				return fmt.Errorf("%s is InSync, and its database: %w", c.name, err)
			}
			if got != c.want {
				return fmt.Errorf("%s is InSync, and its database answers %d to %q, not %d", c.name, got, c.query, c.want)
			}
		}
	}
	return nil
}

// freeAddr is a loopback address with a port nobody listens on.
func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}
