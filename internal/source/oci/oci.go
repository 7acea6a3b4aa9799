// Package oci pulls the SQL files of a resource from an OCI artifact in a
// container registry.
//
// The artifact is named by an oci:// reference pinned by digest (see
// ParseRef). Its manifest must be an OCI image manifest; each layer is one
// file, named by the layer's "org.opencontainers.image.title" annotation, the
// way "oras push" stores files. Everything fetched is checked against the
// digest that names it, so a registry cannot substitute other content.
package oci

import (
	"cmp"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"unicode"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"oras.land/oras-go/v2/content"
	"oras.land/oras-go/v2/errdef"
	"oras.land/oras-go/v2/registry"
	"oras.land/oras-go/v2/registry/remote"
	"oras.land/oras-go/v2/registry/remote/auth"
	"oras.land/oras-go/v2/registry/remote/errcode"
	"oras.land/oras-go/v2/registry/remote/retry"
)

// DefaultMaxBytes is the limit on the total size of an artifact's files
// used when Options.MaxBytes is not set: 16 MiB.
const DefaultMaxBytes = 16 << 20

// maxManifestBytes bounds the size of the manifest itself.
const maxManifestBytes = 4 << 20

// userAgent is sent with every request to the registry.
const userAgent = "ptah"

// File is one file of an artifact.
type File struct {
	// Name is the file name, taken from the layer's
	// "org.opencontainers.image.title" annotation. It is a plain name: no
	// path separator, no "..", no leading dot.
	Name string
	// Data is the file content, checked against the layer digest.
	Data []byte
}

// Options change how Pull talks to the registry.
type Options struct {
	// Credentials log in to the registry. Nil means anonymous access.
	Credentials *Credentials
	// PlainHTTP talks HTTP instead of HTTPS. It is refused unless the
	// registry host is a loopback address or "localhost"; it exists for
	// tests and local registries.
	PlainHTTP bool
	// MaxBytes bounds the total size of the files. Zero or less means
	// DefaultMaxBytes. An artifact whose layers add up to more is refused
	// from its manifest, before any layer is downloaded.
	MaxBytes int64
}

// Pull fetches the manifest that ref names, by its digest, and returns one
// File per layer, sorted by name.
//
// The manifest and every layer are checked against their digests: content
// that does not hash to the digest it was asked for is refused. Pull also
// refuses, with an error naming the layer or file:
//   - a manifest that is not an OCI image manifest (an index, a Docker
//     manifest, ...);
//   - a layer without an "org.opencontainers.image.title" annotation;
//   - a title with a path separator, "..", a leading dot or a control
//     character;
//   - two layers with the same title;
//   - layers whose sizes add up to more than Options.MaxBytes.
//
// A failed login gives an error that says authentication failed. Errors
// never contain the password.
func Pull(ctx context.Context, ref Ref, opts Options) ([]File, error) {
	files, err := pull(ctx, ref, opts)
	if err != nil {
		return nil, redact(err, opts.Credentials)
	}
	return files, nil
}

// pull does the work of Pull; its errors are redacted by Pull.
func pull(ctx context.Context, ref Ref, opts Options) ([]File, error) {
	// A Ref may be built by hand: check it the way ParseRef would.
	if _, err := ParseRef(ref.String()); err != nil {
		return nil, err
	}
	maxBytes := opts.MaxBytes
	if maxBytes <= 0 {
		maxBytes = DefaultMaxBytes
	}
	if opts.PlainHTTP && !IsLoopback(ref.Registry) {
		return nil, fmt.Errorf("%s: plain HTTP is only allowed to a loopback registry (127.0.0.1, ::1, localhost), not %q", ref, ref.Registry)
	}
	if c := opts.Credentials; c != nil && (c.Username == "" || c.Password == "") {
		return nil, fmt.Errorf("%s: credentials for registry %q need both a username and a password", ref, ref.Registry)
	}

	repo := newRepository(ref, opts)
	manifest, err := fetchManifest(ctx, repo, ref)
	if err != nil {
		return nil, err
	}
	layers, err := checkLayers(ref, manifest.Layers, maxBytes)
	if err != nil {
		return nil, err
	}

	files := make([]File, 0, len(layers))
	for _, l := range layers {
		data, err := fetchLayer(ctx, repo, ref, l)
		if err != nil {
			return nil, err
		}
		files = append(files, File{Name: l.title, Data: data})
	}
	slices.SortFunc(files, func(a, b File) int { return cmp.Compare(a.Name, b.Name) })
	return files, nil
}

