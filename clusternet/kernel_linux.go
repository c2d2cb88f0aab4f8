package clusternet

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"slices"

	"github.com/google/nftables"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
	"golang.zx2c4.com/wireguard/wgctrl"
	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"
)

// netlinkKernel is the real kernel: links and routes through rtnetlink
// (vishvananda/netlink), WireGuard peers through WireGuard's generic
// netlink family (wgctrl). Both sockets belong to the network namespace of
// the thread that made them, which is how the tests run one per namespace.
type netlinkKernel struct {
	nl *netlink.Handle
	wg *wgctrl.Client
	// nft is nftables' netlink socket (egress_linux.go), opened with the
	// others so that it belongs to the same namespace; nil, with nftErr
	// saying why, on a kernel without nftables.
	nft    *nftables.Conn
	nftErr error
}

func newNetlinkKernel() (*netlinkKernel, error) {
	nl, err := netlink.NewHandle(unix.NETLINK_ROUTE)
	if err != nil {
		return nil, fmt.Errorf("clusternet: opening rtnetlink: %w", err)
	}
	wg, err := wgctrl.New()
	if err != nil {
		nl.Close()
		return nil, fmt.Errorf("clusternet: opening WireGuard's netlink family: %w", err)
	}
	k := &netlinkKernel{nl: nl, wg: wg}
	k.nft, k.nftErr = nftables.New(nftables.AsLasting())
	return k, nil
}

func (k *netlinkKernel) Close() error {
	k.nl.Close()
	if k.nft != nil {
		k.nft.CloseLasting()
	}
	return k.wg.Close()
}

