package controller

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ptah-run/ptah/internal/kubetest"
	"github.com/ptah-run/ptah/internal/store"
	"github.com/ptah-run/ptah/internal/store/kubestore"
	api "github.com/ptah-run/ptah/pkg/api/v1alpha1"
)

// mounted is what the Pod sees of the parts: one file each, beside the
// volume's own bookkeeping.
func mounted(p PlanParts) fstest.MapFS {
	fsys := fstest.MapFS{"..data": &fstest.MapFile{Data: []byte("x")}}
	for i, part := range p.Parts {
		fsys[partFile(i)] = &fstest.MapFile{Data: part}
	}
	return fsys
}

func planOf(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte('a' + i%26)
	}
	return b
}

func TestPlanPartsRoundTrip(t *testing.T) {
	for _, n := range []int{0, 1, ChunkBytes - 1, ChunkBytes, ChunkBytes + 1, 3*ChunkBytes + ChunkBytes/2, MaxPlanBytes} {
		plan := planOf(n)
		p, err := SplitPlan(plan)
		if err != nil {
			t.Fatalf("%d bytes: %v", n, err)
		}
		for i, part := range p.Parts {
			if len(part) > ChunkBytes || len(part) == 0 && n > 0 {
				t.Fatalf("%d bytes: part %d holds %d", n, i, len(part))
			}
		}
		got, err := AssemblePlan(mounted(p), p.Digest)
		if err != nil || !bytes.Equal(got, plan) {
			t.Fatalf("%d bytes in %d parts: assembled %d bytes, %v", n, len(p.Parts), len(got), err)
		}
	}
	if _, err := SplitPlan(planOf(MaxPlanBytes + 1)); !errors.Is(err, ErrPlanTooLarge) {
		t.Errorf("a plan over the maximum: %v", err)
	}
}

// Every way the parts can differ from what was split is refused.
func TestAssemblePlanRefusesWhatDoesNotHash(t *testing.T) {
	p, err := SplitPlan(planOf(3*ChunkBytes + 10))
	if err != nil {
		t.Fatal(err)
	}
	cases := map[string]func(fstest.MapFS){
		"a byte changed": func(f fstest.MapFS) { f[partFile(1)].Data = append([]byte("X"), f[partFile(1)].Data[1:]...) },
		"a part missing": func(f fstest.MapFS) { delete(f, partFile(3)) },
		"a gap":          func(f fstest.MapFS) { delete(f, partFile(1)) },
		"a part added":   func(f fstest.MapFS) { f[partFile(4)] = &fstest.MapFile{Data: []byte("DROP TABLE t;")} },
		"parts swapped":  func(f fstest.MapFS) { f[partFile(0)], f[partFile(1)] = f[partFile(1)], f[partFile(0)] },
	}
	for name, change := range cases {
		fsys := mounted(p)
		for k, v := range fsys { // a copy the case may change
			d := *v
			d.Data = bytes.Clone(v.Data)
			fsys[k] = &d
		}
		change(fsys)
		if _, err := AssemblePlan(fsys, p.Digest); !errors.Is(err, ErrPlanCorrupted) {
			t.Errorf("%s: %v, want ErrPlanCorrupted", name, err)
		}
	}
	if _, err := AssemblePlan(mounted(p), "sha256:0000"); !errors.Is(err, ErrPlanCorrupted) {
		t.Errorf("another digest: %v", err)
	}
}

func request(t *testing.T, ns string, plan []byte) ExecRequest {
	t.Helper()
	p, err := SplitPlan(plan)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	return ExecRequest{Namespace: ns, ResourceKind: api.KindPtahMigration, ResourceName: "app", ResourceUID: "7d9f8a52-2f0a-4d59-9a1e-3c1f2b7e6a10",
		OperationID: "op-1", Image: "ptah:test", URLSecret: "app-db", URLKey: "url", Now: now, Deadline: now.Add(30 * time.Minute), Plan: p}
}

func TestJobNameIsTheOperations(t *testing.T) {
	a, b := JobName("uid-1", "op-1"), JobName("uid-1", "op-1")
	if a != b || JobName("uid-1", "op-2") == a || JobName("uid-2", "op-1") == a {
		t.Errorf("job names %s %s %s %s", a, b, JobName("uid-1", "op-2"), JobName("uid-2", "op-1"))
	}
	if len(PartsName(strings.Repeat("u", 36), strings.Repeat("o", 64), MaxChunks-1)) > 63 {
		t.Error("a part's ConfigMap name is longer than a label value may be")
	}
}

