package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ptah-run/ptah/internal/engine"
	"github.com/ptah-run/ptah/internal/failpoint"
	"github.com/ptah-run/ptah/internal/kubetest"
	"github.com/ptah-run/ptah/internal/pgtest"
	"github.com/ptah-run/ptah/internal/runner"
	"github.com/ptah-run/ptah/internal/store/pgstore"
	api "github.com/ptah-run/ptah/pkg/api/v1alpha1"
)

// clusterRun is a migration whose run stopped part way through a file run
// without a transaction, on a real database, and the same migration as a
// cluster's custom resource, whose status ptah serve would write.
type clusterRun struct {
	t     *testing.T
	e     *kubetest.Env
	ns    string
	local *project
	conn  *pgx.Conn
	// mig is the cluster's PtahMigration, plan the run's plan there.
	mig  *api.PtahMigration
	plan *api.PtahMigrationPlan
	// dispatched is the operation of the run.
	dispatched string
}

// newClusterRun runs the migration in local mode, in the namespace ns,
// until it dies at the failpoint after the first statement of its
// no-transaction file committed: the journal and the history are then what
// a Job of ptah serve leaves in the database (the same writer, under the
// same key, PtahMigration/NS/app). The cluster gets the resource, naming
// a Secret that holds the database's URL, and the run's plan.
func newClusterRun(t *testing.T, e *kubetest.Env, ns string) *clusterRun {
	t.Helper()
	ctx := context.Background()
	url := pgtest.NewDB(t)
	root := t.TempDir()
	writeFiles(t, root, map[string]string{
		"url": url,
		"ptah.yaml": fmt.Sprintf(`apiVersion: ptah.run/v1alpha1
kind: PtahMigration
metadata:
  name: app
  namespace: %s
spec:
  target:
    urlFrom: {file: url}
  source:
    path: migrations
  policy:
    apply: Always
`, ns),
		"migrations/1_users.sql": "CREATE TABLE users (id bigint PRIMARY KEY, email text NOT NULL);\n",
		"migrations/2_emails.sql": "-- ptah:no-transaction\nCREATE INDEX CONCURRENTLY users_email ON users (email);\n" +
			"CREATE UNIQUE INDEX CONCURRENTLY users_email_lower ON users (lower(email));\n",
		"migrations/3_posts.sql": "CREATE TABLE posts (id bigint PRIMARY KEY, author bigint REFERENCES users);\n",
	})
	local := &project{t: t, url: url, file: filepath.Join(root, "ptah.yaml")}
	if code, _, stderr := local.ptah([]string{failpoint.EnvVar + "=" + failpoint.MidNoTxPhase}, "apply"); code != failpoint.ExitCode {
		t.Fatalf("apply to the failpoint: exit %d\n%s", code, stderr)
	}
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close(context.Background()) })

	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "app-db", Namespace: ns}, StringData: map[string]string{"url": url}}
	if err := e.Client.Create(ctx, secret); err != nil {
		t.Fatal(err)
	}
	c := &clusterRun{t: t, e: e, ns: ns, local: local, conn: conn}
	st, planSpec := c.localRecord()
	if st.ActiveOperation == nil || st.ActiveOperation.DispatchedAt == nil {
		t.Fatalf("the dead run's claim is not recorded as dispatched: %+v", st)
	}
	c.dispatched = st.ActiveOperation.ID
	c.mig = &api.PtahMigration{ObjectMeta: metav1.ObjectMeta{Name: "app", Namespace: ns},
		Spec: api.PtahMigrationSpec{Target: api.Target{URLFrom: &api.URLSource{SecretKeyRef: &api.SecretKeyRef{Name: "app-db", Key: "url"}}},
			Source: api.MigrationSource{ConfigMap: &api.ConfigMapSource{Name: "app-migrations"}},
			Policy: api.MigrationPolicy{Apply: api.ApplyAlways}}}
	if err := e.Client.Create(ctx, c.mig); err != nil {
		t.Fatal(err)
	}
	// The plan as the manager publishes it: bound to the resource's UID.
	planSpec.Migration = api.ObjectReference{Name: c.mig.Name, UID: string(c.mig.UID)}
	planSpec.Fingerprint = engine.MigrationPlanFingerprint(planSpec)
	c.plan = &api.PtahMigrationPlan{ObjectMeta: metav1.ObjectMeta{Name: "app-1", Namespace: ns}, Spec: planSpec}
	if err := e.Client.Create(ctx, c.plan); err != nil {
		t.Fatal(err)
	}
	c.writeStatus(st)
	return c
}