func (k *netlinkKernel) Device(name string) (*device, error) {
	l, err := k.nl.LinkByName(name)
	if _, ok := err.(netlink.LinkNotFoundError); ok {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	if t := l.Type(); t != "wireguard" {
		return nil, fmt.Errorf("link %s is a %s link, not WireGuard", name, t)
	}
	d, err := k.wg.Device(name)
	if err != nil {
		return nil, err
	}
	dev := &device{
		PrivateKey: Key(d.PrivateKey),
		ListenPort: d.ListenPort,
		MTU:        l.Attrs().MTU,
		Up:         l.Attrs().Flags&net.FlagUp != 0,
		Peers:      make(map[Key]wgPeer, len(d.Peers)),
	}
	addrs, err := k.nl.AddrList(l, netlink.FAMILY_ALL)
	if err != nil {
		return nil, fmt.Errorf("listing link %s's addresses: %w", name, err)
	}
	for _, a := range addrs {
		if a.Scope == int(netlink.SCOPE_LINK) || a.IPNet == nil {
			continue
		}
		if pfx, ok := addressOf(*a.IPNet); ok {
			dev.Addresses = append(dev.Addresses, pfx)
		}
	}
	slices.SortFunc(dev.Addresses, comparePrefix)
	for _, p := range d.Peers {
		wp := wgPeer{PublicKey: Key(p.PublicKey)}
		if p.Endpoint != nil {
			wp.Endpoint = p.Endpoint.AddrPort()
			wp.Endpoint = netip.AddrPortFrom(wp.Endpoint.Addr().Unmap(), wp.Endpoint.Port())
		}
		for _, n := range p.AllowedIPs {
			if pfx, ok := prefixOf(n); ok {
				wp.AllowedIPs = append(wp.AllowedIPs, pfx)
			}
		}
		dev.Peers[wp.PublicKey] = wp
	}
	return dev, nil
}

func (k *netlinkKernel) CreateDevice(name string, mtu int) error {
	attrs := netlink.NewLinkAttrs()
	attrs.Name, attrs.MTU = name, mtu
	err := k.nl.LinkAdd(&netlink.GenericLink{LinkAttrs: attrs, LinkType: "wireguard"})
	if errors.Is(err, unix.EOPNOTSUPP) {
		return fmt.Errorf("the kernel has no WireGuard (module wireguard not loaded?): %w", err)
	}
	return err
}

func (k *netlinkKernel) SetMTU(name string, mtu int) error {
	l, err := k.nl.LinkByName(name)
	if err != nil {
		return err
	}
	return k.nl.LinkSetMTU(l, mtu)
}

func (k *netlinkKernel) DeleteDevice(name string) error {
	l, err := k.nl.LinkByName(name)
	if _, ok := err.(netlink.LinkNotFoundError); ok {
		return nil
	}
	if err != nil {
		return err
	}
	return k.nl.LinkDel(l)
}

func (k *netlinkKernel) SetUp(name string) error {
	l, err := k.nl.LinkByName(name)
	if err != nil {
		return err
	}
	return k.nl.LinkSetUp(l)
}

func (k *netlinkKernel) SetAddresses(name string, add, remove []netip.Prefix) error {
	l, err := k.nl.LinkByName(name)
	if err != nil {
		return err
	}
	var errs []error
	for _, a := range remove {
		if err := k.nl.AddrDel(l, netlinkAddr(a)); err != nil && !errors.Is(err, unix.EADDRNOTAVAIL) {
			errs = append(errs, fmt.Errorf("removing %v: %w", a, err))
		}
	}
	for _, a := range add {
		if err := k.nl.AddrAdd(l, netlinkAddr(a)); err != nil && !errors.Is(err, unix.EEXIST) {
			errs = append(errs, fmt.Errorf("adding %v: %w", a, err))
		}
	}
	return errors.Join(errs...)
}

// netlinkAddr is a as netlink has it.
func netlinkAddr(a netip.Prefix) *netlink.Addr {
	return &netlink.Addr{IPNet: &net.IPNet{IP: a.Addr().AsSlice(), Mask: net.CIDRMask(a.Bits(), a.Addr().BitLen())}}
}

// addressOf is n as an interface address: its address unmasked, unlike
// prefixOf's.
func addressOf(n net.IPNet) (netip.Prefix, bool) {
	a, ok := netip.AddrFromSlice(n.IP)
	if !ok {
		return netip.Prefix{}, false
	}
	ones, bits := n.Mask.Size()
	if bits == 32 {
		a = a.Unmap()
	}
	if bits != a.BitLen() {
		return netip.Prefix{}, false
	}
	return netip.PrefixFrom(a, ones), true
}

func (k *netlinkKernel) ConfigureDevice(name string, c deviceChange) error {
	var cfg wgtypes.Config
	if c.PrivateKey != nil {
		key := wgtypes.Key(*c.PrivateKey)
		cfg.PrivateKey = &key
	}
	cfg.ListenPort = c.ListenPort
	for _, key := range c.Remove {
		cfg.Peers = append(cfg.Peers, wgtypes.PeerConfig{PublicKey: wgtypes.Key(key), Remove: true})
	}
	for _, p := range c.Set {
		pc := wgtypes.PeerConfig{
			PublicKey:         wgtypes.Key(p.PublicKey),
			Endpoint:          net.UDPAddrFromAddrPort(p.Endpoint),
			ReplaceAllowedIPs: true,
		}
		for _, a := range p.AllowedIPs {
			pc.AllowedIPs = append(pc.AllowedIPs, net.IPNet{IP: a.Addr().AsSlice(), Mask: net.CIDRMask(a.Bits(), a.Addr().BitLen())})
		}
		cfg.Peers = append(cfg.Peers, pc)
	}
	return k.wg.ConfigureDevice(name, cfg)
}

func (k *netlinkKernel) Routes() (ours []route, foreign []netip.Prefix, err error) {
	// The whole main table, not only the marked routes: a destination
	// that has someone else's route is one to leave alone.
	filter := &netlink.Route{Table: unix.RT_TABLE_MAIN}
	nrs, err := k.nl.RouteListFiltered(netlink.FAMILY_ALL, filter, netlink.RT_FILTER_TABLE)
	if err != nil {
		return nil, nil, err
	}
	names := make(map[int]string)
	for _, nr := range nrs {
		if nr.Dst == nil {
			continue
		}
		dst, ok := prefixOf(*nr.Dst)
		if !ok {
			continue
		}
		if nr.Protocol != routeProtocol {
			foreign = append(foreign, dst)
			continue
		}
		r := route{Dst: dst}
		if gw, ok := netip.AddrFromSlice(nr.Gw); ok && nr.Gw != nil {
			r.Via = gw.Unmap()
		} else {
			name, ok := names[nr.LinkIndex]
			if !ok {
				l, err := k.nl.LinkByIndex(nr.LinkIndex)
				if err != nil {
					return nil, nil, fmt.Errorf("finding the link of route %v: %w", dst, err)
				}
				name = l.Attrs().Name
				names[nr.LinkIndex] = name
			}
			r.Device = name
		}
		ours = append(ours, r)
	}
	return ours, foreign, nil
}

// netlinkRoute is r as netlink has it.
func (k *netlinkKernel) netlinkRoute(r route) (*netlink.Route, error) {
	nr := &netlink.Route{
		Dst:      &net.IPNet{IP: r.Dst.Addr().AsSlice(), Mask: net.CIDRMask(r.Dst.Bits(), r.Dst.Addr().BitLen())},
		Protocol: routeProtocol,
		Table:    unix.RT_TABLE_MAIN,
	}
	if r.Device != "" {
		l, err := k.nl.LinkByName(r.Device)
		if err != nil {
			return nil, err
		}
		nr.LinkIndex = l.Attrs().Index
		nr.Scope = netlink.SCOPE_LINK
	} else {
		nr.Gw = r.Via.AsSlice()
	}
	return nr, nil
}

func (k *netlinkKernel) AddRoute(r route) error {
	nr, err := k.netlinkRoute(r)
	if err != nil {
		return err
	}
	// RouteAdd asks for an exclusive creation: the kernel refuses it when
	// a route to the destination (same table, metric and TOS) exists, as
	// when someone added one since Routes looked.
	err = k.nl.RouteAdd(nr)
	if errors.Is(err, unix.EEXIST) {
		return fmt.Errorf("%v already has a route this node did not add: %w", r.Dst, err)
	}
	return err
}

func (k *netlinkKernel) ReplaceRoute(r route) error {
	nr, err := k.netlinkRoute(r)
	if err != nil {
		return err
	}
	return k.nl.RouteReplace(nr)
}

func (k *netlinkKernel) DeleteRoute(r route) error {
	nr := &netlink.Route{
		Dst:      &net.IPNet{IP: r.Dst.Addr().AsSlice(), Mask: net.CIDRMask(r.Dst.Bits(), r.Dst.Addr().BitLen())},
		Protocol: routeProtocol,
		Table:    unix.RT_TABLE_MAIN,
		// Any scope: the kernel deletes only a route of the scope asked
		// for, and "universe" (0) is not "any" (a route through the
		// device has scope link).
		Scope: netlink.SCOPE_NOWHERE,
	}
	err := k.nl.RouteDel(nr)
	if errors.Is(err, unix.ESRCH) || errors.Is(err, os.ErrNotExist) {
		// Gone already, with its device or by someone else's hand.
		return nil
	}
	return err
}

// prefixOf converts a net.IPNet to a masked prefix, of the family its
// mask says: an IPv4 address may come in 16 bytes (IPv4-mapped), and is
// unmapped then, but an IPv6 prefix stays IPv6 even when its address is
// IPv4-mapped, as the kernel has it.
func prefixOf(n net.IPNet) (netip.Prefix, bool) {
	p, ok := addressOf(n)
	return p.Masked(), ok
}

// LinkMTU is the MTU of the link that holds the address a in this
// network namespace: the cluster link, when a is the node's cluster
// address, whose MTU less Overhead is the tunnel's (TunnelMTU).
func LinkMTU(a netip.Addr) (int, error) {
	addrs, err := netlink.AddrList(nil, netlink.FAMILY_ALL)
	if err != nil {
		return 0, fmt.Errorf("listing addresses to find %v's link: %w", a, err)
	}
	for _, ad := range addrs {
		if got, ok := netip.AddrFromSlice(ad.IP); ok && got.Unmap() == a.Unmap() {
			l, err := netlink.LinkByIndex(ad.LinkIndex)
			if err != nil {
				return 0, fmt.Errorf("finding %v's link (index %d): %w", a, ad.LinkIndex, err)
			}
			return l.Attrs().MTU, nil
		}
	}
	return 0, fmt.Errorf("no link holds address %v", a)
}
