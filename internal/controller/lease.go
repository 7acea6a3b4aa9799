// The database's Lease in a cluster: a coordination.k8s.io Lease named from
// the coordination digest, held by the operation that claimed it.

package controller

import (
	"context"
	"fmt"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ptah-run/ptah/internal/engine"
	api "github.com/ptah-run/ptah/pkg/api/v1alpha1"
)

// LeaseName is the Lease of a coordination digest in a namespace.
func LeaseName(coordinationDigest string) string {
	d := coordinationDigest
	if i := len("sha256:"); len(d) > i && d[:i] == "sha256:" {
		d = d[i:]
	}
	if len(d) > 40 {
		d = d[:40]
	}
	return "ptah-db-" + d
}

func (p *pass) leaseHolder(ctx context.Context, digest string) (string, error) {
	var l coordinationv1.Lease
	err := p.r.Client.Get(ctx, client.ObjectKey{Namespace: p.leaseNS, Name: LeaseName(digest)}, &l)
	if apierrors.IsNotFound(err) {
		return "", nil
	}
	if err != nil || l.Spec.HolderIdentity == nil {
		return "", err
	}
	return *l.Spec.HolderIdentity, nil
}

// lock takes the database's Lease for the claim op; a Lease another
// operation holds drops the claim (engine.LeaseHeld).
func (p *pass) lock(ctx context.Context, op api.Operation) (ctrl.Result, bool, error) {
	holder := op.ID
	l := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Namespace: p.leaseNS, Name: LeaseName(op.CoordinationDigest),
			Labels: map[string]string{LabelResourceUID: p.obj.UID, LabelOperation: op.ID}},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: &holder, AcquireTime: &metav1.MicroTime{Time: p.r.Now()}},
	}
	err := p.r.Client.Create(ctx, l)
	if apierrors.IsAlreadyExists(err) {
		cur, gerr := p.leaseHolder(ctx, op.CoordinationDigest)
		if gerr != nil {
			return ctrl.Result{}, true, gerr
		}
		if cur != op.ID {
			st, rs := p.records.Decided()
			engine.LeaseHeld(rs, fmt.Sprintf("the database's Lease %s is held by operation %s", l.Name, cur))
			return ctrl.Result{RequeueAfter: writerPoll}, true, p.write(ctx, st)
		}
		err = nil
	}
	return ctrl.Result{}, false, err
}

// releaseLease deletes the Lease of digest if operationID holds it.
func (p *pass) releaseLease(ctx context.Context, digest, operationID string) error {
	var l coordinationv1.Lease
	err := p.r.Client.Get(ctx, client.ObjectKey{Namespace: p.leaseNS, Name: LeaseName(digest)}, &l)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	if l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity != operationID {
		return nil
	}
	err = p.r.Client.Delete(ctx, &l, client.Preconditions{UID: &l.UID, ResourceVersion: &l.ResourceVersion})
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

// releaseStrayLeases gives back Leases this resource took for claims its
// status no longer names (a manager that stopped between dropping an
// undispatched claim and releasing its Lease): nothing ran under them.
func (p *pass) releaseStrayLeases(ctx context.Context, rs runState) error {
	var leases coordinationv1.LeaseList
	if err := p.r.Client.List(ctx, &leases, client.InNamespace(p.leaseNS), client.MatchingLabels{LabelResourceUID: p.obj.UID}); err != nil {
		return err
	}
	named := rs.namedOperations()
	for i := range leases.Items {
		l := &leases.Items[i]
		if h := l.Spec.HolderIdentity; h != nil && !named[*h] {
			if err := p.r.Client.Delete(ctx, l, client.Preconditions{UID: &l.UID, ResourceVersion: &l.ResourceVersion}); err != nil && !apierrors.IsNotFound(err) {
				return err
			}
		}
	}
	return nil
}
