package polisctl

import (
	"context"
	"crypto/ed25519"
	"net/netip"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/polis-os/polis/identity"
	"github.com/polis-os/polis/internal/testutil"
	"github.com/polis-os/polis/node/nodetest"
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

// testCluster is a one-node cluster and its owner key.
type testCluster struct {
	first    *nodetest.Node
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
	first := nodetest.StartNode(t, addrs[0], nodetest.BootstrapParameters(ownerKey))
	first.Credentials(t)
	return &testCluster{first: first, ownerKey: ownerKey, addrs: addrs}
}
