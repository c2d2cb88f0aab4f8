package identity

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"
)

// A TLS server on a real socket: it accepts connections one at a time,
// runs the handshake with the given configuration, writes the identity it
// established to the client on one line, and reports each connection's
// outcome on results.
type tlsServer struct {
	addr    string
	results chan serverResult
}

// serverResult is what the server made of one connection.
type serverResult struct {
	id  Identity
	err error // the handshake's or Identify's
}

// serveTLS runs a tlsServer on 127.0.0.1:0 until the test ends.
func serveTLS(t testing.TB, cfg *tls.Config, v *Verifier) *tlsServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &tlsServer{addr: ln.Addr().String(), results: make(chan serverResult, 64)}
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return // listener closed
			}
			s.results <- s.handle(tls.Server(c, cfg), v)
		}
	})
	t.Cleanup(func() {
		ln.Close()
		wg.Wait()
	})
	return s
}

func (s *tlsServer) handle(c *tls.Conn, v *Verifier) serverResult {
	defer c.Close()
	c.SetDeadline(time.Now().Add(testTimeout))
	if err := c.Handshake(); err != nil {
		return serverResult{err: err}
	}
	id, err := v.Identify(c.ConnectionState().PeerCertificates, time.Now())
	if err != nil {
		return serverResult{err: err}
	}
	fmt.Fprintf(c, "%s\n", id)
	return serverResult{id: id}
}

// dial connects to s with cfg and returns the line the server wrote (its
// view of the client), what the server reported for the connection, and
// the error the client saw.
func (s *tlsServer) dial(t testing.TB, cfg *tls.Config) (string, serverResult, error) {
	t.Helper()
	line, cerr := func() (string, error) {
		c, err := tls.DialWithDialer(&net.Dialer{Timeout: testTimeout}, "tcp", s.addr, cfg)
		if err != nil {
			return "", err
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(testTimeout))
		// In TLS 1.3 the client's handshake completes before the server
		// has checked the client's certificate: a refusal shows here.
		return bufio.NewReader(c).ReadString('\n')
	}()
	select {
	case r := <-s.results:
		return line, r, cerr
	case <-time.After(testTimeout):
		t.Fatal("server reported nothing about the connection")
		return "", serverResult{}, nil
	}
}

// pki is a cluster's CA with a curator's node certificate and its server
// configuration, serving on loopback.
type pki struct {
	ca     *CA
	v      *Verifier
	server node
	srv    *tlsServer
}

func newPKI(t testing.TB) *pki {
	t.Helper()
	now := testNow()
	p := &pki{ca: mustCA(t, now)}
	p.v = p.ca.Verifier()
	p.server = mustCurator(t, p.ca, now)
	cfg, err := ServerConfig(p.v, serving(t, p.v, p.server))
	if err != nil {
		t.Fatalf("ServerConfig: %v", err)
	}
	p.srv = serveTLS(t, cfg, p.v)
	return p
}

func TestTLSIdentifiesCallers(t *testing.T) {
	p := newPKI(t)
	now := testNow()

	n := mustNode(t, p.ca, now)
	nodeCfg, err := NodeClientConfig(p.v, n.tls)
	if err != nil {
		t.Fatal(err)
	}
	u := mustUser(t, p.ca, "owner", now)
	userCfg, err := UserClientConfig(p.v, u.tls)
	if err != nil {
		t.Fatal(err)
	}
	regKey := mustKey(t)
	regCfg, err := KeyHolderClientConfig(p.v, regKey)
	if err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		name string
		cfg  *tls.Config
		want Identity
	}{
		{"node", nodeCfg, Identity{Kind: KindNode, NodeID: NodeID(pubOf(n.key))}},
		{"user", userCfg, Identity{Kind: KindUser, UserName: "owner"}},
		{"registering node", regCfg, Identity{Kind: KindKeyHolder}},
		{"anonymous", &tls.Config{MinVersion: tls.VersionTLS13, RootCAs: p.v.roots}, Identity{Kind: KindAnonymous}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			line, r, cerr := p.srv.dial(t, tc.cfg)
			if cerr != nil || r.err != nil {
				t.Fatalf("client: %v; server: %v", cerr, r.err)
			}
			if r.id.Kind != tc.want.Kind || r.id.NodeID != tc.want.NodeID || r.id.UserName != tc.want.UserName {
				t.Errorf("server identified %+v, want %+v", r.id, tc.want)
			}
			if strings.TrimSpace(line) != r.id.String() {
				t.Errorf("client read %q, want %q", line, r.id)
			}
		})
	}
	// The registering node's identity is its key.
	_, r, _ := p.srv.dial(t, regCfg)
	if !r.id.PublicKey.Equal(pubOf(regKey)) {
		t.Error("registering node identified with another key")
	}
}

