package roleserve

import (
	"context"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	cpb "github.com/polis-os/polis/api/curator/v1"
	"github.com/polis-os/polis/clusternet"
	"github.com/polis-os/polis/event/memory"
	"github.com/polis-os/polis/supervisor/supervisortest"
)

// The shared fake curator (fakecurator_test.go) answers the pod network's
// calls too, so that a whole role server runs against it: the key is
// taken, and the node has range 10.244.0.0/24 and no peers.
func (f *fakeCurator) SetWireGuardKey(context.Context, *cpb.SetWireGuardKeyRequest) (*cpb.SetWireGuardKeyResponse, error) {
	return &cpb.SetWireGuardKeyResponse{}, nil
}

func (f *fakeCurator) WatchNetworkPeers(_ *cpb.WatchNetworkPeersRequest, srv grpc.ServerStreamingServer[cpb.WatchNetworkPeersResponse]) error {
	if err := srv.Send(&cpb.WatchNetworkPeersResponse{PodRange: "10.244.0.0/24"}); err != nil {
		return err
	}
	<-srv.Context().Done()
	return srv.Context().Err()
}

// netCurator is a fake curator for the clusternet worker alone: it records
// the keys set, and streams the peers the test sets.
type netCurator struct {
	cpb.UnimplementedCuratorServiceServer

	// keys are the public keys received, in order.
	keys memory.Value[[][]byte]
	// peers is what WatchNetworkPeers streams, each value a message.
	peers memory.Value[*cpb.WatchNetworkPeersResponse]
	mu    sync.Mutex
	// refuse, if set, is SetWireGuardKey's answer.
	refuse error
}

func newNetCurator() *netCurator {
	n := &netCurator{}
	n.keys.Name = "fake-keys"
	n.peers.Name = "fake-peers"
	n.keys.Set(nil)
	return n
}

// membership serves n and returns a membership that reaches it.
func (n *netCurator) membership(t *testing.T) *ClusterMembership {
	t.Helper()
	return fakeMembership(t, n, testCredentials(t))
}

func (n *netCurator) SetWireGuardKey(_ context.Context, req *cpb.SetWireGuardKeyRequest) (*cpb.SetWireGuardKeyResponse, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.refuse != nil {
		return nil, n.refuse
	}
	n.keys.Set(append(slices.Clone(latest(&n.keys)), req.WireguardPublicKey))
	return &cpb.SetWireGuardKeyResponse{}, nil
}

func (n *netCurator) WatchNetworkPeers(_ *cpb.WatchNetworkPeersRequest, srv grpc.ServerStreamingServer[cpb.WatchNetworkPeersResponse]) error {
	w := n.peers.Watch()
	defer w.Close()
	for {
		msg, err := w.Get(srv.Context())
		if err != nil {
			return err
		}
		if err := srv.Send(msg); err != nil {
			return err
		}
	}
}

// The worker makes the node's key once, keeps it 0600 across restarts,
// publishes only its public half, and publishes the node's range and
// peers as the curator streams them; an entry that does not parse is
// left out, the others kept.
func TestClusterNetPublishesKeyAndPeers(t *testing.T) {
	c := newNetCurator()
	v := NewValues()
	keyFile := filepath.Join(t.TempDir(), "wireguard.key")
	var g Graph
	w := newWorkerClusterNet(&g, v, keyFile)
	supervisortest.Harness(t, w.run)
	if r := waitFor(t, &v.LocalPodRange, "no range before the curator answers", func(netip.Prefix) bool { return true }); r.IsValid() {
		t.Errorf("pod range %v before any curator answered", r)
	}
	first := c.membership(t)
	v.Membership.Set(first)
	keys := waitFor(t, &c.keys, "the key published", func(k [][]byte) bool { return len(k) == 1 })
	priv, err := clusternet.LoadOrCreateKey(keyFile)
	if err != nil {
		t.Fatal(err)
	}
	if pub := priv.PublicKey(); string(keys[0]) != string(pub[:]) {
		t.Errorf("published %x, want the public half of the kept key %x", keys[0], pub[:])
	}
	if fi, err := os.Stat(keyFile); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("key file: %v, %v; want 0600", fi, err)
	}

	peerKey := clusternet.Key{1, 2, 3}
	c.peers.Set(&cpb.WatchNetworkPeersResponse{PodRange: "10.244.3.0/24", Peers: []*cpb.NetworkPeer{
		{NodeId: "node-b", Address: "10.77.0.4", PodRange: "10.244.1.0/24", WireguardPublicKey: peerKey[:]},
		{NodeId: "node-c", Address: "10.77.0.5", PodRange: "10.244.2.0/24"},
		{NodeId: "node-bad", Address: "not an address", PodRange: "10.244.9.0/24"},
	}})
	waitFor(t, &v.LocalPodRange, "the node's range", func(r netip.Prefix) bool { return r == netip.MustParsePrefix("10.244.3.0/24") })
	want := []clusternet.Peer{
		{NodeID: "node-b", Address: netip.MustParseAddr("10.77.0.4"), PodCIDR: netip.MustParsePrefix("10.244.1.0/24"), PublicKey: peerKey},
		{NodeID: "node-c", Address: netip.MustParseAddr("10.77.0.5"), PodCIDR: netip.MustParsePrefix("10.244.2.0/24")},
	}
	waitFor(t, &v.NetworkPeers, "the peers", func(p []clusternet.Peer) bool { return slices.Equal(p, want) })

	// A peer goes: the list follows.
	c.peers.Set(&cpb.WatchNetworkPeersResponse{PodRange: "10.244.3.0/24", Peers: []*cpb.NetworkPeer{
		{NodeId: "node-c", Address: "10.77.0.5", PodRange: "10.244.2.0/24"},
	}})
	waitFor(t, &v.NetworkPeers, "node-b gone", func(p []clusternet.Peer) bool { return slices.Equal(p, want[1:]) })

	// A new membership, whose worker closes the old connection: the key
	// is published again, the same key.
	v.Membership.Set(c.membership(t))
	first.Curator.(*grpc.ClientConn).Close()
	keys = waitFor(t, &c.keys, "the key published again", func(k [][]byte) bool { return len(k) == 2 })
	if string(keys[0]) != string(keys[1]) {
		t.Error("a restart published another key")
	}
	// Between the streams the peers stayed (routes stay in place); the
	// new stream's first message replaces them whole.
	if p := latest(&v.NetworkPeers); !slices.Equal(p, want[1:]) {
		t.Errorf("peers between two streams: %v, want the last answer %v", p, want[1:])
	}
	c.peers.Set(&cpb.WatchNetworkPeersResponse{PodRange: "10.244.3.0/24"})
	waitFor(t, &v.NetworkPeers, "no peers left", func(p []clusternet.Peer) bool { return p != nil && len(p) == 0 })
}

// A refused key fails the run (the supervisor tries again), and publishes
// no peers it never got.
func TestClusterNetKeyRefused(t *testing.T) {
	c := newNetCurator()
	c.refuse = status.Error(codes.Unavailable, "fake curator: refusing as the test asked")
	v := NewValues()
	var g Graph
	w := newWorkerClusterNet(&g, v, filepath.Join(t.TempDir(), "wireguard.key"))
	v.Membership.Set(c.membership(t))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := w.run(ctx); status.Code(err) != codes.Unavailable {
		t.Errorf("run with the key refused: %v, want the refusal", err)
	}
	if v.NetworkPeers.Info().Version != 0 {
		t.Error("peers published without a stream")
	}
}
