package oci

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/opencontainers/go-digest"
	specs "github.com/opencontainers/image-spec/specs-go"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"oras.land/oras-go/v2"
	"oras.land/oras-go/v2/content"
	"oras.land/oras-go/v2/errdef"
	orasregistry "oras.land/oras-go/v2/registry"
	"oras.land/oras-go/v2/registry/remote"
	"oras.land/oras-go/v2/registry/remote/auth"
)

const (
	testRepo         = "acme/schemas"
	testArtifactType = "application/vnd.ptah.sql.v1"
	testLayerType    = "application/sql"
)

// middleware wraps the registry handler, to change what the client sees.
type middleware func(http.Handler) http.Handler

// testRegistry is an in-process registry served over plain HTTP on
// 127.0.0.1.
type testRegistry struct {
	host string // host:port
	// creds, if set, are used to push.
	creds *Credentials

	mu        sync.Mutex
	blobGets  []string // paths of GET requests for blobs
	wrapAfter middleware
}

// newTestRegistry starts a registry; wrap (optional) sits in front of it.
func newTestRegistry(t *testing.T, wrap middleware) *testRegistry {
	t.Helper()
	r := &testRegistry{}
	var h http.Handler = registry.New(registry.Logger(log.New(io.Discard, "", 0)))
	if wrap != nil {
		h = wrap(h)
	}
	inner := h
	h = http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.Method == http.MethodGet && strings.Contains(req.URL.Path, "/blobs/") {
			r.mu.Lock()
			r.blobGets = append(r.blobGets, req.URL.Path)
			r.mu.Unlock()
		}
		r.mu.Lock()
		after := r.wrapAfter
		r.mu.Unlock()
		if after != nil {
			after(inner).ServeHTTP(w, req)
			return
		}
		inner.ServeHTTP(w, req)
	})
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	r.host = strings.TrimPrefix(srv.URL, "http://")
	return r
}

// setWrap puts m in front of the registry from now on (after pushing).
func (r *testRegistry) setWrap(m middleware) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.wrapAfter = m
}

// blobGetCount returns how many blob downloads the registry has served.
func (r *testRegistry) blobGetCount() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.blobGets)
}

// resetBlobGets forgets the blob downloads seen so far.
func (r *testRegistry) resetBlobGets() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.blobGets = nil
}

// repo returns an oras client for testRepo, used to push test artifacts.
func (r *testRegistry) repo(t *testing.T) *remote.Repository {
	t.Helper()
	client := &auth.Client{Cache: auth.NewCache()}
	if r.creds != nil {
		client.Credential = auth.StaticCredential(r.host, auth.Credential{Username: r.creds.Username, Password: r.creds.Password})
	}
	return &remote.Repository{
		Client:    client,
		Reference: orasregistry.Reference{Registry: r.host, Repository: testRepo},
		PlainHTTP: true,
	}
}

// testLayer is one layer to push. annotations nil means the layer is
// annotated with title only.
type testLayer struct {
	title       string
	data        string
	annotations map[string]string
	// declaredSize, if set, is put in the manifest as the layer size and
	// the blob is not pushed at all.
	declaredSize int64
}

// file makes a layer with a title annotation.
func file(title, data string) testLayer { return testLayer{title: title, data: data} }

