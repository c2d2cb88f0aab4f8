// Package kubetest holds what the tests of the kube packages, and of the
// kubernetes module, need alike: a real embedded etcd member to confine,
// and the Kubernetes bundle built once for all of them.
package kubetest

import (
	"context"
	"net/netip"
	"net/url"
	"path/filepath"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"

	"github.com/polis-os/polis/internal/testutil"
	"go.uber.org/goleak"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"
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
	dir := t.TempDir()
	cfg := embed.NewConfig()
	cfg.Name = "kubetest"
	cfg.Dir = filepath.Join(dir, "data")
	peerURL := url.URL{Scheme: "http", Host: peer.String()}
	cfg.ListenPeerUrls = []url.URL{peerURL}
	cfg.AdvertisePeerUrls = []url.URL{peerURL}
	cfg.InitialCluster = cfg.Name + "=" + peerURL.String()
	sock := url.URL{Scheme: "unix", Path: filepath.Join(dir, "etcd.sock")}
	cfg.ListenClientUrls = []url.URL{sock}
	cfg.AdvertiseClientUrls = []url.URL{sock}
	cfg.ListenClientHttpUrls = nil
	cfg.Logger = "zap"
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel)).Named("etcd"))
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		t.Fatalf("starting etcd: %v", err)
	}
	t.Cleanup(e.Close)
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		t.Fatalf("etcd failed while starting: %v", err)
	case <-time.After(startTimeout):
		t.Fatalf("etcd not ready after %v", startTimeout)
	}
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   []string{sock.String()},
		DialTimeout: startTimeout,
		Logger:      zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel)).Named("etcd-client"),
	})
	if err != nil {
		t.Fatalf("connecting to etcd: %v", err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
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
