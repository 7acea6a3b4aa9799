package v1alpha1

// Hand-written until the types move to apimachinery and controller-gen
// generates zz_generated.deepcopy.go; the method set matches what it emits.
// TestDeepCopySharesNoMemory fills every field of every object below, so a
// field added to a type and forgotten here fails it.

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

// DeepCopyInto copies s into out, sharing no memory.
func (s *PtahSchemaStatus) DeepCopyInto(out *PtahSchemaStatus) {
	*out = *s
	s.RunState.DeepCopyInto(&out.RunState)
	if s.Applied != nil {
		out.Applied = new(AppliedPlan)
		s.Applied.DeepCopyInto(out.Applied)
	}
	out.PendingObservation = clonePtr(s.PendingObservation)
}

// DeepCopyInto copies s into out, sharing no memory.
func (s *RunState) DeepCopyInto(out *RunState) {
	*out = *s
	out.Conditions = cloneSlice(s.Conditions)
	out.ExecutionBinding = clonePtr(s.ExecutionBinding)
	out.Plan = clonePtr(s.Plan)
	if s.ActiveOperation != nil {
		out.ActiveOperation = new(Operation)
		s.ActiveOperation.DeepCopyInto(out.ActiveOperation)
	}
	out.OwedRelease = clonePtr(s.OwedRelease)
}

// DeepCopy returns a copy of s sharing no memory.
func (s *PtahSchemaStatus) DeepCopy() *PtahSchemaStatus {
	if s == nil {
		return nil
	}
	out := new(PtahSchemaStatus)
	s.DeepCopyInto(out)
	return out
}

// DeepCopyInto copies o into out, sharing no memory.
func (o *Operation) DeepCopyInto(out *Operation) {
	*out = *o
	out.Approval = clonePtr(o.Approval)
	out.DispatchedAt = clonePtr(o.DispatchedAt)
}

// DeepCopyInto copies a into out, sharing no memory.
func (a *AppliedPlan) DeepCopyInto(out *AppliedPlan) {
	*out = *a
	out.Versions = cloneSlice(a.Versions)
	out.Failure = clonePtr(a.Failure)
}

// DeepCopyInto copies p into out, sharing no memory.
func (p *PtahSchemaPlan) DeepCopyInto(out *PtahSchemaPlan) {
	*out = *p
	if p.Spec.Statements != nil {
		out.Spec.Statements = make([]PlanStatement, len(p.Spec.Statements))
		for i, st := range p.Spec.Statements {
			out.Spec.Statements[i] = PlanStatement{SQL: st.SQL, Hazards: cloneSlice(st.Hazards)}
		}
	}
	out.Spec.Phases = cloneSlice(p.Spec.Phases)
	out.Spec.LockCapacity = clonePtr(p.Spec.LockCapacity)
}

// DeepCopy returns a copy of p sharing no memory.
func (p *PtahSchemaPlan) DeepCopy() *PtahSchemaPlan {
	if p == nil {
		return nil
	}
	out := new(PtahSchemaPlan)
	p.DeepCopyInto(out)
	return out
}

// DeepCopyInto copies a into out, sharing no memory.
func (a *PtahSchemaApproval) DeepCopyInto(out *PtahSchemaApproval) {
	*out = *a
	a.Status.DeepCopyInto(&out.Status)
}

// DeepCopy returns a copy of a sharing no memory.
func (a *PtahSchemaApproval) DeepCopy() *PtahSchemaApproval {
	if a == nil {
		return nil
	}
	out := new(PtahSchemaApproval)
	a.DeepCopyInto(out)
	return out
}

// DeepCopyInto copies s into out, sharing no memory.
func (s *DecisionStatus) DeepCopyInto(out *DecisionStatus) {
	*out = *s
	out.Consumed = clonePtr(s.Consumed)
}

// DeepCopyInto copies m into out, sharing no memory.
func (m *PtahMigration) DeepCopyInto(out *PtahMigration) {
	*out = *m
	m.Spec.Target.DeepCopyInto(&out.Spec.Target)
}

// DeepCopy returns a copy of m sharing no memory.
func (m *PtahMigration) DeepCopy() *PtahMigration {
	if m == nil {
		return nil
	}
	out := new(PtahMigration)
	m.DeepCopyInto(out)
	return out
}

// DeepCopyInto copies s into out, sharing no memory.
func (s *PtahMigrationStatus) DeepCopyInto(out *PtahMigrationStatus) {
	*out = *s
	s.RunState.DeepCopyInto(&out.RunState)
	out.History = clonePtr(s.History)
	if s.LastRun != nil {
		out.LastRun = new(AppliedPlan)
		s.LastRun.DeepCopyInto(out.LastRun)
	}
	if s.UnresolvedRun != nil {
		out.UnresolvedRun = new(UnresolvedRun)
		s.UnresolvedRun.DeepCopyInto(out.UnresolvedRun)
	}
	out.ResolvedRun = clonePtr(s.ResolvedRun)
}

// DeepCopy returns a copy of s sharing no memory.
func (s *PtahMigrationStatus) DeepCopy() *PtahMigrationStatus {
	if s == nil {
		return nil
	}
	out := new(PtahMigrationStatus)
	s.DeepCopyInto(out)
	return out
}

// DeepCopyInto copies u into out, sharing no memory.
func (u *UnresolvedRun) DeepCopyInto(out *UnresolvedRun) {
	*out = *u
	out.Writer = clonePtr(u.Writer)
}

// DeepCopyInto copies p into out, sharing no memory.
func (p *PtahMigrationPlan) DeepCopyInto(out *PtahMigrationPlan) {
	*out = *p
	out.Spec.Versions = cloneSlice(p.Spec.Versions)
}

// DeepCopy returns a copy of p sharing no memory.
func (p *PtahMigrationPlan) DeepCopy() *PtahMigrationPlan {
	if p == nil {
		return nil
	}
	out := new(PtahMigrationPlan)
	p.DeepCopyInto(out)
	return out
}

// DeepCopyInto copies a into out, sharing no memory.
func (a *PtahMigrationApproval) DeepCopyInto(out *PtahMigrationApproval) {
	*out = *a
	a.Status.DeepCopyInto(&out.Status)
}

// DeepCopy returns a copy of a sharing no memory.
func (a *PtahMigrationApproval) DeepCopy() *PtahMigrationApproval {
	if a == nil {
		return nil
	}
	out := new(PtahMigrationApproval)
	a.DeepCopyInto(out)
	return out
}

// DeepCopyInto copies a into out, sharing no memory.
func (a *PtahMigrationRunAcknowledgment) DeepCopyInto(out *PtahMigrationRunAcknowledgment) {
	*out = *a
	out.Spec.MarkedApplied = cloneSlice(a.Spec.MarkedApplied)
	a.Status.DeepCopyInto(&out.Status)
}

// DeepCopy returns a copy of a sharing no memory.
func (a *PtahMigrationRunAcknowledgment) DeepCopy() *PtahMigrationRunAcknowledgment {
	if a == nil {
		return nil
	}
	out := new(PtahMigrationRunAcknowledgment)
	a.DeepCopyInto(out)
	return out
}

// clonePtr copies what p points at, for types holding no pointers, slices
// or maps of their own.
func clonePtr[T any](p *T) *T {
	if p == nil {
		return nil
	}
	c := *p
	return &c
}

// cloneSlice copies s, for element types holding no pointers, slices or
// maps of their own; nil stays nil.
func cloneSlice[S ~[]E, E any](s S) S {
	if s == nil {
		return nil
	}
	return append(S(nil), s...)
}
