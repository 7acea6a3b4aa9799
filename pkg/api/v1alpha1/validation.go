package v1alpha1

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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

// fieldErrors collects the problems of one object.
type fieldErrors struct{ list FieldErrors }

func (e *fieldErrors) add(field, format string, args ...any) {
	e.list = append(e.list, &FieldError{Field: field, Detail: fmt.Sprintf(format, args...)})
}

// err returns nil or the FieldErrors collected.
func (e *fieldErrors) err() error {
	if len(e.list) == 0 {
		return nil
	}
	return e.list
}

// Validate reports every invalid field of s. It expects a defaulted object
// (see Default) but accepts empty defaultable fields. It returns nil or a
// FieldErrors.
func (s *PtahSchema) Validate() error {
	var errs fieldErrors
	errs.object(s.TypeMeta, s.ObjectMeta, KindPtahSchema)
	errs.target(s.Spec.Target)

	errs.source(s.Spec.Source.Path, s.Spec.Source.ConfigMap, s.Spec.Source.OCI, "a directory of .sql files")
	errs.schedule(s.Spec.Schedule)

	seen := map[string]bool{}
	for i, name := range s.Spec.Schemas {
		field := fmt.Sprintf("spec.schemas[%d]", i)
		switch {
		case name == "":
			errs.add(field, "empty schema name")
		case name == ManagedSchemaReserved:
			errs.add(field, "%q holds ptah's own state and cannot be managed", name)
		case strings.HasPrefix(name, "pg_") || name == "information_schema":
			errs.add(field, "%q is a system schema and cannot be managed", name)
		case len(name) > maxIdentifierBytes:
			errs.add(field, "%q is longer than PostgreSQL's %d-byte identifier limit", name, maxIdentifierBytes)
		case seen[name]:
			errs.add(field, "%q is listed twice", name)
		}
		seen[name] = true
	}

	errs.policy(s.Spec.Policy.Apply, s.Spec.Policy.LockTimeout)
	errs.duration("spec.policy.lockAttemptTimeout", s.Spec.Policy.LockAttemptTimeout)
	errs.duration("spec.policy.statementTimeout", s.Spec.Policy.StatementTimeout)
	if p := s.Spec.Privileges; p != "" && !slices.Contains(PrivilegesModes, p) {
		errs.add("spec.privileges", "%q is not one of %s", p, joinStrings(PrivilegesModes))
	}
	return errs.err()
}

// Validate reports every invalid field of m, as PtahSchema.Validate does.
func (m *PtahMigration) Validate() error {
	var errs fieldErrors
	errs.object(m.TypeMeta, m.ObjectMeta, KindPtahMigration)
	errs.target(m.Spec.Target)

	src := m.Spec.Source
	errs.source(src.Path, src.ConfigMap, src.OCI, "a directory of versioned .sql files")
	errs.schedule(m.Spec.Schedule)
	if src.Layout != LayoutDetect && !slices.Contains(MigrationLayouts, src.Layout) {
		errs.add("spec.source.layout", "%q is not one of %s; leave it out to detect the layout from the file names",
			src.Layout, joinStrings(MigrationLayouts))
	}

	errs.policy(m.Spec.Policy.Apply, m.Spec.Policy.LockTimeout)
	errs.duration("spec.policy.lockAttemptTimeout", m.Spec.Policy.LockAttemptTimeout)
	errs.duration("spec.policy.statementTimeout", m.Spec.Policy.StatementTimeout)
	return errs.err()
}