// TestTLSSelfSignedNeverNode presents self-signed copies of a node's and
// a user's certificates, with their real keys: the server takes them for
// key holders, nothing more.
func TestTLSSelfSignedNeverNode(t *testing.T) {
	p := newPKI(t)
	now := testNow()
	for _, victim := range []node{mustNode(t, p.ca, now), mustUser(t, p.ca, "owner", now)} {
		forged := mustTLS(t, selfSign(t, victim.cert, victim.key), victim.key)
		_, r, cerr := p.srv.dial(t, clientConfig(p.v, forged))
		if cerr != nil || r.err != nil {
			t.Fatalf("client: %v; server: %v", cerr, r.err)
		}
		if r.id.Kind != KindKeyHolder || r.id.NodeID != "" || r.id.UserName != "" || !r.id.PublicKey.Equal(pubOf(victim.key)) {
			t.Errorf("self-signed copy of %s identified as %+v", victim.cert.Subject.CommonName, r.id)
		}
	}
}

// TestTLSRefusesClients has clients present certificates the server must
// refuse in the handshake.
func TestTLSRefusesClients(t *testing.T) {
	p := newPKI(t)
	now := testNow()
	otherCA := mustCA(t, now)
	past := now.Add(-2 * NodeCertificateLifetime)
	oldCA := p.ca // same CA, certificate issued two years ago
	expired := mustNode(t, oldCA, past)
	expiredUser := mustUser(t, oldCA, "owner", now.Add(-2*UserCertificateLifetime))

	for _, tc := range []struct {
		name string
		cfg  *tls.Config
		want error
	}{
		{"another CA's node", clientConfig(p.v, mustNode(t, otherCA, now).tls), ErrUntrusted},
		{"another CA's user", clientConfig(p.v, mustUser(t, otherCA, "owner", now).tls), ErrUntrusted},
		{"expired node", clientConfig(p.v, expired.tls), ErrUntrusted},
		{"expired user", clientConfig(p.v, expiredUser.tls), ErrUntrusted},
		{"the CA's own certificate", clientConfig(p.v, mustTLS(t, p.ca.Certificate(), p.ca.key)), ErrUntrusted},
	} {
		t.Run(tc.name, func(t *testing.T) {
			line, r, cerr := p.srv.dial(t, tc.cfg)
			if r.err == nil {
				t.Fatalf("server accepted the client as %+v", r.id)
			}
			if !errors.Is(r.err, tc.want) {
				t.Errorf("server refused with %v, want %v", r.err, tc.want)
			}
			if cerr == nil || line != "" {
				t.Errorf("client read %q, %v; want a refusal", line, cerr)
			}
			t.Logf("server: %v; client: %v", r.err, cerr)
		})
	}
	// The node whose certificate expired proves its key instead, as it
	// does to join again after a long time down.
	joinCfg, err := KeyHolderClientConfig(p.v, expired.key)
	if err != nil {
		t.Fatal(err)
	}
	if _, r, cerr := p.srv.dial(t, joinCfg); cerr != nil || r.err != nil || r.id.Kind != KindKeyHolder || NodeID(r.id.PublicKey) != expired.cert.Subject.CommonName {
		t.Errorf("expired node as key holder: client %v, server %v, %+v", cerr, r.err, r.id)
	}

	// Refused before use, too: a client does not build a configuration
	// around a certificate peers would refuse, nor one of the wrong kind.
	if _, err := NodeClientConfig(p.v, expired.tls); err == nil {
		t.Error("NodeClientConfig accepted an expired certificate")
	}
	if _, err := NodeClientConfig(p.v, mustUser(t, p.ca, "owner", now).tls); err == nil {
		t.Error("NodeClientConfig accepted a user certificate")
	}
	if _, err := UserClientConfig(p.v, mustNode(t, p.ca, now).tls); err == nil {
		t.Error("UserClientConfig accepted a node certificate")
	}
	if _, err := NodeClientConfig(p.v, mustNode(t, otherCA, now).tls); err == nil {
		t.Error("NodeClientConfig accepted another CA's certificate")
	}
	for name, n := range map[string]node{"a user": mustUser(t, p.ca, "owner", now), "a node": mustNode(t, p.ca, now)} {
		if _, err := NewServingCertificate(p.v, n.tls); err == nil {
			t.Errorf("NewServingCertificate accepted %s certificate", name)
		}
	}
	// A curator certificate is no caller.
	if line, r, cerr := p.srv.dial(t, clientConfig(p.v, mustCurator(t, p.ca, now).tls)); r.err == nil || cerr == nil {
		t.Errorf("server accepted a curator certificate from a client: %q", line)
	}
}

