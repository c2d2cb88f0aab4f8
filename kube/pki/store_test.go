package pki

import (
	"bytes"
	"context"
	"errors"
	"net/netip"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/polis-os/polis/internal/testutil"
	"github.com/polis-os/polis/internal/testutil/etcdtest"
)

// storeTimeout bounds every wait on the test's etcd; generous for -race on
// a busy machine.
const storeTimeout = 60 * time.Second

// subnets gives each embedded etcd of this package its own loopback /24.
var subnets = testutil.Subnets{Octet: 83}

// storeClient starts a one-member etcd and returns a client of it, both
// stopped by the test's cleanup.
func storeClient(t *testing.T) *clientv3.Client {
	t.Helper()
	m := etcdtest.Start(t, etcdtest.Options{Name: "pki-test", Peer: netip.AddrPortFrom(subnets.Addrs(1)[0], 0), Timeout: storeTimeout})
	return m.Client(t)
}

func storeCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), storeTimeout)
	t.Cleanup(cancel)
	return ctx
}

// TestEnsureCreatesOnce races several Ensure calls, as several controller
// nodes would on a new cluster: exactly one creates, and all get its PKI.
func TestEnsureCreatesOnce(t *testing.T) {
	cli := storeClient(t)
	ctx := storeCtx(t)
	if _, err := Load(ctx, cli); !errors.Is(err, ErrNoCluster) {
		t.Fatalf("Load before Ensure: %v, want ErrNoCluster", err)
	}
	const racers = 4
	var (
		wg      sync.WaitGroup
		got     [racers]*Cluster
		created [racers]bool
		errs    [racers]error
	)
	for i := range racers {
		wg.Go(func() { got[i], created[i], errs[i] = Ensure(ctx, cli, "test", now) })
	}
	wg.Wait()
	creators := 0
	for i := range racers {
		if errs[i] != nil {
			t.Fatalf("Ensure %d: %v", i, errs[i])
		}
		if created[i] {
			creators++
		}
		if !bytes.Equal(got[i].CAKey, got[0].CAKey) || !bytes.Equal(got[i].ServiceAccountKey, got[0].ServiceAccountKey) {
			t.Errorf("Ensure %d returned another PKI than Ensure 0", i)
		}
	}
	if creators != 1 {
		t.Errorf("%d calls created the PKI, want exactly 1", creators)
	}
	loaded, err := Load(ctx, cli)
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	if !bytes.Equal(loaded.CACert, got[0].CACert) {
		t.Error("Load returned another CA than Ensure")
	}
}

// TestCorruptStoreIsNeverReplaced: a damaged PKI is reported, and Ensure
// does not paper over it with a new CA that no issued certificate chains to.
func TestCorruptStoreIsNeverReplaced(t *testing.T) {
	cli := storeClient(t)
	ctx := storeCtx(t)
	other := newCluster(t)
	for name, value := range map[string]string{
		"not JSON":          "{",
		"unknown version":   `{"version":9}`,
		"key of another CA": `{"version":1,"caCert":` + quote(newCluster(t).CACert) + `,"caKey":` + quote(other.CAKey) + `,"serviceAccountKey":` + quote(other.ServiceAccountKey) + `}`,
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := cli.Put(ctx, StoreKey, value); err != nil {
				t.Fatal(err)
			}
			if _, err := Load(ctx, cli); !errors.Is(err, ErrCorruptCluster) {
				t.Errorf("Load: %v, want ErrCorruptCluster", err)
			}
			if _, created, err := Ensure(ctx, cli, "test", now); created || !errors.Is(err, ErrCorruptCluster) {
				t.Errorf("Ensure: created %v, %v; want ErrCorruptCluster and nothing created", created, err)
			}
			resp, err := cli.Get(ctx, StoreKey)
			if err != nil || len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != value {
				t.Errorf("stored value changed: %v %v", resp, err)
			}
		})
	}
}

func quote(pem []byte) string {
	var b bytes.Buffer
	b.WriteByte('"')
	for _, c := range pem {
		if c == '\n' {
			b.WriteString(`\n`)
			continue
		}
		b.WriteByte(c)
	}
	b.WriteByte('"')
	return b.String()
}
