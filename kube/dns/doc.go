// Package dns renders what the node's DNS server needs and makes the node
// service (kube/nodeservice) that runs it: the system disk's
// polis-coredns (CoreDNS with the plugins a node needs,
// noderuntime/cmd/polis-coredns) on every worker node, as the system Polis
// descends from runs its DNS: a node service, so no image is pulled and
// nothing depends on the pod network to resolve names.
//
// # Model
//
// The server listens on the node's address, port 53 (Config.NodeIP), and
// answers for the cluster's domain (cluster.local): Services by name
// (NAME.NAMESPACE.svc.cluster.local, and the shorter forms through the
// search list the kubelet gives Pods), from the Services, EndpointSlices
// and Namespaces it lists and watches through the apiserver. The kubelet
// names the node's address as the Pods' nameserver (kube/kubelet
// Config.ClusterDNS), so every Pod asks the server of its own node, which
// it reaches through its bridge's gateway with no pod network between
// nodes. Names outside the cluster's domain are refused: the nodes have no
// upstream resolver to forward them to.
//
// Its credentials are a client certificate for the user polis:dns
// (pki.DNSUser) from the cluster's Kubernetes CA, issued by the curator to
// nodes that hold KubernetesWorker; kube/controlplane binds that user to a
// ClusterRole that may list and watch Services, EndpointSlices and
// Namespaces, and nothing else. /health, /ready and /metrics (Prometheus:
// queries, cache, the process' memory) are served on the node's loopback
// address.
//
// # What it does not do
//
// It does not forward, cache beyond CoreDNS' own 30 seconds, answer for
// Pods by address (pods disabled: no Pod watch, no Pod permission), or
// obtain credentials (the kubernetes worker asks the curator).
package dns