// push pushes the layers and an OCI image manifest listing them in order,
// and returns the reference of the manifest.
func (r *testRegistry) push(t *testing.T, layers ...testLayer) Ref {
	t.Helper()
	ctx := context.Background()
	repo := r.repo(t)
	var descs []ocispec.Descriptor
	for _, l := range layers {
		desc := content.NewDescriptorFromBytes(testLayerType, []byte(l.data))
		desc.Annotations = l.annotations
		if desc.Annotations == nil {
			desc.Annotations = map[string]string{ocispec.AnnotationTitle: l.title}
		}
		if l.declaredSize != 0 {
			desc.Size = l.declaredSize
			descs = append(descs, desc)
			continue
		}
		exists, err := repo.Exists(ctx, desc)
		if err != nil {
			t.Fatalf("exists %q: %v", l.title, err)
		}
		if !exists {
			if err := repo.Push(ctx, desc, strings.NewReader(l.data)); err != nil {
				t.Fatalf("push layer %q: %v", l.title, err)
			}
		}
		descs = append(descs, desc)
	}
	m, err := oras.PackManifest(ctx, repo, oras.PackManifestVersion1_1, testArtifactType, oras.PackManifestOptions{
		Layers:              descs,
		ManifestAnnotations: map[string]string{ocispec.AnnotationCreated: "2020-01-01T00:00:00Z"},
	})
	if err != nil {
		t.Fatalf("pack manifest: %v", err)
	}
	return Ref{Registry: r.host, Repository: testRepo, Digest: m.Digest.String()}
}

// pushManifest pushes raw manifest bytes with the given media type and
// returns their reference.
func (r *testRegistry) pushManifest(t *testing.T, mediaType string, data []byte) Ref {
	t.Helper()
	desc := content.NewDescriptorFromBytes(mediaType, data)
	if err := r.repo(t).Manifests().Push(context.Background(), desc, bytes.NewReader(data)); err != nil {
		t.Fatalf("push manifest: %v", err)
	}
	return Ref{Registry: r.host, Repository: testRepo, Digest: desc.Digest.String()}
}

// plain returns the options for pulling from a test registry.
func plain() Options { return Options{PlainHTTP: true} }

// checkFiles fails unless got is exactly want, in order.
func checkFiles(t *testing.T, got []File, want ...File) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("got %d files %v, want %d %v", len(got), names(got), len(want), names(want))
	}
	for i := range want {
		if got[i].Name != want[i].Name || !bytes.Equal(got[i].Data, want[i].Data) {
			t.Errorf("file %d = %q %q, want %q %q", i, got[i].Name, got[i].Data, want[i].Name, want[i].Data)
		}
	}
}

func names(files []File) []string {
	var s []string
	for _, f := range files {
		s = append(s, f.Name)
	}
	return s
}

func wantError(t *testing.T, err error, parts ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("got no error, want one saying %q", parts)
	}
	t.Logf("error: %v", err)
	for _, p := range parts {
		if !strings.Contains(err.Error(), p) {
			t.Errorf("error %q does not say %q", err, p)
		}
	}
}

func TestPullRoundTrip(t *testing.T) {
	reg := newTestRegistry(t, nil)
	ref := reg.push(t,
		file("003_views.sql", "CREATE VIEW v AS SELECT 1;\n"),
		file("001_tables.sql", "CREATE TABLE t (id int);\n"),
		file("002_empty.sql", ""),
	)
	// Through ParseRef and String, as a user would give it.
	parsed, err := ParseRef(ref.String())
	if err != nil {
		t.Fatalf("ParseRef(%q): %v", ref, err)
	}
	files, err := Pull(context.Background(), parsed, plain())
	if err != nil {
		t.Fatalf("Pull: %v", err)
	}
	checkFiles(t, files,
		File{"001_tables.sql", []byte("CREATE TABLE t (id int);\n")},
		File{"002_empty.sql", []byte{}},
		File{"003_views.sql", []byte("CREATE VIEW v AS SELECT 1;\n")},
	)
}

