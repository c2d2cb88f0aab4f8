package client

import (
	"context"
	"crypto/ed25519"
	"crypto/tls"
	"errors"
	"fmt"
	"net/netip"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
	"google.golang.org/protobuf/proto"

	cpb "github.com/polis-os/polis/api/curator/v1"
	"github.com/polis-os/polis/consensus"
	"github.com/polis-os/polis/curator"
	"github.com/polis-os/polis/event"
	"github.com/polis-os/polis/identity"
	"github.com/polis-os/polis/internal/testutil"
	"github.com/polis-os/polis/supervisor/supervisortest"
)

// testLeaseTTL keeps failovers after a lost lease short (etcd counts whole
// seconds).
const testLeaseTTL = 2 * time.Second

// haCluster is a control plane of several nodes on one machine: a
// consensus member and a curator per node, each on its own loopback
// address, over real etcd and real mTLS.
type haCluster struct {
	t        testing.TB
	nodes    []*haNode
	ca       *identity.CA
	ownerKey ed25519.PrivateKey
}

// haNode is one control-plane node. Its curator always listens on the same
// address, so that a restarted curator is found where it was.
type haNode struct {
	id        string
	key       ed25519.PrivateKey
	consCfg   consensus.Config
	consensus *consensus.Service
	stopCons  func()
	etcd      *clientv3.Client
	listen    netip.AddrPort
	curator   *curator.Service // nil while stopped
	stopCur   func()
}

// newHACluster forms an n-member consensus (one bootstraps, the others join
// as learners and promote themselves), bootstraps the curator state once,
// and starts a curator on every node.
func newHACluster(t testing.TB, n int) *haCluster {
	t.Helper()
	c := &haCluster{t: t, ownerKey: mustKey(t)}
	var first *consensus.Status
	for i, ip := range subnets.Addrs(n) {
		key := mustKey(t)
		nd := &haNode{id: identity.NodeID(key.Public().(ed25519.PublicKey)), key: key, listen: testutil.FreePort(t, ip)}
		nd.consCfg = consensus.Config{Name: nd.id, DataDir: t.TempDir(), PeerAddress: testutil.FreePort(t, ip).String()}
		if i == 0 {
			nd.consCfg.Bootstrap = true
		} else {
			// The peer key is not the node key: consensus and the curator
			// have separate CAs and credentials.
			peerKey := mustKey(t)
			jd, err := first.AddLearner(ctxT(t), nd.id, nd.consCfg.PeerAddress, peerKey.Public().(ed25519.PublicKey))
			if err != nil {
				t.Fatalf("adding %s as a learner: %v", nd.id, err)
			}
			nd.consCfg.PeerKey, nd.consCfg.Join = peerKey, jd
		}
		st := c.startConsensus(nd)
		if i == 0 {
			first = st
		}
		c.nodes = append(c.nodes, nd)
	}

	boot := c.nodes[0]
	if _, err := curator.Bootstrap(ctxT(t), boot.etcd, curator.BootstrapParams{
		OwnerKey:   c.ownerKey.Public().(ed25519.PublicKey),
		NodeKey:    boot.key.Public().(ed25519.PublicKey),
		NodeStatus: &cpb.NodeStatus{ExternalAddress: boot.listen.Addr().String()},
	}, time.Now()); err != nil {
		t.Fatalf("bootstrap: %v", err)
	}
	var err error
	if c.ca, err = identity.LoadCA(ctxT(t), boot.etcd); err != nil {
		t.Fatal(err)
	}
	// Only a node whose record holds ConsensusMember gets a curator
	// certificate: record the others as the curator records a node it
	// gave the role (the etcd membership was made above).
	for _, nd := range c.nodes[1:] {
		rec, err := proto.Marshal(&cpb.Node{
			Id:        nd.id,
			PublicKey: nd.key.Public().(ed25519.PublicKey),
			State:     cpb.NodeState_NODE_STATE_UP,
			Roles:     &cpb.Roles{ConsensusMember: &cpb.ConsensusMemberRole{}},
			Status:    &cpb.NodeStatus{ExternalAddress: nd.listen.Addr().String()},
		})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := boot.etcd.Put(ctxT(t), "nodes/"+nd.id, string(rec)); err != nil {
			t.Fatalf("recording %s: %v", nd.id, err)
		}
	}
	for _, nd := range c.nodes {
		c.startCurator(nd)
	}
	c.leader()
	return c
}

