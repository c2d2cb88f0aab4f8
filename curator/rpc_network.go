package curator

import (
	"bytes"
	"cmp"
	"context"
	"net/netip"
	"slices"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	cpb "github.com/polis-os/polis/api/curator/v1"
)

// The pod network's calls: a node publishes the public half of its
// WireGuard key (SetWireGuardKey) and follows its peers
// (WatchNetworkPeers), the other nodes on the pod network: those holding
// KubernetesWorker, whose Pods it must reach, and those holding
// KubernetesController, whose apiservers reach Pods (webhooks, aggregated
// APIs, proxy subresources) and get their replies. Pod ranges are given
// by UpdateNodeRoles (podnetwork.go).

func (r *rpcServer) SetWireGuardKey(ctx context.Context, req *cpb.SetWireGuardKeyRequest) (*cpb.SetWireGuardKeyResponse, error) {
	key := req.WireguardPublicKey
	if len(key) != wireGuardKeySize {
		return nil, status.Errorf(codes.InvalidArgument, "wireguard_public_key is %d bytes, want a %d-byte Curve25519 public key", len(key), wireGuardKeySize)
	}
	if bytes.Equal(key, make([]byte, wireGuardKeySize)) {
		return nil, status.Error(codes.InvalidArgument, "wireguard_public_key is all zeros, which is no key")
	}
	id := callerFrom(ctx).NodeID
	_, err := r.changeNode(ctx, id, func(n *cpb.Node) (*cpb.Node, error) {
		if err := nodeStillUp(id, n); err != nil {
			return nil, err
		}
		n.Network = cmp.Or(n.Network, &cpb.NodeNetwork{})
		n.Network.WireguardPublicKey = key
		return n, nil
	})
	if err != nil {
		return nil, err
	}
	return &cpb.SetWireGuardKeyResponse{}, nil
}

// WatchNetworkPeers follows the node cache like Watch, and sends the
// caller's whole list again whenever its part of it changed. Most record
// changes (statuses, labels) touch no peer: what changed is found from the
// snapshots' change lists and compared as peers (networkChanged), so such
// a change costs each stream a look at the records it names, not a walk
// over the cluster.
func (r *rpcServer) WatchNetworkPeers(_ *cpb.WatchNetworkPeersRequest, stream grpc.ServerStreamingServer[cpb.WatchNetworkPeersResponse]) error {
	ctx := stream.Context()
	caller := callerFrom(ctx).NodeID
	// Chosen at bootstrap and never changed: read once per stream.
	pods, err := readPodNetwork(ctx, r.s.cfg.Client)
	if err != nil {
		return status.Errorf(codes.Unavailable, "%v", err)
	}
	clusterRange := pods.GetClusterRange()
	// As in Watch: the stream ends with the curator's following of etcd,
	// and with the caller's standing (followNodes).
	var sent *nodeSnapshot
	var last *cpb.WatchNetworkPeersResponse
	return r.followNodes(ctx, caller, func(snap *nodeSnapshot) error {
		if sent != nil && !networkChanged(sent, snap, caller) {
			sent = snap
			return nil
		}
		sent = snap
		msg := networkPeersOf(snap, caller)
		msg.ClusterPodRange = clusterRange
		if last != nil && proto.Equal(msg, last) {
			return nil
		}
		if err := stream.Send(msg); err != nil {
			return err
		}
		last = msg
		return nil
	})
}

// networkPeersOf is what node self is sent in snap: its pod range and its
// peers, by node ID.
func networkPeersOf(snap *nodeSnapshot, self string) *cpb.WatchNetworkPeersResponse {
	msg := &cpb.WatchNetworkPeersResponse{PodRange: snap.nodes[self].GetNetwork().GetPodRange()}
	for id, n := range snap.nodes {
		if id == self {
			continue
		}
		if p := peerOf(n); p != nil {
			msg.Peers = append(msg.Peers, p)
		}
	}
	slices.SortFunc(msg.Peers, func(a, b *cpb.NetworkPeer) int { return cmp.Compare(a.NodeId, b.NodeId) })
	return msg
}

// peerOf is n as a peer of the other nodes on the pod network; nil if it
// is none: it must be UP, hold KubernetesWorker or KubernetesController
// (needsPodRange), have a pod range and report an address. A node that
// lost both roles keeps its range (podnetwork.go) but is no peer;
// decommissioned and deleted nodes are nobody's peers.
func peerOf(n *cpb.Node) *cpb.NetworkPeer {
	if n == nil || n.State != cpb.NodeState_NODE_STATE_UP || !needsPodRange(n.GetRoles()) || n.GetNetwork().GetPodRange() == "" {
		return nil
	}
	addr, err := netip.ParseAddr(n.GetStatus().GetExternalAddress())
	if err != nil || addr.IsUnspecified() {
		return nil
	}
	return &cpb.NetworkPeer{NodeId: n.Id, Address: addr.String(), PodRange: n.Network.PodRange, WireguardPublicKey: n.Network.WireguardPublicKey}
}

// networkChanged reports whether self's message may differ between
// snapshots sent and snap: whether a record changed in between in a way
// that changes it as a peer (peerOf: its state, either Kubernetes role,
// its range, address or key), or changes self's own pod range.
func networkChanged(sent, snap *nodeSnapshot, self string) bool {
	ids, ok := snap.changedSince(sent, len(snap.nodes))
	if !ok {
		return true
	}
	for _, id := range ids {
		before, after := sent.nodes[id], snap.nodes[id]
		if id == self {
			if before.GetNetwork().GetPodRange() != after.GetNetwork().GetPodRange() {
				return true
			}
			continue
		}
		if !proto.Equal(peerOf(before), peerOf(after)) {
			return true
		}
	}
	return false
}
