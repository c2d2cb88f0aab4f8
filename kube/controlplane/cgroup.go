package controlplane

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/polis-os/polis/internal/cgroupdir"
)

// accountedControllers are the cgroup v2 controllers the components'
// parent enables for them, where the kernel offers them: enough to
// account each one's CPU (cpu.stat has usage_usec with or without the cpu
// controller, the rest of it with) and memory (memory.current needs the
// memory controller). No limits are set: the components are the node's
// own, as the agent is.
var accountedControllers = []string{"cpu", "memory"}

// openComponentCgroup makes parent (if missing) with the accounted
// controllers enabled for its children, and parent/name in it, and opens
// the latter for starting the component's process in it. Only the
// directories are required: a controller that cannot be enabled leaves
// that figure out of the node's metrics, and not is why.
func openComponentCgroup(parent, name string) (f *os.File, not string, err error) {
	dir := filepath.Join(parent, name)
	if err := cgroupdir.Make(parent); err != nil {
		return nil, "", fmt.Errorf("controlplane: %w", err)
	}
	not, err = cgroupdir.EnableControllers(parent, accountedControllers)
	if err != nil {
		not = err.Error()
	}
	if err := cgroupdir.Make(dir); err != nil {
		return nil, "", fmt.Errorf("controlplane: %w", err)
	}
	if f, err = cgroupdir.Open(dir); err != nil {
		return nil, "", fmt.Errorf("controlplane: %w", err)
	}
	return f, not, nil
}
