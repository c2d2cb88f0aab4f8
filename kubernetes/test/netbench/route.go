package main

import (
	"encoding/json"
	"fmt"
	"net"
	"os"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// The route subcommands let the VM test measure plain routing Pod to Pod
// beside WireGuard in the same run: run in a host-network Pod with
// CAP_NET_ADMIN, they route one Pod's address (a /32, more specific than
// the peer's pod range that the node routes through its WireGuard device)
// through the peer node's cluster address, in clear, as clusternet's
// ModePlain routes a whole range. The node's pod-network reconciler keeps
// only routes of its own protocol number, so it leaves these alone; the
// test removes them when it is done.

// routeVia routes dst (one address) through gateway, replacing a route to
// dst there may be, and prints the device the kernel now sends dst's
// packets out of, for the test to check that it is not the tunnel:
// {"kind":"route","dst":…,"dev":…}.
func routeVia(dst, gateway string) error {
	d, err := hostPrefix(dst)
	if err != nil {
		return err
	}
	gw := net.ParseIP(gateway)
	if gw == nil || gw.To4() == nil {
		return fmt.Errorf("gateway %q is no IPv4 address", gateway)
	}
	if err := netlink.RouteReplace(&netlink.Route{Dst: d, Gw: gw, Protocol: unix.RTPROT_STATIC}); err != nil {
		return fmt.Errorf("routing %s via %s: %w", dst, gateway, err)
	}
	chosen, err := netlink.RouteGet(d.IP)
	if err != nil || len(chosen) == 0 {
		return fmt.Errorf("asking the kernel how it routes %s: %v", dst, err)
	}
	link, err := netlink.LinkByIndex(chosen[0].LinkIndex)
	if err != nil {
		return fmt.Errorf("the link %s is routed out of: %w", dst, err)
	}
	return json.NewEncoder(os.Stdout).Encode(map[string]any{"kind": "route", "dst": dst, "dev": link.Attrs().Name})
}

// unroute removes the route to dst that routeVia added.
func unroute(dst string) error {
	d, err := hostPrefix(dst)
	if err != nil {
		return err
	}
	if err := netlink.RouteDel(&netlink.Route{Dst: d, Protocol: unix.RTPROT_STATIC}); err != nil {
		return fmt.Errorf("removing the route to %s: %w", dst, err)
	}
	return nil
}

func hostPrefix(addr string) (*net.IPNet, error) {
	ip := net.ParseIP(addr)
	if ip == nil || ip.To4() == nil {
		return nil, fmt.Errorf("%q is no IPv4 address", addr)
	}
	return &net.IPNet{IP: ip.To4(), Mask: net.CIDRMask(32, 32)}, nil
}
