// Package etcdtest starts the one-member embedded etcd that the tests of
// several packages store into (identity's certificates, kube/pki's
// cluster PKI, the kube packages' confined data), so that each does not
// carry its own copy of the configuration and of the wait for readiness.
//
// A member listens for peers on a test's own loopback address (see
// testutil.Subnets) and for clients on that address too or on a Unix
// socket in its data directory; it is stopped, and its data removed, when
// the test ends. Tests of a cluster of several members (consensus,
// event/etcd) run them their own way: they stop and restart members.
//
// It is its own package, not part of internal/testutil, so that only the
// tests that run etcd link its server.
package etcdtest

import (
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/polis-os/polis/internal/testutil"
)

// Options say how to start a member.
type Options struct {
	// Name is the member's name and its cluster token's prefix.
	Name string
	// Peer is where the member listens for peers: a test's own loopback
	// address, with a port, or with port 0 for a free one.
	Peer netip.AddrPort
	// UnixClient puts the client listener on a Unix socket in the member's
	// directory; otherwise it is a free port on Peer's address.
	UnixClient bool
	// FastElections makes raft tick every 10 ms (elections 100 ms), for
	// tests that time out soon; etcd's defaults otherwise.
	FastElections bool
	// Timeout bounds the wait for the member to serve and a client's dial
	// (two minutes if zero: the machine running the tests may be busy).
	Timeout time.Duration
}

// Member is a running one-member etcd.
type Member struct {
	// Etcd is the embedded server.
	Etcd *embed.Etcd
	// Endpoint is the client endpoint: host:port, or unix://path.
	Endpoint string

	timeout time.Duration
}

// Start starts a member as o says, waits until it serves, and stops it
// when the test ends.
func Start(tb testing.TB, o Options) *Member {
	tb.Helper()
	if o.Timeout == 0 {
		o.Timeout = 2 * time.Minute
	}
	if o.Peer.Port() == 0 {
		o.Peer = testutil.FreePort(tb, o.Peer.Addr())
	}
	dir := tb.TempDir()
	cfg := embed.NewConfig()
	cfg.Name = o.Name
	cfg.Dir = filepath.Join(dir, "data")
	if err := os.Mkdir(cfg.Dir, 0o700); err != nil { // as etcd wants its data directory
		tb.Fatal(err)
	}
	peer := url.URL{Scheme: "http", Host: o.Peer.String()}
	cfg.ListenPeerUrls = []url.URL{peer}
	cfg.AdvertisePeerUrls = []url.URL{peer}
	cfg.InitialCluster = cfg.Name + "=" + peer.String()
	cfg.InitialClusterToken = o.Name + "-" + o.Peer.Addr().String()
	client := url.URL{Scheme: "http", Host: testutil.FreePort(tb, o.Peer.Addr()).String()}
	endpoint := client.Host
	if o.UnixClient {
		client = url.URL{Scheme: "unix", Path: filepath.Join(dir, "etcd.sock")}
		endpoint = client.String()
		cfg.ListenClientHttpUrls = nil
	}
	cfg.ListenClientUrls = []url.URL{client}
	cfg.AdvertiseClientUrls = []url.URL{client}
	if o.FastElections {
		cfg.TickMs = 10
		cfg.ElectionMs = 100
	}
	cfg.Logger = "zap"
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zaptest.NewLogger(tb, zaptest.Level(zap.WarnLevel)).Named("etcd"))
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		tb.Fatalf("starting etcd %s on %s: %v", o.Name, o.Peer, err)
	}
	tb.Cleanup(e.Close)
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		tb.Fatalf("etcd %s on %s failed while starting: %v", o.Name, o.Peer, err)
	case <-time.After(o.Timeout):
		tb.Fatalf("etcd %s on %s not ready after %v", o.Name, o.Peer, o.Timeout)
	}
	return &Member{Etcd: e, Endpoint: endpoint, timeout: o.Timeout}
}

// Client returns an unconfined client of m, closed when the test ends.
func (m *Member) Client(tb testing.TB) *clientv3.Client {
	tb.Helper()
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   []string{m.Endpoint},
		DialTimeout: m.timeout,
		Logger:      zap.NewNop(),
	})
	if err != nil {
		tb.Fatalf("connecting to etcd at %s: %v", m.Endpoint, err)
	}
	tb.Cleanup(func() { cli.Close() })
	return cli
}
