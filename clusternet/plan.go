package clusternet

import (
	"cmp"
	"errors"
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
	// addAddresses and removeAddresses change the device's addresses.
	addAddresses, removeAddresses []netip.Prefix
	// add are the routes to destinations that have none of ours: added,
	// never replacing, so that someone else's route is never taken over.
	add     []route // sorted by destination
	replace []route // sorted by destination
	delete  []route // sorted by destination
	// nodes are the peers' node IDs by pod range, for naming the peer of
	// a route that fails.
	nodes map[netip.Prefix]string
}

func (p plan) empty() bool {
	return !p.deleteDevice && !p.createDevice && !p.setMTU && p.configure.empty() && !p.setUp &&
		len(p.addAddresses) == 0 && len(p.removeAddresses) == 0 && len(p.add) == 0 && len(p.replace) == 0 && len(p.delete) == 0
}

func (p plan) String() string {
	return fmt.Sprintf("delete device %v, create device %v, set MTU %v, set key %v, set port %v, remove %d peers, set %d peers, set up %v, add %d addresses, remove %d addresses, add %d routes, replace %d routes, delete %d routes",
		p.deleteDevice, p.createDevice, p.setMTU, p.configure.PrivateKey != nil, p.configure.ListenPort != nil,
		len(p.configure.Remove), len(p.configure.Set), p.setUp, len(p.addAddresses), len(p.removeAddresses),
		len(p.add), len(p.replace), len(p.delete))
}

// diff is the plan that takes the kernel from (dev, routes) to want. dev is
// the device of want's name as it is (nil: absent); routes are the marked
// routes as they are. want must not route a destination that has someone
// else's route (desired.yieldTo): diff would plan to add it, which the
// kernel refuses.
func diff(want desired, dev *device, routes []route) plan {
	p := plan{nodes: make(map[netip.Prefix]string, len(want.peers))}
	for _, peer := range want.peers {
		p.nodes[peer.PodCIDR] = peer.NodeID
	}
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
		p.addAddresses = slices.Clone(want.device.Addresses)
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
		for _, a := range want.device.Addresses {
			if !slices.Contains(dev.Addresses, a) {
				p.addAddresses = append(p.addAddresses, a)
			}
		}
		for _, a := range dev.Addresses {
			if !slices.Contains(want.device.Addresses, a) {
				p.removeAddresses = append(p.removeAddresses, a)
			}
		}
	}
	have := make(map[netip.Prefix]route, len(routes))
	for _, r := range routes {
		if _, ok := want.routes[r.Dst]; !ok {
			p.delete = append(p.delete, r)
		}
		have[r.Dst] = r
	}
	for _, r := range want.routes {
		h, ok := have[r.Dst]
		switch {
		case !ok:
			p.add = append(p.add, r)
		// A new device has none of its routes yet, whatever an old device
		// of the same name had: the kernel dropped them with it.
		case h != r || p.createDevice && r.Device != "":
			p.replace = append(p.replace, r)
		}
	}
	byDst := func(a, b route) int { return comparePrefix(a.Dst, b.Dst) }
	slices.SortFunc(p.add, byDst)
	slices.SortFunc(p.replace, byDst)
	slices.SortFunc(p.delete, byDst)
	return p
}

// apply carries p out on k, for the device called name, in an order that
// keeps traffic flowing: the device is ready before routes point at it, and
// routes are replaced in place (never deleted and added again). Only the
// marked routes are replaced; a new one is added, which the kernel refuses
// when someone else's route has its destination.
//
// A step that fails does not stop the steps that do not depend on it: one
// route the kernel refuses (and would refuse again at every attempt) must
// not keep the other peers' routes out, nor a departed peer's route in.
// Only the device's own steps depend on each other, and the routes through
// it on them all. The error joins every step's, each naming what failed.
func (p plan) apply(k kernel, name string) error {
	var errs []error
	fail := func(err error, format string, args ...any) bool {
		if err != nil {
			errs = append(errs, fmt.Errorf(format+": %w", append(args, err)...))
		}
		return err != nil
	}
	if p.deleteDevice {
		fail(k.DeleteDevice(name), "deleting WireGuard device %s", name)
	}
	// ready is whether the device can carry what is routed to it: it
	// exists, holds its peers and is up. A route set through a device that
	// lacks its peer would drop the peer's traffic, where the route it
	// replaces might not have.
	ready := true
	// exists is whether the device is there to be given addresses.
	exists := !p.deleteDevice
	if p.createDevice && fail(k.CreateDevice(name, p.mtu), "creating WireGuard device %s", name) {
		ready, exists = false, false
	}
	// A wrong MTU does not keep the device from carrying packets: the
	// steps after it go ahead.
	if ready && p.setMTU {
		fail(k.SetMTU(name, p.mtu), "setting WireGuard device %s's MTU to %d", name, p.mtu)
	}
	if ready && !p.configure.empty() && fail(k.ConfigureDevice(name, p.configure), "configuring WireGuard device %s", name) {
		ready = false
	}
	// The device's address only chooses the source of the node's own
	// packets: the routes need not wait for it.
	if exists && (len(p.addAddresses) > 0 || len(p.removeAddresses) > 0) {
		fail(k.SetAddresses(name, p.addAddresses, p.removeAddresses), "setting WireGuard device %s's addresses to add %v, remove %v", name, p.addAddresses, p.removeAddresses)
	}
	if ready && p.setUp && fail(k.SetUp(name), "bringing WireGuard device %s up", name) {
		ready = false
	}
	for _, r := range p.add {
		if r.Device != "" && !ready {
			// The device's error says why; the route waits for the next
			// attempt.
			continue
		}
		fail(k.AddRoute(r), "adding route %v to %s", r, p.nodeOf(r))
	}
	for _, r := range p.replace {
		if r.Device != "" && !ready {
			continue
		}
		fail(k.ReplaceRoute(r), "setting route %v to %s", r, p.nodeOf(r))
	}
	// Deleting a route depends on nothing: the peer is gone, and so is
	// the reason to carry anything to its pod range.
	for _, r := range p.delete {
		fail(k.DeleteRoute(r), "deleting route %v", r)
	}
	return errors.Join(errs...)
}

// nodeOf names the peer whose pods r leads to, for errors.
func (p plan) nodeOf(r route) string {
	if id, ok := p.nodes[r.Dst]; ok {
		return id + "'s pods"
	}
	return "no known peer's pods"
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