func TestPullByDigest(t *testing.T) {
	reg := newTestRegistry(t, nil)
	first := reg.push(t, file("a.sql", "first a"), file("b.sql", "first b"))
	second := reg.push(t, file("a.sql", "second a"), file("c.sql", "second c"))

	t.Run("second manifest", func(t *testing.T) {
		files, err := Pull(context.Background(), second, plain())
		if err != nil {
			t.Fatalf("Pull: %v", err)
		}
		checkFiles(t, files, File{"a.sql", []byte("second a")}, File{"c.sql", []byte("second c")})
	})
	t.Run("first manifest", func(t *testing.T) {
		files, err := Pull(context.Background(), first, plain())
		if err != nil {
			t.Fatalf("Pull: %v", err)
		}
		checkFiles(t, files, File{"a.sql", []byte("first a")}, File{"b.sql", []byte("first b")})
	})
	t.Run("digest that names nothing", func(t *testing.T) {
		missing := first
		missing.Digest = digest.FromString("nothing").String()
		_, err := Pull(context.Background(), missing, plain())
		wantError(t, err, "manifest "+missing.Digest+": not found in "+reg.host+"/"+testRepo)
		if !errors.Is(err, errdef.ErrNotFound) {
			t.Errorf("error %q is not errdef.ErrNotFound", err)
		}
	})
	t.Run("repository that does not exist", func(t *testing.T) {
		missing := first
		missing.Repository = "acme/nothing"
		_, err := Pull(context.Background(), missing, plain())
		wantError(t, err, "not found in "+reg.host+"/acme/nothing")
	})
	t.Run("invalid hand-built ref", func(t *testing.T) {
		bad := first
		bad.Digest = "latest"
		_, err := Pull(context.Background(), bad, plain())
		wantError(t, err, "invalid OCI reference", "only sha256 is accepted")
	})
}

func TestPullRefuses(t *testing.T) {
	tests := []struct {
		name   string
		layers []testLayer
		want   []string
	}{
		{
			name: "layer without title",
			layers: []testLayer{
				file("a.sql", "a"),
				{data: "untitled", annotations: map[string]string{"org.example.note": "no title"}},
			},
			want: []string{"layer 1 (" + digest.FromString("untitled").String() + `) has no "org.opencontainers.image.title" annotation`},
		},
		{
			name:   "slash",
			layers: []testLayer{file("sub/a.sql", "a")},
			want:   []string{`layer 0`, `file name "sub/a.sql" contains a path separator`},
		},
		{
			name:   "backslash",
			layers: []testLayer{file(`sub\a.sql`, "a")},
			want:   []string{`file name "sub\\a.sql" contains a path separator`},
		},
		{
			name:   "parent",
			layers: []testLayer{file("ok.sql", "ok"), file("../a.sql", "a")},
			want:   []string{`layer 1`, `file name "../a.sql" contains a path separator`},
		},
		{
			name:   "dot dot",
			layers: []testLayer{file("..", "a")},
			want:   []string{`file name ".." contains ".."`},
		},
		{
			name:   "dot dot inside",
			layers: []testLayer{file("a..sql", "a")},
			want:   []string{`file name "a..sql" contains ".."`},
		},
		{
			name:   "leading dot",
			layers: []testLayer{file(".hidden.sql", "a")},
			want:   []string{`file name ".hidden.sql" starts with a dot`},
		},
		{
			name:   "control character",
			layers: []testLayer{file("a\n.sql", "a")},
			want:   []string{`file name "a\n.sql" contains a control character`},
		},
		{
			name:   "duplicate titles",
			layers: []testLayer{file("a.sql", "one"), file("b.sql", "b"), file("a.sql", "two")},
			want:   []string{`layers 0 and 2 are both named "a.sql"`},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			reg := newTestRegistry(t, nil)
			ref := reg.push(t, tt.layers...)
			reg.resetBlobGets()
			files, err := Pull(context.Background(), ref, plain())
			if err == nil {
				t.Fatalf("Pull = %v, want an error", names(files))
			}
			wantError(t, err, append(tt.want, ref.String())...)
			if n := reg.blobGetCount(); n != 0 {
				t.Errorf("%d layers were downloaded before the refusal, want none", n)
			}
		})
	}
}

