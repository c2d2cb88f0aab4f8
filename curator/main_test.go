package curator

import (
	"context"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"

	"github.com/polis-os/polis/consensus"
	"github.com/polis-os/polis/event"
	"github.com/polis-os/polis/internal/testutil"
	"github.com/polis-os/polis/supervisor/supervisortest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, testutil.EtcdLeakOptions()...)
}

const waitTimeout = 60 * time.Second

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	t.Cleanup(cancel)
	return ctx
}

// Every test cluster of this package gets its own loopback address,
// 127.25.<n>.1, so that nothing is shared between tests or packages.
var subnets = testutil.Subnets{Octet: 25}

func freeAddress(t testing.TB) string {
	t.Helper()
	return testutil.FreePort(t, subnets.Addrs(1)[0]).String()
}

// startConsensus bootstraps a one-member etcd and returns a client in the
// curator's namespace. Everything stops when the test ends.
func startConsensus(t testing.TB) *clientv3.Client {
	t.Helper()
	return curatorClient(t, startConsensusStatus(t))
}

// startConsensusStatus is startConsensus, returning the member's status.
func startConsensusStatus(t testing.TB) *consensus.Status {
	t.Helper()
	svc, err := consensus.New(consensus.Config{
		Name:        "one",
		DataDir:     t.TempDir(),
		PeerAddress: freeAddress(t),
		Bootstrap:   true,
	})
	if err != nil {
		t.Fatal(err)
	}
	supervisortest.Harness(t, svc.Run)
	st, err := event.Get(ctxT(t), svc.Status(), event.Filter(consensus.IsVoter))
	if err != nil {
		t.Fatalf("waiting for consensus: %v", err)
	}
	return st
}

// curatorClient is a new client of st in the curator's namespace, closed
// when the test ends.
func curatorClient(t testing.TB, st *consensus.Status) *clientv3.Client {
	t.Helper()
	cli, err := st.ClientFor("curator")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}
