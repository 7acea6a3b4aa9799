// Package deploy holds what installs ptah in a cluster: the CRDs generated
// from pkg/api (make generate), the admission policies, RBAC and the
// manager's Deployment, as a kustomize base (kubectl apply -k deploy).
// The CRDs are embedded so that ptah can compare what a cluster serves
// with what it was built for.
package deploy

import (
	"embed"
	"fmt"
	"io/fs"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/yaml"
)

//go:embed crds/*.yaml
var crds embed.FS

// ReadCRDs decodes the generated CustomResourceDefinitions.
func ReadCRDs() ([]*apiextensionsv1.CustomResourceDefinition, error) {
	var out []*apiextensionsv1.CustomResourceDefinition
	err := fs.WalkDir(CRDs(), ".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := fs.ReadFile(CRDs(), path)
		if err != nil {
			return err
		}
		crd := &apiextensionsv1.CustomResourceDefinition{}
		if err := yaml.UnmarshalStrict(b, crd); err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		out = append(out, crd)
		return nil
	})
	return out, err
}

// CRDs returns the generated CustomResourceDefinitions, one file each.
func CRDs() fs.FS {
	sub, err := fs.Sub(crds, "crds")
	if err != nil {
		panic(err) // the embedded folder is fixed at build time
	}
	return sub
}
