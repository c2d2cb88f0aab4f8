// Package roletest tests the Kubernetes roles on real node agents: a node
// given KubernetesController runs the real control plane from the bundle
// (kube/kubetest builds it once per machine) on the cluster's own etcd,
// confined to the consensus namespace "kubernetes"; the role taken away
// stops every component process; a killed apiserver comes back; two
// controller nodes serve the same objects with the CA kept in etcd. The agents
// run in the test process (node/nodetest) on 127.87.x.y.
//
// It holds tests and benchmarks only; the kubernetes worker itself is in
// roleserve (worker_kubernetes.go).
package roletest
