package controller

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	ctrlcontroller "sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	"github.com/ptah-run/ptah/internal/engine"
	"github.com/ptah-run/ptah/internal/store"
	api "github.com/ptah-run/ptah/pkg/api/v1alpha1"
)

// MigrationReconciler answers for PtahMigrations in a cluster until ptah
// serve runs them: it says so in their status, by name, rather than leave
// them without a word. It reads no database and runs nothing.
type MigrationReconciler struct {
	Store store.Store
}

// notServed is the status message of a PtahMigration in a cluster.
const notServed = "this ptah serve does not run PtahMigrations yet: nothing was read or run; apply them with ptah apply (local mode)"

// SetupWithManager registers the reconciler for PtahMigrations.
func (r *MigrationReconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		Named("ptahmigration").
		For(&api.PtahMigration{}, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		WithOptions(ctrlcontroller.Options{SkipNameValidation: &skipNameValidation}).
		Complete(r)
}

// Reconcile records, once per generation, that the resource is not served.
func (r *MigrationReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	obj, err := r.Store.Get(ctx, api.KindPtahMigration, req.Namespace, req.Name)
	if errors.Is(err, store.ErrNotFound) {
		return ctrl.Result{}, nil
	}
	if err != nil {
		return ctrl.Result{}, err
	}
	var st api.PtahMigrationStatus
	if len(obj.Status) > 0 {
		if err := json.Unmarshal(obj.Status, &st); err != nil {
			return ctrl.Result{}, err
		}
	}
	if st.Reason == api.ReasonNotServed && st.ObservedGeneration == obj.Generation {
		return ctrl.Result{}, nil
	}
	st.Phase, st.Reason, st.Message, st.ObservedGeneration = api.PhaseBlocked, api.ReasonNotServed, notServed, obj.Generation
	st.Conditions = engine.SetReady(st.Conditions, st.RunState, obj.Generation, time.Now())
	raw, err := json.Marshal(st)
	if err != nil {
		return ctrl.Result{}, err
	}
	obj.Status, obj.ContractVersion = raw, api.ContractVersion
	blockedNow.set(api.KindPtahMigration, obj.Namespace+"/"+obj.Name, api.ReasonNotServed)
	_, err = r.Store.UpdateStatus(ctx, obj)
	return ctrl.Result{}, err
}
