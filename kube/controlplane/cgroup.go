package controlplane

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
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
	if err := os.Mkdir(parent, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
		return nil, "", fmt.Errorf("controlplane: creating cgroup %s: %w", parent, err)
	}
	not = enableControllers(parent)
	if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
		return nil, "", fmt.Errorf("controlplane: creating cgroup %s: %w", dir, err)
	}
	if f, err = os.Open(dir); err != nil {
		return nil, "", fmt.Errorf("controlplane: opening cgroup %s: %w", dir, err)
	}
	return f, not, nil
}

// enableControllers enables, for dir's children, the accounted controllers
// that dir has (its cgroup.controllers, those its own parent enabled for
// it); it returns why not, or "". Writing what is enabled already is
// harmless, so every component's start does it again.
func enableControllers(dir string) (not string) {
	have, err := os.ReadFile(filepath.Join(dir, "cgroup.controllers"))
	if err != nil {
		return "reading the controllers of " + dir + ": " + err.Error()
	}
	var want []string
	for _, c := range accountedControllers {
		if slices.Contains(strings.Fields(string(have)), c) {
			want = append(want, "+"+c)
		}
	}
	if len(want) < len(accountedControllers) {
		not = fmt.Sprintf("%s has the controllers %q, not all of %v", dir, strings.TrimSpace(string(have)), accountedControllers)
	}
	if len(want) == 0 {
		return not
	}
	if err := os.WriteFile(filepath.Join(dir, "cgroup.subtree_control"), []byte(strings.Join(want, " ")), 0o644); err != nil {
		return "enabling " + strings.Join(want, " ") + " in " + dir + ": " + err.Error()
	}
	return not
}
