// Package controller is ptah serve: a controller-runtime manager over
// ptah's custom resources, running the same engine as the CLI's local mode
// (DESIGN.md sections 2 to 4).
package controller

import (
	"context"
	"fmt"
	"strconv"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ptah-run/ptah/internal/engine"
	"github.com/ptah-run/ptah/internal/runner"
	"github.com/ptah-run/ptah/internal/store/kubestore"
	api "github.com/ptah-run/ptah/pkg/api/v1alpha1"
)

// VerifyStoredControllerState is the stored-state fence of ptah serve, run
// before the manager starts: every ptah resource in the cluster, of every
// kind, must be of a contract version this binary reads, and so must the
// CRDs of group ptah.run (a newer ptah installs its CRDs first, and may
// add a kind this one does not know). It refuses, naming what is newer,
// rather than reconcile over state it would misread.
func VerifyStoredControllerState(ctx context.Context, c client.Client) error {
	var crds apiextensionsv1.CustomResourceDefinitionList
	if err := c.List(ctx, &crds); err != nil {
		return fmt.Errorf("listing the CRDs: %w", err)
	}
	var installed []engine.StoredObject
	for _, crd := range crds.Items {
		if crd.Spec.Group != api.Group {
			continue
		}
		version := 0
		if v, ok := crd.Annotations[kubestore.AnnotationContractVersion]; ok {
			n, err := strconv.Atoi(v)
			if err != nil {
				return fmt.Errorf("CRD %s: annotation %s=%q is not a number", crd.Name, kubestore.AnnotationContractVersion, v)
			}
			version = n
		}
		installed = append(installed, engine.StoredObject{Kind: crd.Spec.Names.Kind, Name: crd.Name, ContractVersion: version})
	}
	return runner.FenceStore(ctx, kubestore.New(c), installed...)
}