// TestTLSClientChecksServer is the server side of the authorization
// matrix: which certificates every kind of client (node, user, key
// holder) accepts from a server it dials as a curator, by address or by
// node ID. Exactly one cell per client is allowed: a valid curator
// certificate from the client's CA for what it dialled.
func TestTLSClientChecksServer(t *testing.T) {
	now := testNow()
	ca := mustCA(t, now)
	v := ca.Verifier()
	cur := mustCurator(t, ca, now)
	curID := NodeID(pubOf(cur.key))
	n := mustNode(t, ca, now)
	nodeCfg, err := NodeClientConfig(v, n.tls)
	if err != nil {
		t.Fatal(err)
	}
	userCfg, err := UserClientConfig(v, mustUser(t, ca, "owner", now).tls)
	if err != nil {
		t.Fatal(err)
	}
	regCfg, err := KeyHolderClientConfig(v, mustKey(t))
	if err != nil {
		t.Fatal(err)
	}
	clients := map[string]*tls.Config{"node": nodeCfg, "user": userCfg, "key holder": regCfg}
	// rawServer serves cert with a configuration that bypasses
	// ServerConfig's checks of its own certificate.
	rawServer := func(cert tls.Certificate) *tlsServer {
		cfg, err := ServerConfig(v, serving(t, v, cur))
		if err != nil {
			t.Fatal(err)
		}
		cfg.GetCertificate = nil
		cfg.Certificates = []tls.Certificate{cert}
		return serveTLS(t, cfg, v)
	}
	otherCA := mustCA(t, now)
	nodeAPI := mustNodeAPI(t, ca, now)
	elsewhere, err := ca.IssueCurator(pubOf(cur.key), []netip.Addr{netip.MustParseAddr("10.9.9.9")}, now)
	if err != nil {
		t.Fatal(err)
	}
	// Certificates the CA signed and the TLS stack accepts for a server at
	// 127.0.0.1, but that are not curator certificates: only the client's
	// own check refuses them.
	misissued := func(ou, cn string, dns ...string) tls.Certificate {
		key := mustKey(t)
		if cn == "" {
			cn = NodeID(pubOf(key))
		}
		cert, err := ca.issue(&x509.Certificate{
			Subject:     pkix.Name{OrganizationalUnit: []string{ou}, CommonName: cn},
			ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
			DNSNames:    dns,
			IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		}, pubOf(key), now, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		return mustTLS(t, cert, key)
	}
	byID := func(id string) func(*tls.Config) *tls.Config {
		return func(c *tls.Config) *tls.Config {
			c = c.Clone()
			c.ServerName = id
			return c
		}
	}
	byAddress := func(c *tls.Config) *tls.Config { return c }
	for _, tc := range []struct {
		name   string
		server tls.Certificate
		dial   func(*tls.Config) *tls.Config
		accept bool
	}{
		{"a curator, dialled by address", cur.tls, byAddress, true},
		{"a curator, dialled by its node ID", cur.tls, byID(curID), true},
		{"a curator, dialled by another node ID", cur.tls, byID(NodeID(pubOf(mustKey(t)))), false},
		{"a curator at another address", mustTLS(t, elsewhere, cur.key), byAddress, false},
		{"an expired curator", mustCurator(t, ca, now.Add(-2*CuratorCertificateLifetime)).tls, byAddress, false},
		{"another CA's curator", mustCurator(t, otherCA, now).tls, byAddress, false},
		{"a node (of this cluster, valid)", n.tls, byID(NodeID(pubOf(n.key))), false},
		{"a node's API, dialled by address", nodeAPI.tls, byAddress, false},
		{"a node's API, dialled by its node ID", nodeAPI.tls, byID(NodeID(pubOf(nodeAPI.key))), false},
		{"a node certificate good for servers", misissued(ouNode, "", "x"), byAddress, false},
		{"a curator certificate also good for clients", misissued(ouCurator, ""), byAddress, false},
		{"a curator certificate for another key", misissued(ouCurator, curID, curID), byAddress, false},
		{"a user certificate good for servers", misissued(ouUser, "owner"), byAddress, false},
		{"a user", mustUser(t, ca, "owner", now).tls, byAddress, false},
		{"a self-signed copy of a curator", mustTLS(t, selfSign(t, cur.cert, cur.key), cur.key), byAddress, false},
		{"the CA itself", mustTLS(t, ca.Certificate(), ca.key), byAddress, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := rawServer(tc.server)
			for client, cfg := range clients {
				line, r, cerr := srv.dial(t, tc.dial(cfg))
				accepted := cerr == nil && r.err == nil && line != ""
				if accepted != tc.accept {
					t.Errorf("%s client: accepted = %t, want %t (client: %v, server: %v)", client, accepted, tc.accept, cerr, r.err)
				}
			}
		})
	}
}

