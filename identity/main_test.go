package identity

import (
	"context"
	"crypto/ed25519"
	"crypto/tls"
	"crypto/x509"
	"net/netip"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/namespace"
	"go.uber.org/goleak"

	"github.com/polis-os/polis/internal/testutil"
	"github.com/polis-os/polis/internal/testutil/etcdtest"
)

// TestMain fails the package if any goroutine outlives the tests. Every
// etcd server, etcd client, gRPC server and connection a test makes is
// closed by the test's cleanup, so nothing is ignored.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// testTimeout bounds every wait of a test on etcd or a connection.
// Generous: an embedded etcd under -race on a busy machine is slow.
const testTimeout = 60 * time.Second

// ctxT is a context for the etcd calls of one test.
func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	t.Cleanup(cancel)
	return ctx
}

// subnets hands each embedded etcd its own loopback address, 127.62.N.1,
// so that no two servers of this package (and no other package's, which use
// other 127.x ranges) share an address.
var subnets = testutil.Subnets{Octet: 62}

// startEtcd starts a one-member etcd on a fresh loopback address, stopped
// by the test's cleanup.
func startEtcd(t testing.TB) *etcdtest.Member {
	t.Helper()
	return etcdtest.Start(t, etcdtest.Options{Name: "identity-test", Peer: netip.AddrPortFrom(subnets.Addrs(1)[0], 0), FastElections: true, Timeout: testTimeout})
}

// etcdClient returns a client of e confined to prefix, as the curator's
// namespaced client is, closed by the test's cleanup.
func etcdClient(t testing.TB, e *etcdtest.Member, prefix string) *clientv3.Client {
	t.Helper()
	cli := e.Client(t)
	cli.KV = namespace.NewKV(cli.KV, prefix)
	cli.Watcher = namespace.NewWatcher(cli.Watcher, prefix)
	cli.Lease = namespace.NewLease(cli.Lease, prefix)
	return cli
}

// testNow is the time tests issue at: now, truncated to a second as
// certificates are.
func testNow() time.Time { return time.Now().Truncate(time.Second) }

// mustCA makes a CA valid from now.
func mustCA(t testing.TB, now time.Time) *CA {
	t.Helper()
	ca, err := NewCA(now)
	if err != nil {
		t.Fatalf("NewCA: %v", err)
	}
	return ca
}

// mustKey makes a key.
func mustKey(t testing.TB) ed25519.PrivateKey {
	t.Helper()
	key, err := GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	return key
}

// pubOf is key's public key.
func pubOf(key ed25519.PrivateKey) ed25519.PublicKey { return key.Public().(ed25519.PublicKey) }

// loopback is the address test servers listen on and node certificates
// name.
var loopback = netip.MustParseAddr("127.0.0.1")

// node is a node's key and certificate.
type node struct {
	key  ed25519.PrivateKey
	cert *x509.Certificate
	tls  tls.Certificate
}

// mustNode issues a node certificate at now for a fresh key.
func mustNode(t testing.TB, ca *CA, now time.Time) node {
	t.Helper()
	key := mustKey(t)
	cert, err := ca.IssueNode(pubOf(key), now)
	if err != nil {
		t.Fatalf("IssueNode: %v", err)
	}
	return node{key: key, cert: cert, tls: mustTLS(t, cert, key)}
}

// mustCurator issues a curator certificate at now for a fresh key, naming
// the loopback address.
func mustCurator(t testing.TB, ca *CA, now time.Time) node {
	t.Helper()
	key := mustKey(t)
	cert, err := ca.IssueCurator(pubOf(key), []netip.Addr{loopback}, now)
	if err != nil {
		t.Fatalf("IssueCurator: %v", err)
	}
	return node{key: key, cert: cert, tls: mustTLS(t, cert, key)}
}

// serving wraps a curator's certificate for ServerConfig.
func serving(t testing.TB, v *Verifier, n node) *ServingCertificate {
	t.Helper()
	s, err := NewServingCertificate(v, n.tls)
	if err != nil {
		t.Fatalf("NewServingCertificate: %v", err)
	}
	return s
}

// mustUser issues a user certificate at now for a fresh key.
func mustUser(t testing.TB, ca *CA, name string, now time.Time) node {
	t.Helper()
	key := mustKey(t)
	cert, err := ca.IssueUser(name, pubOf(key), now)
	if err != nil {
		t.Fatalf("IssueUser: %v", err)
	}
	return node{key: key, cert: cert, tls: mustTLS(t, cert, key)}
}

// mustTLS is TLSCertificate that fails the test on error.
func mustTLS(t testing.TB, cert *x509.Certificate, key ed25519.PrivateKey) tls.Certificate {
	t.Helper()
	c, err := TLSCertificate(cert, key)
	if err != nil {
		t.Fatalf("TLSCertificate: %v", err)
	}
	return c
}

// certs is what n presents in a handshake.
func (n node) certs() []*x509.Certificate { return []*x509.Certificate{n.cert} }
