package clusternet

import (
	"fmt"
	"net/netip"
)

// Pods' traffic that leaves the pod network.
//
// Pod addresses are routed between the workers (through the tunnel), but
// nothing else in the cluster routes them: a controller node that runs no
// Pods, the nodes' own services, anything beyond the cluster network. A
// packet a Pod sends to such an address (the apiserver behind the
// `kubernetes` Service, another node's host-network Pod or NodePort)
// would leave with the Pod's address, and the answer would have no way
// back. So what a node's Pods send to an address outside the cluster's
// pod range leaves with the node's own address instead (masqueraded,
// the answers translated back by the node's connection tracking), while
// Pod-to-Pod traffic keeps its addresses on both ends.
//
// The rule lives in an nftables table of its own (EgressTable, family
// ip), which the reconciler writes whole in one transaction when it
// starts and at every resync (Config.ClusterPodRange), and which Clear
// deletes; nothing else touches it, and it touches nothing else (kube-
// proxy's tables and the CNI portmap's are theirs). IPv4 only, as the
// pod network is.

// EgressTable is the nftables table (family ip) of the egress rule.
const EgressTable = "polis-pod-egress"

// egressChain is the table's one chain, at the NAT hook after routing.
const egressChain = "postrouting"

// checkEgress says why podRange and clusterRange cannot make an egress
// rule, if they cannot.
func checkEgress(podRange, clusterRange netip.Prefix) error {
	switch {
	case !podRange.IsValid() || !podRange.Addr().Is4():
		return fmt.Errorf("clusternet: egress: the node's pod range %v is not an IPv4 range", podRange)
	case !clusterRange.IsValid() || !clusterRange.Addr().Is4():
		return fmt.Errorf("clusternet: egress: the cluster's pod range %v is not an IPv4 range", clusterRange)
	case podRange.Bits() < clusterRange.Bits() || !clusterRange.Contains(podRange.Addr()):
		return fmt.Errorf("clusternet: egress: the node's pod range %v is not inside the cluster's %v", podRange, clusterRange)
	}
	return nil
}
