package etcdproxy

import (
	"context"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/polis-os/polis/event"
	"github.com/polis-os/polis/internal/testutil"
	"github.com/polis-os/polis/kube/kubetest"
	"github.com/polis-os/polis/supervisor"
	"github.com/polis-os/polis/supervisor/supervisortest"
)

// TestMain fails the package if a goroutine outlives the tests (waiting a
// little for etcd's and gRPC's connections to wind down).
func TestMain(m *testing.M) {
	testutil.VerifyTestMainWithin(m, 15*time.Second)
}

// subnets gives each test its own 127.80.N.0/24 for etcd's peer listener.
var subnets = testutil.Subnets{Octet: 80}

// waitTimeout bounds each wait of a test; generous for a loaded machine.
const waitTimeout = time.Minute

const prefix = "/kubernetes/"

// outside are keys around the prefix that no confined call may touch.
var outside = []string{"/", "/curator/leader", "/kubernetes", "/kubernetes0", "/kubernetes2/x", "/kubernetet", "/secret", "\xff"}

// setup starts etcd with the outside keys, and the proxy on a socket, and
// returns the unconfined client and a stock client through the proxy.
func setup(t *testing.T) (raw, confined *clientv3.Client) {
	t.Helper()
	raw = kubetest.StartEtcd(t, testutil.FreePort(t, subnets.Addrs(1)[0]))
	ctx := testCtx(t)
	for _, k := range outside {
		if _, err := raw.Put(ctx, k, "outside"); err != nil {
			t.Fatalf("put %q: %v", k, err)
		}
	}
	p, err := New(Config{Client: raw, Prefix: prefix, Socket: filepath.Join(t.TempDir(), "etcd.sock")})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	s, _ := supervisortest.HarnessTree(t, p.Run)
	if _, err := event.Get(ctx, s.Tree(), event.Filter(func(ts supervisor.TreeState) bool {
		n, ok := ts.Root()
		return ok && n.State == supervisor.StateHealthy
	})); err != nil {
		t.Fatalf("waiting for the proxy to serve: %v", err)
	}
	confined, err = clientv3.New(clientv3.Config{
		Endpoints:   []string{p.Endpoint()},
		DialTimeout: waitTimeout,
		Logger:      zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel)).Named("confined"),
	})
	if err != nil {
		t.Fatalf("connecting through the proxy: %v", err)
	}
	t.Cleanup(func() { confined.Close() })
	return raw, confined
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	t.Cleanup(cancel)
	return ctx
}

// checkOutside fails unless every outside key still holds "outside" and no
// other key outside the prefix exists.
func checkOutside(t *testing.T, raw *clientv3.Client) {
	t.Helper()
	ctx := testCtx(t)
	for _, k := range kubetest.AllKeys(t, raw) {
		if strings.HasPrefix(k, prefix) {
			continue
		}
		if !slices.Contains(outside, k) {
			t.Errorf("key %q was created outside %s", k, prefix)
		}
	}
	for _, k := range outside {
		resp, err := raw.Get(ctx, k)
		if err != nil {
			t.Fatalf("get %q: %v", k, err)
		}
		if len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != "outside" {
			t.Errorf("outside key %q was changed: %v", k, resp.Kvs)
		}
	}
}

func keys(resp *clientv3.GetResponse) []string {
	var ks []string
	for _, kv := range resp.Kvs {
		ks = append(ks, string(kv.Key))
	}
	return ks
}

func wantCode(t *testing.T, what string, err error, code codes.Code) {
	t.Helper()
	if status.Code(err) != code {
		t.Errorf("%s: got error %v, want code %v", what, err, code)
	}
}

