// Command kube-apiserver is the Kubernetes API server, built from its Go
// module for ptah's envtest suites (the tests need a real API server and no
// downloaded binaries). See hack/README.md.
package main

import (
	"os"

	"k8s.io/component-base/cli"
	"k8s.io/kubernetes/cmd/kube-apiserver/app"
)

func main() {
	os.Exit(cli.Run(app.NewAPIServerCommand()))
}