func TestPullMaxBytes(t *testing.T) {
	reg := newTestRegistry(t, nil)
	ref := reg.push(t,
		file("a.sql", strings.Repeat("a", 10)),
		file("b.sql", strings.Repeat("b", 10)),
		file("c.sql", strings.Repeat("c", 10)),
	)

	t.Run("over", func(t *testing.T) {
		reg.resetBlobGets()
		_, err := Pull(context.Background(), ref, Options{PlainHTTP: true, MaxBytes: 25})
		wantError(t, err, "more than the limit of 25 bytes", `file "c.sql"`)
		if n := reg.blobGetCount(); n != 0 {
			t.Errorf("%d layers were downloaded before the refusal, want none", n)
		}
	})
	t.Run("exactly at the limit", func(t *testing.T) {
		files, err := Pull(context.Background(), ref, Options{PlainHTTP: true, MaxBytes: 30})
		if err != nil {
			t.Fatalf("Pull: %v", err)
		}
		if len(files) != 3 {
			t.Fatalf("got %d files, want 3", len(files))
		}
	})
	t.Run("default", func(t *testing.T) {
		// The manifest claims sizes whose blobs were never pushed: the
		// refusal can only come from the manifest.
		bigRef := reg.push(t,
			testLayer{title: "big1.sql", data: "1", declaredSize: DefaultMaxBytes / 2},
			testLayer{title: "big2.sql", data: "2", declaredSize: DefaultMaxBytes/2 + 1},
		)
		reg.resetBlobGets()
		_, err := Pull(context.Background(), bigRef, plain())
		wantError(t, err, fmt.Sprintf("more than the limit of %d bytes", DefaultMaxBytes))
		if n := reg.blobGetCount(); n != 0 {
			t.Errorf("%d layers were downloaded before the refusal, want none", n)
		}
	})
}

func TestPullRefusesOtherManifests(t *testing.T) {
	reg := newTestRegistry(t, nil)
	good := reg.push(t, file("a.sql", "a"))
	goodDesc := ocispec.Descriptor{MediaType: ocispec.MediaTypeImageManifest, Digest: digest.Digest(good.Digest)}
	// Fill in the size of the good manifest for the index below.
	{
		desc, err := reg.repo(t).Resolve(context.Background(), good.Digest)
		if err != nil {
			t.Fatal(err)
		}
		goodDesc.Size = desc.Size
	}
	index, _ := json.Marshal(ocispec.Index{
		Versioned: specs.Versioned{SchemaVersion: 2},
		MediaType: ocispec.MediaTypeImageIndex,
		Manifests: []ocispec.Descriptor{goodDesc},
	})
	configDesc := content.NewDescriptorFromBytes("application/vnd.docker.container.image.v1+json", []byte("{}"))
	layerDesc := content.NewDescriptorFromBytes("application/vnd.docker.image.rootfs.diff.tar.gzip", []byte("a"))
	layerDesc.Annotations = map[string]string{ocispec.AnnotationTitle: "a.sql"}
	docker, _ := json.Marshal(map[string]any{
		"schemaVersion": 2,
		"mediaType":     "application/vnd.docker.distribution.manifest.v2+json",
		"config":        configDesc,
		"layers":        []ocispec.Descriptor{layerDesc},
	})
	if err := reg.repo(t).Push(context.Background(), configDesc, strings.NewReader("{}")); err != nil {
		t.Fatal(err)
	}
	// An OCI manifest served as such, whose own mediaType says otherwise.
	mislabelled, _ := json.Marshal(map[string]any{
		"schemaVersion": 2,
		"mediaType":     ocispec.MediaTypeImageIndex,
		"config":        ocispec.DescriptorEmptyJSON,
		"layers":        []ocispec.Descriptor{},
	})
	oldSchema, _ := json.Marshal(map[string]any{
		"schemaVersion": 1,
		"mediaType":     ocispec.MediaTypeImageManifest,
		"config":        ocispec.DescriptorEmptyJSON,
		"layers":        []ocispec.Descriptor{},
	})

	tests := []struct {
		name      string
		mediaType string
		data      []byte
		want      string
	}{
		{"image index", ocispec.MediaTypeImageIndex, index, `not an OCI image manifest (media type "application/vnd.oci.image.index.v1+json"`},
		{"docker manifest", "application/vnd.docker.distribution.manifest.v2+json", docker, `not an OCI image manifest (media type "application/vnd.docker.distribution.manifest.v2+json"`},
		{"mediaType field", ocispec.MediaTypeImageManifest, mislabelled, `not an OCI image manifest (mediaType "application/vnd.oci.image.index.v1+json"`},
		{"schema version", ocispec.MediaTypeImageManifest, oldSchema, `not an OCI image manifest (schemaVersion 1, want 2)`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ref := reg.pushManifest(t, tt.mediaType, tt.data)
			_, err := Pull(context.Background(), ref, plain())
			wantError(t, err, tt.want, ref.String())
		})
	}
}

