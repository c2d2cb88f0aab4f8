package curator

import (
	"crypto/ed25519"
	"crypto/tls"
	"crypto/x509"
	"net/netip"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	cpb "github.com/polis-os/polis/api/curator/v1"
	"github.com/polis-os/polis/consensus"
	"github.com/polis-os/polis/event"
	"github.com/polis-os/polis/identity"
	"github.com/polis-os/polis/supervisor/supervisortest"
)

// testCluster is a bootstrapped cluster with one curator, served over real
// mTLS on a loopback address, and the credentials to call it as each kind
// of caller.
type testCluster struct {
	t         testing.TB
	etcd      *clientv3.Client
	consensus *consensus.Service
	curator   *Service
	status    *Status
	ca        *identity.CA
	ownerKey  ed25519.PrivateKey
	nodeKey   ed25519.PrivateKey // the first node's
	nodeCert  *x509.Certificate
	// target is the curator the dial helpers call: the first one, the
	// leader, when unset (see at).
	target netip.AddrPort
	// stopConsensus stops the etcd member, without waiting.
	stopConsensus func()
	// stopCurator stops the first curator, without waiting.
	stopCurator func()
}

// newTestCluster bootstraps a cluster and starts its curator, with the
// curator's Config changed by opts.
func newTestCluster(t testing.TB, opts ...func(*Config)) *testCluster {
	t.Helper()
	peer := freeAddress(t)
	svc, err := consensus.New(consensus.Config{Name: "one", DataDir: t.TempDir(), PeerAddress: peer, Bootstrap: true})
	if err != nil {
		t.Fatal(err)
	}
	stopConsensus := supervisortest.Harness(t, svc.Run)
	st, err := event.Get(ctxT(t), svc.Status(), event.Filter(consensus.IsVoter))
	if err != nil {
		t.Fatalf("waiting for consensus: %v", err)
	}
	cli, err := st.ClientFor("curator")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })

	c := &testCluster{t: t, etcd: cli, consensus: svc, ownerKey: mustKey(t), nodeKey: mustKey(t), stopConsensus: stopConsensus}
	ip := netip.MustParseAddrPort(peer).Addr()
	c.nodeCert, err = Bootstrap(ctxT(t), cli, BootstrapParams{
		OwnerKey:   c.ownerKey.Public().(ed25519.PublicKey),
		NodeKey:    c.nodeKey.Public().(ed25519.PublicKey),
		NodeStatus: &cpb.NodeStatus{ExternalAddress: ip.String()},
	}, time.Now())
	if err != nil {
		t.Fatalf("bootstrap: %v", err)
	}
	c.ca, err = identity.LoadCA(ctxT(t), cli)
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{
		Client:        cli,
		Consensus:     svc.Status(),
		NodeKey:       c.nodeKey,
		ListenAddress: netip.AddrPortFrom(ip, 0).String(),
	}
	for _, o := range opts {
		o(&cfg)
	}
	c.curator, err = New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	c.stopCurator = supervisortest.Harness(t, c.curator.Run)
	c.status, err = event.Get(ctxT(t), c.curator.Status())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := event.Get(ctxT(t), &c.curator.leader, event.Filter(func(l *leaderState) bool { return l != nil })); err != nil {
		t.Fatalf("waiting for the curator to lead: %v", err)
	}
	// The new leader stores the Kubernetes PKI; tests that compare the
	// store before and after a call start once it has.
	leaderKubernetesPKI(t, c.curator)
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

// at is c with its dial helpers calling the curator at addr instead.
func (c *testCluster) at(addr netip.AddrPort) *testCluster {
	d := *c
	d.target = addr
	return &d
}