// mustNodeAPI issues a node API certificate at now for a fresh key, naming
// the loopback address.
func mustNodeAPI(t testing.TB, ca *CA, now time.Time) node {
	t.Helper()
	key := mustKey(t)
	cert, err := ca.IssueNodeAPI(pubOf(key), loopback, now)
	if err != nil {
		t.Fatalf("IssueNodeAPI: %v", err)
	}
	return node{key: key, cert: cert, tls: mustTLS(t, cert, key)}
}

// A node's API serves with its node API certificate, which a stock TLS
// client verifies with the cluster CA as its only root and the node ID (or
// the node's address) as server name, and which NodeAPIClientConfig
// accepts for that node ID only.
func TestNodeAPIClientChecksServer(t *testing.T) {
	now := testNow()
	ca := mustCA(t, now)
	v := ca.Verifier()
	api := mustNodeAPI(t, ca, now)
	id := NodeID(pubOf(api.key))
	owner := mustUser(t, ca, "owner", now)
	n := mustNode(t, ca, now)
	// The node's own certificates for the same key: its node certificate
	// (what the API served with before) and a curator certificate.
	nodeCert, err := ca.IssueNode(pubOf(api.key), now)
	if err != nil {
		t.Fatal(err)
	}
	curCert, err := ca.IssueCurator(pubOf(api.key), []netip.Addr{loopback}, now)
	if err != nil {
		t.Fatal(err)
	}
	expired, err := ca.IssueNodeAPI(pubOf(api.key), loopback, now.Add(-2*NodeAPICertificateLifetime))
	if err != nil {
		t.Fatal(err)
	}
	otherCA, err := mustCA(t, now).IssueNodeAPI(pubOf(api.key), loopback, now)
	if err != nil {
		t.Fatal(err)
	}
	elsewhere, err := ca.IssueNodeAPI(pubOf(api.key), netip.MustParseAddr("10.9.9.9"), now)
	if err != nil {
		t.Fatal(err)
	}
	server := func(cert tls.Certificate) *tlsServer {
		// A node API server as nodeapi makes it, but presenting cert
		// unchecked, as a wrong server would.
		sc, err := NewNodeServingCertificate(v, api.tls)
		if err != nil {
			t.Fatal(err)
		}
		cfg, err := ServerConfig(v, sc)
		if err != nil {
			t.Fatal(err)
		}
		cfg.GetCertificate = nil
		cfg.Certificates = []tls.Certificate{cert}
		return serveTLS(t, cfg, v)
	}
	polisctl := func(nodeID string) *tls.Config {
		c, err := NodeAPIClientConfig(v, owner.tls, nodeID)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	// stock is what grpcurl -cacert or curl --cacert do: the CA as the
	// only root, the name dialled as server name, nothing else.
	stock := func(serverName string) *tls.Config {
		roots := x509.NewCertPool()
		roots.AddCert(ca.Certificate())
		return &tls.Config{MinVersion: tls.VersionTLS13, RootCAs: roots, ServerName: serverName, Certificates: []tls.Certificate{owner.tls}}
	}
	other := NodeID(pubOf(n.key))
	for _, tc := range []struct {
		name   string
		server tls.Certificate
		client *tls.Config
		accept bool
	}{
		{"polisctl, the node's API", api.tls, polisctl(id), true},
		{"stock client by node ID, the node's API", api.tls, stock(id), true},
		{"stock client by address, the node's API", api.tls, stock("127.0.0.1"), true},
		{"polisctl dialling another node, the node's API", api.tls, polisctl(other), false},
		{"stock client dialling another node ID, the node's API", api.tls, stock(other), false},
		{"stock client by another address, the node's API", mustTLS(t, elsewhere, api.key), stock("127.0.0.1"), false},
		{"polisctl, the node certificate", mustTLS(t, nodeCert, api.key), polisctl(id), false},
		{"stock client, the node certificate", mustTLS(t, nodeCert, api.key), stock(id), false},
		{"polisctl, the node's curator certificate", mustTLS(t, curCert, api.key), polisctl(id), false},
		{"polisctl, an expired node API certificate", mustTLS(t, expired, api.key), polisctl(id), false},
		{"polisctl, another CA's node API certificate", mustTLS(t, otherCA, api.key), polisctl(id), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			line, r, cerr := server(tc.server).dial(t, tc.client)
			accepted := cerr == nil && r.err == nil && line != ""
			if accepted != tc.accept {
				t.Errorf("accepted = %t, want %t (client: %v, server: %v)", accepted, tc.accept, cerr, r.err)
			}
			if accepted && line != "user owner\n" {
				t.Errorf("the server saw %q, want the owner", line)
			}
		})
	}
}

