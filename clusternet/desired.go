package clusternet

import (
	"cmp"
	"net/netip"
	"slices"
)

// SkippedPeer is a peer the reconciler left out, and why.
type SkippedPeer struct {
	NodeID string
	Reason string
}

// desired is the kernel state the reconciler aims for, decided from the
// configuration and the peers alone.
type desired struct {
	// device is the WireGuard device's configuration (Up is always true);
	// nil in plain mode, where no device must exist.
	device *device
	// routes by destination: every configured peer's pod range.
	routes map[netip.Prefix]route
	// peers are the peers configured, sorted by pod range.
	peers []Peer
	// skipped are the peers left out.
	skipped []SkippedPeer
}

// decide computes the desired state for peers. A peer that cannot be
// configured is skipped with a reason, never fatal: one node's bad record
// must not cut this node off from every other. When two peers' pod ranges
// overlap, the one whose range sorts first (by address, then the larger
// range, then by node ID) is kept, so every node makes the same choice.
func decide(c Config, peers []Peer) desired {
	d := desired{routes: make(map[netip.Prefix]route, len(peers))}
	if c.Mode == ModeWireGuard {
		d.device = &device{PrivateKey: c.PrivateKey, ListenPort: c.ListenPort, MTU: c.MTU, Up: true, Peers: make(map[Key]wgPeer, len(peers))}
		if a, ok := tunnelAddress(c.PodCIDR); ok {
			d.device.Addresses = []netip.Prefix{a}
		}
	}
	skip := func(p Peer, reason string) {
		d.skipped = append(d.skipped, SkippedPeer{NodeID: p.NodeID, Reason: reason})
	}
	addrs := clusterAddresses(c, peers)
	var ownKey Key
	if c.Mode == ModeWireGuard {
		ownKey = c.PrivateKey.PublicKey()
	}
	var candidates []Peer
	for _, p := range peers {
		held, holds := addrs.heldBy(p.PodCIDR)
		switch {
		case !p.Address.IsValid():
			skip(p, "no cluster address")
		case !p.PodCIDR.IsValid():
			skip(p, "no pod range")
		case p.PodCIDR.Addr().Is4In6():
			// Refused, not converted: the curator gives ranges as IPv4 or
			// IPv6, so one of these is a record gone wrong. As given, it
			// would be an IPv6 route that no IPv4 packet matches.
			skip(p, "pod range "+p.PodCIDR.String()+" is an IPv4-mapped IPv6 range, which no IPv4 packet matches")
		case c.Address.IsValid() && p.Address.Unmap() == c.Address.Unmap():
			skip(p, "has this node's own address")
		case holds:
			// Its route would take what goes to that address, WireGuard's
			// own packets to the node included, into the tunnel (or to
			// this peer): the node would be cut off.
			skip(p, "pod range "+p.PodCIDR.String()+" holds "+held.owner+" address "+held.addr.String())
		case c.PodCIDR.IsValid() && p.PodCIDR.Overlaps(c.PodCIDR):
			skip(p, "pod range "+p.PodCIDR.String()+" overlaps this node's own "+c.PodCIDR.String())
		case c.Mode == ModeWireGuard && p.PublicKey.IsZero():
			skip(p, "no WireGuard public key published yet")
		case c.Mode == ModeWireGuard && p.PublicKey == ownKey:
			// Another node with this node's key (a cloned data disk, say):
			// WireGuard ignores a peer with the device's own key, without
			// an error, so the peer would never be configured.
			skip(p, "same WireGuard key as this node")
		case c.Mode == ModePlain && p.Address.Unmap().Is4() != p.PodCIDR.Addr().Is4():
			skip(p, "plain routes need the address and the pod range in the same IP family")
		default:
			p.Address = p.Address.Unmap()
			p.PodCIDR = p.PodCIDR.Masked()
			candidates = append(candidates, p)
		}
	}
	slices.SortFunc(candidates, func(a, b Peer) int {
		if c := comparePrefix(a.PodCIDR, b.PodCIDR); c != 0 {
			return c
		}
		return cmp.Compare(a.NodeID, b.NodeID)
	})
	keys := make(map[Key]string)
	for _, p := range candidates {
		// Accepted ranges do not overlap and are sorted, so a candidate
		// (which starts at or after the last accepted one) can only
		// overlap the last one.
		if n := len(d.peers); n > 0 && d.peers[n-1].PodCIDR.Overlaps(p.PodCIDR) {
			last := d.peers[n-1]
			skip(p, "pod range "+p.PodCIDR.String()+" overlaps "+last.NodeID+"'s "+last.PodCIDR.String())
			continue
		}
		if c.Mode == ModeWireGuard {
			if other, dup := keys[p.PublicKey]; dup {
				skip(p, "same WireGuard public key as "+other)
				continue
			}
			keys[p.PublicKey] = p.NodeID
			d.device.Peers[p.PublicKey] = wgPeer{
				PublicKey:  p.PublicKey,
				Endpoint:   netip.AddrPortFrom(p.Address, uint16(c.ListenPort)),
				AllowedIPs: []netip.Prefix{p.PodCIDR},
			}
			d.routes[p.PodCIDR] = route{Dst: p.PodCIDR, Device: c.Device}
		} else {
			d.routes[p.PodCIDR] = route{Dst: p.PodCIDR, Via: p.Address}
		}
		d.peers = append(d.peers, p)
	}
	return d
}

