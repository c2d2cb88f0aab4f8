package nodeservice

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"go.uber.org/zap"
)

// CPUWeight is the cpu.weight given to the parent of the services'
// cgroups (Spec.Cgroup's parent), against the default 100 of its
// siblings, the node's own cgroup and the kubelet's: under contention
// (one slow CPU while the node starts) the kubelet and containerd get
// four times the services' share, so the Node is Ready sooner, while the
// services still run; with the CPU idle the weight changes nothing.
const CPUWeight = 25

// cgroupRemoveTimeout bounds the wait for the kernel to let go of a
// stopped service's cgroup: rmdir says EBUSY for a moment after the last
// process was reaped.
const cgroupRemoveTimeout = 2 * time.Second

// serviceCgroup is a service's cgroup v2 directory, opened for starting
// the process in it.
type serviceCgroup struct {
	dir string
	fd  *os.File
}

// openCgroup makes dir (a service's cgroup) and its parent (the services')
// if missing, gives the parent CPUWeight if the cpu controller is enabled
// for it, and opens dir. Only the directories are required: without the
// weight the service runs unweighted, and noWeight says why.
func openCgroup(dir string) (cg *serviceCgroup, noWeight string, err error) {
	parent := filepath.Dir(dir)
	for _, d := range []string{parent, dir} {
		if err := os.Mkdir(d, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
			return nil, "", fmt.Errorf("creating cgroup %s: %w", d, err)
		}
	}
	f, err := os.Open(dir)
	if err != nil {
		return nil, "", fmt.Errorf("opening cgroup %s: %w", dir, err)
	}
	return &serviceCgroup{dir: dir, fd: f}, setWeight(parent), nil
}

// setWeight gives the cgroup dir CPUWeight if its parent enables the cpu
// controller for it (the controllers a cgroup enables for its children
// are in its cgroup.subtree_control: "cpu io memory pids"); it returns
// why not otherwise.
func setWeight(dir string) (noWeight string) {
	up := filepath.Dir(dir)
	enabled, err := os.ReadFile(filepath.Join(up, "cgroup.subtree_control"))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return "reading the controllers of " + up + ": " + err.Error()
	}
	if !slices.Contains(strings.Fields(string(enabled)), "cpu") {
		return fmt.Sprintf("the cpu controller is not enabled in %s (cgroup.subtree_control %q)", up, strings.TrimSpace(string(enabled)))
	}
	if err := os.WriteFile(filepath.Join(dir, "cpu.weight"), []byte(strconv.Itoa(CPUWeight)), 0o644); err != nil {
		return "setting the CPU weight of " + dir + ": " + err.Error()
	}
	return ""
}

// close closes the directory and removes it, which cgroup v2 allows once
// no process is left in it; its parent stays, shared by the services.
// What cannot be removed is logged: a cgroup left empty costs nothing and
// the next run uses it again.
func (c *serviceCgroup) close(log *zap.Logger) {
	c.fd.Close()
	deadline := time.Now().Add(cgroupRemoveTimeout)
	for {
		err := syscall.Rmdir(c.dir)
		if err == nil || errors.Is(err, syscall.ENOENT) {
			return
		}
		if !errors.Is(err, syscall.EBUSY) || time.Now().After(deadline) {
			log.Warn("could not remove the service's cgroup", zap.String("cgroup", c.dir), zap.Error(err))
			return
		}
		time.Sleep(20 * time.Millisecond) // polling interval of a deadline-bounded wait
	}
}
