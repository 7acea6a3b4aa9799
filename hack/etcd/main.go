// Command etcd is the etcd server, built from its Go module for ptah's
// envtest suites. It lives in a module of its own: k8s.io/kubernetes
// requires a newer etcd server than the one envtest is verified with, and
// minimum version selection would pick it silently in a shared go.mod.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