// A node API serving certificate takes a node API certificate, or a node
// certificate until the node has one; nothing else.
func TestNodeServingCertificateReplace(t *testing.T) {
	now := testNow()
	ca := mustCA(t, now)
	v := ca.Verifier()
	n := mustNode(t, ca, now)
	sc, err := NewNodeServingCertificate(v, n.tls)
	if err != nil {
		t.Fatalf("with a node certificate: %v", err)
	}
	api := mustNodeAPI(t, ca, now)
	if err := sc.Replace(api.tls); err != nil {
		t.Fatalf("with a node API certificate: %v", err)
	}
	if !sc.Leaf().Equal(api.cert) {
		t.Error("Replace did not take the node API certificate")
	}
	for name, c := range map[string]tls.Certificate{
		"a curator certificate":       mustCurator(t, ca, now).tls,
		"a user certificate":          mustUser(t, ca, "owner", now).tls,
		"an expired node API one":     mustNodeAPI(t, ca, now.Add(-2*NodeAPICertificateLifetime)).tls,
		"another CA's node API one":   mustNodeAPI(t, mustCA(t, now), now).tls,
		"a node API one, another key": {Certificate: [][]byte{api.cert.Raw}, PrivateKey: mustKey(t)},
	} {
		if err := sc.Replace(c); err == nil {
			t.Errorf("Replace accepted %s", name)
		}
	}
	if !sc.Leaf().Equal(api.cert) {
		t.Error("a refused Replace changed the certificate")
	}
}