func mustKey(t testing.TB) ed25519.PrivateKey {
	t.Helper()
	k, err := identity.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// startConsensus starts (or restarts, from its data) nd's member and waits
// until it votes.
func (c *haCluster) startConsensus(nd *haNode) *consensus.Status {
	c.t.Helper()
	svc, err := consensus.New(nd.consCfg)
	if err != nil {
		c.t.Fatal(err)
	}
	nd.consensus = svc
	nd.stopCons = supervisortest.Harness(c.t, svc.Run)
	st, err := event.Get(ctxT(c.t), svc.Status(), event.Filter(consensus.IsVoter))
	if err != nil {
		c.t.Fatalf("waiting for %s to vote: %v", nd.id, err)
	}
	// A client works only as long as the member's run that made it.
	cli, err := st.ClientFor("curator")
	if err != nil {
		c.t.Fatal(err)
	}
	c.t.Cleanup(func() { cli.Close() })
	nd.etcd = cli
	return st
}

// stopConsensus stops nd's member and waits until it has, cutting its
// curator off from etcd.
func (c *haCluster) stopConsensus(nd *haNode) {
	c.t.Helper()
	nd.stopCons()
	if _, err := event.Get(ctxT(c.t), nd.consensus.Status(), event.Filter(func(s *consensus.Status) bool { return s.State == consensus.StateStopped })); err != nil {
		c.t.Fatalf("waiting for %s's consensus to stop: %v", nd.id, err)
	}
}

// startCurator starts nd's curator and waits until it serves.
func (c *haCluster) startCurator(nd *haNode) {
	c.t.Helper()
	svc, err := curator.New(curator.Config{
		Client:        nd.etcd,
		Consensus:     nd.consensus.Status(),
		NodeKey:       nd.key,
		ListenAddress: nd.listen.String(),
		LeaseTTL:      testLeaseTTL,
	})
	if err != nil {
		c.t.Fatal(err)
	}
	nd.curator = svc
	nd.stopCur = supervisortest.Harness(c.t, svc.Run)
	if _, err := event.Get(ctxT(c.t), svc.Status()); err != nil {
		c.t.Fatalf("waiting for %s's curator to serve: %v", nd.id, err)
	}
	// Once set, the leadership view stays set, so leading never waits.
	if _, err := event.Get(ctxT(c.t), svc.Leader()); err != nil {
		c.t.Fatalf("waiting for %s's curator to stand for election: %v", nd.id, err)
	}
}

// heal restarts nd's consensus member after stopConsensus, and its
// curator with a client of the new run, as the node's control-plane worker
// does when consensus restarts.
func (c *haCluster) heal(nd *haNode) {
	c.t.Helper()
	c.stopCurator(nd)
	c.startConsensus(nd)
	c.startCurator(nd)
}

// stopCurator cancels nd's curator. It does not wait: the test harness
// does at the end of the test.
func (c *haCluster) stopCurator(nd *haNode) {
	nd.stopCur()
	nd.curator = nil
}

// leading reports whether nd's curator leads now.
func leading(nd *haNode) bool {
	if nd.curator == nil {
		return false
	}
	st, err := event.Get(context.Background(), nd.curator.Leader())
	return err == nil && st.Leading != nil
}

// leader waits until exactly one running curator leads and returns its node.
func (c *haCluster) leader() *haNode {
	c.t.Helper()
	var l *haNode
	testutil.Eventually(c.t, waitTimeout, "one curator leading", func() error {
		var ls []*haNode
		for _, nd := range c.nodes {
			if leading(nd) {
				ls = append(ls, nd)
			}
		}
		if len(ls) != 1 {
			return fmt.Errorf("%d curators lead", len(ls))
		}
		l = ls[0]
		return nil
	})
	return l
}

// endpoints are every node's curator endpoint.
func (c *haCluster) endpoints() []*cpb.CuratorEndpoint {
	var eps []*cpb.CuratorEndpoint
	for _, nd := range c.nodes {
		eps = append(eps, &cpb.CuratorEndpoint{NodeId: nd.id, Address: nd.listen.Addr().String(), Port: uint32(nd.listen.Port())})
	}
	return eps
}

// ownerTLS is the owner's client configuration, with a certificate
// straight from the CA.
func (c *haCluster) ownerTLS() *tls.Config {
	c.t.Helper()
	return ownerClientTLS(c.t, c.ca, c.ownerKey)
}

// ownerClientTLS is the client configuration of an owner holding key, with
// a certificate straight from ca.
func ownerClientTLS(t testing.TB, ca *identity.CA, key ed25519.PrivateKey) *tls.Config {
	t.Helper()
	cert, err := ca.IssueUser(curator.OwnerUserName, key.Public().(ed25519.PublicKey), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	tc, err := identity.TLSCertificate(cert, key)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := identity.UserClientConfig(ca.Verifier(), tc)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// follower is the endpoint of a curator other than l's.
func (c *haCluster) follower(l *haNode) *cpb.CuratorEndpoint {
	for _, ep := range c.endpoints() {
		if ep.NodeId != l.id {
			return ep
		}
	}
	c.t.Fatal("the cluster has no curator but the leader")
	return nil
}

// direct is a plain connection to one curator, bypassing the routing.
func (c *haCluster) direct(nd *haNode) *grpc.ClientConn {
	c.t.Helper()
	conn, err := grpc.NewClient(nd.listen.String(), grpc.WithTransportCredentials(credentials.NewTLS(c.ownerTLS())))
	if err != nil {
		c.t.Fatal(err)
	}
	c.t.Cleanup(func() { conn.Close() })
	return conn
}

// leaderOnly makes a call only the leader serves (GetRegisterTicket,
// SERVE_LEADER) and returns the address of the curator that served it.
func leaderOnly(ctx context.Context, conn *grpc.ClientConn) (string, error) {
	var p peer.Peer
	_, err := cpb.NewManagementServiceClient(conn).GetRegisterTicket(ctx, &cpb.GetRegisterTicketRequest{}, grpc.Peer(&p))
	if err != nil {
		return "", err
	}
	if p.Addr == nil {
		return "", errors.New("no peer recorded")
	}
	return p.Addr.String(), nil
}

// dialRouter is New for tests, keeping the router: the connection closes
// with the test. distort, if set, replaces the answers of discovery.
func dialRouter(t testing.TB, cfg Config, distort func(*cpb.GetLeaderResponse) *cpb.GetLeaderResponse) (*grpc.ClientConn, *router) {
	t.Helper()
	if err := cfg.validate(); err != nil {
		t.Fatal(err)
	}
	r := newRouter(cfg)
	r.distort = distort
	conn, err := r.dial()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn, r
}

// newTestResolver is a resolver over cfg for calling discovery directly,
// without a connection: its probe connections close with the test.
func newTestResolver(t testing.TB, cfg Config) *leaderResolver {
	t.Helper()
	if err := cfg.validate(); err != nil {
		t.Fatal(err)
	}
	lr := &leaderResolver{r: newRouter(cfg), probes: map[netip.AddrPort]*grpc.ClientConn{}, down: map[netip.AddrPort]bool{}}
	t.Cleanup(func() {
		for _, c := range lr.probes {
			c.Close()
		}
	})
	return lr
}
