package oci

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
)

// Credentials are the username and password used to log in to a registry.
// A nil *Credentials means anonymous access.
type Credentials struct {
	// Username is the registry user name.
	Username string
	// Password is the registry password or access token.
	Password string
}

// dockerConfig is the part of a ".dockerconfigjson" value that is read.
type dockerConfig struct {
	Auths map[string]dockerAuth `json:"auths"`
}

// dockerAuth is one entry of the "auths" map of a ".dockerconfigjson" value.
type dockerAuth struct {
	Username string `json:"username"`
	Password string `json:"password"`
	Auth     string `json:"auth"`
}

// CredentialsFromDockerConfig reads the ".dockerconfigjson" value of a
// kubernetes.io/dockerconfigjson Secret and returns the credentials it holds
// for registry (a host with an optional port, as in Ref.Registry).
//
// The entry is auths[registry]; a key written as a URL, such as
// "https://registry/" or "https://registry/v1/", matches too. The entry's
// "username" and "password" are used when both are set, otherwise its "auth"
// field, the base64 encoding of "user:password". When no entry matches, or the
// entry has no usable username and password, the error names the registry.
// Errors never contain a secret value.
func CredentialsFromDockerConfig(data []byte, registry string) (*Credentials, error) {
	var cfg dockerConfig
	if err := json.Unmarshal(data, &cfg); err != nil {
		// The decoder's message can quote parts of the input; only the
		// offset of a syntax error is passed on.
		var syntax *json.SyntaxError
		if errors.As(err, &syntax) {
			return nil, fmt.Errorf("docker config: not valid JSON (syntax error at byte %d)", syntax.Offset)
		}
		return nil, errors.New(`docker config: not a .dockerconfigjson document (want {"auths": {"REGISTRY": {...}}})`)
	}
	if cfg.Auths == nil {
		return nil, errors.New(`docker config: no "auths" object`)
	}

	entry, ok := cfg.Auths[registry]
	if !ok {
		// Sorted, so that the same document always gives the same answer.
		for _, key := range slices.Sorted(maps.Keys(cfg.Auths)) {
			if configKeyHost(key) == registry {
				entry, ok = cfg.Auths[key], true
				break
			}
		}
	}
	if !ok {
		return nil, fmt.Errorf("docker config: no credentials for registry %q", registry)
	}

	if entry.Username != "" && entry.Password != "" {
		return &Credentials{Username: entry.Username, Password: entry.Password}, nil
	}
	if entry.Auth == "" {
		return nil, fmt.Errorf("docker config: the entry for registry %q has neither username and password nor auth", registry)
	}
	decoded, err := base64.StdEncoding.DecodeString(entry.Auth)
	if err != nil {
		return nil, fmt.Errorf("docker config: the auth field for registry %q is not valid base64", registry)
	}
	user, pass, found := strings.Cut(string(decoded), ":")
	if !found || user == "" || pass == "" {
		return nil, fmt.Errorf(`docker config: the auth field for registry %q does not decode to "username:password"`, registry)
	}
	return &Credentials{Username: user, Password: pass}, nil
}

// configKeyHost returns the host[:port] of an "auths" key, which docker
// tools sometimes write as a URL ("https://host/v1/").
func configKeyHost(key string) string {
	if _, after, found := strings.Cut(key, "://"); found {
		key = after
	}
	host, _, _ := strings.Cut(key, "/")
	return host
}
