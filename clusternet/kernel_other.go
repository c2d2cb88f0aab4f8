//go:build !linux

package clusternet

import (
	"errors"
	"net/netip"
)

// netlinkKernel exists on Linux only.
type netlinkKernel struct{ kernel }

func newNetlinkKernel() (*netlinkKernel, error) {
	return nil, errors.New("clusternet: the node's network is configured on Linux only")
}

func (k *netlinkKernel) Close() error { return nil }

// LinkMTU exists on Linux only.
func LinkMTU(a netip.Addr) (int, error) {
	return 0, errors.New("clusternet: the node's network is configured on Linux only")
}
