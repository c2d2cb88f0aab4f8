package curatorv1

import (
	"net"
	"strconv"
)

// HostPort is where the endpoint is, as host:port ([host]:port for IPv6):
// what a dialer takes and what logs and tables show. It is "" when the
// endpoint has no address.
func (ep *CuratorEndpoint) HostPort() string {
	if ep.GetAddress() == "" {
		return ""
	}
	return net.JoinHostPort(ep.GetAddress(), strconv.FormatUint(uint64(ep.GetPort()), 10))
}
