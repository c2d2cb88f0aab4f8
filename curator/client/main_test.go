package client

import (
	"context"
	"testing"
	"time"

	"github.com/polis-os/polis/internal/testutil"
)

// TestMain fails the package if any goroutine outlives the tests. It waits
// up to leakGrace for goroutines to end by themselves: etcd's peer HTTP
// client keeps idle keep-alive connections that last until the peer
// server's read timeout (5s) closes the other end.
func TestMain(m *testing.M) {
	testutil.VerifyTestMainWithin(m, leakGrace)
}

const leakGrace = 15 * time.Second

// waitTimeout bounds every wait of a test. Generous: under -race on busy
// cores an etcd election can take seconds.
const waitTimeout = 60 * time.Second

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	t.Cleanup(cancel)
	return ctx
}

// Each cluster of this package gets its own 127.26.<n>.0/24, one address
// per node.
var subnets = testutil.Subnets{Octet: 26}
