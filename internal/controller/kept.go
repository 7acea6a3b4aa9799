// A PtahMigration's unresolved run, kept outside its status too.

package controller

import (
	"context"
	"encoding/json"
	"fmt"

	"sigs.k8s.io/controller-runtime/pkg/client"

	api "github.com/ptah-run/ptah/pkg/api/v1alpha1"
)

// AnnotationUnresolvedRun keeps a PtahMigration's unresolved run on the
// resource itself, outside its status: a backup restored without status
// (or a status written over) would otherwise erase the one record that
// stops the migration until a person settles the run, and the next pass
// would plan and run what may already have run in part. The manager
// writes it before the status records the run, puts it back into a status
// that lost it (engine.RestoreUnresolvedRun), and removes it once the
// status records that a person resolved that run.
const AnnotationUnresolvedRun = "ptah.run/unresolved-run"

// readKept reads the kept run from the live resource, once per reconcile.
func (p *pass) readKept(ctx context.Context) error {
	if p.keptRead || p.r.Kind != api.KindPtahMigration {
		return nil
	}
	var m api.PtahMigration
	if err := p.r.Client.Get(ctx, client.ObjectKey{Namespace: p.obj.Namespace, Name: p.obj.Name}, &m); err != nil {
		return err
	}
	p.kept, p.keptRead = nil, true
	if raw := m.Annotations[AnnotationUnresolvedRun]; raw != "" {
		var u api.UnresolvedRun
		if err := json.Unmarshal([]byte(raw), &u); err != nil {
			return fmt.Errorf("%s/%s: annotation %s is not an unresolved run: %w; it was written by ptah serve, and only a person "+
				"who established the run's outcome may remove it", p.obj.Namespace, p.obj.Name, AnnotationUnresolvedRun, err)
		}
		p.kept = &u
	}
	return nil
}

// restoreKept puts the kept run back into a status that lost it; it
// reports whether it wrote the status.
func (p *pass) restoreKept(ctx context.Context) (bool, error) {
	if err := p.readKept(ctx); err != nil || p.kept == nil {
		return false, err
	}
	st, ok := p.records.RestoreUnresolvedRun(p.kept)
	if !ok {
		return false, nil
	}
	return true, p.write(ctx, st)
}

// keep writes st's unresolved run, if it has one the annotation lacks,
// into the annotation: before the status, so that no status ever records
// a run the annotation does not keep.
func (p *pass) keep(ctx context.Context, st any) error {
	if p.r.Kind != api.KindPtahMigration {
		return nil
	}
	u := unresolvedIn(st)
	if u == nil {
		return nil
	}
	if err := p.readKept(ctx); err != nil {
		return err
	}
	if p.kept != nil && p.kept.OperationID == u.OperationID {
		return nil
	}
	raw, err := json.Marshal(u)
	if err != nil {
		return err
	}
	if err := p.annotate(ctx, string(raw)); err != nil {
		return fmt.Errorf("keeping the unresolved run %s of %s/%s: %w", u.OperationID, p.obj.Namespace, p.obj.Name, err)
	}
	p.kept = u
	return nil
}

// dropKept removes the annotation once the status written records that a
// person resolved the kept run.
func (p *pass) dropKept(ctx context.Context) error {
	if p.kept == nil {
		return nil
	}
	var st api.PtahMigrationStatus
	if err := json.Unmarshal(p.obj.Status, &st); err != nil {
		return err
	}
	if st.UnresolvedRun != nil || st.ResolvedRun == nil || st.ResolvedRun.OperationID != p.kept.OperationID {
		return nil
	}
	if err := p.annotate(ctx, ""); err != nil {
		return err
	}
	p.kept = nil
	return nil
}

// annotate sets the annotation to value ("" removes it), conditionally on
// the resource's version.
func (p *pass) annotate(ctx context.Context, value string) error {
	var m api.PtahMigration
	if err := p.r.Client.Get(ctx, client.ObjectKey{Namespace: p.obj.Namespace, Name: p.obj.Name}, &m); err != nil {
		return err
	}
	base := m.DeepCopy()
	if value == "" {
		delete(m.Annotations, AnnotationUnresolvedRun)
	} else {
		if m.Annotations == nil {
			m.Annotations = map[string]string{}
		}
		m.Annotations[AnnotationUnresolvedRun] = value
	}
	return p.r.Client.Patch(ctx, &m, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{}))
}

// unresolvedIn is the unresolved run of a status to write, nil when none.
func unresolvedIn(st any) *api.UnresolvedRun {
	raw, err := json.Marshal(st)
	if err != nil {
		return nil
	}
	var s struct {
		UnresolvedRun *api.UnresolvedRun `json:"unresolvedRun"`
	}
	_ = json.Unmarshal(raw, &s)
	return s.UnresolvedRun
}
