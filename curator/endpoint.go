package curator

import (
	"net/netip"

	cpb "github.com/polis-os/polis/api/curator/v1"
)

// Endpoint is where the curator of s is reached, as the curator client and
// the cluster directory name curators; nil for a nil status (not serving).
// It is the one conversion from a curator's status to an endpoint: the
// role server's local curator and enrolment's dial both use it.
//
// A curator listening on every address (unspecified) is reached through
// loopback of the same family: it runs on this machine, and its
// certificate is checked by node ID, not by address.
func (s *Status) Endpoint() *cpb.CuratorEndpoint {
	if s == nil {
		return nil
	}
	addr := s.Address.Addr()
	if addr.IsUnspecified() {
		addr = netip.IPv6Loopback()
		if s.Address.Addr().Is4() {
			addr = netip.AddrFrom4([4]byte{127, 0, 0, 1})
		}
	}
	return &cpb.CuratorEndpoint{NodeId: s.NodeID, Address: addr.String(), Port: uint32(s.Address.Port())}
}