// localRecord is the migration's status and its run's plan as local mode
// recorded them.
func (c *clusterRun) localRecord() (api.PtahMigrationStatus, api.PtahMigrationPlanSpec) {
	c.t.Helper()
	ctx := context.Background()
	s, err := pgstore.New(ctx, c.conn)
	if err != nil {
		c.t.Fatal(err)
	}
	obj, err := s.Get(ctx, api.KindPtahMigration, c.ns, "app")
	if err != nil {
		c.t.Fatal(err)
	}
	var st api.PtahMigrationStatus
	if err := json.Unmarshal(obj.Status, &st); err != nil {
		c.t.Fatal(err)
	}
	ref := st.ActiveOperation
	if ref == nil && st.UnresolvedRun != nil {
		ref = &api.Operation{Plan: st.UnresolvedRun.Plan}
	}
	if ref == nil {
		c.t.Fatalf("no run recorded: %+v", st)
	}
	p, err := s.GetByUID(ctx, ref.Plan.UID)
	if err != nil {
		c.t.Fatal(err)
	}
	var spec api.PtahMigrationPlanSpec
	if err := json.Unmarshal(p.Spec, &spec); err != nil {
		c.t.Fatal(err)
	}
	return st, spec
}

// writeStatus writes st to the cluster's resource through the status
// subresource, as ptah serve does, its plan references naming the
// cluster's plan.
func (c *clusterRun) writeStatus(st api.PtahMigrationStatus) {
	c.t.Helper()
	ref := api.PlanReference{ObjectReference: api.ObjectReference{Name: c.plan.Name, UID: string(c.plan.UID)}, Fingerprint: c.plan.Spec.Fingerprint}
	if st.ActiveOperation != nil {
		st.ActiveOperation.Plan = ref
	}
	if st.UnresolvedRun != nil {
		st.UnresolvedRun.Plan = ref
	}
	st.Plan = nil
	m := &api.PtahMigration{}
	if err := c.e.Client.Get(context.Background(), client.ObjectKeyFromObject(c.mig), m); err != nil {
		c.t.Fatal(err)
	}
	m.Status = st
	if err := c.e.Client.Status().Update(context.Background(), m); err != nil {
		c.t.Fatal(err)
	}
}

// history is the migration's history in the database: "version:how:by".
func (c *clusterRun) history() []string {
	c.t.Helper()
	rows, err := c.conn.Query(context.Background(), "SELECT version, how, applied_by FROM ptah.migration_history ORDER BY version")
	if err != nil {
		c.t.Fatal(err)
	}
	var out []string
	for rows.Next() {
		var v, how, by string
		if err := rows.Scan(&v, &how, &by); err != nil {
			c.t.Fatal(err)
		}
		out = append(out, v+":"+how+":"+by)
	}
	if err := rows.Err(); err != nil {
		c.t.Fatal(err)
	}
	return out
}

// acks are the cluster's run acknowledgments in the namespace.
func (c *clusterRun) acks() []api.PtahMigrationRunAcknowledgment {
	c.t.Helper()
	var l api.PtahMigrationRunAcknowledgmentList
	if err := c.e.Client.List(context.Background(), &l, client.InNamespace(c.ns)); err != nil {
		c.t.Fatal(err)
	}
	return l.Items
}