// Validate reports every invalid field of a: it is written from what a
// person typed (ptah resolve-run, or the resource itself in a cluster), and
// settles nothing unless it names exactly one run.
func (a *PtahMigrationRunAcknowledgment) Validate() error {
	var errs fieldErrors
	errs.object(a.TypeMeta, a.ObjectMeta, KindPtahMigrationRunAcknowledgment)

	s := a.Spec
	if s.Migration.Name == "" {
		errs.add("spec.migration.name", "required: the PtahMigration whose run this settles")
	}
	if s.Migration.UID == "" {
		errs.add("spec.migration.uid", "required: an acknowledgment is bound to one instance of the migration, so a recreated one is not settled by it")
	}
	if s.OperationID == "" {
		errs.add("spec.operationID", "required: the operation ID of the unresolved run (ptah resolve-run NAME shows it)")
	}
	if strings.TrimSpace(s.By) == "" {
		errs.add("spec.by", "required: who settles the run")
	}
	if s.At.IsZero() {
		errs.add("spec.at", "required: when the run was settled")
	}
	if strings.TrimSpace(s.Reason) == "" {
		errs.add("spec.reason", "required: what established the run's outcome, for whoever reads the history next")
	}
	seen := map[string]bool{}
	for i, v := range s.MarkedApplied {
		field := fmt.Sprintf("spec.markedApplied[%d]", i)
		switch {
		case v.Version == "":
			errs.add(field+".version", "required")
		case seen[v.Version]:
			errs.add(field+".version", "%q is listed twice", v.Version)
		}
		seen[v.Version] = true
		if v.Checksum == "" {
			errs.add(field+".checksum", "required: the checksum of the file as it was applied")
		}
	}
	return errs.err()
}

// object checks what every kind's documents share: apiVersion, kind and
// metadata.
func (e *fieldErrors) object(tm metav1.TypeMeta, om metav1.ObjectMeta, kind string) {
	if tm.APIVersion != APIVersion {
		e.add("apiVersion", "%q is not %s", tm.APIVersion, APIVersion)
	}
	if tm.Kind != kind {
		e.add("kind", "%q is not %s", tm.Kind, kind)
	}
	switch name := om.Name; {
	case name == "":
		e.add("metadata.name", "required")
	case len(name) > 253 || !dns1123Subdomain.MatchString(name):
		e.add("metadata.name", "%q must be lowercase letters, digits, '-' and '.', starting and ending with a letter or digit (at most 253 characters)", name)
	}
	if ns := om.Namespace; ns != "" && (len(ns) > 63 || !dns1123Label.MatchString(ns)) {
		e.add("metadata.namespace", "%q must be lowercase letters, digits and '-', starting and ending with a letter or digit (at most 63 characters)", ns)
	}
}

// target checks spec.target, the same for both families.
func (e *fieldErrors) target(t Target) {
	if t.Engine != "" && t.Engine != EnginePostgres {
		e.add("spec.target.engine", "%q is not one of %s", t.Engine, EnginePostgres)
	}
	switch {
	case t.URL == "" && t.URLFrom == nil:
		e.add("spec.target", "one of url and urlFrom is required (prefer urlFrom: {env: NAME})")
	case t.URL != "" && t.URLFrom != nil:
		e.add("spec.target", "url and urlFrom are mutually exclusive")
	case t.URLFrom != nil:
		f := t.URLFrom
		set := 0
		for _, s := range []bool{f.Env != "", f.File != "", f.SecretKeyRef != nil} {
			if s {
				set++
			}
		}
		switch {
		case set == 0:
			e.add("spec.target.urlFrom", "one of env, file and secretKeyRef is required")
		case set > 1:
			e.add("spec.target.urlFrom", "env, file and secretKeyRef are mutually exclusive")
		case f.Env != "" && !envVarName.MatchString(f.Env):
			e.add("spec.target.urlFrom.env", "%q is not a valid environment variable name", f.Env)
		case f.SecretKeyRef != nil && (f.SecretKeyRef.Name == "" || f.SecretKeyRef.Key == ""):
			e.add("spec.target.urlFrom.secretKeyRef", "both name and key are required")
		}
	}
}

// source checks that exactly one of spec.source's places is named.
func (e *fieldErrors) source(path string, cm *ConfigMapSource, oci *OCISource, what string) {
	set := 0
	for _, s := range []bool{path != "", cm != nil, oci != nil} {
		if s {
			set++
		}
	}
	switch {
	case set == 0:
		e.add("spec.source.path", "required: %s (or, for ptah serve, spec.source.configMap or spec.source.oci)", what)
	case set > 1:
		e.add("spec.source", "path, configMap and oci are mutually exclusive")
	case cm != nil && cm.Name == "":
		e.add("spec.source.configMap.name", "required: the ConfigMap whose keys are the files")
	case oci != nil && !ociRef.MatchString(oci.Ref):
		e.add("spec.source.oci.ref", "%q is not an artifact pinned by digest: write oci://REGISTRY/REPOSITORY@sha256:<64 hex digits> (a tag is not a version)", oci.Ref)
	}
}

