package roleserve

import (
	"context"
	"fmt"
	"net/netip"

	"go.uber.org/zap"

	cpb "github.com/polis-os/polis/api/curator/v1"
	"github.com/polis-os/polis/clusternet"
	"github.com/polis-os/polis/event"
	"github.com/polis-os/polis/supervisor"
)

// workerClusterNet is the node's side of the pod network: it publishes
// the public half of the node's WireGuard key (made and kept on the node,
// clusternet.LoadOrCreateKey) through the curator, and follows the
// curator's WatchNetworkPeers stream, publishing the node's own pod range
// (for the kubernetesworker worker: the CNI configuration and the
// kubelet) and its peers (for whatever programs the routes to them,
// package clusternet).
//
// It runs whether or not the node holds a Kubernetes role: the curator
// gives the range with KubernetesWorker or KubernetesController, and the
// key is published before it. The kubernetesworker worker acts on the
// peers: it runs clusternet.Run over them beside the kubelet, or alone on
// a node that holds KubernetesController without KubernetesWorker, so
// that its apiserver reaches the workers' Pods. Both values keep
// their last answer while the stream is down (between a curator stepping
// down and the next stream), so routes stay in place meanwhile; the next
// stream's first message replaces them whole.
type workerClusterNet struct {
	*Worker
	// keyFile keeps the node's WireGuard private key (0600).
	keyFile string
	started bool

	membership      event.ValueWatch[*ClusterMembership] // reads
	podRange        event.Value[netip.Prefix]            // writes
	clusterPodRange event.Value[netip.Prefix]            // writes
	peers           event.Value[[]clusternet.Peer]       // writes
}

func newWorkerClusterNet(g *Graph, v *Values, keyFile string) *workerClusterNet {
	h := g.Worker("clusternet")
	return &workerClusterNet{
		Worker:          h,
		keyFile:         keyFile,
		membership:      Reads[*ClusterMembership](h, &v.Membership),
		podRange:        Writes[netip.Prefix](h, &v.LocalPodRange),
		clusterPodRange: Writes[netip.Prefix](h, &v.ClusterPodRange),
		peers:           Writes[[]clusternet.Peer](h, &v.NetworkPeers),
	}
}

func (w *workerClusterNet) run(ctx context.Context) error {
	log := supervisor.Logger(ctx)
	if !w.started {
		// "No range yet" until the curator says otherwise, so that the
		// kubernetesworker worker can say what it waits for. The peers
		// stay unset: nobody acts on a list that was never asked for.
		w.podRange.Set(netip.Prefix{})
		w.clusterPodRange.Set(netip.Prefix{})
		w.started = true
	}
	key, err := clusternet.LoadOrCreateKey(w.keyFile)
	if err != nil {
		return err
	}
	in := w.Inputs()
	defer in.Close()
	m := Input(in, w.membership, hasCurator)
	why, err := in.Wait(ctx)
	if err != nil {
		return err
	}
	// Published at every start: the record may have been written by
	// another cluster's curator, or lost the key to a restore.
	pub := key.PublicKey()
	if err := w.publishKey(ctx, m.Latest(), pub); err != nil {
		return stopIfDecommissioned(ctx, err)
	}
	log.Info("published the WireGuard public key", zap.Stringer("key", pub), zap.Stringer("because", why))
	supervisor.Signal(ctx, supervisor.SignalHealthy)

	// A new membership closes the connection this stream runs on; the
	// restart that follows watches through the new one.
	stream, err := cpb.NewCuratorServiceClient(m.Latest().Curator).WatchNetworkPeers(ctx, &cpb.WatchNetworkPeersRequest{})
	if err != nil {
		return fmt.Errorf("watching the network peers: %w", err)
	}
	for {
		msg, err := stream.Recv()
		if err != nil {
			return stopIfDecommissioned(ctx, fmt.Errorf("watching the network peers: %w", err))
		}
		own, cluster, peers := parseNetworkPeers(ctx, msg)
		log.Info("network peers", zap.String("podRange", prefixOrNone(own)), zap.String("clusterPodRange", prefixOrNone(cluster)), zap.Int("peers", len(peers)))
		// The cluster's first: the kubernetesworker worker starts a node
		// on the node's own range, and reads the cluster's then.
		w.clusterPodRange.Set(cluster)
		w.podRange.Set(own)
		w.peers.Set(peers)
	}
}

func (w *workerClusterNet) publishKey(ctx context.Context, m *ClusterMembership, pub clusternet.Key) error {
	ctx, cancel := context.WithTimeout(ctx, rpcTimeout)
	defer cancel()
	if _, err := cpb.NewCuratorServiceClient(m.Curator).SetWireGuardKey(ctx, &cpb.SetWireGuardKeyRequest{WireguardPublicKey: pub[:]}); err != nil {
		return fmt.Errorf("publishing the WireGuard public key: %w", err)
	}
	return nil
}

// parseNetworkPeers turns the curator's message into the node's pod range
// and the cluster's (each the zero Prefix if there is none) and the peers.
// The curator checks what it stores; an entry that does not parse all the
// same is left out, with a warning, rather than taking the other peers'
// routes down with it.
func parseNetworkPeers(ctx context.Context, msg *cpb.WatchNetworkPeersResponse) (own, cluster netip.Prefix, peers []clusternet.Peer) {
	log := supervisor.Logger(ctx)
	own = parseRange(log, "this node's pod range", msg.GetPodRange())
	cluster = parseRange(log, "the cluster's pod range", msg.GetClusterPodRange())
	peers = make([]clusternet.Peer, 0, len(msg.GetPeers()))
	for _, p := range msg.GetPeers() {
		peer, err := parsePeer(p)
		if err != nil {
			log.Warn("ignoring a network peer", zap.String("node", p.GetNodeId()), zap.Error(err))
			continue
		}
		peers = append(peers, peer)
	}
	return own, cluster, peers
}

// parseRange parses the curator's range r ("" is none), warning about
// what does not parse, and returns the zero Prefix for either.
func parseRange(log *zap.Logger, what, r string) netip.Prefix {
	if r == "" {
		return netip.Prefix{}
	}
	p, err := netip.ParsePrefix(r)
	if err != nil {
		log.Warn("ignoring "+what+" from the curator", zap.String("range", r), zap.Error(err))
		return netip.Prefix{}
	}
	return p
}

func parsePeer(p *cpb.NetworkPeer) (clusternet.Peer, error) {
	addr, err := netip.ParseAddr(p.GetAddress())
	if err != nil {
		return clusternet.Peer{}, fmt.Errorf("address: %w", err)
	}
	r, err := netip.ParsePrefix(p.GetPodRange())
	if err != nil {
		return clusternet.Peer{}, fmt.Errorf("pod range: %w", err)
	}
	peer := clusternet.Peer{NodeID: p.GetNodeId(), Address: addr, PodCIDR: r}
	if k := p.GetWireguardPublicKey(); len(k) > 0 {
		if peer.PublicKey, err = clusternet.ParseKey(k); err != nil {
			return clusternet.Peer{}, fmt.Errorf("WireGuard public key: %w", err)
		}
	}
	return peer, nil
}

// prefixOrNone is p for logs, "none" for the zero Prefix.
func prefixOrNone(p netip.Prefix) string {
	if !p.IsValid() {
		return "none"
	}
	return p.String()
}
