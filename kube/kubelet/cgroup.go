package kubelet

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"
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
	for _, dir := range []string{c.Cgroup, c.cgroup(cgroupRuntime), c.cgroup(cgroupKubelet), c.cgroup(cgroupPods)} {
		if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("kubelet: creating cgroup %s: %w", dir, err)
		}
	}
	for _, dir := range []string{c.Cgroup, c.cgroup(cgroupPods)} {
		if err := enableControllers(dir); err != nil {
			return err
		}
	}
	return nil
}

// enableControllers enables, for dir's children, every controller dir has.
func enableControllers(dir string) error {
	data, err := os.ReadFile(filepath.Join(dir, "cgroup.controllers"))
	if err != nil {
		return fmt.Errorf("kubelet: reading the controllers of %s: %w", dir, err)
	}
	var enable []string
	for _, c := range strings.Fields(string(data)) {
		enable = append(enable, "+"+c)
	}
	if len(enable) == 0 {
		return nil
	}
	if err := os.WriteFile(filepath.Join(dir, "cgroup.subtree_control"), []byte(strings.Join(enable, " ")), 0o644); err != nil {
		return fmt.Errorf("kubelet: enabling %s in %s: %w", strings.Join(enable, " "), dir, err)
	}
	return nil
}

// openCgroup opens a cgroup directory for starting a process in it.
func openCgroup(dir string) (*os.File, error) {
	f, err := os.Open(dir)
	if err != nil {
		return nil, fmt.Errorf("kubelet: opening cgroup %s: %w", dir, err)
	}
	return f, nil
}

// killCgroup kills every process in dir and below (cgroup.kill) and waits,
// until timeout, for them to be gone.
func killCgroup(dir string, timeout time.Duration) error {
	if err := os.WriteFile(filepath.Join(dir, "cgroup.kill"), []byte("1"), 0o644); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		return fmt.Errorf("kubelet: killing cgroup %s: %w", dir, err)
	}
	deadline := time.Now().Add(timeout)
	for {
		populated, err := cgroupPopulated(dir)
		if err != nil || !populated {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("kubelet: cgroup %s still has processes %v after cgroup.kill", dir, timeout)
		}
		time.Sleep(20 * time.Millisecond) // polling interval of a deadline-bounded wait
	}
}

// cgroupPopulated reads "populated" from dir's cgroup.events: whether a
// process is left in dir or below.
func cgroupPopulated(dir string) (bool, error) {
	data, err := os.ReadFile(filepath.Join(dir, "cgroup.events"))
	if err != nil {
		return false, fmt.Errorf("kubelet: reading %s/cgroup.events: %w", dir, err)
	}
	for line := range strings.Lines(string(data)) {
		if f := strings.Fields(line); len(f) == 2 && f[0] == "populated" {
			return f[1] == "1", nil
		}
	}
	return false, nil
}
