package oci

import (
	"errors"
	"fmt"
	"strings"

	"oras.land/oras-go/v2/registry"
)

// scheme is the prefix every reference starts with.
const scheme = "oci://"

// expectedForm is shown in every ParseRef error so that the user sees what a
// good reference looks like.
const expectedForm = "oci://REGISTRY/REPOSITORY@sha256:<64 lowercase hex digits>"

// digestPrefix is the only digest algorithm a reference may use.
const digestPrefix = "sha256:"

// Ref is a parsed reference of the form "oci://REGISTRY/REPOSITORY@sha256:HEX".
// A Ref always names its artifact by digest, never by tag, so what it names
// cannot change after the fact.
type Ref struct {
	// Registry is the registry host, with an optional port, such as
	// "ghcr.io" or "127.0.0.1:5000".
	Registry string
	// Repository is the repository path inside the registry, such as
	// "acme/schemas".
	Repository string
	// Digest is the manifest digest, "sha256:" followed by 64 lowercase hex
	// digits.
	Digest string
}

// ParseRef parses s as "oci://REGISTRY/REPOSITORY@sha256:HEX".
//
// It refuses a reference without the oci:// scheme, one with a tag instead
// of or beside the digest, a digest that is not sha256 with 64 lowercase hex
// digits, and an empty or malformed registry or repository. The error says
// what is wrong and shows the expected form.
func ParseRef(s string) (Ref, error) {
	rest, ok := strings.CutPrefix(s, scheme)
	if !ok {
		if i := strings.Index(s, "://"); i >= 0 {
			return Ref{}, refError(s, fmt.Sprintf("scheme %q is not supported, the reference must start with %q", s[:i+3], scheme))
		}
		return Ref{}, refError(s, fmt.Sprintf("missing %q scheme", scheme))
	}

	regPart, path, _ := strings.Cut(rest, "/")
	if _, after, found := strings.Cut(regPart, "@"); found && path == "" && strings.HasPrefix(after, digestPrefix) {
		// "oci://REGISTRY@sha256:...": the repository was left out.
		return Ref{}, refError(s, "empty repository")
	}
	if strings.Contains(regPart, "@") || strings.Count(rest, "@") > 1 {
		// Most likely "user:password@host/...". Do not echo the reference:
		// it may hold a secret.
		return Ref{}, fmt.Errorf("invalid OCI reference: more than one %q, or %q in the registry (credentials do not belong in a reference); expected %s", "@", "@", expectedForm)
	}
	if regPart == "" {
		return Ref{}, refError(s, "empty registry")
	}
	if path == "" {
		return Ref{}, refError(s, "empty repository")
	}

	name, dgst, hasDigest := strings.Cut(path, "@")
	if !hasDigest {
		if _, tag, hasTag := strings.Cut(lastSegment(name), ":"); hasTag {
			return Ref{}, refError(s, fmt.Sprintf("tag %q instead of a digest; pin the artifact by digest", tag))
		}
		return Ref{}, refError(s, "missing digest")
	}
	if _, tag, hasTag := strings.Cut(lastSegment(name), ":"); hasTag {
		return Ref{}, refError(s, fmt.Sprintf("tag %q beside the digest; give the digest only", tag))
	}
	if name == "" {
		return Ref{}, refError(s, "empty repository")
	}
	if err := checkDigest(dgst); err != nil {
		return Ref{}, refError(s, err.Error())
	}

	ref := registry.Reference{Registry: regPart, Repository: name}
	if err := ref.ValidateRegistry(); err != nil {
		return Ref{}, refError(s, fmt.Sprintf("registry %q is not a valid host[:port]", regPart))
	}
	if err := ref.ValidateRepository(); err != nil {
		return Ref{}, refError(s, fmt.Sprintf("repository %q is not valid (lowercase letters, digits and separators, path components joined by \"/\")", name))
	}
	return Ref{Registry: regPart, Repository: name, Digest: dgst}, nil
}

// String returns the reference in the form ParseRef accepts.
func (r Ref) String() string {
	return scheme + r.Registry + "/" + r.Repository + "@" + r.Digest
}

// checkDigest checks that d is "sha256:" followed by 64 lowercase hex digits.
func checkDigest(d string) error {
	if d == "" {
		return errors.New("empty digest")
	}
	hex, ok := strings.CutPrefix(d, digestPrefix)
	if !ok {
		algo, _, found := strings.Cut(d, ":")
		if !found || algo == "" {
			return fmt.Errorf("digest %q has no algorithm, only sha256 is accepted", d)
		}
		return fmt.Errorf("digest algorithm %q is not supported, only sha256 is accepted", algo)
	}
	if len(hex) != 64 {
		return fmt.Errorf("sha256 digest has %d hex digits, want 64", len(hex))
	}
	for _, c := range hex {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return fmt.Errorf("sha256 digest contains %q, only lowercase hex digits are allowed", c)
		}
	}
	return nil
}

// lastSegment returns the part of a repository path after its last "/".
func lastSegment(name string) string {
	return name[strings.LastIndex(name, "/")+1:]
}

// refError builds a ParseRef error that quotes the input, says what is wrong
// and shows the expected form.
func refError(s, reason string) error {
	return fmt.Errorf("invalid OCI reference %q: %s; expected %s", s, reason, expectedForm)
}