func TestKVConfined(t *testing.T) {
	raw, c := setup(t)
	ctx := testCtx(t)

	for _, k := range []string{"a", "../x", "/secret", "\xff"} {
		if _, err := c.Put(ctx, k, "inside"); err != nil {
			t.Fatalf("put %q through the proxy: %v", k, err)
		}
		resp, err := raw.Get(ctx, prefix+k)
		if err != nil || len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != "inside" {
			t.Errorf("put %q through the proxy: at %q in etcd got %v, %v", k, prefix+k, resp, err)
		}
	}
	want := []string{"../x", "/secret", "a", "\xff"}

	// Every way of naming "everything" sees the inside keys only, without
	// the prefix.
	for name, get := range map[string]func() (*clientv3.GetResponse, error){
		"from the first key": func() (*clientv3.GetResponse, error) { return c.Get(ctx, "\x00", clientv3.WithFromKey()) },
		"prefix \"\"":        func() (*clientv3.GetResponse, error) { return c.Get(ctx, "", clientv3.WithPrefix()) },
		"range to \\xff\\xff": func() (*clientv3.GetResponse, error) {
			return c.Get(ctx, "\x00", clientv3.WithRange("\xff\xff\xff"))
		},
	} {
		resp, err := get()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if got := keys(resp); !slices.Equal(got, want) {
			t.Errorf("%s: got keys %q, want %q", name, got, want)
		}
	}
	// The unprefixed name of an outside key is a key inside (and absent).
	if resp, err := c.Get(ctx, "/curator/leader"); err != nil || len(resp.Kvs) != 0 {
		t.Errorf("get /curator/leader through the proxy: %v, %v; want nothing", keys(resp), err)
	}

	// Transactions: compares, puts, reads and nested transactions.
	txn, err := c.Txn(ctx).
		If(clientv3.Compare(clientv3.Value("/secret"), "=", "inside")).
		Then(
			clientv3.OpPut("/curator/leader", "inside"),
			clientv3.OpTxn(nil, []clientv3.Op{clientv3.OpGet("", clientv3.WithFromKey())}, nil),
		).Commit()
	if err != nil {
		t.Fatalf("txn: %v", err)
	}
	if !txn.Succeeded {
		t.Errorf("txn compared against a key outside the prefix")
	}
	nested := txn.Responses[1].GetResponseTxn().Responses[0].GetResponseRange()
	if got, want := keys((*clientv3.GetResponse)(nested)), []string{"../x", "/curator/leader", "/secret", "a", "\xff"}; !slices.Equal(got, want) {
		t.Errorf("nested txn: got keys %q, want %q", got, want)
	}
	if _, err := c.Txn(ctx).Then(clientv3.OpTxn(nil, []clientv3.Op{clientv3.OpDelete("", clientv3.WithFromKey())}, nil)).Commit(); err != nil {
		t.Fatalf("txn deleting everything: %v", err)
	}
	if resp, err := raw.Get(ctx, prefix, clientv3.WithPrefix()); err != nil || len(resp.Kvs) != 0 {
		t.Errorf("after a txn deleted everything through the proxy, inside keys %q, %v", keys(resp), err)
	}

	// Deleting everything through the proxy deletes the inside only.
	if _, err := c.Put(ctx, "b", "inside"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Delete(ctx, "\x00", clientv3.WithFromKey()); err != nil {
		t.Fatalf("delete everything: %v", err)
	}
	if resp, err := raw.Get(ctx, prefix, clientv3.WithPrefix()); err != nil || len(resp.Kvs) != 0 {
		t.Errorf("after deleting everything through the proxy, inside keys %q, %v", keys(resp), err)
	}

	_, err = c.Compact(ctx, txn.Header.Revision)
	wantCode(t, "compact", err, codes.PermissionDenied)
	checkOutside(t, raw)
}

func TestWatchConfined(t *testing.T) {
	raw, c := setup(t)
	ctx := testCtx(t)
	wctx := clientv3.WithRequireLeader(ctx)
	all := c.Watch(wctx, "", clientv3.WithPrefix(), clientv3.WithPrevKV())
	fromKey := c.Watch(wctx, "\x00", clientv3.WithFromKey())
	single := c.Watch(wctx, "/secret")

	// Writes outside first, then one inside: a watch that saw an outside
	// write would see it before the inside one.
	for _, k := range outside {
		if _, err := raw.Put(ctx, k, "outside"); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := raw.Put(ctx, prefix+"/secret", "v1"); err != nil {
		t.Fatal(err)
	}
	if _, err := raw.Put(ctx, prefix+"/secret", "v2"); err != nil {
		t.Fatal(err)
	}
	for name, ch := range map[string]clientv3.WatchChan{"prefix \"\"": all, "from the first key": fromKey, "single key": single} {
		var got []string
		for len(got) < 2 {
			resp, ok := <-ch
			if !ok {
				t.Fatalf("%s: watch closed: %v", name, ctx.Err())
			}
			if err := resp.Err(); err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			for _, ev := range resp.Events {
				got = append(got, string(ev.Kv.Key)+"="+string(ev.Kv.Value))
			}
		}
		if want := []string{"/secret=v1", "/secret=v2"}; !slices.Equal(got, want) {
			t.Errorf("%s: got events %q, want %q", name, got, want)
		}
	}

	// Progress requests reach etcd (the apiserver's watch cache relies on
	// them): the watches get a progress notification.
	if err := c.RequestProgress(wctx); err != nil {
		t.Fatalf("RequestProgress: %v", err)
	}
	resp := <-all
	if !resp.IsProgressNotify() {
		t.Errorf("after RequestProgress got %+v, want a progress notification", resp)
	}
	checkOutside(t, raw)
}

func TestLeasesConfined(t *testing.T) {
	raw, c := setup(t)
	ctx := testCtx(t)

	// A lease of someone else, holding a key outside.
	foreign, err := raw.Grant(ctx, 600)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := raw.Put(ctx, "/secret", "outside", clientv3.WithLease(foreign.ID)); err != nil {
		t.Fatal(err)
	}
	_, err = c.Revoke(ctx, foreign.ID)
	wantCode(t, "revoke a foreign lease", err, codes.PermissionDenied)
	_, err = c.TimeToLive(ctx, foreign.ID, clientv3.WithAttachedKeys())
	wantCode(t, "time to live of a foreign lease", err, codes.PermissionDenied)
	_, err = c.Put(ctx, "a", "v", clientv3.WithLease(foreign.ID))
	wantCode(t, "put on a foreign lease", err, codes.PermissionDenied)
	_, err = c.Txn(ctx).Then(clientv3.OpTxn(nil, []clientv3.Op{clientv3.OpPut("a", "v", clientv3.WithLease(foreign.ID))}, nil)).Commit()
	wantCode(t, "put on a foreign lease in a nested txn", err, codes.PermissionDenied)
	_, err = c.KeepAliveOnce(ctx, foreign.ID)
	wantCode(t, "keep a foreign lease alive", err, codes.PermissionDenied)

	// A lease of its own works as in etcd.
	own, err := c.Grant(ctx, 600)
	if err != nil {
		t.Fatalf("grant: %v", err)
	}
	if _, err := c.Put(ctx, "a", "v", clientv3.WithLease(own.ID)); err != nil {
		t.Fatalf("put on its own lease: %v", err)
	}
	ttl, err := c.TimeToLive(ctx, own.ID, clientv3.WithAttachedKeys())
	if err != nil {
		t.Fatalf("time to live: %v", err)
	}
	if len(ttl.Keys) != 1 || string(ttl.Keys[0]) != "a" {
		t.Errorf("time to live: keys %q, want [a]", ttl.Keys)
	}
	if _, err := c.KeepAliveOnce(ctx, own.ID); err != nil {
		t.Errorf("keep its own lease alive: %v", err)
	}
	leases, err := c.Leases(ctx)
	if err != nil {
		t.Fatalf("leases: %v", err)
	}
	if len(leases.Leases) != 1 || leases.Leases[0].ID != own.ID {
		t.Errorf("leases: got %v, want only %x", leases.Leases, own.ID)
	}
	if _, err := c.Revoke(ctx, own.ID); err != nil {
		t.Fatalf("revoke its own lease: %v", err)
	}
	if resp, err := raw.Get(ctx, prefix+"a"); err != nil || len(resp.Kvs) != 0 {
		t.Errorf("revoking its lease left %q, %v", keys(resp), err)
	}
	checkOutside(t, raw)
}

func TestMaintenance(t *testing.T) {
	raw, c := setup(t)
	ctx := testCtx(t)
	st, err := c.Status(ctx, c.Endpoints()[0])
	if err != nil {
		t.Fatalf("status: %v", err)
	}
	if st.Version == "" {
		t.Errorf("status has no version: %+v", st)
	}
	rc, err := c.Snapshot(ctx)
	if err == nil {
		_, err = rc.Read(make([]byte, 1))
		rc.Close()
	}
	wantCode(t, "snapshot", err, codes.Unimplemented)
	_, err = c.MemberList(ctx)
	wantCode(t, "member list", err, codes.Unimplemented)
	checkOutside(t, raw)
}

func TestConfig(t *testing.T) {
	raw := kubetest.StartEtcd(t, testutil.FreePort(t, subnets.Addrs(1)[0]))
	for _, bad := range []string{"", "/", "kubernetes/", "/kubernetes", "/Kube/", "/a//"} {
		_, err := New(Config{Client: raw, Prefix: bad, Socket: "x"})
		if err == nil || !strings.Contains(err.Error(), "prefix") {
			t.Errorf("prefix %q: got %v, want an error naming the prefix", bad, err)
		}
	}
	_, err := New(Config{Client: clientv3.NewCtxClient(context.Background()), Prefix: prefix, Socket: "x"})
	if err == nil {
		t.Errorf("a client without connection was accepted")
	}
	if _, err := New(Config{Client: raw, Prefix: prefix}); err == nil {
		t.Errorf("an empty socket path was accepted")
	}
}
