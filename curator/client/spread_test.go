package client

import (
	"context"
	"crypto/ed25519"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"slices"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/peer"

	cpb "github.com/polis-os/polis/api/curator/v1"
	"github.com/polis-os/polis/identity"
	"github.com/polis-os/polis/internal/testutil"
)

// nodeTLS is nd's client configuration as a node, with a certificate
// straight from the CA (its record is UP: newHACluster made it so).
func (c *haCluster) nodeTLS(nd *haNode) *tls.Config {
	c.t.Helper()
	cert, err := c.ca.IssueNode(nd.key.Public().(ed25519.PublicKey), time.Now())
	if err != nil {
		c.t.Fatal(err)
	}
	tc, err := identity.TLSCertificate(cert, nd.key)
	if err != nil {
		c.t.Fatal(err)
	}
	cfg, err := identity.NodeClientConfig(c.ca.Verifier(), tc)
	if err != nil {
		c.t.Fatal(err)
	}
	return cfg
}

// anyCurator makes a call any curator serves (GetClusterInfo, SERVE_ANY)
// and returns the address of the curator that served it.
func anyCurator(ctx context.Context, conn *grpc.ClientConn) (string, error) {
	var p peer.Peer
	if _, err := cpb.NewManagementServiceClient(conn).GetClusterInfo(ctx, &cpb.GetClusterInfoRequest{}, grpc.Peer(&p)); err != nil {
		return "", err
	}
	if p.Addr == nil {
		return "", errors.New("no peer recorded")
	}
	return p.Addr.String(), nil
}

// nodeAnyCurator is anyCurator for a node's connection: GetOwnerKey, which
// any curator serves.
func nodeAnyCurator(ctx context.Context, conn *grpc.ClientConn) (string, error) {
	var p peer.Peer
	if _, err := cpb.NewCuratorServiceClient(conn).GetOwnerKey(ctx, &cpb.GetOwnerKeyRequest{}, grpc.Peer(&p)); err != nil {
		return "", err
	}
	if p.Addr == nil {
		return "", errors.New("no peer recorded")
	}
	return p.Addr.String(), nil
}

// servedByAll makes calls any curator serves until each of nds has served
// one: the connection spreads them over every running curator.
func (c *haCluster) servedByAll(conn *grpc.ClientConn, nds []*haNode, call func(context.Context, *grpc.ClientConn) (string, error)) {
	c.t.Helper()
	want := map[string]bool{}
	for _, nd := range nds {
		want[nd.listen.String()] = true
	}
	got := map[string]bool{}
	testutil.Eventually(c.t, waitTimeout, "calls served by every running curator", func() error {
		addr, err := call(ctxT(c.t), conn)
		if err != nil {
			return err
		}
		if !want[addr] {
			return fmt.Errorf("served by %s, which is not running", addr)
		}
		got[addr] = true
		if len(got) < len(want) {
			return fmt.Errorf("served by %d of the %d running curators so far", len(got), len(want))
		}
		return nil
	})
}

