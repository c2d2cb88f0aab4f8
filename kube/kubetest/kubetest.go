// Package kubetest holds what the tests of the kube packages, and of the
// kubernetes module, need alike: a real embedded etcd member to confine,
// the Kubernetes bundle built once for all of them, and a gRPC health
// server standing in for containerd's (ContainerdHealth).
package kubetest

import (
	"context"
	"net/netip"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"go.uber.org/goleak"

	"github.com/polis-os/polis/internal/testutil"
	"github.com/polis-os/polis/internal/testutil/etcdtest"
)

// startTimeout bounds the start of the etcd member: generous, because the
// machine running the tests may be busy compiling.
const startTimeout = 2 * time.Minute

// StartEtcd starts a single-member etcd in a temporary directory, with its
// peer listener on peer (a test's own loopback address and free port) and
// its client listener on a unix socket, and returns an unconfined client of
// it. Both are closed when the test ends.
func StartEtcd(t testing.TB, peer netip.AddrPort) *clientv3.Client {
	t.Helper()
	m := etcdtest.Start(t, etcdtest.Options{Name: "kubetest", Peer: peer, UnixClient: true, Timeout: startTimeout})
	return m.Client(t)
}

// AllKeys returns every key in cli's etcd, to check where things landed.
func AllKeys(t testing.TB, cli *clientv3.Client) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	resp, err := cli.Get(ctx, "\x00", clientv3.WithFromKey(), clientv3.WithKeysOnly())
	if err != nil {
		t.Fatalf("listing every key: %v", err)
	}
	var keys []string
	for _, kv := range resp.Kvs {
		keys = append(keys, string(kv.Key))
	}
	return keys
}

// LeakOptions are the goleak options of a package that uses StartEtcd:
// those of internal/testutil for etcd's idle connections.
func LeakOptions() []goleak.Option { return testutil.EtcdLeakOptions() }