// substitute answers requests for path with body instead of the real
// content, as a broken or hostile registry (or a man in the middle) could.
// With claim set, the response claims to be the digest that was asked for.
func substitute(path, mediaType string, body []byte, claim string) middleware {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path != path || (r.Method != http.MethodGet && r.Method != http.MethodHead) {
				next.ServeHTTP(w, r)
				return
			}
			w.Header().Set("Content-Type", mediaType)
			w.Header().Set("Content-Length", fmt.Sprint(len(body)))
			if claim != "" {
				w.Header().Set("Docker-Content-Digest", claim)
			}
			w.WriteHeader(http.StatusOK)
			if r.Method == http.MethodGet {
				_, _ = w.Write(body)
			}
		})
	}
}

func TestPullVerifiesDigests(t *testing.T) {
	reg := newTestRegistry(t, nil)
	pinned := reg.push(t, file("a.sql", "SELECT 'pinned';"))
	other := reg.push(t, file("a.sql", "SELECT 'other!';")) // same length
	_, otherBytes, err := oras.FetchBytes(context.Background(), reg.repo(t), other.Digest, oras.DefaultFetchBytesOptions)
	if err != nil {
		t.Fatal(err)
	}

	manifestPath := "/v2/" + testRepo + "/manifests/" + pinned.Digest
	layerDigest := digest.FromString("SELECT 'pinned';").String()
	layerPath := "/v2/" + testRepo + "/blobs/" + layerDigest

	tests := []struct {
		name string
		wrap middleware
		want string
	}{
		{"manifest swapped, digest header kept", substitute(manifestPath, ocispec.MediaTypeImageManifest, otherBytes, pinned.Digest), "manifest content does not match its digest"},
		{"manifest swapped, digest header dropped", substitute(manifestPath, ocispec.MediaTypeImageManifest, otherBytes, ""), "digest mismatch"},
		{"layer swapped, digest header kept", substitute(layerPath, "application/octet-stream", []byte("SELECT 'other!';"), layerDigest), `file "a.sql"`},
		{"layer swapped, digest header dropped", substitute(layerPath, "application/octet-stream", []byte("SELECT 'other!';"), ""), "mismatched digest"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			reg.setWrap(tt.wrap)
			defer reg.setWrap(nil)
			files, err := Pull(context.Background(), pinned, plain())
			if err == nil {
				t.Fatalf("Pull = %q, want an error", files)
			}
			wantError(t, err, tt.want)
		})
	}

	// Unwrapped, the same registry gives the pinned content.
	files, err := Pull(context.Background(), pinned, plain())
	if err != nil {
		t.Fatalf("Pull: %v", err)
	}
	checkFiles(t, files, File{"a.sql", []byte("SELECT 'pinned';")})
}

// basicAuth requires user and password. With echo set, the 401 answer
// repeats the Authorization header it was given, as a careless registry
// might, to check that Pull keeps secrets out of its errors anyway.
func basicAuth(user, pass string, echo bool) middleware {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			u, p, ok := r.BasicAuth()
			if ok && u == user && p == pass {
				next.ServeHTTP(w, r)
				return
			}
			w.Header().Set("WWW-Authenticate", `Basic realm="test"`)
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusUnauthorized)
			msg := "authentication required"
			if echo {
				raw, _ := base64.StdEncoding.DecodeString(strings.TrimPrefix(r.Header.Get("Authorization"), "Basic "))
				msg = fmt.Sprintf("bad credentials %q (%s)", r.Header.Get("Authorization"), raw)
			}
			_ = json.NewEncoder(w).Encode(map[string]any{
				"errors": []map[string]string{{"code": "UNAUTHORIZED", "message": msg}},
			})
		})
	}
}

