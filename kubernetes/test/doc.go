// Package test runs the Kubernetes control plane of Polis end to end with
// a stock Kubernetes client: the bundle built by kube/bundle, an embedded
// etcd confined by kube/etcdproxy, the PKI of kube/pki, and the runner of
// kube/controlplane; client-go (which only this module may import, to keep
// Kubernetes out of the main module) creates objects and the test checks
// what the controller-manager and scheduler make of them and where they
// are stored. TestLaunchedClusterWithKubernetes does what an operator
// does: the real polis-launch --kubernetes, polisctl kubeconfig, and
// client-go with nothing but that kubeconfig. TestVMClusterRunsPods does
// the same with VMs (polis-launch --vm --kubernetes --image demo=DIR, one
// controller and two workers) and runs Pods: both workers' Nodes Ready
// with their labels, a Deployment of the demo image (launch/demoimage)
// spread over both, kubectl logs and exec through the launcher's proxy, a
// worker's kubelet credentials held to its own Node by the Node authorizer
// (./authzprobe, run on the worker), label changes reaching the Node,
// KubernetesWorker taken away (nothing left) and given back, a worker
// rebooted (same pod range, its Pod reached by Pod IP again), and last a
// worker decommissioned and deleted (no longer a WireGuard peer of the
// other, its pod range back in the pool); it also measures the pod network
// between the workers (./netbench: round trips and throughput, Pod to Pod
// over WireGuard, Pod to Pod plain-routed and node to node in clear). It
// needs qemu. scripts/test
// runs them after the main module's tests.
package test
