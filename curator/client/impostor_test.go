package client

import (
	"context"
	"crypto/ed25519"
	"crypto/tls"
	"net"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	cpb "github.com/polis-os/polis/api/curator/v1"
	"github.com/polis-os/polis/curator"
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
}

func (f *fakeCurator) GetLeader(context.Context, *cpb.GetLeaderRequest) (*cpb.GetLeaderResponse, error) {
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
	ownerKey := mustKey(t)
	ownerCert, err := ca.IssueUser(curator.OwnerUserName, ownerKey.Public().(ed25519.PublicKey), now)
	if err != nil {
		t.Fatal(err)
	}
	otc, err := identity.TLSCertificate(ownerCert, ownerKey)
	if err != nil {
		t.Fatal(err)
	}
	ownerTLS, err := identity.UserClientConfig(ca.Verifier(), otc)
	if err != nil {
		t.Fatal(err)
	}
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
			cfg := Config{Endpoints: []*cpb.CuratorEndpoint{ep}, TLS: ownerTLS}
			if err := cfg.validate(); err != nil {
				t.Fatal(err)
			}
			r := newRouter(cfg)
			conn, err := r.dial()
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			ctx, cancel := context.WithCancel(ctxT(t))
			defer cancel()
			done := make(chan error, 1)
			go func() {
				_, err := cpb.NewManagementServiceClient(conn).ApproveNode(ctx, &cpb.ApproveNodeRequest{NodeId: id})
				done <- err
			}()
			if tc.follow {
				if err := <-done; err != nil {
					t.Fatalf("ApproveNode through a curator: %v", err)
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
		})
	}
}
