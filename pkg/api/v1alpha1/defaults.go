package v1alpha1

// Defaults the API applies to fields left empty.
const (
	DefaultSchema      = "public"
	DefaultApply       = ApplyOnApproval
	DefaultLockTimeout = "5s"
)

// Default fills in every field the API defaults. It is idempotent and
// touches only empty fields, so it matches what the API server's defaulting
// (the kubebuilder:default markers) does to the same document.
func (s *PtahSchema) Default() {
	defaultTarget(&s.Spec.Target)
	if len(s.Spec.Schemas) == 0 {
		s.Spec.Schemas = []string{DefaultSchema}
	}
	defaultPolicy(&s.Spec.Policy.Apply, &s.Spec.Policy.LockTimeout)
}

// Default fills in every field the API defaults, as PtahSchema.Default
// does. spec.source.layout stays empty: empty means detected.
func (m *PtahMigration) Default() {
	defaultTarget(&m.Spec.Target)
	defaultPolicy(&m.Spec.Policy.Apply, &m.Spec.Policy.LockTimeout)
}

func defaultTarget(t *Target) {
	if t.Engine == "" {
		t.Engine = EnginePostgres
	}
}

// defaultPolicy defaults what both families' policies have.
func defaultPolicy(apply *ApplyPolicy, lockTimeout *string) {
	if *apply == "" {
		*apply = DefaultApply
	}
	if *lockTimeout == "" {
		*lockTimeout = DefaultLockTimeout
	}
}