// The Job runs once, as nobody in particular, and holds no credential but
// the Secret reference: not in its arguments, not in a token.
func TestBuildJobRunsOnceWithoutCredentials(t *testing.T) {
	r := request(t, "ns", []byte(`{"statements":["CREATE TABLE t ()"]}`))
	j := BuildJob(r)
	s := j.Spec.Template.Spec
	c := s.Containers[0]
	switch {
	case j.Name != JobName(r.ResourceUID, r.OperationID):
		t.Errorf("job name %s", j.Name)
	case *j.Spec.BackoffLimit != 0 || s.RestartPolicy != corev1.RestartPolicyNever:
		t.Errorf("backoffLimit %d, restartPolicy %s: a run may be retried", *j.Spec.BackoffLimit, s.RestartPolicy)
	case *j.Spec.ActiveDeadlineSeconds < int64(r.Deadline.Sub(r.Now)/time.Second):
		t.Errorf("activeDeadlineSeconds %d stops the Pod before the run's deadline", *j.Spec.ActiveDeadlineSeconds)
	case *s.AutomountServiceAccountToken || !*s.SecurityContext.RunAsNonRoot || !*c.SecurityContext.ReadOnlyRootFilesystem ||
		*c.SecurityContext.AllowPrivilegeEscalation:
		t.Errorf("pod security: %+v %+v", s.SecurityContext, c.SecurityContext)
	case len(c.Env) != 1 || c.Env[0].ValueFrom == nil || c.Env[0].ValueFrom.SecretKeyRef.Name != "app-db" || c.Env[0].Value != "":
		t.Errorf("the URL must come from the Secret key only: %+v", c.Env)
	case j.OwnerReferences[0].UID != "7d9f8a52-2f0a-4d59-9a1e-3c1f2b7e6a10":
		t.Errorf("owner %+v", j.OwnerReferences)
	}
	for _, arg := range c.Args {
		if strings.Contains(arg, "CREATE") || strings.Contains(arg, "://") {
			t.Errorf("argument %q carries SQL or a URL", arg)
		}
	}
}

// The API server accepts the Job and its plan's ConfigMaps as built, keeps
// the parts immutable, and refuses a second Job for the same operation.
func TestJobAndPlanAreAcceptedByTheAPIServer(t *testing.T) {
	e := kubetest.Shared(t)
	ctx := context.Background()
	ns := e.Namespace(t)
	owner := &api.PtahMigration{ObjectMeta: metav1.ObjectMeta{Name: "app", Namespace: ns},
		Spec: api.PtahMigrationSpec{Source: api.MigrationSource{Path: "migrations"}}}
	if err := e.Client.Create(ctx, owner); err != nil {
		t.Fatal(err)
	}
	r := request(t, ns, planOf(2*ChunkBytes+100))
	r.ResourceUID = string(owner.UID)
	cms := PlanConfigMaps(r)
	if len(cms) != 3 {
		t.Fatalf("%d ConfigMaps for a plan of three parts", len(cms))
	}
	for _, cm := range cms {
		if err := e.Client.Create(ctx, cm); err != nil {
			t.Fatalf("creating %s: %v", cm.Name, err)
		}
	}
	cms[1].BinaryData[partFile(1)] = []byte("DROP TABLE t;")
	if err := e.Client.Update(ctx, cms[1]); !apierrors.IsInvalid(err) {
		t.Errorf("changing a part of a dispatched plan: %v; want the API server to refuse it", err)
	}
	if err := e.Client.Create(ctx, BuildJob(r)); err != nil {
		t.Fatalf("creating the Job: %v", err)
	}
	if err := e.Client.Create(ctx, BuildJob(r)); !apierrors.IsAlreadyExists(err) {
		t.Errorf("a second Job for the same operation: %v; want AlreadyExists", err)
	}
}