// newRepository returns a client for the repository ref names.
func newRepository(ref Ref, opts Options) *remote.Repository {
	client := &auth.Client{
		Client: retry.DefaultClient,
		Cache:  auth.NewCache(),
		Header: http.Header{"User-Agent": {userAgent}},
	}
	if c := opts.Credentials; c != nil {
		client.Credential = auth.StaticCredential(ref.Registry, auth.Credential{
			Username: c.Username,
			Password: c.Password,
		})
	}
	return &remote.Repository{
		Client: client,
		Reference: registry.Reference{
			Registry:   ref.Registry,
			Repository: ref.Repository,
			Reference:  ref.Digest,
		},
		PlainHTTP: opts.PlainHTTP,
	}
}

// fetchManifest fetches the manifest by its digest, checks that the bytes
// hash to that digest and that it is an OCI image manifest, and decodes it.
func fetchManifest(ctx context.Context, repo *remote.Repository, ref Ref) (ocispec.Manifest, error) {
	var m ocispec.Manifest
	desc, rc, err := repo.Manifests().FetchReference(ctx, ref.Digest)
	if err != nil {
		return m, fetchError(ref, "manifest "+ref.Digest, err)
	}
	defer rc.Close()

	// The descriptor comes from the response headers; ReadAll below checks
	// the body against it, and this check ties it to the pinned digest.
	if desc.Digest.String() != ref.Digest {
		return m, fmt.Errorf("%s: the registry answered with manifest %s instead", ref, desc.Digest)
	}
	if desc.MediaType != ocispec.MediaTypeImageManifest {
		return m, fmt.Errorf("%s: not an OCI image manifest (media type %q, want %q)", ref, desc.MediaType, ocispec.MediaTypeImageManifest)
	}
	if desc.Size > maxManifestBytes {
		return m, fmt.Errorf("%s: manifest is %d bytes, more than the limit of %d", ref, desc.Size, maxManifestBytes)
	}
	data, err := content.ReadAll(rc, desc)
	if err != nil {
		return m, fmt.Errorf("%s: manifest content does not match its digest: %w", ref, err)
	}
	// ReadAll has verified data against desc.Digest, which is ref.Digest;
	// checking again costs little and does not depend on that.
	if got := digest.FromBytes(data); got.String() != ref.Digest {
		return m, fmt.Errorf("%s: manifest content hashes to %s, not to the pinned digest", ref, got)
	}

	if err := json.Unmarshal(data, &m); err != nil {
		return m, fmt.Errorf("%s: manifest is not valid JSON: %w", ref, err)
	}
	if m.SchemaVersion != 2 {
		return m, fmt.Errorf("%s: not an OCI image manifest (schemaVersion %d, want 2)", ref, m.SchemaVersion)
	}
	if m.MediaType != "" && m.MediaType != ocispec.MediaTypeImageManifest {
		return m, fmt.Errorf("%s: not an OCI image manifest (mediaType %q, want %q)", ref, m.MediaType, ocispec.MediaTypeImageManifest)
	}
	return m, nil
}

// layer is a manifest layer that passed checkLayers.
type layer struct {
	title string
	desc  ocispec.Descriptor
}