func TestPullAuthentication(t *testing.T) {
	const user, pass = "robot", "correct-horse-battery"
	for _, echo := range []bool{false, true} {
		t.Run(fmt.Sprintf("echo=%v", echo), func(t *testing.T) {
			reg := newTestRegistry(t, basicAuth(user, pass, echo))
			reg.creds = &Credentials{user, pass}
			ref := reg.push(t, file("a.sql", "SELECT 1;"))

			t.Run("right credentials", func(t *testing.T) {
				files, err := Pull(context.Background(), ref, Options{PlainHTTP: true, Credentials: &Credentials{user, pass}})
				if err != nil {
					t.Fatalf("Pull: %v", err)
				}
				checkFiles(t, files, File{"a.sql", []byte("SELECT 1;")})
			})

			tests := []struct {
				name  string
				creds *Credentials
			}{
				{"no credentials", nil},
				{"wrong password", &Credentials{user, "wrong-staple-guess"}},
				{"wrong user", &Credentials{"intruder", pass}},
			}
			for _, tt := range tests {
				t.Run(tt.name, func(t *testing.T) {
					_, err := Pull(context.Background(), ref, Options{PlainHTTP: true, Credentials: tt.creds})
					wantError(t, err, "authentication failed", reg.host)
					secrets := []string{pass, user + ":" + pass, b64(user + ":" + pass)}
					if tt.creds != nil {
						pair := tt.creds.Username + ":" + tt.creds.Password
						secrets = append(secrets, tt.creds.Password, pair, b64(pair))
					}
					for _, s := range secrets {
						if strings.Contains(err.Error(), s) {
							t.Errorf("error %q contains the secret %q", err, s)
						}
					}
				})
			}
		})
	}
}

func TestPullPlainHTTPNeedsLoopback(t *testing.T) {
	for _, host := range []string{
		"registry.example.com",
		"registry.example.com:5000",
		"192.0.2.1:5000",
		"[2001:db8::1]:5000",
		"127.0.0.1.example.com",
		"localhost.example.com:5000",
	} {
		t.Run(host, func(t *testing.T) {
			// If the check were missing, Pull would try to connect; the
			// deadline keeps such a failure short.
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			ref := Ref{Registry: host, Repository: testRepo, Digest: dgA}
			_, err := Pull(ctx, ref, Options{PlainHTTP: true})
			wantError(t, err, "plain HTTP is only allowed to a loopback registry", host)
		})
	}
}

func TestIsLoopback(t *testing.T) {
	tests := []struct {
		host string
		want bool
	}{
		{"127.0.0.1", true},
		{"127.0.0.1:5000", true},
		{"127.8.9.10:443", true},
		{"[::1]:5000", true},
		{"::1", true},
		{"localhost", true},
		{"LOCALHOST:5000", true},
		{"10.0.0.1:5000", false},
		{"[::2]:5000", false},
		{"localhost.example.com", false},
		{"127.0.0.1.nip.io", false},
		{"ghcr.io", false},
	}
	for _, tt := range tests {
		if got := IsLoopback(tt.host); got != tt.want {
			t.Errorf("IsLoopback(%q) = %v, want %v", tt.host, got, tt.want)
		}
	}
}

func TestPullRefusesHalfCredentials(t *testing.T) {
	ref := Ref{Registry: "127.0.0.1:1", Repository: testRepo, Digest: dgA}
	for _, c := range []*Credentials{{"user", ""}, {"", "secret-pw"}} {
		_, err := Pull(context.Background(), ref, Options{PlainHTTP: true, Credentials: c})
		wantError(t, err, "need both a username and a password")
		if strings.Contains(err.Error(), "secret-pw") {
			t.Errorf("error %q contains the password", err)
		}
	}
}
