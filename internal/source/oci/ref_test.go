package oci

import (
	"strings"
	"testing"
)

const (
	hexA = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	dgA  = "sha256:" + hexA
)

func TestParseRefAccepts(t *testing.T) {
	tests := []struct {
		in   string
		want Ref
	}{
		{"oci://ghcr.io/acme/schemas@" + dgA, Ref{"ghcr.io", "acme/schemas", dgA}},
		{"oci://registry.example.com:5000/a/b/c@" + dgA, Ref{"registry.example.com:5000", "a/b/c", dgA}},
		{"oci://127.0.0.1:5000/x@" + dgA, Ref{"127.0.0.1:5000", "x", dgA}},
		{"oci://localhost/my-app_sql.v2@" + dgA, Ref{"localhost", "my-app_sql.v2", dgA}},
		{"oci://[::1]:5000/x@" + dgA, Ref{"[::1]:5000", "x", dgA}},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := ParseRef(tt.in)
			if err != nil {
				t.Fatalf("ParseRef: %v", err)
			}
			if got != tt.want {
				t.Fatalf("ParseRef = %#v, want %#v", got, tt.want)
			}
			if s := got.String(); s != tt.in {
				t.Fatalf("String() = %q, want %q", s, tt.in)
			}
		})
	}
}

func TestParseRefRefuses(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want string // part of the error message
	}{
		{"missing scheme", "ghcr.io/acme/x@" + dgA, `missing "oci://" scheme`},
		{"other scheme", "https://ghcr.io/acme/x@" + dgA, `scheme "https://" is not supported`},
		{"upper-case scheme", "OCI://ghcr.io/acme/x@" + dgA, `scheme "OCI://" is not supported`},
		{"tag instead of digest", "oci://ghcr.io/acme/x:v1.2", `tag "v1.2" instead of a digest`},
		{"tag beside digest", "oci://ghcr.io/acme/x:v1@" + dgA, `tag "v1" beside the digest`},
		{"tag with port", "oci://localhost:5000/x:latest", `tag "latest" instead of a digest`},
		{"no tag, no digest", "oci://ghcr.io/acme/x", "missing digest"},
		{"empty digest", "oci://ghcr.io/acme/x@", "empty digest"},
		{"sha512", "oci://ghcr.io/acme/x@sha512:" + hexA + hexA, `digest algorithm "sha512" is not supported`},
		{"no algorithm", "oci://ghcr.io/acme/x@" + hexA, "has no algorithm"},
		{"upper-case hex", "oci://ghcr.io/acme/x@sha256:" + strings.ToUpper(hexA), "only lowercase hex digits"},
		{"non-hex", "oci://ghcr.io/acme/x@sha256:" + hexA[:63] + "g", "only lowercase hex digits"},
		{"short digest", "oci://ghcr.io/acme/x@sha256:" + hexA[:63], "has 63 hex digits, want 64"},
		{"long digest", "oci://ghcr.io/acme/x@sha256:" + hexA + "0", "has 65 hex digits, want 64"},
		{"empty repository", "oci://ghcr.io/@" + dgA, "empty repository"},
		{"no repository", "oci://ghcr.io@" + dgA, "empty repository"},
		{"registry only", "oci://ghcr.io", "empty repository"},
		{"empty registry", "oci:///acme/x@" + dgA, "empty registry"},
		{"bad repository", "oci://ghcr.io/Acme/x@" + dgA, `repository "Acme/x" is not valid`},
		{"bad registry", "oci://ghcr io/acme/x@" + dgA, `registry "ghcr io" is not a valid host[:port]`},
		{"two digests", "oci://ghcr.io/acme/x@" + dgA + "@" + dgA, `more than one "@"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ref, err := ParseRef(tt.in)
			if err == nil {
				t.Fatalf("ParseRef(%q) = %#v, want an error", tt.in, ref)
			}
			msg := err.Error()
			if !strings.Contains(msg, tt.want) {
				t.Errorf("error %q does not say %q", msg, tt.want)
			}
			if !strings.Contains(msg, expectedForm) {
				t.Errorf("error %q does not show the expected form", msg)
			}
		})
	}
}

func TestParseRefDoesNotEchoCredentials(t *testing.T) {
	for _, in := range []string{
		"oci://user:s3cret-pw@ghcr.io/acme/x@" + dgA,
		"oci://user:s3cret/pw@ghcr.io/acme/x@" + dgA,
		"oci://user:s3cret-pw@ghcr.io",
	} {
		_, err := ParseRef(in)
		if err == nil {
			t.Fatalf("ParseRef(%q) succeeded, want an error", in)
		}
		if strings.Contains(err.Error(), "s3cret") {
			t.Errorf("error for %q shows the password: %v", in, err)
		}
		if !strings.Contains(err.Error(), "credentials do not belong in a reference") {
			t.Errorf("error for %q does not say why: %v", in, err)
		}
	}
}
