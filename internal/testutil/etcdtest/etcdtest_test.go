package etcdtest

import (
	"context"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/polis-os/polis/internal/testutil"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m, testutil.EtcdLeakOptions()...) }

// etcdtest's tests are the only ones that use 127.88.
var subnets = testutil.Subnets{Octet: 88}

// A member serves a put and a get, over TCP and over a Unix socket.
func TestStart(t *testing.T) {
	for _, unix := range []bool{false, true} {
		m := Start(t, Options{Name: "etcdtest", Peer: testutil.FreePort(t, subnets.Addrs(1)[0]), UnixClient: unix, FastElections: true})
		cli := m.Client(t)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if _, err := cli.Put(ctx, "k", "v"); err != nil {
			t.Fatalf("put through %s: %v", m.Endpoint, err)
		}
		resp, err := cli.Get(ctx, "k")
		if err != nil || len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != "v" {
			t.Fatalf("get through %s: %v, %v", m.Endpoint, resp, err)
		}
	}
}
