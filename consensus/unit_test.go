package consensus

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// Tests of the parts that need no etcd.

func TestConfigValidation(t *testing.T) {
	_, key, _ := ed25519.GenerateKey(rand.Reader)
	c, err := newCA(time.Now())
	if err != nil {
		t.Fatal(err)
	}
	good := func() Config {
		return Config{Name: "one", DataDir: "/var/data", PeerAddress: "127.24.0.1:2380", Bootstrap: true}
	}
	cfg := good()
	if err := cfg.validate(); err != nil {
		t.Fatalf("valid config: %v", err)
	}
	if cfg.ListenAddress != cfg.PeerAddress || cfg.ClientSocket != "/var/data/client.sock" ||
		cfg.HeartbeatInterval != DefaultHeartbeatInterval || cfg.ElectionTimeout != DefaultElectionTimeout {
		t.Errorf("defaults not applied: %+v", cfg)
	}
	join := joinDataFor(t, c, "one", "127.24.0.1:2380", key)
	for _, tc := range []struct {
		name   string
		change func(*Config)
		want   string
	}{
		{"no name", func(c *Config) { c.Name = "" }, "name"},
		{"name with comma", func(c *Config) { c.Name = "a,b=c" }, "name"},
		{"name with trailing newline", func(c *Config) { c.Name = "one\n" }, "name"},
		{"no data dir", func(c *Config) { c.DataDir = "" }, "DataDir"},
		{"host name", func(c *Config) { c.PeerAddress = "node1:2380" }, "PeerAddress"},
		{"port 0", func(c *Config) { c.PeerAddress = "127.24.0.1:0" }, "port 0"},
		{"unspecified", func(c *Config) { c.PeerAddress = "0.0.0.0:2380" }, "unspecified"},
		{"bad listen", func(c *Config) { c.ListenAddress = "x" }, "ListenAddress"},
		{"long socket", func(c *Config) { c.ClientSocket = "/" + strings.Repeat("s", 200) }, "unix sockets"},
		{"short key", func(c *Config) { c.PeerKey = key[:10] }, "PeerKey"},
		{"both", func(c *Config) { c.Join = join }, "only one"},
		{"join without key", func(c *Config) { c.Bootstrap = false; c.Join = join }, "PeerKey"},
		{"join without peers", func(c *Config) {
			c.Bootstrap, c.PeerKey = false, key
			j := *join
			j.Peers = nil
			c.Join = &j
		}, "no peers"},
		{"election too short", func(c *Config) { c.ElectionTimeout = 300 * time.Millisecond }, "5 heartbeats"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := good()
			tc.change(&cfg)
			_, err := New(cfg)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("New: %v, want an error mentioning %q", err, tc.want)
			}
		})
	}
}

// TestPrepareJoinChecks checks that a joiner refuses join data that is not
// for it, before it writes anything.
func TestPrepareJoinChecks(t *testing.T) {
	c, err := newCA(time.Now())
	if err != nil {
		t.Fatal(err)
	}
	other, err := newCA(time.Now())
	if err != nil {
		t.Fatal(err)
	}
	_, key, _ := ed25519.GenerateKey(rand.Reader)
	_, otherKey, _ := ed25519.GenerateKey(rand.Reader)
	const addr = "127.24.0.2:2380"
	for _, tc := range []struct {
		name string
		jd   func() *JoinData
		want string
	}{
		{"certificate for another key", func() *JoinData { return joinDataFor(t, c, "two", addr, otherKey) }, "peer key"},
		{"certificate for another name", func() *JoinData {
			jd := joinDataFor(t, c, "three", addr, key)
			jd.Peers[0].Name = "two"
			return jd
		}, "is for \"three\""},
		{"certificate for another address", func() *JoinData {
			jd := joinDataFor(t, c, "two", "127.24.0.3:2380", key)
			jd.Peers[0].Address = addr
			return jd
		}, "does not cover"},
		{"certificate from another CA", func() *JoinData {
			jd := joinDataFor(t, c, "two", addr, key)
			jd.CACertificate = other.cert.Raw
			return jd
		}, "not signed"},
		{"not among the peers", func() *JoinData {
			jd := joinDataFor(t, c, "two", addr, key)
			jd.Peers[0].Name = "one"
			return jd
		}, "does not list"},
		{"listed at another address", func() *JoinData {
			jd := joinDataFor(t, c, "two", addr, key)
			jd.Peers[0].Address = "127.24.0.9:2380"
			return jd
		}, "lists this member at"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := Config{Name: "two", DataDir: t.TempDir(), PeerAddress: addr, PeerKey: key, Join: tc.jd()}
			if err := cfg.validate(); err != nil {
				t.Fatal(err)
			}
			_, err := prepare(&cfg, zap.NewNop())
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("prepare: %v, want an error mentioning %q", err, tc.want)
			}
			if _, err := os.Stat(layout(cfg.DataDir).identityFile()); !os.IsNotExist(err) {
				t.Errorf("identity written despite bad join data")
			}
		})
	}
}

