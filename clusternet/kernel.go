package clusternet

import (
	"net/netip"
	"slices"
)

// kernel is what the reconciler needs of the node's kernel: the WireGuard
// device and the routes this package owns. The real one speaks netlink
// (kernel_linux.go); unit tests use an in-memory one.
type kernel interface {
	// Device returns the configuration of the WireGuard device called
	// name, or nil when there is no link of that name. A link of that name
	// that is not a WireGuard device is an error.
	Device(name string) (*device, error)
	// CreateDevice adds a WireGuard link called name with the given MTU.
	CreateDevice(name string, mtu int) error
	// SetMTU changes the MTU of the link called name.
	SetMTU(name string, mtu int) error
	// DeleteDevice removes the link called name.
	DeleteDevice(name string) error
	// SetUp brings the link called name up.
	SetUp(name string) error
	// ConfigureDevice applies c to the WireGuard device called name.
	ConfigureDevice(name string, c deviceChange) error
	// Routes lists the main table's routes: ours, those that carry this
	// package's mark (routeProtocol), whoever added them (this run or an
	// earlier one); and foreign, the destinations of the others.
	Routes() (ours []route, foreign []netip.Prefix, err error)
	// AddRoute adds r, and fails when the main table has a route to the
	// same destination already: it never takes one over.
	AddRoute(r route) error
	// ReplaceRoute replaces the marked route to r's destination with r.
	// Only for a destination that has one: the kernel matches a
	// replacement by destination, not by mark, and would take someone
	// else's route over just as well.
	ReplaceRoute(r route) error
	// DeleteRoute removes the marked route r.
	DeleteRoute(r route) error
	// SetAddresses gives the link called name the addresses add and takes
	// the addresses remove from it.
	SetAddresses(name string, add, remove []netip.Prefix) error
	// SetEgress writes the egress rule for the node's pod range and the
	// cluster's (egress.go), replacing the table whole.
	SetEgress(podRange, clusterRange netip.Prefix) error
	// ClearEgress deletes the egress rule's table, if there is one.
	ClearEgress() error
}

// routeProtocol marks the routes this package adds (the routing protocol
// field, "proto 158" in `ip route`), so that it finds them again after a
// restart and never touches a route someone else added: those it neither
// replaces nor deletes, and a peer whose pod range has one is skipped. The
// number is unassigned in iproute2's rt_protos.
const routeProtocol = 158

// device is a WireGuard device as the kernel has it.
type device struct {
	PrivateKey Key
	ListenPort int
	MTU        int
	Up         bool
	// Addresses are the link's own addresses (not its link-local ones),
	// sorted.
	Addresses []netip.Prefix
	// Peers by public key.
	Peers map[Key]wgPeer
}

// wgPeer is one peer of a WireGuard device.
type wgPeer struct {
	PublicKey  Key
	Endpoint   netip.AddrPort
	AllowedIPs []netip.Prefix
}

func (p wgPeer) equal(o wgPeer) bool {
	return p.PublicKey == o.PublicKey && p.Endpoint == o.Endpoint && slices.Equal(p.AllowedIPs, o.AllowedIPs)
}

// deviceChange is what must change on a WireGuard device; nil fields stay
// as they are.
type deviceChange struct {
	PrivateKey *Key
	ListenPort *int
	// Remove lists the peers to drop, by public key.
	Remove []Key
	// Set lists the peers to add or update; a peer's allowed IPs are
	// replaced, not added to.
	Set []wgPeer
}

func (c deviceChange) empty() bool {
	return c.PrivateKey == nil && c.ListenPort == nil && len(c.Remove) == 0 && len(c.Set) == 0
}

// route is a route to a peer's pod range: through the WireGuard device
// (Device set) or, in plain mode, through the peer's address (Via set).
type route struct {
	Dst    netip.Prefix
	Via    netip.Addr
	Device string
}

func (r route) String() string {
	if r.Device != "" {
		return r.Dst.String() + " dev " + r.Device
	}
	return r.Dst.String() + " via " + r.Via.String()
}
