package clusternet

import (
	"net/netip"
)

// Peer is another node whose pods this node must reach: where it is on the
// cluster network, which pod range it serves, and the public half of its
// WireGuard key.
type Peer struct {
	// NodeID is the peer's Polis node ID (for logs and status).
	NodeID string
	// Address is the peer's address on the cluster network: the WireGuard
	// endpoint, and the next hop of plain routes.
	Address netip.Addr
	// PodCIDR is the peer's pod range.
	PodCIDR netip.Prefix
	// PublicKey is the peer's WireGuard public key; the zero key when the
	// peer has not published one yet.
	PublicKey Key
}
