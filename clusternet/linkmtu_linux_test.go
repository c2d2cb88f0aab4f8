package clusternet

import (
	"net/netip"
	"os"
	"strconv"
	"strings"
	"testing"
)

// LinkMTU finds the link by the address it holds: the loopback device's
// MTU for 127.0.0.1; an address no link holds is an error naming it.
func TestLinkMTU(t *testing.T) {
	raw, err := os.ReadFile("/sys/class/net/lo/mtu")
	if err != nil {
		t.Skipf("no loopback device to compare with: %v", err)
	}
	want, err := strconv.Atoi(strings.TrimSpace(string(raw)))
	if err != nil {
		t.Fatal(err)
	}
	if got, err := LinkMTU(netip.MustParseAddr("127.0.0.1")); err != nil || got != want {
		t.Errorf("LinkMTU(127.0.0.1) = %d, %v; want lo's %d", got, err, want)
	}
	if _, err := LinkMTU(netip.MustParseAddr("192.0.2.77")); err == nil || !strings.Contains(err.Error(), "192.0.2.77") {
		t.Errorf("LinkMTU of an address no link holds: %v, want an error naming it", err)
	}
}
