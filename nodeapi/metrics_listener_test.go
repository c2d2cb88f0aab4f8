package nodeapi

import (
	"context"
	"crypto/ed25519"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/polis-os/polis/identity"
	"github.com/polis-os/polis/internal/testutil"
	"github.com/polis-os/polis/roleserve"
)

// A /metrics server that cannot set up its TLS (here: no serving
// certificate) fails without keeping its port: otherwise every
// restart by the supervisor would fail with "address already in use".
func TestMetricsFailingTLSSetupFreesThePort(t *testing.T) {
	defer func(f func(netip.Addr) bool) { metricsNeedTLS = f }(metricsNeedTLS)
	metricsNeedTLS = func(netip.Addr) bool { return true }

	now := time.Now()
	ca, err := identity.NewCA(now)
	if err != nil {
		t.Fatal(err)
	}
	pub, key, err := ed25519.GenerateKey(nil)
	if err != nil {
		t.Fatal(err)
	}
	user, err := ca.IssueUser("alice", pub, now) // not a node certificate
	if err != nil {
		t.Fatal(err)
	}
	creds := &roleserve.Credentials{Key: key, Certificate: user, CACertificate: ca.Certificate()}
	// An address outside the /24s that subnets (nodeapi_test.go) hands out.
	ap := testutil.FreePort(t, netip.MustParseAddr("127.31.254.1"))
	s := &Service{cfg: Config{Address: ap.Addr(), MetricsPort: ap.Port()}}
	if err := s.serveMetrics(creds, nil, nil)(context.Background()); err == nil {
		t.Fatal("serving metrics without a serving certificate: no error")
	}
	lis, err := net.Listen("tcp", ap.String())
	if err != nil {
		t.Fatalf("the port after a failed start: %v", err)
	}
	lis.Close()
}
