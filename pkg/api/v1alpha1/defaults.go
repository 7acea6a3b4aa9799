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
	if s.Spec.Target.Engine == "" {
		s.Spec.Target.Engine = EnginePostgres
	}
	if len(s.Spec.Schemas) == 0 {
		s.Spec.Schemas = []string{DefaultSchema}
	}
	if s.Spec.Policy.Apply == "" {
		s.Spec.Policy.Apply = DefaultApply
	}
	if s.Spec.Policy.LockTimeout == "" {
		s.Spec.Policy.LockTimeout = DefaultLockTimeout
	}
}
