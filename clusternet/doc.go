// Package clusternet connects the pod networks of a cluster's nodes.
//
// Every node that holds KubernetesWorker or KubernetesController has its
// own pod range, given by the curator out of the cluster's pod range. Pods
// on one node reach each other over the node's bridge (see kube/kubelet's
// CNI configuration); to reach a Pod on another node, a packet must be
// routed to that node. This package keeps those routes: from the set of
// peers (every other such node's cluster address, pod range and WireGuard
// public key, as the curator publishes them) it programs the node's
// kernel so that each peer's pod range is reached through that peer, over
// an encrypted WireGuard tunnel. A controller runs no Pods: its range
// holds only its end of the tunnel (the range's first address), from
// which its apiserver reaches Pods and to which their answers route.
//
// The node's WireGuard private key is made on the node and never leaves
// it (LoadOrCreateKey); only its public key is published through the
// curator.
//
// # The model
//
// Run is a supervised runnable that waits on one event value, the peers
// ([]Peer), and after every change brings the kernel in line in three
// steps, each a plain function:
//
//	peers ──decide──► desired state ──diff(kernel as it is)──► plan ──apply──► kernel
//
// decide (desired.go) needs nothing but the configuration and the peers: it
// drops the peers that cannot be configured, each with a reason in Status,
// and keeps the others. A peer is dropped when it has no address or pod
// range, or an IPv4-mapped IPv6 pod range; in WireGuard mode, when it has no
// public key or this node's own (which WireGuard would ignore); when it is
// this node itself; when its pod range overlaps this node's or another
// peer's, or holds a node's cluster address (its route would carry the
// tunnel's own packets into the tunnel, and cut the node off). diff
// (plan.go) compares that with what the kernel has and says only what
// differs, so that running it again with the same peers, or from a restarted
// agent that finds the device and routes of its previous run, changes
// nothing. apply carries the plan out in an order that keeps traffic
// flowing: the device exists, holds its peers and is up before a route
// points at it, and routes are replaced in place.
//
// In ModeWireGuard (the default) the node has one WireGuard device
// (DefaultDevice, listening on DefaultListenPort): each peer is a
// WireGuard peer whose endpoint is its cluster address and whose allowed
// IPs are its pod range, and each pod range is routed through the device.
// WireGuard then encrypts what leaves for a peer, and accepts from a peer
// only packets whose source lies in that peer's pod range. In ModePlain
// each pod range is routed through the peer's address, in clear: for
// measuring what encryption costs, and where the kernel has no WireGuard.
//
// The device's MTU is Config.MTU: the role server gives it the cluster
// link's MTU less WireGuard's Overhead (LinkMTU, TunnelMTU), and gives
// every Pod the same (kube/kubelet's PodMTU), so that what a Pod sends to
// another node fits the tunnel, and once encrypted the cluster link, whole:
// no fragments, no reliance on path MTU discovery. The exception is a
// cluster link under 1360 bytes: the tunnel keeps IPv6's minimum of 1280,
// and its largest packets cross the link in fragments (TunnelMTU). A
// device found with another MTU gets it set in place.
//
// The routes carry their own protocol number (158: "proto 158" in `ip
// route`), which is how the reconciler finds its routes after a restart and
// why it never touches a route it did not add: only routes of its own are
// replaced or deleted, a new one is added (which the kernel refuses rather
// than overwrite another), and a peer whose pod range already has someone
// else's route to exactly that range in the main table is skipped, the range
// left to that route. A failed step stops only the steps that depend on it
// (no route through a device that could not be made, given its peers or
// brought up); the others go ahead, so that one route the kernel refuses
// keeps neither the other peers' routes out nor a departed peer's in. The
// kernel is left part-way, which the next attempt finishes: attempts repeat
// with backoff, and as soon as the peers change; every failed step's error,
// naming its route or device, is in Status (LastError) until an attempt
// succeeds. Every DefaultResync the kernel is checked again, which undoes
// what someone else changed of the device and of the routes that carry the
// mark.
//
// # The node's own packets, and the Pods' beyond the pod network
//
// The WireGuard device holds the first address of the node's pod range
// (the Pods' gateway, which their bridge holds too), as a single address.
// The kernel gives what the node itself sends through the tunnel (a
// host-network process's connection to a remote Pod, or a NodePort's
// traffic it masquerades on the way to one) that address as its source,
// which is inside the node's pod range: the peer's WireGuard accepts it,
// where it would drop the node's cluster address.
//
// The other way, what a Pod sends to an address outside the cluster's pod
// range (Config.ClusterPodRange) leaves with the node's address: the
// apiserver behind the `kubernetes` Service, another node's own address,
// the rest of the cluster network have no route to any Pod. That is the
// egress rule (egress.go), an nftables table of the package's own.
//
// # What it does not do
//
// It connects only the nodes it runs on: the role server runs it beside
// the kubelet on nodes running KubernetesWorker, and alone on nodes that
// hold KubernetesController without it (VM nodes, whose network is their
// own), whose peers are the other such nodes. A process node runs it
// nowhere: its machine's network is not its own.
//
// It does not choose pod ranges or publish keys (the curator does, and the
// role server feeds the peers), nor configure the pod bridge (CNI does),
// nor enable IP forwarding (the CNI bridge plugin does, as a gateway).
// Only pod ranges travel through the tunnel: traffic between the nodes'
// own addresses (etcd, the curator, kubelet) stays on the cluster network
// as before, protected by its own mTLS.
package clusternet
