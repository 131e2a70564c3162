// Package suite is the upstream Kubernetes e2e test binary cut down to the
// sig-node specs: `go test -c` here builds an e2e.test that takes upstream's
// flags (--kubeconfig, --ginkgo.focus, ...) and runs only the specs of
// k8s.io/kubernetes/test/e2e/common/node and test/e2e/node. The runner in
// the parent directory builds it and points it at a podvisor of its own.
package suite
