package v1alpha1

// Hand-written until the types move to apimachinery and controller-gen
// generates zz_generated.deepcopy.go; the method set matches what it emits.

// DeepCopyInto copies s into out, sharing no memory.
func (s *PtahSchema) DeepCopyInto(out *PtahSchema) {
	*out = *s
	s.Spec.DeepCopyInto(&out.Spec)
}

// DeepCopy returns a copy of s sharing no memory.
func (s *PtahSchema) DeepCopy() *PtahSchema {
	if s == nil {
		return nil
	}
	out := new(PtahSchema)
	s.DeepCopyInto(out)
	return out
}

// DeepCopyInto copies s into out, sharing no memory.
func (s *PtahSchemaSpec) DeepCopyInto(out *PtahSchemaSpec) {
	*out = *s
	s.Target.DeepCopyInto(&out.Target)
	if s.Schemas != nil {
		out.Schemas = append([]string(nil), s.Schemas...)
	}
}

// DeepCopyInto copies t into out, sharing no memory.
func (t *Target) DeepCopyInto(out *Target) {
	*out = *t
	if t.URLFrom != nil {
		f := *t.URLFrom
		out.URLFrom = &f
	}
}
