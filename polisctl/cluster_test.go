package polisctl

import (
	"context"
	"crypto/ed25519"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/protobuf/proto"

	nodev1 "github.com/polis-os/polis/api/node/v1"
	"github.com/polis-os/polis/event"
	"github.com/polis-os/polis/identity"
	"github.com/polis-os/polis/internal/testutil"
	"github.com/polis-os/polis/node"
	"github.com/polis-os/polis/roleserve"
	"github.com/polis-os/polis/supervisor"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, testutil.EtcdLeakOptions()...)
}

// Each test cluster lives on 127.28.<n>.1, .2, …: the node agents use
// fixed ports, so every cluster gets addresses no other test uses.
var subnets = testutil.Subnets{Octet: 28}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// testNode is one node agent run in the test.
type testNode struct {
	dir  string
	addr netip.Addr
	node *node.Node
}

func startNode(t *testing.T, addr netip.Addr, p *nodev1.NodeParameters) *testNode {
	t.Helper()
	tn := &testNode{dir: t.TempDir(), addr: addr}
	b, err := proto.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	params := filepath.Join(tn.dir, "parameters.pb")
	if err := os.WriteFile(params, b, 0o600); err != nil {
		t.Fatal(err)
	}
	n, err := node.New(node.Config{
		StorageRoot:       filepath.Join(tn.dir, "storage"),
		Address:           addr,
		ParametersFile:    params,
		LeaseTTL:          2 * time.Second,
		HeartbeatInterval: 500 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	tn.node = n
	supervisor.TestHarness(t, n.Run)
	return tn
}

// credentials waits until the node has its certificate, and returns them.
func (tn *testNode) credentials(t *testing.T) *roleserve.Credentials {
	t.Helper()
	c, err := event.Get(ctxT(t), &tn.node.Values().Credentials, event.Filter(func(c *roleserve.Credentials) bool { return c != nil }))
	if err != nil {
		t.Fatalf("node on %v never got credentials: %v", tn.addr, err)
	}
	return c
}

// curator is where the node's curator listens.
func (tn *testNode) curator() netip.AddrPort {
	return netip.AddrPortFrom(tn.addr, roleserve.DefaultCuratorPort)
}

// testCluster is a one-node cluster and its owner key.
type testCluster struct {
	first    *testNode
	ownerKey ed25519.PrivateKey
	addrs    []netip.Addr
}

// bootstrap starts a cluster of one node, with a fresh owner key, and waits
// until the node has its credentials (its curator serves then).
func bootstrap(t *testing.T) *testCluster {
	t.Helper()
	ownerKey, err := identity.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	addrs := subnets.Addrs(3)
	first := startNode(t, addrs[0], &nodev1.NodeParameters{Cluster: &nodev1.NodeParameters_ClusterBootstrap{
		ClusterBootstrap: &nodev1.ClusterBootstrap{OwnerPublicKey: ownerKey.Public().(ed25519.PublicKey)},
	}})
	first.credentials(t)
	return &testCluster{first: first, ownerKey: ownerKey, addrs: addrs}
}
