//go:build !linux

package clusternet

import "errors"

// netlinkKernel exists on Linux only.
type netlinkKernel struct{ kernel }

func newNetlinkKernel() (*netlinkKernel, error) {
	return nil, errors.New("clusternet: the node's network is configured on Linux only")
}

func (k *netlinkKernel) Close() error { return nil }
