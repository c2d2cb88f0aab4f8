package clusternet

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"
)

// plan is what must change in the kernel to reach a desired state: the
// difference between the two, nothing more, so that applying it to a kernel
// already in line does nothing at all.
type plan struct {
	deleteDevice bool
	createDevice bool
	// mtu is the MTU of a device created, or of one whose MTU is wrong
	// (setMTU).
	mtu       int
	setMTU    bool
	configure deviceChange
	setUp     bool
	replace   []route // sorted by destination
	delete    []route // sorted by destination
}

func (p plan) empty() bool {
	return !p.deleteDevice && !p.createDevice && !p.setMTU && p.configure.empty() && !p.setUp &&
		len(p.replace) == 0 && len(p.delete) == 0
}

func (p plan) String() string {
	return fmt.Sprintf("delete device %v, create device %v, set MTU %v, set key %v, set port %v, remove %d peers, set %d peers, set up %v, replace %d routes, delete %d routes",
		p.deleteDevice, p.createDevice, p.setMTU, p.configure.PrivateKey != nil, p.configure.ListenPort != nil,
		len(p.configure.Remove), len(p.configure.Set), p.setUp, len(p.replace), len(p.delete))
}

// diff is the plan that takes the kernel from (dev, routes) to want. dev is
// the device of want's name as it is (nil: absent); routes are the marked
// routes as they are.
func diff(want desired, dev *device, routes []route) plan {
	var p plan
	switch {
	case want.device == nil:
		p.deleteDevice = dev != nil
	case dev == nil:
		p.createDevice = true
		p.mtu = want.device.MTU
		p.setUp = true
		p.configure = deviceChange{PrivateKey: &want.device.PrivateKey, ListenPort: &want.device.ListenPort}
		for _, k := range sortedKeys(want.device.Peers) {
			p.configure.Set = append(p.configure.Set, want.device.Peers[k])
		}
	default:
		if dev.MTU != want.device.MTU {
			p.setMTU, p.mtu = true, want.device.MTU
		}
		if dev.PrivateKey != want.device.PrivateKey {
			p.configure.PrivateKey = &want.device.PrivateKey
		}
		if dev.ListenPort != want.device.ListenPort {
			p.configure.ListenPort = &want.device.ListenPort
		}
		for _, k := range sortedKeys(dev.Peers) {
			if _, ok := want.device.Peers[k]; !ok {
				p.configure.Remove = append(p.configure.Remove, k)
			}
		}
		for _, k := range sortedKeys(want.device.Peers) {
			w := want.device.Peers[k]
			if have, ok := dev.Peers[k]; !ok || !have.equal(w) {
				p.configure.Set = append(p.configure.Set, w)
			}
		}
		p.setUp = !dev.Up
	}
	have := make(map[netip.Prefix]route, len(routes))
	for _, r := range routes {
		if _, ok := want.routes[r.Dst]; !ok {
			p.delete = append(p.delete, r)
		}
		have[r.Dst] = r
	}
	for _, r := range want.routes {
		// A new device has none of its routes yet, whatever an old device
		// of the same name had: the kernel dropped them with it.
		if h, ok := have[r.Dst]; !ok || h != r || p.createDevice && r.Device != "" {
			p.replace = append(p.replace, r)
		}
	}
	byDst := func(a, b route) int { return comparePrefix(a.Dst, b.Dst) }
	slices.SortFunc(p.replace, byDst)
	slices.SortFunc(p.delete, byDst)
	return p
}

// apply carries p out on k, for the device called name, in an order that
// keeps traffic flowing: the device is ready before routes point at it, and
// routes are replaced in place (never deleted and added again).
func (p plan) apply(k kernel, name string) error {
	if p.deleteDevice {
		if err := k.DeleteDevice(name); err != nil {
			return fmt.Errorf("deleting WireGuard device %s: %w", name, err)
		}
	}
	if p.createDevice {
		if err := k.CreateDevice(name, p.mtu); err != nil {
			return fmt.Errorf("creating WireGuard device %s: %w", name, err)
		}
	}
	if p.setMTU {
		if err := k.SetMTU(name, p.mtu); err != nil {
			return fmt.Errorf("setting WireGuard device %s's MTU to %d: %w", name, p.mtu, err)
		}
	}
	if !p.configure.empty() {
		if err := k.ConfigureDevice(name, p.configure); err != nil {
			return fmt.Errorf("configuring WireGuard device %s: %w", name, err)
		}
	}
	if p.setUp {
		if err := k.SetUp(name); err != nil {
			return fmt.Errorf("bringing WireGuard device %s up: %w", name, err)
		}
	}
	for _, r := range p.replace {
		if err := k.ReplaceRoute(r); err != nil {
			return fmt.Errorf("setting route %v: %w", r, err)
		}
	}
	for _, r := range p.delete {
		if err := k.DeleteRoute(r); err != nil {
			return fmt.Errorf("deleting route %v: %w", r, err)
		}
	}
	return nil
}

func sortedKeys[V any](m map[Key]V) []Key {
	keys := make([]Key, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b Key) int { return slices.Compare(a[:], b[:]) })
	return keys
}

func comparePrefix(a, b netip.Prefix) int {
	if c := a.Addr().Compare(b.Addr()); c != 0 {
		return c
	}
	return cmp.Compare(a.Bits(), b.Bits())
}
