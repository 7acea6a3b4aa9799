// Package deploy holds what installs ptah in a cluster: the CRDs generated
// from pkg/api (make generate), the admission policies, RBAC and the
// manager's Deployment, as a kustomize base (kubectl apply -k deploy).
// The CRDs are embedded so that ptah can compare what a cluster serves
// with what it was built for.
package deploy

import (
	"embed"
	"io/fs"
)

//go:embed crds/*.yaml
var crds embed.FS

// CRDs returns the generated CustomResourceDefinitions, one file each.
func CRDs() fs.FS {
	sub, err := fs.Sub(crds, "crds")
	if err != nil {
		panic(err) // the embedded folder is fixed at build time
	}
	return sub
}