// ociRef is an OCI reference pinned by a sha256 digest.
var ociRef = regexp.MustCompile(`^oci://[^@]+@sha256:[0-9a-f]{64}$`)

// MinInterval is the shortest spec.interval: a database is not observed
// more often than this.
const MinInterval = 30 * time.Second

// DefaultInterval is spec.interval when it is empty.
const DefaultInterval = 5 * time.Minute

func (e *fieldErrors) schedule(s Schedule) {
	if s.Interval == "" {
		return
	}
	d, err := time.ParseDuration(s.Interval)
	switch {
	case err != nil:
		e.add("spec.interval", "%q is not a duration (write it like 5m or 90s)", s.Interval)
	case d < MinInterval:
		e.add("spec.interval", "%s is shorter than the minimum %s", s.Interval, MinInterval)
	}
}

// IntervalDuration is the schedule's interval, DefaultInterval when empty
// or invalid (Validate reports the latter).
func (s Schedule) IntervalDuration() time.Duration {
	d, err := time.ParseDuration(s.Interval)
	if err != nil || d < MinInterval {
		return DefaultInterval
	}
	return d
}

// ClusterOnly lists the fields of spec that only ptah serve reads (a
// Secret, a ConfigMap): local mode refuses them by name.
func ClusterOnly(t Target, configMap *ConfigMapSource, oci *OCISource) []FieldError {
	var out []FieldError
	if t.URLFrom != nil && t.URLFrom.SecretKeyRef != nil {
		out = append(out, FieldError{Field: "spec.target.urlFrom.secretKeyRef",
			Detail: "a Secret is read by ptah serve in a cluster; from a file, use urlFrom.env or urlFrom.file"})
	}
	if configMap != nil {
		out = append(out, FieldError{Field: "spec.source.configMap",
			Detail: "a ConfigMap is read by ptah serve in a cluster; from a file, use spec.source.path"})
	}
	if oci != nil {
		out = append(out, FieldError{Field: "spec.source.oci",
			Detail: "an OCI artifact is read by ptah serve in a cluster; from a file, use spec.source.path"})
	}
	return out
}

// policy checks spec.policy.apply and spec.policy.lockTimeout, which both
// families' policies have.
func (e *fieldErrors) policy(apply ApplyPolicy, lockTimeout string) {
	if apply != "" && !slices.Contains(ApplyPolicies, apply) {
		e.add("spec.policy.apply", "%q is not one of %s", apply, joinStrings(ApplyPolicies))
	}
	if lockTimeout != "" {
		if d, err := time.ParseDuration(lockTimeout); err != nil {
			e.add("spec.policy.lockTimeout", "%q is not a duration such as 5s or 500ms", lockTimeout)
		} else if d < time.Millisecond {
			// PostgreSQL counts lock_timeout in milliseconds and takes 0 as
			// "wait forever", which is exactly what the setting prevents.
			e.add("spec.policy.lockTimeout", "%q must be at least 1ms", lockTimeout)
		}
	}
}

// duration checks an optional duration field: PostgreSQL counts its
// timeouts in milliseconds, and takes 0 as none.
func (e *fieldErrors) duration(field, value string) {
	if value == "" {
		return
	}
	if d, err := time.ParseDuration(value); err != nil {
		e.add(field, "%q is not a duration such as 5s or 500ms", value)
	} else if d < time.Millisecond {
		e.add(field, "%q must be at least 1ms; leave it out for the default", value)
	}
}

// LockTimeoutDuration returns the parsed policy.lockTimeout, or the default
// when it is empty. Call it on a validated object.
func (p Policy) LockTimeoutDuration() time.Duration { return lockTimeoutDuration(p.LockTimeout) }

// LockTimeoutDuration is Policy.LockTimeoutDuration for a migration.
func (p MigrationPolicy) LockTimeoutDuration() time.Duration {
	return lockTimeoutDuration(p.LockTimeout)
}

func lockTimeoutDuration(s string) time.Duration {
	if s == "" {
		s = DefaultLockTimeout
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		d, _ = time.ParseDuration(DefaultLockTimeout)
	}
	return d
}

// joinStrings lists values for a message: "a, b, c".
func joinStrings[T ~string](values []T) string {
	parts := make([]string, len(values))
	for i, v := range values {
		parts[i] = string(v)
	}
	return strings.Join(parts, ", ")
}