// TestAnyCuratorDown stops each of three curators in turn and checks that
// one connection keeps serving every kind of call meanwhile: calls any
// curator serves spread over the two left, calls only the leader serves
// reach the leader (a new one when the stopped curator led), and a Watch
// stream cut by the stop is watched again elsewhere.
func TestAnyCuratorDown(t *testing.T) {
	c := newHACluster(t, 3)
	conn, _ := c.dialT(Config{Endpoints: c.endpoints(), TLS: c.ownerTLS(), Logger: zaptest.NewLogger(t)}, nil)
	nodeConn, _ := c.dialT(Config{Endpoints: c.endpoints(), TLS: c.nodeTLS(c.nodes[0]), Logger: zaptest.NewLogger(t)}, nil)
	c.servedByAll(conn, c.nodes, anyCurator)

	// Each curator in turn, and then a follower, whichever that is: a
	// stopped leader comes back as a follower, so the turns may all
	// stop leaders.
	turns := slices.Clone(c.nodes)
	for _, nd := range c.nodes {
		if !leading(nd) {
			turns = append(turns, nd)
			break
		}
	}
	for i, down := range turns {
		t.Run(fmt.Sprintf("curator %s down", down.id), func(t *testing.T) {
			wasLeader := leading(down)
			// A stream open before the stop.
			ctx, cancel := context.WithCancel(ctxT(t))
			defer cancel()
			w, err := cpb.NewCuratorServiceClient(nodeConn).Watch(ctx, &cpb.WatchRequest{Target: &cpb.WatchRequest_AllNodes{AllNodes: &cpb.AllNodes{}}})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := w.Recv(); err != nil {
				t.Fatal(err)
			}

			c.stopCurator(down)
			var up []*haNode
			for _, nd := range c.nodes {
				if nd != down {
					up = append(up, nd)
				}
			}
			c.servedByAll(conn, up, anyCurator)
			l := c.leader()
			c.servedBy(ctxT(t), conn, l)
			t.Logf("turn %d: curator %s (leader: %t) down; served by the other two, leader %s", i, down.id, wasLeader, l.id)

			// The stream either goes on (it was on another curator)
			// or ends; watching again works either way.
			cancel()
			for {
				if _, err := w.Recv(); err != nil {
					break
				}
			}
			ctx, cancel = context.WithCancel(ctxT(t))
			defer cancel()
			w, err = cpb.NewCuratorServiceClient(nodeConn).Watch(ctx, &cpb.WatchRequest{Target: &cpb.WatchRequest_AllNodes{AllNodes: &cpb.AllNodes{}}})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := w.Recv(); err != nil {
				t.Fatalf("watching with curator %s down: %v", down.id, err)
			}

			c.startCurator(down)
			c.servedByAll(conn, c.nodes, anyCurator)
		})
	}
}

// TestWatchStreamsSpread opens the two Watch streams a node holds (its own
// record, and all nodes) from many nodes' connections, and checks that the
// leader holds at most half of them. Before connections balanced the calls
// any curator serves, every stream went to the leader.
func TestWatchStreamsSpread(t *testing.T) {
	const clients = 12
	c := newHACluster(t, 3)
	l := c.leader()
	var conns []*grpc.ClientConn
	for i := range clients {
		conn, _ := c.dialT(Config{Endpoints: c.endpoints(), TLS: c.nodeTLS(c.nodes[i%len(c.nodes)])}, nil)
		// As a node is once it runs: connected to every curator.
		c.servedByAll(conn, c.nodes, nodeAnyCurator)
		conns = append(conns, conn)
	}

	ctx, cancel := context.WithCancel(ctxT(t))
	defer cancel()
	type stream struct {
		s    grpc.ClientStream
		peer *peer.Peer
	}
	var streams []stream
	for i, conn := range conns {
		self := c.nodes[i%len(c.nodes)].id
		for _, req := range []*cpb.WatchRequest{
			{Target: &cpb.WatchRequest_NodeId{NodeId: self}},
			{Target: &cpb.WatchRequest_AllNodes{AllNodes: &cpb.AllNodes{}}},
		} {
			p := &peer.Peer{}
			w, err := cpb.NewCuratorServiceClient(conn).Watch(ctx, req, grpc.Peer(p))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := w.Recv(); err != nil {
				t.Fatal(err)
			}
			streams = append(streams, stream{w, p})
		}
	}
	// Every stream is open at once; the peer is recorded when each ends.
	cancel()
	count := map[string]int{}
	for _, s := range streams {
		for {
			if err := s.s.RecvMsg(&cpb.WatchResponse{}); err != nil {
				if errors.Is(err, io.EOF) {
					t.Fatal("a Watch stream ended without an error")
				}
				break
			}
		}
		if s.peer.Addr == nil {
			t.Fatal("no peer recorded")
		}
		count[s.peer.Addr.String()]++
	}
	t.Logf("Watch streams per curator (leader %s): %v", l.listen, count)
	if n := count[l.listen.String()]; n > len(streams)/2 {
		t.Errorf("the leader holds %d of %d Watch streams, want at most half", n, len(streams))
	}
	if len(count) != len(c.nodes) {
		t.Errorf("the streams went to %d curators, want all %d", len(count), len(c.nodes))
	}
}
