// Package clusternet connects the pod networks of a cluster's nodes.
//
// Every node that holds KubernetesWorker has its own pod range, given by
// the curator out of the cluster's pod range. Pods on one node reach each
// other over the node's bridge (see kube/kubelet's CNI configuration); to
// reach a Pod on another node, a packet must be routed to that node. This
// package keeps those routes: from the set of peers (every other worker
// node's cluster address, pod range and WireGuard public key, as the
// curator publishes them) it programs the node's kernel so that each
// peer's pod range is reached through that peer, over an encrypted
// WireGuard tunnel.
//
// The node's WireGuard private key is made on the node and never leaves
// it (LoadOrCreateKey); only its public key is published through the
// curator.
package clusternet