// startFollower starts a second curator on the cluster's etcd, on a node
// of its own that holds ConsensusMember (all a curator needs to serve),
// and waits until it serves. The first curator leads, so this one
// follows. opts change its Config.
func (c *testCluster) startFollower(opts ...func(*Config)) *Service {
	c.t.Helper()
	n := c.seedNode(cpb.NodeState_NODE_STATE_UP)
	n.node.Roles = &cpb.Roles{ConsensusMember: &cpb.ConsensusMemberRole{}}
	c.putNode(n.node)
	cfg := Config{
		Client:        c.etcd,
		Consensus:     c.consensus.Status(),
		NodeKey:       n.key,
		ListenAddress: netip.AddrPortFrom(c.status.Address.Addr(), 0).String(),
	}
	for _, o := range opts {
		o(&cfg)
	}
	f, err := New(cfg)
	if err != nil {
		c.t.Fatal(err)
	}
	supervisortest.Harness(c.t, f.Run)
	if _, err := event.Get(ctxT(c.t), f.Status()); err != nil {
		c.t.Fatalf("waiting for the follower to serve: %v", err)
	}
	return f
}

// followerAddress is where follower f serves.
func followerAddress(t testing.TB, f *Service) netip.AddrPort {
	t.Helper()
	st, err := event.Get(ctxT(t), f.Status())
	if err != nil {
		t.Fatal(err)
	}
	return st.Address
}

// dial connects to the target curator with a TLS configuration.
func (c *testCluster) dial(cfg *tls.Config) *grpc.ClientConn {
	c.t.Helper()
	addr := c.status.Address
	if c.target.IsValid() {
		addr = c.target
	}
	conn, err := grpc.NewClient(addr.String(), grpc.WithTransportCredentials(credentials.NewTLS(cfg)))
	if err != nil {
		c.t.Fatal(err)
	}
	c.t.Cleanup(func() { conn.Close() })
	return conn
}

// asOwner calls as the owner, with a user certificate issued straight
// from the CA.
func (c *testCluster) asOwner() *grpc.ClientConn {
	c.t.Helper()
	cert, err := c.ca.IssueUser(OwnerUserName, c.ownerKey.Public().(ed25519.PublicKey), time.Now())
	if err != nil {
		c.t.Fatal(err)
	}
	return c.asUserCert(cert, c.ownerKey)
}

func (c *testCluster) asUserCert(cert *x509.Certificate, key ed25519.PrivateKey) *grpc.ClientConn {
	c.t.Helper()
	tc, err := identity.TLSCertificate(cert, key)
	if err != nil {
		c.t.Fatal(err)
	}
	cfg, err := identity.UserClientConfig(c.ca.Verifier(), tc)
	if err != nil {
		c.t.Fatal(err)
	}
	return c.dial(cfg)
}

// asNode calls as a node holding cert for key.
func (c *testCluster) asNode(cert *x509.Certificate, key ed25519.PrivateKey) *grpc.ClientConn {
	c.t.Helper()
	tc, err := identity.TLSCertificate(cert, key)
	if err != nil {
		c.t.Fatal(err)
	}
	cfg, err := identity.NodeClientConfig(c.ca.Verifier(), tc)
	if err != nil {
		c.t.Fatal(err)
	}
	return c.dial(cfg)
}

// asFirstNode calls as the bootstrapped node.
func (c *testCluster) asFirstNode() *grpc.ClientConn {
	return c.asNode(c.nodeCert, c.nodeKey)
}

// asKeyHolder calls with a self-signed certificate for key.
func (c *testCluster) asKeyHolder(key ed25519.PrivateKey) *grpc.ClientConn {
	c.t.Helper()
	cfg, err := identity.KeyHolderClientConfig(c.ca.Verifier(), key)
	if err != nil {
		c.t.Fatal(err)
	}
	return c.dial(cfg)
}

// anonymous calls without a client certificate.
func (c *testCluster) anonymous() *grpc.ClientConn {
	c.t.Helper()
	pool := x509.NewCertPool()
	pool.AddCert(c.ca.Certificate())
	return c.dial(&tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS13})
}
