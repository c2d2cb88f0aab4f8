package pid1

import (
	"fmt"
	"net/netip"
	"time"

	"github.com/vishvananda/netlink"
)

// nicTimeout bounds the wait for the NIC to appear: virtio_net probes
// asynchronously after it is loaded, slowly under TCG on a busy host.
const nicTimeout = 60 * time.Second

// setUpNetwork brings up lo and the first ethernet NIC with addr. It
// returns the NIC's name.
func setUpNetwork(addr netip.Prefix) (string, error) {
	lo, err := netlink.LinkByName("lo")
	if err != nil {
		return "", fmt.Errorf("network: finding lo: %w", err)
	}
	if err := netlink.LinkSetUp(lo); err != nil {
		return "", fmt.Errorf("network: bringing lo up: %w", err)
	}
	deadline := time.Now().Add(nicTimeout)
	var nic netlink.Link
	for nic == nil {
		links, err := netlink.LinkList()
		if err != nil {
			return "", fmt.Errorf("network: listing links: %w", err)
		}
		for _, l := range links {
			if l.Type() == "device" && l.Attrs().Name != "lo" && len(l.Attrs().HardwareAddr) == 6 {
				nic = l
				break
			}
		}
		if nic == nil {
			if time.Now().After(deadline) {
				return "", fmt.Errorf("network: no NIC appeared within %v (is virtio_net loaded, and does qemu give the machine a virtio-net device?)", nicTimeout)
			}
			time.Sleep(50 * time.Millisecond) // polling the kernel: nothing to wait on without udev
		}
	}
	name := nic.Attrs().Name
	a, err := netlink.ParseAddr(addr.String())
	if err != nil {
		return "", fmt.Errorf("network: %v: %w", addr, err)
	}
	if err := netlink.AddrReplace(nic, a); err != nil {
		return "", fmt.Errorf("network: giving %s the address %v: %w", name, addr, err)
	}
	if err := netlink.LinkSetUp(nic); err != nil {
		return "", fmt.Errorf("network: bringing %s up: %w", name, err)
	}
	return name, nil
}
