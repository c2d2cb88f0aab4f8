package node

import (
	"context"
	"crypto/ed25519"
	"crypto/x509"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/polis-os/polis/event"
	"github.com/polis-os/polis/roleserve"
	"github.com/polis-os/polis/supervisor/supervisortest"
)

// A node obtains its node API certificate from the cluster once enrolled:
// for its key, from the cluster CA, naming its node ID and its address;
// and a new one when the one it has is due.
func TestNodeAPICertificate(t *testing.T) {
	// Outside the /24s that subnets hands out (1 to 250).
	addr := netip.AddrFrom4([4]byte{127, 27, 252, 1})
	n := bootstrapNode(t, addr)
	// The first node API certificate is due at once; the next is not.
	var due dueOnce
	n.apiRenewAt = due.renewAt
	supervisortest.Harness(t, n.Run)

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	creds, err := event.Get(ctx, &n.Values().Credentials, event.Filter(func(c *roleserve.Credentials) bool { return c != nil }))
	if err != nil {
		t.Fatal(err)
	}
	first, err := event.Get(ctx, &n.apiCertificate, event.Filter(func(c *x509.Certificate) bool { return c != nil && namesAddress(c, addr) }))
	if err != nil {
		t.Fatalf("no node API certificate naming %s: %v", addr, err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(creds.CACertificate)
	for _, name := range []string{creds.NodeID, addr.String()} {
		if _, err := first.Verify(x509.VerifyOptions{Roots: roots, DNSName: name, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
			t.Errorf("the node API certificate for %s: %v", name, err)
		}
	}
	if k, ok := first.PublicKey.(ed25519.PublicKey); !ok || !k.Equal(creds.Key.Public()) {
		t.Error("the node API certificate is not for the node key")
	}
	if _, err := event.Get(ctx, &n.apiCertificate, event.Filter(due.renewed)); err != nil {
		t.Fatalf("the node API certificate was not renewed: %v", err)
	}
}

func TestNamesAddress(t *testing.T) {
	cert := &x509.Certificate{IPAddresses: []net.IP{net.IPv4(10, 0, 0, 1)}}
	for _, tc := range []struct {
		addr netip.Addr
		want bool
	}{
		{netip.MustParseAddr("10.0.0.1"), true},
		{netip.MustParseAddr("::ffff:10.0.0.1"), true},
		{netip.MustParseAddr("10.0.0.2"), false},
		{netip.IPv4Unspecified(), true},
		{netip.Addr{}, true},
	} {
		if got := namesAddress(cert, tc.addr); got != tc.want {
			t.Errorf("namesAddress(%v) = %t, want %t", tc.addr, got, tc.want)
		}
	}
}