// checkLayers checks titles, digests and sizes of all layers before any of
// them is downloaded.
func checkLayers(ref Ref, descs []ocispec.Descriptor, maxBytes int64) ([]layer, error) {
	layers := make([]layer, 0, len(descs))
	seen := make(map[string]int, len(descs))
	var total int64
	for i, d := range descs {
		title := d.Annotations[ocispec.AnnotationTitle]
		if title == "" {
			return nil, fmt.Errorf("%s: layer %d (%s) has no %q annotation naming its file", ref, i, d.Digest, ocispec.AnnotationTitle)
		}
		if err := checkTitle(title); err != nil {
			return nil, fmt.Errorf("%s: layer %d (%s): file name %q %v", ref, i, d.Digest, title, err)
		}
		if j, dup := seen[title]; dup {
			return nil, fmt.Errorf("%s: layers %d and %d are both named %q", ref, j, i, title)
		}
		seen[title] = i
		if err := d.Digest.Validate(); err != nil {
			return nil, fmt.Errorf("%s: layer %d (file %q) has an invalid digest %q: %w", ref, i, title, d.Digest, err)
		}
		if d.Size < 0 {
			return nil, fmt.Errorf("%s: layer %d (file %q) has a negative size %d", ref, i, title, d.Size)
		}
		if d.Size > maxBytes-total {
			return nil, fmt.Errorf("%s: the files add up to more than the limit of %d bytes (file %q, layer %d, of %d bytes, goes over it)", ref, maxBytes, title, i, d.Size)
		}
		total += d.Size
		layers = append(layers, layer{title: title, desc: d})
	}
	return layers, nil
}

// checkTitle says what is wrong with a file name taken from a layer title,
// or returns nil.
func checkTitle(title string) error {
	switch {
	case strings.ContainsAny(title, `/\`):
		return errors.New("contains a path separator")
	case strings.Contains(title, ".."):
		return errors.New(`contains ".."`)
	case strings.HasPrefix(title, "."):
		return errors.New("starts with a dot")
	case strings.ContainsFunc(title, unicode.IsControl):
		return errors.New("contains a control character")
	}
	return nil
}

// fetchLayer downloads one layer and checks it against its size and digest.
func fetchLayer(ctx context.Context, repo *remote.Repository, ref Ref, l layer) ([]byte, error) {
	what := fmt.Sprintf("file %q (layer %s)", l.title, l.desc.Digest)
	rc, err := repo.Blobs().Fetch(ctx, l.desc)
	if err != nil {
		return nil, fetchError(ref, what, err)
	}
	defer rc.Close()
	// ReadAll reads at most the declared size (plus one byte to detect
	// trailing data) and checks the digest.
	data, err := content.ReadAll(rc, l.desc)
	if err != nil {
		return nil, fmt.Errorf("%s: %s: content does not match its descriptor: %w", ref, what, err)
	}
	return data, nil
}

// fetchError turns an error from the registry client into one that says
// plainly what went wrong with what.
func fetchError(ref Ref, what string, err error) error {
	var resp *errcode.ErrorResponse
	switch {
	case errors.Is(err, auth.ErrBasicCredentialNotFound):
		return fmt.Errorf("%s: authentication failed: registry %q requires credentials and none were given: %w", ref, ref.Registry, err)
	case errors.As(err, &resp) && resp.StatusCode == http.StatusUnauthorized:
		return fmt.Errorf("%s: authentication failed for registry %q (missing or wrong credentials): %w", ref, ref.Registry, err)
	case errors.As(err, &resp) && resp.StatusCode == http.StatusForbidden:
		return fmt.Errorf("%s: access denied to repository %q on registry %q: %w", ref, ref.Repository, ref.Registry, err)
	case errors.Is(err, errdef.ErrNotFound):
		return fmt.Errorf("%s: %s: %w in %s/%s", ref, what, errdef.ErrNotFound, ref.Registry, ref.Repository)
	}
	return fmt.Errorf("%s: fetching %s: %w", ref, what, err)
}

// IsLoopback reports whether the host of a "host[:port]" registry is a
// loopback IP address or "localhost".
func IsLoopback(hostport string) bool {
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// redact removes the password, in the forms it travels in, from an error
// message. The registry client never puts it there as far as is known; this
// makes sure of it. When something is removed the error chain is dropped,
// since the wrapped errors still hold the secret.
func redact(err error, c *Credentials) error {
	if c == nil || c.Password == "" {
		return err
	}
	pair := c.Username + ":" + c.Password
	secrets := []string{
		base64.StdEncoding.EncodeToString([]byte(pair)),
		pair,
		url.QueryEscape(c.Password),
		url.PathEscape(c.Password),
		c.Password,
	}
	msg := err.Error()
	redacted := msg
	for _, s := range secrets {
		if s != "" {
			redacted = strings.ReplaceAll(redacted, s, "[redacted]")
		}
	}
	if redacted == msg {
		return err
	}
	return errors.New(redacted)
}
