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
//     the pool for the next worker (podcidr.go: who writes it and why,
//     and which Nodes it deletes).
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
// returned for the worker to follow).
package controller
