package clusternet

import (
	"errors"
	"fmt"
	"net/netip"
	"time"

	"github.com/polis-os/polis/event"
)

// Mode is how traffic to a peer's pods travels.
type Mode string

const (
	// ModeWireGuard sends pod traffic to a peer through a WireGuard tunnel
	// to its address: encrypted and authenticated by the peers' keys. It is
	// the default.
	ModeWireGuard Mode = "wireguard"
	// ModePlain routes a peer's pod range through the peer's address, in
	// clear: for measuring what encryption costs, and where the kernel has
	// no WireGuard.
	ModePlain Mode = "plain"
)

// Overhead is what WireGuard adds to each packet it carries, at most:
// an outer IPv6 header (40 bytes), UDP (8), WireGuard's own header (16)
// and its authentication tag (16). The tunnel's MTU is the cluster link's
// less this (TunnelMTU).
const Overhead = 80

// TunnelMTU is the MTU to give the WireGuard device, and the Pods, over a
// cluster link whose MTU is linkMTU: the link's less Overhead, so that the
// largest packet the tunnel takes still fits the link once encrypted, and
// nothing a Pod sends is fragmented or refused on the way to another node.
//
// It is never below IPv6's minimum of 1280, which a link must carry
// whatever is beneath it: over a link under 1360 bytes (1280 + Overhead)
// the largest packets no longer fit the link once encrypted. WireGuard
// lets the sending node fragment its outer packets, so they still arrive,
// in fragments that the peer reassembles: slower, and only where the
// cluster network lets fragments through.
func TunnelMTU(linkMTU int) int {
	return max(linkMTU-Overhead, 1280)
}

// Defaults of Config's optional fields.
const (
	DefaultDevice     = "polis-wg"
	DefaultListenPort = 51820
	// DefaultMTU leaves room for WireGuard's headers (Overhead) inside
	// a 1500-byte frame: the MTU when the cluster link's is unknown.
	DefaultMTU    = 1500 - Overhead
	DefaultResync = time.Minute
)

// Config is what Run needs. Peers is required, and in ModeWireGuard so is
// PrivateKey; the rest has defaults.
type Config struct {
	// Mode is ModeWireGuard (the default when empty) or ModePlain.
	Mode Mode
	// PrivateKey is this node's WireGuard private key (LoadOrCreateKey).
	PrivateKey Key
	// Address is this node's own cluster address, and PodCIDR its own pod
	// range: a peer that has either is this node, or claims its pods, and
	// is skipped.
	Address netip.Addr
	PodCIDR netip.Prefix
	// ClusterPodRange, when given, is the cluster's pod range, which holds
	// PodCIDR: what this node's Pods send outside it leaves with the
	// node's address (the egress rule, egress.go). When not given, the
	// node has no egress rule (one an earlier run wrote is deleted).
	ClusterPodRange netip.Prefix
	// ListenPort is the UDP port the WireGuard device listens on, and the
	// port of every peer's endpoint: all nodes use the same one.
	ListenPort int
	// Device is the WireGuard link's name.
	Device string
	// MTU is the WireGuard link's MTU (DefaultMTU if 0): given to the
	// link when it is created, and set again when the link has another.
	// TunnelMTU of the cluster link's MTU is the one to give; it is at
	// least 1280 (IPv6's minimum), even when the cluster link's is too
	// small for that (TunnelMTU says what happens then).
	MTU int
	// Peers are the other nodes, as the curator publishes them.
	Peers event.ValueWatch[[]Peer]
	// Status, when set, receives the reconciler's Status after every
	// attempt.
	Status event.Value[*Status]
	// Resync is how often the kernel is checked again with no new peers,
	// to undo what someone else changed.
	Resync time.Duration

	// kernel replaces netlink in unit tests.
	kernel kernel
}

// withDefaults returns c with its defaults filled in, or an error naming
// the first field that is wrong.
func (c Config) withDefaults() (Config, error) {
	if c.Mode == "" {
		c.Mode = ModeWireGuard
	}
	if c.Device == "" {
		c.Device = DefaultDevice
	}
	if c.ListenPort == 0 {
		c.ListenPort = DefaultListenPort
	}
	if c.MTU == 0 {
		c.MTU = DefaultMTU
	}
	if c.Resync == 0 {
		c.Resync = DefaultResync
	}
	switch {
	case c.Mode != ModeWireGuard && c.Mode != ModePlain:
		return c, fmt.Errorf("clusternet: mode %q is neither %q nor %q", c.Mode, ModeWireGuard, ModePlain)
	case c.Peers == nil:
		return c, errors.New("clusternet: no peers value given")
	case c.Mode == ModeWireGuard && c.PrivateKey.IsZero():
		return c, errors.New("clusternet: WireGuard mode needs the node's private key")
	case c.ListenPort < 1 || c.ListenPort > 65535:
		return c, fmt.Errorf("clusternet: listen port %d out of range", c.ListenPort)
	case len(c.Device) > 15:
		return c, fmt.Errorf("clusternet: device name %q is longer than the kernel's 15 bytes", c.Device)
	case c.MTU < 1280:
		return c, fmt.Errorf("clusternet: MTU %d below IPv6's minimum of 1280", c.MTU)
	case c.Resync < 0:
		return c, fmt.Errorf("clusternet: negative resync interval %v", c.Resync)
	case c.Address.IsValid() && c.Address.Zone() != "":
		return c, fmt.Errorf("clusternet: own address %v has a zone", c.Address)
	case c.ClusterPodRange.IsValid():
		if err := checkEgress(c.PodCIDR, c.ClusterPodRange); err != nil {
			return c, err
		}
	}
	return c, nil
}