// yieldTo drops from d the peers whose pod range has a route someone else
// added (a foreign destination) and none of this package's, each skipped
// with a reason. Such a route is the node owner's choice of where that
// range goes: taking it over would change it, and deleting it when the
// peer leaves would lose it. A range that has a route of ours (an earlier
// run's) stays ours, whatever other routes share its destination with
// another metric.
func (d *desired) yieldTo(foreign []netip.Prefix, ours []route) {
	if len(foreign) == 0 {
		return
	}
	taken := make(map[netip.Prefix]bool, len(foreign))
	for _, dst := range foreign {
		taken[dst] = true
	}
	for _, r := range ours {
		delete(taken, r.Dst)
	}
	d.peers = slices.DeleteFunc(d.peers, func(p Peer) bool {
		if !taken[p.PodCIDR] {
			return false
		}
		d.skipped = append(d.skipped, SkippedPeer{NodeID: p.NodeID, Reason: "pod range " + p.PodCIDR.String() + " already has a route this node did not add"})
		delete(d.routes, p.PodCIDR)
		if d.device != nil {
			delete(d.device.Peers, p.PublicKey)
		}
		return true
	})
}

// nodeAddress is a node's cluster address, and whose it is as a reason
// says it ("this node's own", "node-2's").
type nodeAddress struct {
	addr  netip.Addr
	owner string
}

// addressList is the nodes' cluster addresses, sorted.
type addressList []nodeAddress

// clusterAddresses lists this node's and every peer's cluster address,
// unmapped and without zones, as a route's destination would match them.
func clusterAddresses(c Config, peers []Peer) addressList {
	var l addressList
	if c.Address.IsValid() {
		l = append(l, nodeAddress{c.Address.Unmap().WithZone(""), "this node's own"})
	}
	for _, p := range peers {
		if p.Address.IsValid() {
			l = append(l, nodeAddress{p.Address.Unmap().WithZone(""), p.NodeID + "'s"})
		}
	}
	// Stable, so that of two nodes given the same address the reason
	// names this node, then the first peer.
	slices.SortStableFunc(l, func(a, b nodeAddress) int { return a.addr.Compare(b.addr) })
	return l
}

// heldBy returns the lowest of the addresses that r holds, if any. The
// addresses are sorted and a prefix is one contiguous range, so only the
// first address at or after r's start can be in it.
func (l addressList) heldBy(r netip.Prefix) (nodeAddress, bool) {
	if !r.IsValid() {
		return nodeAddress{}, false
	}
	r = r.Masked()
	i, _ := slices.BinarySearchFunc(l, r.Addr(), func(a nodeAddress, start netip.Addr) int { return a.addr.Compare(start) })
	if i < len(l) && r.Contains(l[i].addr) {
		return l[i], true
	}
	return nodeAddress{}, false
}

// tunnelAddress is the address the WireGuard device holds: the first of
// the node's pod range (the Pods' gateway, which their bridge holds too),
// as a single address. The kernel picks a route's link's own address as
// the source of what the node itself sends that way, so with it the
// node's own packets to a remote Pod, and those it masquerades on their
// way there (a NodePort's, say), leave the tunnel with an address of this
// node's pod range, which the peer accepts; without it they would carry
// the node's cluster address, which the peer's WireGuard drops. ok is
// false when there is no pod range.
func tunnelAddress(podCIDR netip.Prefix) (netip.Prefix, bool) {
	if !podCIDR.IsValid() {
		return netip.Prefix{}, false
	}
	a := podCIDR.Masked().Addr().Next()
	if !a.IsValid() || !podCIDR.Contains(a) {
		return netip.Prefix{}, false
	}
	return netip.PrefixFrom(a, a.BitLen()), true
}
