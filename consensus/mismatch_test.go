package consensus

import (
	"crypto/ed25519"
	"crypto/rand"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestRefuseMismatch checks that a data directory is never started under
// another identity than the one it was created with.
func TestRefuseMismatch(t *testing.T) {
	a := addrs(t, 2)
	_, key, _ := ed25519.GenerateKey(rand.Reader)
	cfg := bootstrapConfig(t, "one", a[0])
	cfg.PeerKey = key
	svc := newService(t, cfg)
	stop := start(t, svc)
	waitVoter(t, svc)
	stop()

	// Join data of another cluster, valid in itself.
	other, err := newCA(time.Now())
	if err != nil {
		t.Fatal(err)
	}
	otherJoin := joinDataFor(t, other, "one", a[0], key)

	_, otherKey, _ := ed25519.GenerateKey(rand.Reader)
	for _, tc := range []struct {
		name   string
		change func(c *Config)
	}{
		{"other name", func(c *Config) { c.Name = "two" }},
		{"other peer address", func(c *Config) { c.PeerAddress = a[1] }},
		{"other peer key", func(c *Config) { c.PeerKey = otherKey }},
		{"join of another cluster", func(c *Config) { c.Bootstrap = false; c.Join = otherJoin }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := cfg
			tc.change(&c)
			svc := newService(t, c)
			stop := start(t, svc)
			st := waitStoppedWith(t, svc, ErrDataMismatch)
			t.Logf("refused: %v", st.Err)
			stop()
		})
	}

	t.Run("etcd data without identity", func(t *testing.T) {
		c := cfg
		c.DataDir = t.TempDir()
		if err := os.MkdirAll(filepath.Join(c.DataDir, "etcd", "member"), 0o700); err != nil {
			t.Fatal(err)
		}
		svc := newService(t, c)
		stop := start(t, svc)
		waitStoppedWith(t, svc, ErrDataMismatch)
		stop()
	})

	t.Run("empty directory, nothing to do", func(t *testing.T) {
		c := cfg
		c.DataDir = t.TempDir()
		c.Bootstrap = false
		svc := newService(t, c)
		stop := start(t, svc)
		st := waitFor(t, svc, "stopped", func(s *Status) bool { return s.State == StateStopped && s.Err != nil })
		if !strings.Contains(st.Err.Error(), "neither Bootstrap nor Join") {
			t.Errorf("error = %v, want one about Bootstrap and Join", st.Err)
		}
		stop()
	})

	// The original configuration still works: nothing above touched the
	// directory.
	svc = newService(t, cfg)
	start(t, svc)
	waitVoter(t, svc)
}

// TestRefuseOtherClusterData checks that etcd data of another cluster is
// refused even when identity.json and the PKI files match the
// configuration (a directory assembled from two, or restored from the wrong
// backup).
func TestRefuseOtherClusterData(t *testing.T) {
	a := addrs(t, 1)
	cfgA := bootstrapConfig(t, "one", a[0])
	cfgB := bootstrapConfig(t, "one", a[0])
	for _, cfg := range []Config{cfgA, cfgB} {
		svc := newService(t, cfg)
		stop := start(t, svc)
		waitVoter(t, svc)
		stop()
	}
	la, lb := layout(cfgA.DataDir), layout(cfgB.DataDir)
	for _, f := range [][2]string{
		{la.identityFile(), lb.identityFile()},
		{la.caFile(), lb.caFile()},
		{la.peerCertFile(), lb.peerCertFile()},
		{la.peerKeyFile(), lb.peerKeyFile()},
		{la.crlFile(), lb.crlFile()},
	} {
		data, err := os.ReadFile(f[0])
		if err != nil {
			t.Fatal(err)
		}
		// A byte-for-byte copy, checksum header and all.
		if err := os.WriteFile(f[1], data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	svc := newService(t, cfgB)
	stop := start(t, svc)
	st := waitStoppedWith(t, svc, ErrDataMismatch)
	if !strings.Contains(st.Err.Error(), "cluster") {
		t.Errorf("error %q does not mention the cluster", st.Err)
	}
	stop()
}

// joinDataFor issues join data from c for a member, as AddLearner would but
// without a cluster behind it.
func joinDataFor(t testing.TB, c *ca, name, addr string, key ed25519.PrivateKey) *JoinData {
	t.Helper()
	now := time.Now()
	cert, err := c.issuePeer(name, mustAddr(t, addr), key.Public().(ed25519.PublicKey), now)
	if err != nil {
		t.Fatal(err)
	}
	crl, err := newCRL(c, nil, nil, now)
	if err != nil {
		t.Fatal(err)
	}
	return &JoinData{
		CACertificate:   c.cert.Raw,
		PeerCertificate: cert.Raw,
		Peers:           []Peer{{Name: name, Address: addr}},
		CRL:             crl,
	}
}