func TestCRL(t *testing.T) {
	c, err := newCA(time.Now())
	if err != nil {
		t.Fatal(err)
	}
	first, err := newCRL(c, nil, nil, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	crl, err := parseCRL(c.cert, first)
	if err != nil {
		t.Fatal(err)
	}
	second, err := newCRL(c, crl, []*big.Int{big.NewInt(42)}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	crl2, err := parseCRL(c.cert, second)
	if err != nil {
		t.Fatal(err)
	}
	if !isRevoked(crl2, big.NewInt(42)) || isRevoked(crl2, big.NewInt(43)) || crl2.Number.Cmp(big.NewInt(2)) != 0 {
		t.Errorf("CRL after one revocation: number %v, entries %v", crl2.Number, crl2.RevokedCertificateEntries)
	}
	other, err := newCA(time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := parseCRL(other.cert, second); err == nil {
		t.Error("CRL signed by another CA accepted")
	}
}

func TestPeerCertificate(t *testing.T) {
	c, err := newCA(time.Now())
	if err != nil {
		t.Fatal(err)
	}
	pub, _, _ := ed25519.GenerateKey(rand.Reader)
	cert, err := c.issuePeer("two", mustAddr(t, "127.24.0.2:2380"), pub, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(c.cert)
	for _, usage := range []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth} {
		if _, err := cert.Verify(x509.VerifyOptions{Roots: pool, DNSName: "127.24.0.2", KeyUsages: []x509.ExtKeyUsage{usage}}); err != nil {
			t.Errorf("peer certificate does not verify for %v: %v", usage, err)
		}
	}
	if ap, ok := peerAddressOf(cert); !ok || ap.String() != "127.24.0.2:2380" {
		t.Errorf("peer address from certificate = %v, %v", ap, ok)
	}
}

// The files etcd's peer TLS reads are replaced atomically (through
// localstorage.File) with the key 0600 and the certificates and CRL 0644;
// writing them again leaves no temporary files behind.
func TestWritePKIModes(t *testing.T) {
	l := layout(t.TempDir())
	if err := os.MkdirAll(l.pkiDir(), 0o700); err != nil {
		t.Fatal(err)
	}
	_, key, _ := ed25519.GenerateKey(rand.Reader)
	for _, crl := range []string{"first", "second"} {
		if err := writePKI(l, []byte("ca"), []byte("peer"), key, []byte(crl)); err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(l.crlFile())
		if err != nil || string(got) != crl {
			t.Fatalf("CRL file holds %q, %v; want %q", got, err, crl)
		}
	}
	for f, want := range map[string]os.FileMode{
		l.peerKeyFile():  0o600,
		l.caFile():       0o644,
		l.peerCertFile(): 0o644,
		l.crlFile():      0o644,
	} {
		fi, err := os.Stat(f)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != want {
			t.Errorf("%s has mode %v, want %v", filepath.Base(f), fi.Mode().Perm(), want)
		}
	}
	entries, _ := os.ReadDir(l.pkiDir())
	if len(entries) != 4 {
		t.Errorf("temporary files left behind: %v", entries)
	}
}

func TestRemovalSpotter(t *testing.T) {
	var seen atomic.Bool
	// A logger that drops everything must not blind the spotter.
	l := zap.NewNop().WithOptions(zap.WrapCore(func(c zapcore.Core) zapcore.Core {
		return &removalSpotter{Core: c, seen: &seen, closed: new(atomic.Bool)}
	})).With(zap.String("component", "etcd"))
	l.Warn("server error")
	if seen.Load() {
		t.Fatal("spotted removal in an unrelated message")
	}
	l.Warn(etcdRemovedMessage)
	if !seen.Load() {
		t.Fatal("removal message not spotted")
	}
}
