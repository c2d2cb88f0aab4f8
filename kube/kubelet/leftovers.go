package kubelet

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/vishvananda/netlink"
)

// What the Pods of a runner leave on the machine outside its directories
// and cgroups. A stop leaves them, since the node may run Kubernetes again
// (the same role after an agent's restart): Pods are killed through their
// cgroup, so CNI DEL never runs for them. A node that stops running
// Kubernetes for good removes them (the kubernetes worker, roleserve, when
// the role goes) once nothing of the runner runs: DeleteBridge,
// RemoveCNIState and the nftables table HostPortTable.
const (
	// CNINetwork is the CNI network's name in the configuration
	// (cniConfig), which names its state below CNIStateDir.
	CNINetwork = "polis"
	// Bridge is the Pods' bridge, which the bridge plugin makes at the
	// first Pod's ADD: with the gateway address in PodCIDR, and so the
	// connected route to PodCIDR.
	Bridge = "polis0"
	// HostPortTable is portmap's nftables table (its nftables backend:
	// family inet), with the Pods' host ports ("family name", as nft
	// names a table).
	HostPortTable = "inet cni_hostport"
	// CNIStateDir is where CNI keeps state: host-local's reservations in
	// networks/<network> (its default dataDir: the configuration sets
	// none) and the results containerd's CRI plugin caches in
	// results/<network>-<container>-<interface> (libcni's default cache
	// dir: containerd's configuration has no setting for it).
	CNIStateDir = "/var/lib/cni"
)

// DeleteBridge deletes the Pods' bridge, and with it its address and the
// route to the Pods' range. No bridge is no error.
func DeleteBridge() error {
	link, err := netlink.LinkByName(Bridge)
	if err != nil {
		if errors.As(err, new(netlink.LinkNotFoundError)) {
			return nil
		}
		return fmt.Errorf("kubelet: finding the Pods' bridge %s: %w", Bridge, err)
	}
	if err := netlink.LinkDel(link); err != nil {
		return fmt.Errorf("kubelet: deleting the Pods' bridge %s: %w", Bridge, err)
	}
	return nil
}

// RemoveCNIState removes the CNI network's state below dir (CNIStateDir):
// host-local's reservations, which would otherwise keep addresses of Pods
// long gone, and the cached results. Other networks' state is left. None
// is no error.
func RemoveCNIState(dir string) error {
	var errs []error
	if err := os.RemoveAll(filepath.Join(dir, "networks", CNINetwork)); err != nil {
		errs = append(errs, err)
	}
	results, err := filepath.Glob(filepath.Join(dir, "results", CNINetwork+"-*"))
	if err != nil {
		errs = append(errs, err)
	}
	for _, r := range results {
		if err := os.Remove(r); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("kubelet: removing the CNI network %s's state in %s: %w", CNINetwork, dir, err)
	}
	return nil
}
