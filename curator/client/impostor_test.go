package client

import (
	"context"
	"crypto/ed25519"
	"crypto/tls"
	"crypto/x509"
	"net"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"

	cpb "github.com/polis-os/polis/api/curator/v1"
	"github.com/polis-os/polis/event"
	"github.com/polis-os/polis/identity"
	"github.com/polis-os/polis/internal/testutil"
)

// fakeCurator answers GetLeader naming itself and accepts every
// ApproveNode: what a node that wants to pass for a curator would serve.
type fakeCurator struct {
	cpb.UnimplementedCuratorServiceServer
	cpb.UnimplementedManagementServiceServer
	self     *cpb.CuratorEndpoint
	approved atomic.Int32
	// electing makes GetLeader answer as a curator does during an
	// election: UNAVAILABLE, no leader known.
	electing bool
}

func (f *fakeCurator) GetLeader(context.Context, *cpb.GetLeaderRequest) (*cpb.GetLeaderResponse, error) {
	if f.electing {
		return nil, status.Error(codes.Unavailable, "no leader is known (an election is under way)")
	}
	return &cpb.GetLeaderResponse{Leader: f.self, Responder: f.self}, nil
}

func (f *fakeCurator) ApproveNode(context.Context, *cpb.ApproveNodeRequest) (*cpb.ApproveNodeResponse, error) {
	f.approved.Add(1)
	return &cpb.ApproveNodeResponse{}, nil
}

// serveFake serves f on ip with cert, and returns its endpoint.
func serveFake(t *testing.T, f *fakeCurator, id string, ip netip.Addr, cert tls.Certificate) *cpb.CuratorEndpoint {
	t.Helper()
	ap := testutil.FreePort(t, ip)
	lis, err := net.Listen("tcp", ap.String())
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(grpc.Creds(credentials.NewTLS(&tls.Config{MinVersion: tls.VersionTLS13, Certificates: []tls.Certificate{cert}, ClientAuth: tls.RequestClientCert})))
	cpb.RegisterCuratorServiceServer(srv, f)
	cpb.RegisterManagementServiceServer(srv, f)
	var wg sync.WaitGroup
	wg.Go(func() { srv.Serve(lis) })
	t.Cleanup(func() {
		srv.Stop()
		wg.Wait()
	})
	f.self = &cpb.CuratorEndpoint{NodeId: id, Address: ap.Addr().String(), Port: uint32(ap.Port())}
	return f.self
}

// TestClientRefusesImpostor: a node with a valid node certificate of the
// cluster (even a decommissioned one's) cannot pass for a curator to the
// curator client: discovery fails and no call reaches it. The same server
// with a curator certificate, which only a consensus member's curator
// issues itself, is followed.
func TestClientRefusesImpostor(t *testing.T) {
	now := time.Now()
	ca, err := identity.NewCA(now)
	if err != nil {
		t.Fatal(err)
	}
	ownerTLS := ownerClientTLS(t, ca, mustKey(t))
	nodeKey := mustKey(t)
	id := identity.NodeID(nodeKey.Public().(ed25519.PublicKey))

	for _, tc := range []struct {
		name   string
		issue  func(ip netip.Addr) (tls.Certificate, error)
		follow bool
	}{
		{"a node certificate", func(netip.Addr) (tls.Certificate, error) {
			c, err := ca.IssueNode(nodeKey.Public().(ed25519.PublicKey), now)
			if err != nil {
				return tls.Certificate{}, err
			}
			return identity.TLSCertificate(c, nodeKey)
		}, false},
		{"a curator certificate", func(ip netip.Addr) (tls.Certificate, error) {
			c, err := ca.IssueCurator(nodeKey.Public().(ed25519.PublicKey), []netip.Addr{ip}, now)
			if err != nil {
				return tls.Certificate{}, err
			}
			return identity.TLSCertificate(c, nodeKey)
		}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &fakeCurator{}
			ip := subnets.Addrs(1)[0]
			cert, err := tc.issue(ip)
			if err != nil {
				t.Fatal(err)
			}
			ep := serveFake(t, f, id, ip, cert)
			conn, r := dialRouter(t, Config{Endpoints: []*cpb.CuratorEndpoint{ep}, TLS: ownerTLS}, nil)
			approveThrough(t, conn, r, f, id, tc.follow, "a curator")
		})
	}
}

