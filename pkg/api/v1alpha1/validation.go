package v1alpha1

import (
	"fmt"
	"regexp"
	"strings"
	"time"
)

// FieldError is one invalid field, named by its path in the document
// (e.g. "spec.policy.apply"), so a person can find it in the YAML.
type FieldError struct {
	Field  string
	Detail string
}

func (e *FieldError) Error() string { return e.Field + ": " + e.Detail }

// FieldErrors is every problem Validate found: reporting all of them at once
// saves a fix-and-rerun round per field.
type FieldErrors []*FieldError

func (l FieldErrors) Error() string {
	msgs := make([]string, len(l))
	for i, e := range l {
		msgs[i] = e.Error()
	}
	return strings.Join(msgs, "\n")
}

// ManagedSchemaReserved is ptah's own schema, which holds its durable state
// and must never be planned against.
const ManagedSchemaReserved = "ptah"

// maxIdentifierBytes is PostgreSQL's NAMEDATALEN-1: longer names are
// silently truncated by the server, so they could never match.
const maxIdentifierBytes = 63

var (
	// dns1123Subdomain is the rule Kubernetes applies to resource names; ptah
	// applies it locally so a ptah.yaml is valid as custom resources too.
	dns1123Subdomain = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`)
	dns1123Label     = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)
	envVarName       = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
)

// Validate reports every invalid field of s. It expects a defaulted object
// (see Default) but accepts empty defaultable fields. It returns nil or a
// FieldErrors.
func (s *PtahSchema) Validate() error {
	var errs FieldErrors
	add := func(field, format string, args ...any) {
		errs = append(errs, &FieldError{Field: field, Detail: fmt.Sprintf(format, args...)})
	}

	if s.APIVersion != APIVersion {
		add("apiVersion", "%q is not %s", s.APIVersion, APIVersion)
	}
	if s.Kind != KindPtahSchema {
		add("kind", "%q is not %s", s.Kind, KindPtahSchema)
	}
	switch name := s.Name; {
	case name == "":
		add("metadata.name", "required")
	case len(name) > 253 || !dns1123Subdomain.MatchString(name):
		add("metadata.name", "%q must be lowercase letters, digits, '-' and '.', starting and ending with a letter or digit (at most 253 characters)", name)
	}
	if ns := s.Namespace; ns != "" && (len(ns) > 63 || !dns1123Label.MatchString(ns)) {
		add("metadata.namespace", "%q must be lowercase letters, digits and '-', starting and ending with a letter or digit (at most 63 characters)", ns)
	}

	t := s.Spec.Target
	if t.Engine != "" && t.Engine != EnginePostgres {
		add("spec.target.engine", "%q is not one of %s", t.Engine, EnginePostgres)
	}
	switch {
	case t.URL == "" && t.URLFrom == nil:
		add("spec.target", "one of url and urlFrom is required (prefer urlFrom: {env: NAME})")
	case t.URL != "" && t.URLFrom != nil:
		add("spec.target", "url and urlFrom are mutually exclusive")
	case t.URLFrom != nil:
		f := t.URLFrom
		switch {
		case f.Env == "" && f.File == "":
			add("spec.target.urlFrom", "one of env and file is required")
		case f.Env != "" && f.File != "":
			add("spec.target.urlFrom", "env and file are mutually exclusive")
		case f.Env != "" && !envVarName.MatchString(f.Env):
			add("spec.target.urlFrom.env", "%q is not a valid environment variable name", f.Env)
		}
	}

	if s.Spec.Source.Path == "" {
		add("spec.source.path", "required: a directory of .sql files")
	}

	seen := map[string]bool{}
	for i, name := range s.Spec.Schemas {
		field := fmt.Sprintf("spec.schemas[%d]", i)
		switch {
		case name == "":
			add(field, "empty schema name")
		case name == ManagedSchemaReserved:
			add(field, "%q holds ptah's own state and cannot be managed", name)
		case strings.HasPrefix(name, "pg_") || name == "information_schema":
			add(field, "%q is a system schema and cannot be managed", name)
		case len(name) > maxIdentifierBytes:
			add(field, "%q is longer than PostgreSQL's %d-byte identifier limit", name, maxIdentifierBytes)
		case seen[name]:
			add(field, "%q is listed twice", name)
		}
		seen[name] = true
	}

	p := s.Spec.Policy
	if p.Apply != "" && !validApply(p.Apply) {
		add("spec.policy.apply", "%q is not one of %s", p.Apply, joinPolicies())
	}
	if p.LockTimeout != "" {
		if d, err := time.ParseDuration(p.LockTimeout); err != nil {
			add("spec.policy.lockTimeout", "%q is not a duration such as 5s or 500ms", p.LockTimeout)
		} else if d < time.Millisecond {
			// PostgreSQL counts lock_timeout in milliseconds and takes 0 as
			// "wait forever", which is exactly what the setting prevents.
			add("spec.policy.lockTimeout", "%q must be at least 1ms", p.LockTimeout)
		}
	}

	if len(errs) == 0 {
		return nil
	}
	return errs
}

// LockTimeoutDuration returns the parsed policy.lockTimeout, or the default
// when it is empty. Call it on a validated object.
func (p Policy) LockTimeoutDuration() time.Duration {
	s := p.LockTimeout
	if s == "" {
		s = DefaultLockTimeout
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		d, _ = time.ParseDuration(DefaultLockTimeout)
	}
	return d
}

func validApply(a ApplyPolicy) bool {
	for _, p := range ApplyPolicies {
		if a == p {
			return true
		}
	}
	return false
}

func joinPolicies() string {
	parts := make([]string, len(ApplyPolicies))
	for i, p := range ApplyPolicies {
		parts[i] = string(p)
	}
	return strings.Join(parts, ", ")
}
