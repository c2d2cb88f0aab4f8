package kubelet

import (
	"fmt"
	"path/filepath"

	"github.com/polis-os/polis/internal/cgroupdir"
)

// The cgroups below Config.Cgroup.
const (
	cgroupRuntime = "runtime" // containerd and its shims
	cgroupKubelet = "kubelet"
	cgroupPods    = "pods" // the kubelet's cgroupRoot
)

func (c Config) cgroup(name string) string { return filepath.Join(c.Cgroup, name) }

// makeCgroups creates Config.Cgroup and its children, with every
// controller the parent offers enabled for the children (cgroup v2 lets
// only a cgroup without processes of its own delegate, which Cgroup and
// pods are).
func (c Config) makeCgroups() error {
	if err := cgroupdir.Make(c.Cgroup, c.cgroup(cgroupRuntime), c.cgroup(cgroupKubelet), c.cgroup(cgroupPods)); err != nil {
		return fmt.Errorf("kubelet: %w", err)
	}
	for _, dir := range []string{c.Cgroup, c.cgroup(cgroupPods)} {
		if _, err := cgroupdir.EnableControllers(dir, nil); err != nil {
			return fmt.Errorf("kubelet: %w", err)
		}
	}
	return nil
}
