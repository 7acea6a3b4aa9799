package kubestore

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	api "github.com/ptah-run/ptah/pkg/api/v1alpha1"
)

// planObject is a plan as the API server returns it: n statements, and a
// status naming the contract versions of what it records.
func planObject(tb testing.TB, n int) *unstructured.Unstructured {
	tb.Helper()
	var stmts []string
	for i := range n {
		stmts = append(stmts, fmt.Sprintf(`{"sql":"CREATE TABLE public.t%d (id bigint PRIMARY KEY, body text NOT NULL)","hazards":[{"kind":"TakesLock","detail":"ACCESS EXCLUSIVE on public.t%d"}]}`, i, i))
	}
	doc := `{"apiVersion":"` + api.APIVersion + `","kind":"PtahSchemaPlan","metadata":{"name":"app-1","namespace":"ns","uid":"u-1",` +
		`"resourceVersion":"42","generation":1,"creationTimestamp":"2026-12-01T10:00:00Z","labels":{"ptah.run/schema":"app"},` +
		`"annotations":{"ptah.run/contract-version":"1"}},` +
		`"spec":{"schema":{"name":"app","uid":"s-1"},"fingerprint":"sha256:ab","statements":[` + strings.Join(stmts, ",") + `],` +
		`"bindings":{"binding":{"contractVersion":1,"ptahVersion":"v1"}}},` +
		`"status":{"contractVersion":1,"spent":{"by":"op-1","binding":{"contractVersion":3}}}}`
	u := &unstructured.Unstructured{}
	if err := u.UnmarshalJSON([]byte(doc)); err != nil {
		tb.Fatal(err)
	}
	return u
}

// Reading an object with its bodies and without them finds the same
// contract versions, including one embedded deep in the status.
func TestMetadataOnlyReadsTheSameContractVersions(t *testing.T) {
	u := planObject(t, 3)
	whole, err := toObject(u, true)
	if err != nil {
		t.Fatal(err)
	}
	meta, err := toObject(u, false)
	if err != nil {
		t.Fatal(err)
	}
	if whole.EmbeddedContractVersion != 3 || meta.EmbeddedContractVersion != 3 || whole.ContractVersion != 1 || meta.ContractVersion != 1 {
		t.Errorf("contract versions: with bodies %d/%d, without %d/%d; want 1 and 3 embedded",
			whole.ContractVersion, whole.EmbeddedContractVersion, meta.ContractVersion, meta.EmbeddedContractVersion)
	}
	if len(whole.Spec) == 0 || len(whole.Status) == 0 || meta.Spec != nil || meta.Status != nil {
		t.Errorf("bodies: with %d/%d bytes, without %d/%d; want them only with", len(whole.Spec), len(whole.Status), len(meta.Spec), len(meta.Status))
	}
	var status map[string]any
	if err := json.Unmarshal(whole.Status, &status); err != nil || status[statusContractVersion] != nil {
		t.Errorf("the status as read: %s, %v; want it without the store's own contractVersion", whole.Status, err)
	}
}

// BenchmarkToObject: one plan of 200 statements read as a store object,
// as a Get reads it and as the fence's MetadataOnly list reads it.
func BenchmarkToObject(b *testing.B) {
	u := planObject(b, 200)
	for _, bodies := range []bool{true, false} {
		b.Run(fmt.Sprintf("bodies=%v", bodies), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := toObject(u, bodies); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
