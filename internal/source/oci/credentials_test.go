package oci

import (
	"encoding/base64"
	"strings"
	"testing"
)

func b64(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }

func TestCredentialsFromDockerConfig(t *testing.T) {
	tests := []struct {
		name     string
		config   string
		registry string
		want     Credentials
	}{
		{
			name:     "username and password",
			config:   `{"auths":{"ghcr.io":{"username":"alice","password":"pw-1"},"other.io":{"username":"bob","password":"pw-2"}}}`,
			registry: "ghcr.io",
			want:     Credentials{"alice", "pw-1"},
		},
		{
			name:     "auth field",
			config:   `{"auths":{"ghcr.io":{"auth":"` + b64("alice:pw:with:colons") + `"}}}`,
			registry: "ghcr.io",
			want:     Credentials{"alice", "pw:with:colons"},
		},
		{
			name:     "username and password win over auth",
			config:   `{"auths":{"ghcr.io":{"username":"alice","password":"pw-1","auth":"` + b64("mallory:other") + `"}}}`,
			registry: "ghcr.io",
			want:     Credentials{"alice", "pw-1"},
		},
		{
			name:     "registry with port",
			config:   `{"auths":{"127.0.0.1:5000":{"username":"alice","password":"pw-1"},"127.0.0.1":{"username":"bob","password":"pw-2"}}}`,
			registry: "127.0.0.1:5000",
			want:     Credentials{"alice", "pw-1"},
		},
		{
			name:     "key written as a URL",
			config:   `{"auths":{"https://registry.example.com/v1/":{"auth":"` + b64("alice:pw-1") + `"}}}`,
			registry: "registry.example.com",
			want:     Credentials{"alice", "pw-1"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := CredentialsFromDockerConfig([]byte(tt.config), tt.registry)
			if err != nil {
				t.Fatalf("CredentialsFromDockerConfig: %v", err)
			}
			if *got != tt.want {
				t.Fatalf("got %+v, want %+v", *got, tt.want)
			}
		})
	}
}

func TestCredentialsFromDockerConfigRefuses(t *testing.T) {
	// Every secret value used below; none may appear in an error.
	secrets := []string{"pw-1", "pw-2", b64("alice:pw-1"), "alice:pw-1", "alicepw1"}
	tests := []struct {
		name     string
		config   string
		registry string
		want     string
	}{
		{
			name:     "missing registry",
			config:   `{"auths":{"ghcr.io":{"username":"alice","password":"pw-1"},"quay.io":{"auth":"` + b64("alice:pw-1") + `"}}}`,
			registry: "registry.example.com",
			want:     `no credentials for registry "registry.example.com"`,
		},
		{
			name:     "same host, other port",
			config:   `{"auths":{"127.0.0.1:5000":{"username":"alice","password":"pw-1"}}}`,
			registry: "127.0.0.1:5001",
			want:     `no credentials for registry "127.0.0.1:5001"`,
		},
		{
			name:     "no auths",
			config:   `{"ghcr.io":{"username":"alice","password":"pw-1"}}`,
			registry: "ghcr.io",
			want:     `no "auths" object`,
		},
		{
			name:     "not JSON",
			config:   `{"auths":{"ghcr.io":{"password":pw-1}}}`,
			registry: "ghcr.io",
			want:     "not valid JSON",
		},
		{
			name:     "wrong shape",
			config:   `{"auths":{"ghcr.io":{"password":["pw-1"]}}}`,
			registry: "ghcr.io",
			want:     "not a .dockerconfigjson document",
		},
		{
			name:     "auth not base64",
			config:   `{"auths":{"ghcr.io":{"auth":"alice:pw-1"}}}`,
			registry: "ghcr.io",
			want:     `auth field for registry "ghcr.io" is not valid base64`,
		},
		{
			name:     "auth without colon",
			config:   `{"auths":{"ghcr.io":{"auth":"` + b64("alicepw1") + `"}}}`,
			registry: "ghcr.io",
			want:     `does not decode to "username:password"`,
		},
		{
			name:     "password only",
			config:   `{"auths":{"ghcr.io":{"password":"pw-1"}}}`,
			registry: "ghcr.io",
			want:     `entry for registry "ghcr.io" has neither username and password nor auth`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := CredentialsFromDockerConfig([]byte(tt.config), tt.registry)
			if err == nil {
				t.Fatalf("got %+v, want an error", got)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %q does not say %q", err, tt.want)
			}
			for _, s := range secrets {
				if strings.Contains(err.Error(), s) {
					t.Errorf("error %q contains the secret %q", err, s)
				}
			}
		})
	}
}
