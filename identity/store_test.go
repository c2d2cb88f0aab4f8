package identity

import (
	"bytes"
	"errors"
	"strings"
	"sync"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// TestCAConcurrentCreation starts many creators at once, through several
// clients, as curators bootstrapping together would: one CA results, which
// every EnsureCA returns, and exactly one creator reports creating it.
func TestCAConcurrentCreation(t *testing.T) {
	e := startEtcd(t)
	const clients, perClient = 4, 8
	var clis []*clientv3.Client
	for range clients {
		clis = append(clis, etcdClient(t, e, "/curator/"))
	}
	ctx := ctxT(t)
	type result struct {
		ca      *CA
		created bool
		err     error
	}
	results := make([]result, clients*perClient)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range results {
		wg.Go(func() {
			<-start
			ca, created, err := EnsureCA(ctx, clis[i%clients], testNow())
			results[i] = result{ca, created, err}
		})
	}
	close(start)
	wg.Wait()

	stored, err := LoadCA(ctx, clis[0])
	if err != nil {
		t.Fatalf("LoadCA after creation: %v", err)
	}
	creators := 0
	for i, r := range results {
		if r.err != nil {
			t.Fatalf("EnsureCA %d: %v", i, r.err)
		}
		if r.created {
			creators++
		}
		if !bytes.Equal(r.ca.Certificate().Raw, stored.Certificate().Raw) || !r.ca.key.Equal(stored.key) {
			t.Errorf("EnsureCA %d returned a CA other than the stored one", i)
		}
	}
	if creators != 1 {
		t.Errorf("%d callers created the CA, want exactly 1", creators)
	}

	// The CA is where the prefix says, inside the client's namespace, and
	// nothing else was written.
	raw := etcdClient(t, e, "")
	resp, err := raw.Get(ctx, "", clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, kv := range resp.Kvs {
		keys = append(keys, string(kv.Key))
	}
	if want := "/curator/" + caCertKey + " /curator/" + caKeyKey; strings.Join(keys, " ") != want {
		t.Errorf("keys in etcd: %v, want %s", keys, want)
	}
}

// TestCreateCAOnce races CreateCA callers: exactly one succeeds, and the
// others learn that a CA exists.
func TestCreateCAOnce(t *testing.T) {
	e := startEtcd(t)
	cli := etcdClient(t, e, "/curator/")
	ctx := ctxT(t)
	if _, err := LoadCA(ctx, cli); !errors.Is(err, ErrNoCA) {
		t.Fatalf("LoadCA before creation = %v, want ErrNoCA", err)
	}
	const n = 16
	errs := make([]error, n)
	cas := make([]*CA, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			<-start
			cas[i], errs[i] = CreateCA(ctx, cli, testNow())
		})
	}
	close(start)
	wg.Wait()
	var winner *CA
	for i, err := range errs {
		switch {
		case err == nil && winner == nil:
			winner = cas[i]
		case err == nil:
			t.Errorf("CreateCA %d also succeeded", i)
		case !errors.Is(err, ErrCAExists):
			t.Errorf("CreateCA %d: %v, want ErrCAExists", i, err)
		}
	}
	if winner == nil {
		t.Fatal("no CreateCA succeeded")
	}
	loaded, err := LoadCA(ctx, cli)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(loaded.Certificate().Raw, winner.Certificate().Raw) {
		t.Error("LoadCA returned a CA other than the one created")
	}
	// What was loaded can issue, and what it issues verifies against the
	// created CA.
	n1 := mustNode(t, loaded, testNow())
	if _, err := winner.Verifier().Identify(n1.certs(), testNow()); err != nil {
		t.Errorf("certificate from the loaded CA: %v", err)
	}
}

// TestCorruptCA stores broken CAs: LoadCA, EnsureCA and CreateCA report
// ErrCorruptCA naming the key, and nothing overwrites the entry.
func TestCorruptCA(t *testing.T) {
	e := startEtcd(t)
	ctx := ctxT(t)
	good := mustCA(t, testNow())
	other := mustCA(t, testNow())
	goodKey, err := MarshalPrivateKey(good.key)
	if err != nil {
		t.Fatal(err)
	}
	otherKey, err := MarshalPrivateKey(other.key)
	if err != nil {
		t.Fatal(err)
	}
	nodeCert := mustNode(t, good, testNow())
	nodeKey, err := MarshalPrivateKey(nodeCert.key)
	if err != nil {
		t.Fatal(err)
	}
	for i, tc := range []struct {
		name       string
		cert, key  []byte // nil: key absent
		wantInText string
	}{
		{"garbage certificate", []byte("not a certificate"), goodKey, caCertKey},
		{"garbage key", good.Certificate().Raw, []byte("not a key"), caKeyKey},
		{"empty certificate", []byte{}, goodKey, caCertKey},
		{"truncated certificate", good.Certificate().Raw[:100], goodKey, caCertKey},
		{"key of another CA", good.Certificate().Raw, otherKey, "does not match"},
		{"certificate only", good.Certificate().Raw, nil, caKeyKey + " is missing"},
		{"key only", nil, goodKey, caCertKey + " is missing"},
		{"node certificate as CA", nodeCert.cert.Raw, nodeKey, "not a CA certificate"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cli := etcdClient(t, e, "/c"+string(rune('a'+i))+"/")
			if tc.cert != nil {
				if _, err := cli.Put(ctx, caCertKey, string(tc.cert)); err != nil {
					t.Fatal(err)
				}
			}
			if tc.key != nil {
				if _, err := cli.Put(ctx, caKeyKey, string(tc.key)); err != nil {
					t.Fatal(err)
				}
			}
			before, err := cli.Get(ctx, CAPrefix, clientv3.WithPrefix())
			if err != nil {
				t.Fatal(err)
			}
			_, err = LoadCA(ctx, cli)
			if !errors.Is(err, ErrCorruptCA) || !strings.Contains(err.Error(), tc.wantInText) {
				t.Errorf("LoadCA = %v, want ErrCorruptCA mentioning %q", err, tc.wantInText)
			}
			if _, _, err := EnsureCA(ctx, cli, testNow()); !errors.Is(err, ErrCorruptCA) {
				t.Errorf("EnsureCA = %v, want ErrCorruptCA", err)
			}
			if _, err := CreateCA(ctx, cli, testNow()); !errors.Is(err, ErrCAExists) || !errors.Is(err, ErrCorruptCA) {
				t.Errorf("CreateCA = %v, want ErrCAExists and ErrCorruptCA", err)
			}
			after, err := cli.Get(ctx, CAPrefix, clientv3.WithPrefix())
			if err != nil {
				t.Fatal(err)
			}
			if after.Header.Revision != before.Header.Revision {
				t.Errorf("etcd changed from revision %d to %d: the corrupt entry was touched", before.Header.Revision, after.Header.Revision)
			}
		})
	}
}