// A plan of at most InlinePlanBytes travels in its Job: no ConfigMap, the
// plan an annotation of the Pod template that the downward API mounts as
// its one part; one byte more, and it travels in a ConfigMap. The API
// server takes the largest Job so built (a Pod's annotations may hold 256
// KiB in all).
func TestASmallPlanTravelsInItsJob(t *testing.T) {
	e := kubetest.Shared(t)
	ctx := context.Background()
	ns := e.Namespace(t)
	owner := &api.PtahSchema{ObjectMeta: metav1.ObjectMeta{Name: "app", Namespace: ns},
		Spec: api.PtahSchemaSpec{Source: api.Source{Path: "schema"}}}
	if err := e.Client.Create(ctx, owner); err != nil {
		t.Fatal(err)
	}
	r := request(t, ns, planOf(InlinePlanBytes))
	r.ResourceKind, r.ResourceUID = api.KindPtahSchema, string(owner.UID)
	j := BuildJob(r)
	if cms := PlanConfigMaps(r); len(cms) != 0 {
		t.Fatalf("%d ConfigMaps for a plan its Job carries", len(cms))
	}
	if got := j.Spec.Template.Annotations[AnnotationPlan]; got != string(r.Plan.Parts[0]) {
		t.Fatalf("the Pod template's annotation holds %d bytes, want the plan's %d", len(got), len(r.Plan.Parts[0]))
	}
	v := j.Spec.Template.Spec.Volumes[0]
	if v.Projected == nil || len(v.Projected.Sources) != 1 || v.Projected.Sources[0].DownwardAPI == nil {
		t.Fatalf("the plan's volume: %+v; want the downward API alone", v)
	}
	item := v.Projected.Sources[0].DownwardAPI.Items[0]
	if item.Path != partFile(0) || item.FieldRef.FieldPath != "metadata.annotations['"+AnnotationPlan+"']" {
		t.Errorf("the plan's file: %+v", item)
	}
	if err := e.Client.Create(ctx, j); err != nil {
		t.Fatalf("the API server refused a Job carrying %d bytes of plan: %v", InlinePlanBytes, err)
	}

	r = request(t, ns, planOf(InlinePlanBytes+1))
	r.ResourceKind, r.ResourceUID, r.OperationID = api.KindPtahSchema, string(owner.UID), "op-2"
	j = BuildJob(r)
	if cms := PlanConfigMaps(r); len(cms) != 1 || len(j.Spec.Template.Annotations) != 0 {
		t.Fatalf("a plan one byte over: %d ConfigMaps, annotations %d; want one ConfigMap and none", len(cms), len(j.Spec.Template.Annotations))
	}
	if src := j.Spec.Template.Spec.Volumes[0].Projected.Sources; len(src) != 1 || src[0].ConfigMap == nil ||
		src[0].ConfigMap.Name != PartsName(r.ResourceUID, r.OperationID, 0) {
		t.Errorf("a plan one byte over mounts %+v; want its ConfigMap", src)
	}
}

// TestAPlanObjectIsBoundedByWhatTheAPIServerHolds: a reading's plan is
// handed back, and published, as one API object: up to
// MaxPlanObjectBytes of spec the API server takes it; a larger one is
// refused by name before anything is created.
func TestAPlanObjectIsBoundedByWhatTheAPIServerHolds(t *testing.T) {
	e := kubetest.Shared(t)
	ctx := context.Background()
	ns := e.Namespace(t)
	st := kubestore.New(e.Client)
	spec := func(n int) api.PtahSchemaPlanSpec {
		s := api.PtahSchemaPlanSpec{Schema: api.ObjectReference{Name: "app", UID: "uid"},
			Statements: []api.PlanStatement{{SQL: "COMMENT ON TABLE t IS '" + string(planOf(n)) + "'"}}}
		raw, _ := json.Marshal(s)
		// Grow the statement until the spec is exactly n bytes.
		s.Statements[0].SQL = "COMMENT ON TABLE t IS '" + string(planOf(2*n-len(raw))) + "'"
		return s
	}
	fits := spec(MaxPlanObjectBytes)
	if raw, _ := json.Marshal(fits); len(raw) != MaxPlanObjectBytes {
		t.Fatalf("the test's spec is %d bytes, want %d", len(raw), MaxPlanObjectBytes)
	}
	p := Payload{OperationID: "reading-1", Resource: "app", Namespace: ns}
	if _, err := createTransport(ctx, st, p, api.KindPtahSchemaPlan, fits); err != nil {
		t.Fatalf("a plan of %d bytes, the most: %v", MaxPlanObjectBytes, err)
	}
	p.OperationID = "reading-2"
	_, err := createTransport(ctx, st, p, api.KindPtahSchemaPlan, spec(MaxPlanObjectBytes+1))
	if !errors.Is(err, ErrPlanObjectTooLarge) || !strings.Contains(err.Error(), "ptah apply") {
		t.Fatalf("a plan one byte over: %v; want ErrPlanObjectTooLarge, saying what to do", err)
	}
	if _, err := st.Get(ctx, api.KindPtahSchemaPlan, ns, TransportName("app", "reading-2")); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("the refused plan was created: %v", err)
	}
}