// TestElectingCuratorNotDown checks that discovery tells a curator that
// answers, if only to say that it knows no leader yet, from one that does
// not answer: only the second is asked last in later rounds, and a
// follower naming the first as the leader is believed. Counting the first
// as down left a node's connection without a leader for a minute when the
// new leader was still publishing its own election (node's
// TestThreeNodeCluster).
func TestElectingCuratorNotDown(t *testing.T) {
	now := time.Now()
	ca, err := identity.NewCA(now)
	if err != nil {
		t.Fatal(err)
	}
	key := mustKey(t)
	ips := subnets.Addrs(2)
	cc, err := ca.IssueCurator(key.Public().(ed25519.PublicKey), []netip.Addr{ips[0]}, now)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := identity.TLSCertificate(cc, key)
	if err != nil {
		t.Fatal(err)
	}
	electing := serveFake(t, &fakeCurator{electing: true}, identity.NodeID(key.Public().(ed25519.PublicKey)), ips[0], cert)
	deadAP := testutil.FreePort(t, ips[1]) // nothing listens there
	dead := &cpb.CuratorEndpoint{NodeId: "node-dead", Address: deadAP.Addr().String(), Port: uint32(deadAP.Port())}

	ownerTLS := ownerClientTLS(t, ca, mustKey(t))
	lr := newTestResolver(t, Config{Endpoints: []*cpb.CuratorEndpoint{electing, dead}, TLS: ownerTLS})
	if _, _, err := lr.discover(ctxT(t), nil); err == nil || !strings.Contains(err.Error(), "no leader is known") {
		t.Fatalf("discovery: %v, want the electing curator's answer", err)
	}
	if lr.down[addrPort(electing)] {
		t.Error("the curator that answered (no leader known) counts as down")
	}
	if !lr.down[addrPort(dead)] {
		t.Error("the curator that did not answer does not count as down")
	}
}

// TestClientFollowsCuratorUnderAnotherID: a client whose endpoints name
// a curator by a node ID that no longer serves at that address (a
// cluster restored from a backup: new nodes at the old members'
// addresses, with the old CA) follows the curator that serves there
// now, because discovery checks a curator certificate against the
// address it dialled, which every curator certificate names. The
// certificate must still be a curator's, from the cluster's CA, naming
// that address: a node certificate of the cluster, or a curator
// certificate for another address, is refused there as anywhere.
func TestClientFollowsCuratorUnderAnotherID(t *testing.T) {
	now := time.Now()
	ca, err := identity.NewCA(now)
	if err != nil {
		t.Fatal(err)
	}
	ownerTLS := ownerClientTLS(t, ca, mustKey(t))
	stale := identity.NodeID(mustKey(t).Public().(ed25519.PublicKey)) // the ID the client knows
	key := mustKey(t)                                                 // the node serving there now
	pub := key.Public().(ed25519.PublicKey)

	for _, tc := range []struct {
		name   string
		issue  func(ip, other netip.Addr) (*x509.Certificate, error)
		follow bool
	}{
		{"a curator certificate naming the address", func(ip, _ netip.Addr) (*x509.Certificate, error) {
			return ca.IssueCurator(pub, []netip.Addr{ip}, now)
		}, true},
		{"a node certificate", func(netip.Addr, netip.Addr) (*x509.Certificate, error) {
			return ca.IssueNode(pub, now)
		}, false},
		{"a curator certificate naming another address", func(_, other netip.Addr) (*x509.Certificate, error) {
			return ca.IssueCurator(pub, []netip.Addr{other}, now)
		}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ips := subnets.Addrs(2)
			c, err := tc.issue(ips[0], ips[1])
			if err != nil {
				t.Fatal(err)
			}
			cert, err := identity.TLSCertificate(c, key)
			if err != nil {
				t.Fatal(err)
			}
			f := &fakeCurator{}
			ep := serveFake(t, f, identity.NodeID(pub), ips[0], cert)
			known := &cpb.CuratorEndpoint{NodeId: stale, Address: ep.Address, Port: ep.Port}
			conn, r := dialRouter(t, Config{Endpoints: []*cpb.CuratorEndpoint{known}, TLS: ownerTLS}, nil)
			approveThrough(t, conn, r, f, stale, tc.follow, "the curator now at "+ep.Address)
		})
	}
}

// approveThrough calls ApproveNode(id) through conn, which r routes, to the
// fake curator f. With follow, f is a curator to be trusted (where names
// it): the call reaches it and succeeds. Otherwise f is an impostor:
// discovery fails for its certificate, and the call fails without
// reaching it.
func approveThrough(t *testing.T, conn *grpc.ClientConn, r *router, f *fakeCurator, id string, follow bool, where string) {
	t.Helper()
	ctx, cancel := context.WithCancel(ctxT(t))
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := cpb.NewManagementServiceClient(conn).ApproveNode(ctx, &cpb.ApproveNodeRequest{NodeId: id})
		done <- err
	}()
	if follow {
		if err := <-done; err != nil {
			t.Fatalf("ApproveNode through %s: %v", where, err)
		}
		if f.approved.Load() != 1 {
			t.Fatalf("the curator served %d approvals, want 1", f.approved.Load())
		}
		return
	}
	res, err := event.Get(ctx, &r.resolutions, event.Filter(func(res *resolution) bool { return res.err != nil }))
	if err != nil {
		t.Fatalf("waiting for a failed discovery: %v", err)
	}
	if !strings.Contains(res.err.Error(), "certificate") {
		t.Errorf("discovery failed with %v, want a refused certificate", res.err)
	}
	cancel()
	if err := <-done; err == nil {
		t.Fatal("ApproveNode succeeded through an impostor")
	}
	if n := f.approved.Load(); n != 0 {
		t.Fatalf("the impostor served %d approvals", n)
	}
}
