// Package controller assembles the Kubernetes control plane of one
// controller node, over the cluster's etcd member that runs on the node.
//
// # Model
//
// Start is called by the kubernetes worker (roleserve) from inside its run,
// once the node holds KubernetesController and its consensus member votes.
// It does, in this order:
//
//  1. read the cluster's Kubernetes PKI from the curator's etcd namespace
//     (kube/pki, pki.Ensure: created by whichever node needs it first, in
//     one transaction, so every controller node serves with the same CA);
//  2. issue this node's component files (serving certificate for the
//     node's address, kubeconfigs of the controller-manager and scheduler);
//  3. start, as children of the caller's runnable, the etcd proxy that
//     confines the apiserver to the consensus namespace "kubernetes" on a
//     private unix socket (kube/etcdproxy), the control-plane runner
//     (kube/controlplane), and "podcidr", which sets each Node's
//     spec.podCIDR to the pod range the curator gave that node, and
//     deletes the Node of a deleted Polis node, whose range goes back to
//     the pool for the next worker: as it sees the node deleted, and, each
//     time it lists the Nodes (at its start, and whenever the apiserver
//     has ended its watch), every Polis node's Node whose node has no
//     record in the curator's store (Config.Nodes), so that a node
//     deleted while no controller ran leaves no Node behind (podcidr.go:
//     who writes it and why, which Nodes it deletes, and how it tells a
//     Polis node's Node from another).
//
// Stop order: when the caller's run ends, the supervisor cancels both
// children at once. An apiserver whose etcd is already gone hangs in its
// shutdown until it is killed, so the proxy keeps serving until no
// component runs any more (or ProxyStopBound has passed): the components
// stop cleanly, then the proxy, then the consensus connection is closed.
//
// # What it does not do
//
// It does not decide whether the node runs a control plane (the worker
// does, from its roles) nor report status (the runner's Status value is
// returned for the worker to follow). It does not know where the curator
// keeps the pod ranges and node records: the worker says (PodRangeSource,
// NodeRecordSource), as the curator is above this package. Its sweep of
// the listed Nodes deletes none that it cannot tell is a Polis node's, nor
// any whose Polis node has a record.
package controller
