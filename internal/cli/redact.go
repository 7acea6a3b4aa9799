package cli

import (
	"net/url"
	"regexp"
	"sort"
	"strings"
	"sync"
)

// redactor removes connection URLs and passwords from anything ptah prints
// about a failure. The layers below are written not to include them, but an
// error text from a driver or server is outside ptah's control, and a leaked
// password in a CI log cannot be taken back, so the last step before
// printing checks again.
type redactor struct {
	mu      sync.Mutex
	secrets []string
}

const redacted = "[REDACTED]"

var dsnPassword = regexp.MustCompile(`password\s*=\s*('(?:[^'\\]|\\.)*'|\S+)`)

// addURL registers a connection string (URL or key=value form) whose full
// text and password must never be printed.
func (r *redactor) addURL(conn string) {
	if conn == "" {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.secrets = append(r.secrets, conn)
	if u, err := url.Parse(conn); err == nil {
		if u.User != nil {
			if pw, ok := u.User.Password(); ok && pw != "" {
				r.secrets = append(r.secrets, pw, url.QueryEscape(pw), url.PathEscape(pw))
			}
		}
		// libpq also takes the password as a query parameter.
		if pw := u.Query().Get("password"); pw != "" {
			r.secrets = append(r.secrets, pw, url.QueryEscape(pw))
		}
	}
	for _, m := range dsnPassword.FindAllStringSubmatch(conn, -1) {
		if pw := strings.Trim(m[1], "'"); pw != "" {
			r.secrets = append(r.secrets, pw)
		}
	}
	// Longest first, so a URL is replaced whole before its password is.
	sort.Slice(r.secrets, func(i, j int) bool { return len(r.secrets[i]) > len(r.secrets[j]) })
}

func (r *redactor) redact(s string) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, secret := range r.secrets {
		s = strings.ReplaceAll(s, secret, redacted)
	}
	return s
}
