package clusternet

import (
	"net"
	"net/netip"
	"testing"
)

// prefixOf reads the kernel's prefixes as they are: an IPv4 one (whose
// address netlink may give in 16 bytes) as IPv4, an IPv4-mapped IPv6 one
// as IPv6, never as something else or nothing.
func TestPrefixOf(t *testing.T) {
	for _, tc := range []struct {
		n    net.IPNet
		want string
	}{
		{net.IPNet{IP: net.IPv4(10, 0, 0, 0), Mask: net.CIDRMask(24, 32)}, "10.0.0.0/24"},
		{net.IPNet{IP: net.IPv4(10, 0, 0, 0).To4(), Mask: net.CIDRMask(24, 32)}, "10.0.0.0/24"},
		{net.IPNet{IP: net.ParseIP("::ffff:10.0.0.0"), Mask: net.CIDRMask(120, 128)}, "::ffff:10.0.0.0/120"},
		{net.IPNet{IP: net.ParseIP("fd00::1"), Mask: net.CIDRMask(64, 128)}, "fd00::/64"},
	} {
		got, ok := prefixOf(tc.n)
		if !ok || got != netip.MustParsePrefix(tc.want) {
			t.Errorf("prefixOf(%v) = %v, %v; want %s", tc.n, got, ok, tc.want)
		}
	}
	if got, ok := prefixOf(net.IPNet{IP: net.ParseIP("fd00::"), Mask: net.CIDRMask(24, 32)}); ok {
		t.Errorf("prefixOf of an IPv6 address with an IPv4 mask = %v, want none", got)
	}
}
