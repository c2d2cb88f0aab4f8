package etcd

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/polis-os/polis/internal/testutil"
)

// A plain (no TLS) embedded etcd cluster for testing the backend. Members
// listen on their own loopback address, 127.61.<cluster>.<member>, so that no
// two clusters of this package, and no other package's tests, share an
// address and port.

var subnets = testutil.Subnets{Octet: 61}

type member struct {
	name    string
	dir     string
	peerURL url.URL
	client  url.URL
	initial string
	etcd    *embed.Etcd
	logger  *zap.Logger
}

type cluster struct {
	t       testing.TB
	members []*member
}

func newCluster(t testing.TB, n int) *cluster {
	t.Helper()
	ips := subnets.Addrs(n)
	c := &cluster{t: t}
	var initial []string
	for i := range n {
		ip := ips[i].String()
		m := &member{
			name:    fmt.Sprintf("m%d", i),
			dir:     t.TempDir(),
			peerURL: url.URL{Scheme: "http", Host: ip + ":2380"},
			client:  url.URL{Scheme: "http", Host: ip + ":2379"},
			logger:  zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel)).Named(fmt.Sprintf("m%d", i)),
		}
		c.members = append(c.members, m)
		initial = append(initial, m.name+"="+m.peerURL.String())
	}
	for _, m := range c.members {
		m.initial = strings.Join(initial, ",")
	}
	// Members of a new cluster must start together: each waits for a quorum.
	errs := make(chan error, n)
	for _, m := range c.members {
		go func() { errs <- m.start("new") }()
	}
	for range n {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(c.stop)
	for _, m := range c.members {
		m.waitReady(t)
	}
	return c
}

func (m *member) start(state string) error {
	cfg := embed.NewConfig()
	cfg.Name = m.name
	cfg.Dir = m.dir
	cfg.ListenPeerUrls = []url.URL{m.peerURL}
	cfg.AdvertisePeerUrls = []url.URL{m.peerURL}
	cfg.ListenClientUrls = []url.URL{m.client}
	cfg.AdvertiseClientUrls = []url.URL{m.client}
	cfg.InitialCluster = m.initial
	cfg.InitialClusterToken = "event-etcd-test"
	cfg.ClusterState = state
	cfg.TickMs = 20
	cfg.ElectionMs = 200
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(m.logger)
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return fmt.Errorf("starting %s: %w", m.name, err)
	}
	m.etcd = e
	return nil
}

func (m *member) waitReady(t testing.TB) {
	t.Helper()
	select {
	case <-m.etcd.Server.ReadyNotify():
	case err := <-m.etcd.Err():
		t.Fatalf("%s failed: %v", m.name, err)
	case <-time.After(60 * time.Second):
		t.Fatalf("%s not ready after 60s", m.name)
	}
}

// stopMember stops one member; restartMember brings it back from its data.
func (c *cluster) stopMember(i int) {
	m := c.members[i]
	if m.etcd != nil {
		m.etcd.Close()
		m.etcd = nil
	}
}

func (c *cluster) restartMember(i int) {
	c.t.Helper()
	m := c.members[i]
	if err := m.start("existing"); err != nil {
		c.t.Fatal(err)
	}
	m.waitReady(c.t)
}

func (c *cluster) stop() {
	for i := range c.members {
		c.stopMember(i)
	}
}

// client returns a client that only talks to the given members.
func (c *cluster) client(t testing.TB, members ...int) *clientv3.Client {
	t.Helper()
	var eps []string
	for _, i := range members {
		eps = append(eps, c.members[i].client.String())
	}
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   eps,
		DialTimeout: 5 * time.Second,
		Logger:      zap.NewNop(),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

// leader returns the index of the current leader, polling until there is one.
func (c *cluster) leader(t testing.TB) int {
	t.Helper()
	leader := -1
	testutil.Eventually(t, 30*time.Second, "a leader", testutil.Holds(func() bool {
		for i, m := range c.members {
			if m.etcd != nil && m.etcd.Server.Leader() != 0 && m.etcd.Server.MemberID() == m.etcd.Server.Leader() {
				leader = i
				return true
			}
		}
		return false
	}))
	return leader
}

func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}
