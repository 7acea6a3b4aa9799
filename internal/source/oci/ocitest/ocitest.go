// Package ocitest runs an OCI registry in the test's process and pushes
// artifacts of declared files to it, as a team's CI would.
package ocitest

import (
	"context"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/registry"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"oras.land/oras-go/v2"
	"oras.land/oras-go/v2/content"
	orasregistry "oras.land/oras-go/v2/registry"
	"oras.land/oras-go/v2/registry/remote"
	"oras.land/oras-go/v2/registry/remote/auth"
)

// Registry is a registry on a loopback address (plain HTTP), until the
// test ends.
type Registry struct {
	// Host is its "127.0.0.1:PORT".
	Host string

	creds *auth.Credential
}

// Start starts a registry for the test.
func Start(t testing.TB) *Registry {
	t.Helper()
	return StartWithAuth(t, "", "")
}

// StartWithAuth starts a registry that answers only requests with the
// basic credentials user and password (none: anyone).
func StartWithAuth(t testing.TB, user, password string) *Registry {
	t.Helper()
	var h http.Handler = registry.New(registry.Logger(log.New(io.Discard, "", 0)))
	r := &Registry{}
	if user != "" {
		r.creds = &auth.Credential{Username: user, Password: password}
		inner := h
		h = http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
			if u, p, ok := req.BasicAuth(); !ok || u != user || p != password {
				w.Header().Set("WWW-Authenticate", `Basic realm="ocitest"`)
				http.Error(w, "authentication required", http.StatusUnauthorized)
				return
			}
			inner.ServeHTTP(w, req)
		})
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	r.Host = strings.TrimPrefix(srv.URL, "http://")
	return r
}

// DockerConfig is a kubernetes.io/dockerconfigjson Secret's
// .dockerconfigjson for this registry with user and password.
func (r *Registry) DockerConfig(user, password string) []byte {
	return []byte(`{"auths":{"` + r.Host + `":{"username":"` + user + `","password":"` + password + `"}}}`)
}

// Push pushes files (name -> content) to repository as one artifact, a
// layer per file titled with its name, and returns its pinned reference
// "oci://HOST/REPOSITORY@sha256:...".
func (r *Registry) Push(t testing.TB, repository string, files map[string]string) string {
	t.Helper()
	ctx := context.Background()
	repo := &remote.Repository{Reference: orasregistry.Reference{Registry: r.Host, Repository: repository}, PlainHTTP: true}
	if r.creds != nil {
		repo.Client = &auth.Client{Credential: auth.StaticCredential(r.Host, *r.creds)}
	}
	names := make([]string, 0, len(files))
	for name := range files {
		names = append(names, name)
	}
	sort.Strings(names)
	var layers []ocispec.Descriptor
	for _, name := range names {
		desc := content.NewDescriptorFromBytes("application/sql", []byte(files[name]))
		desc.Annotations = map[string]string{ocispec.AnnotationTitle: name}
		if err := repo.Push(ctx, desc, strings.NewReader(files[name])); err != nil {
			t.Fatalf("pushing %s: %v", name, err)
		}
		layers = append(layers, desc)
	}
	m, err := oras.PackManifest(ctx, repo, oras.PackManifestVersion1_1, "application/vnd.ptah.sql.v1",
		oras.PackManifestOptions{Layers: layers, ManifestAnnotations: map[string]string{ocispec.AnnotationCreated: "2026-01-01T00:00:00Z"}})
	if err != nil {
		t.Fatalf("pushing the manifest: %v", err)
	}
	return "oci://" + r.Host + "/" + repository + "@" + m.Digest.String()
}
