package controller

import (
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/polis-os/polis/internal/testutil"
)

// TestMain fails the package if a goroutine outlives the tests, waiting a
// little for etcd's and HTTP's idle connections to wind down (the podcidr
// tests run both).
func TestMain(m *testing.M) { testutil.VerifyTestMainWithin(m, 15*time.Second) }

// A configuration that cannot work is refused, naming what is wrong.
func TestConfigValidate(t *testing.T) {
	good := Config{Bundle: "/bin/polis-kube", Dir: "/run/kube", Address: netip.MustParseAddr("10.0.0.1")}
	if err := good.Validate(); err != nil {
		t.Fatalf("a good config: %v", err)
	}
	if good.APIServerPort() != 6443 || good.EtcdSocket() != "/run/kube/etcd.sock" {
		t.Errorf("port %d, socket %s", good.APIServerPort(), good.EtcdSocket())
	}
	for _, tc := range []struct {
		c    Config
		says string
	}{
		{Config{Bundle: "polis-kube", Dir: "/run/kube"}, `bundle "polis-kube" is not an absolute path`},
		{Config{Bundle: "/bin/polis-kube", Dir: "kube"}, `directory "kube" is not an absolute path`},
		{Config{Bundle: "/bin/polis-kube", Dir: "/" + strings.Repeat("d", 100)}, "longer than 107 bytes"},
	} {
		if err := tc.c.Validate(); err == nil || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("%+v: %v, want it to say %q", tc.c, err, tc.says)
		}
	}
	if got := ServiceIP(netip.MustParsePrefix("10.96.0.0/12")); got != netip.MustParseAddr("10.96.0.1") {
		t.Errorf("ServiceIP = %v", got)
	}
}