// TestClusterResolveRun runs ptah resolve-run --cluster as a person would,
// against a real API server with ptah's CRDs, RBAC roles and admission
// policy, and a real database holding the run's journal: the record comes
// from the cluster, the evidence from the database (through the Secret the
// resource names, or --database-url-env), and the acknowledgment is
// created in the cluster, bound to the resource's UID and the operation,
// in the name of the authenticated user, with the versions marked applied
// in the database's history.
func TestClusterResolveRun(t *testing.T) {
	e, err := kubetest.Start()
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = e.Stop() }()
	root := kubetest.RepoRoot()
	e.Apply(t, filepath.Join(root, "deploy", "admission", "approver-identity.yaml"), filepath.Join(root, "deploy", "rbac", "people.yaml"))
	ns := e.Namespace(t)
	e.Bind(t, ns, "alice", "ptah-approver", "ptah-viewer")
	e.Bind(t, ns, "bob", "ptah-approver", "ptah-viewer")
	e.Bind(t, ns, "vic", "ptah-viewer")
	// bob may also read the database's Secret; alice and vic may not.
	ctx := context.Background()
	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "app-db-reader", Namespace: ns},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"secrets"}, ResourceNames: []string{"app-db"}, Verbs: []string{"get"}}}}
	if err := e.Client.Create(ctx, role); err != nil {
		t.Fatal(err)
	}
	rb := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "app-db-reader-bob", Namespace: ns},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: role.Name},
		Subjects: []rbacv1.Subject{{APIGroup: "rbac.authorization.k8s.io", Kind: "User", Name: "bob"}}}
	if err := e.Client.Create(ctx, rb); err != nil {
		t.Fatal(err)
	}
	alice, bob, vic := e.Kubeconfig(t, "alice"), e.Kubeconfig(t, "bob"), e.Kubeconfig(t, "vic")
	c := newClusterRun(t, e, ns)
	t.Setenv("APP_DB_URL", c.local.url)
	t.Setenv("BAD_DB_URL", "postgres://ptah:s3cret-pw@127.0.0.1:1/nodb?connect_timeout=5")
	inCluster := func(kubeconfig string, args ...string) result {
		var stdout, stderr bytes.Buffer
		code := newApp(&stdout, &stderr).run(context.Background(), append(args, "--cluster", "--kubeconfig", kubeconfig, "-n", ns))
		return result{code: code, stdout: stdout.String(), stderr: stderr.String()}
	}
	asAlice := func(args ...string) result {
		return inCluster(alice, append([]string{"resolve-run", "app", "--database-url-env", "APP_DB_URL"}, args...)...)
	}

	// The run is dispatched and ptah serve has not accounted for it yet:
	// nothing to read as unresolved, and no pass of this process's own.
	if r := asAlice(); r.code != ExitBlocked || !strings.Contains(r.stderr, "ptah serve has not yet accounted for a dispatched run: run "+c.dispatched) ||
		!strings.Contains(r.stderr, "look again in a moment") || len(c.acks()) != 0 {
		t.Fatalf("a run not yet accounted for: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	// ptah serve accounts for it (here: local mode's pass, over the same
	// journal) and records it unresolved.
	if code, stdout, stderr := c.local.ptah(nil, "resolve-run", "app"); code != ExitOK || !strings.Contains(stdout, "outcome Partial") {
		t.Fatalf("accounting for the run: exit %d\n%s%s", code, stdout, stderr)
	}
	st, _ := c.localRecord()
	if st.UnresolvedRun == nil || st.ActiveOperation != nil {
		t.Fatalf("the run is not recorded unresolved: %+v", st)
	}
	op := st.UnresolvedRun.OperationID
	if op != c.dispatched {
		t.Fatalf("the unresolved run is %s, not the run dispatched, %s", op, c.dispatched)
	}
	c.writeStatus(st)

	if r := inCluster(alice, "resolve-run", "app", "--operation", op, "--reason", "x", "--as", "bob"); r.code != ExitUsage ||
		!strings.Contains(r.stderr, "--as") {
		t.Errorf("--as in a cluster: exit %d, %s; want a usage error", r.code, r.stderr)
	}
	if r := inCluster(alice, "resolve-run", "app", "--database-url-env", "postgres://u:pw@h/db"); r.code != ExitUsage || strings.Contains(r.stderr, "pw@h") {
		t.Errorf("a URL for --database-url-env: exit %d, %s; want a usage error that does not repeat it", r.code, r.stderr)
	}
	// alice may not read the Secret: she is told so, and what to do.
	r := inCluster(alice, "resolve-run", "app")
	if r.code != ExitForbidden || !strings.Contains(r.stderr, "may not read Secret app-db") || !strings.Contains(r.stderr, "--database-url-env VAR") {
		t.Errorf("a Secret alice may not read: exit %d\n%s", r.code, r.stderr)
	}
	// A connection that fails says so without the URL's password.
	if r := inCluster(alice, "resolve-run", "app", "--database-url-env", "BAD_DB_URL"); r.code != ExitConnect || strings.Contains(r.stderr, "s3cret-pw") {
		t.Errorf("an unreachable database: exit %d\n%s; want %d, the password redacted", r.code, r.stderr, ExitConnect)
	}

	// The evidence, through --database-url-env.
	r = asAlice()
	if r.code != ExitOK {
		t.Fatalf("resolve-run --cluster: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	text := strings.Join(strings.Fields(r.stdout), " ") // as wrapped for a terminal
	for _, want := range []string{
		`PtahMigration "app": Unresolved run ` + op + ` (outcome Partial).`,
		"plan:          app-1 (uid " + string(c.plan.UID) + ")",
		"version 1 (checksum sha256:",
		"transaction): in the history; journal: 1 started, 1 committed",
		"no transaction): not in the history; journal: 2 started, 1 committed",
		"it runs without a transaction: 1 of its statements committed; statement 2 was in flight when the run stopped",
		"in flight, statement 2 (started ",
		"CREATE UNIQUE INDEX CONCURRENTLY users_email_lower ON users (lower(email));",
		"transaction): not in the history; journal: 0 started, 0 committed",
		"The history now:",
		"ptah resolve-run app --cluster -n " + ns + " --database-url-env APP_DB_URL --operation " + op + " --reason REASON --mark-applied 2",
	} {
		if !strings.Contains(text, strings.Join(strings.Fields(want), " ")) {
			t.Errorf("the evidence lacks %q:\n%s", want, r.stdout)
		}
	}
	if strings.Contains(r.stdout, "not in the source") {
		t.Errorf("the evidence says a file is not in the source, which cluster mode does not read:\n%s", r.stdout)
	}
	// The same as JSON; bob reads the URL from the Secret himself.
	r = inCluster(bob, "resolve-run", "app", "-o", "json")
	if r.code != ExitOK {
		t.Fatalf("resolve-run --cluster -o json, through the Secret: exit %d\n%s", r.code, r.stderr)
	}
	var ev evidenceOutput
	if err := json.Unmarshal([]byte(r.stdout), &ev); err != nil {
		t.Fatalf("%v\n%s", err, r.stdout)
	}
	var versions []string
	for _, v := range ev.Versions {
		versions = append(versions, fmt.Sprintf("%s recorded=%t %d/%d", v.Version, v.Recorded, v.Committed, v.Started))
	}
	if ev.Unresolved == nil || ev.Unresolved.OperationID != op || ev.Plan == nil || ev.Plan.UID != string(c.plan.UID) ||
		!slices.Equal(versions, []string{"1 recorded=true 1/1", "2 recorded=false 1/2", "3 recorded=false 0/0"}) ||
		len(ev.History) != 1 || ev.History[0].Version != "1" || ev.Run == nil || ev.Run.OperationID != op ||
		ev.Next == nil || !slices.Equal(ev.Next.Partial, []string{"2"}) || ev.WriterMayStillWrite {
		t.Errorf("the evidence as JSON: versions %v\n%s", versions, r.stdout)
	}
	if len(ev.Versions) == 3 && (len(ev.Versions[1].InFlight) != 1 || ev.Versions[1].InFlight[0].InFile != 2) {
		t.Errorf("version 2's statement in flight: %+v", ev.Versions[1].InFlight)
	}

	// Refusals, each with its code, and nothing recorded.
	if r := asAlice("--operation", "0123456789abcdef0123456789abcdef", "--reason", "x"); r.code != ExitWrongOperation ||
		!strings.Contains(r.stderr, "the unresolved run is operation "+op) {
		t.Errorf("another operation: exit %d, %s; want %d", r.code, r.stderr, ExitWrongOperation)
	}
	if r := asAlice("--operation", op, "--reason", "x"); r.code != ExitUnaccounted {
		t.Errorf("version 2 unaccounted for: exit %d, %s; want %d", r.code, r.stderr, ExitUnaccounted)
	}
	// vic may read everything but not acknowledge: he records nothing,
	// not even the versions he marks.
	if r := inCluster(vic, "resolve-run", "app", "--database-url-env", "APP_DB_URL", "--operation", op, "--mark-applied", "2",
		"--reason", "x"); r.code != ExitForbidden || !strings.Contains(r.stderr, "nothing was recorded") {
		t.Errorf("a viewer's acknowledgment: exit %d, %s; want %d", r.code, r.stderr, ExitForbidden)
	}
	if h, acks := c.history(), c.acks(); len(h) != 1 || !strings.HasPrefix(h[0], "1:run:") || len(acks) != 0 {
		t.Fatalf("refusals recorded something: history %v, %d acknowledgments", h, len(acks))
	}

	// alice finishes version 2 by hand and says so.
	pgtest.Exec(t, c.local.url, "CREATE UNIQUE INDEX CONCURRENTLY users_email_lower ON users (lower(email))")
	r = asAlice("--operation", op, "--mark-applied", "2", "--reason", "built users_email_lower by hand; INC-42", "-o", "json")
	if r.code != ExitOK {
		t.Fatalf("resolve-run --cluster --operation: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	var out resolvedOutput
	if err := json.Unmarshal([]byte(r.stdout), &out); err != nil {
		t.Fatalf("%v\n%s", err, r.stdout)
	}
	acks := c.acks()
	if len(acks) != 1 {
		t.Fatalf("%d acknowledgments in the cluster, want 1", len(acks))
	}
	a := acks[0]
	checksum := c.plan.Spec.Versions[1].Checksum
	if a.Spec.Migration.UID != string(c.mig.UID) || a.Spec.Migration.Name != "app" || a.Spec.OperationID != op || a.Spec.By != "alice" ||
		a.Spec.Reason != "built users_email_lower by hand; INC-42" ||
		!slices.Equal(a.Spec.MarkedApplied, []api.MarkedVersion{{Version: "2", Checksum: checksum}}) ||
		a.Labels[runner.LabelMigration] != "app" || string(a.UID) != out.Acknowledgment.Metadata.UID {
		t.Errorf("the acknowledgment: %+v (labels %v, uid %s); want alice's, bound to %s and operation %s, marking 2", a.Spec, a.Labels,
			a.UID, c.mig.UID, op)
	}
	h := c.history()
	if len(h) != 2 || h[1] != "2:marked:alice" {
		t.Errorf("history %v; want version 2 marked by alice", h)
	}
	// The run stays unresolved until ptah serve consumes the
	// acknowledgment; the evidence shows version 2 recorded meanwhile.
	r = asAlice()
	if r.code != ExitOK || !strings.Contains(r.stdout, "no transaction): in the history; journal: 2 started, 1 committed") {
		t.Errorf("the evidence after the acknowledgment: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
}
