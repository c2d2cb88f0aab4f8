package cgroupdir

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
)

// pollInterval is how often Kill and Remove look again while they wait
// for the kernel, each until its own deadline. The waits are rare (a
// stop) and short (milliseconds, as a rule), and rmdir's EBUSY cannot be
// watched for, so polling is the simple way.
const pollInterval = 20 * time.Millisecond

// Make makes each of dirs in turn, a parent before its children; one that
// exists already is fine, so every start of a service can make its cgroups
// again rather than ask whether an earlier one did.
func Make(dirs ...string) error {
	for _, dir := range dirs {
		if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("creating cgroup %s: %w", dir, err)
		}
	}
	return nil
}

// Open opens dir for starting a process into it (SysProcAttr.CgroupFD).
// The caller closes it once the process has started.
func Open(dir string) (*os.File, error) {
	f, err := os.Open(dir)
	if err != nil {
		return nil, fmt.Errorf("opening cgroup %s: %w", dir, err)
	}
	return f, nil
}

// EnableControllers enables, for dir's children, the controllers of want
// that dir has (its cgroup.controllers: those its own parent enabled for
// it), or every one it has if want is nil. A controller the kernel or the
// parent withholds is not an error, since the children run without it
// all the same: missing says, for the caller's log, which of want dir
// lacks, or is "". Writing what is enabled already is harmless, so every
// start can do it again.
func EnableControllers(dir string, want []string) (missing string, err error) {
	data, err := os.ReadFile(filepath.Join(dir, "cgroup.controllers"))
	if err != nil {
		return "", fmt.Errorf("reading the controllers of %s: %w", dir, err)
	}
	have := strings.Fields(string(data))
	enable := have
	if want != nil {
		enable = nil
		for _, c := range want {
			if slices.Contains(have, c) {
				enable = append(enable, c)
			}
		}
		if len(enable) < len(want) {
			missing = fmt.Sprintf("%s has the controllers %q, not all of %v", dir, strings.TrimSpace(string(data)), want)
		}
	}
	if len(enable) == 0 {
		return missing, nil
	}
	line := "+" + strings.Join(enable, " +")
	if err := os.WriteFile(filepath.Join(dir, "cgroup.subtree_control"), []byte(line), 0o644); err != nil {
		return missing, fmt.Errorf("enabling %s in %s: %w", line, dir, err)
	}
	return missing, nil
}

// SetCPUWeight gives dir the cpu.weight weight, which shares the CPU
// among dir and its siblings only under contention, if dir's parent
// enables the cpu controller for its children (its
// cgroup.subtree_control, "cpu io memory pids"). Without the weight the
// processes in dir run all the same, so not is a reason for the caller's
// log, or "" once the weight is set.
func SetCPUWeight(dir string, weight int) (not string) {
	up := filepath.Dir(dir)
	enabled, err := os.ReadFile(filepath.Join(up, "cgroup.subtree_control"))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return "reading the controllers of " + up + ": " + err.Error()
	}
	if !slices.Contains(strings.Fields(string(enabled)), "cpu") {
		return fmt.Sprintf("the cpu controller is not enabled in %s (cgroup.subtree_control %q)", up, strings.TrimSpace(string(enabled)))
	}
	if err := os.WriteFile(filepath.Join(dir, "cpu.weight"), []byte(strconv.Itoa(weight)), 0o644); err != nil {
		return "setting the CPU weight of " + dir + ": " + err.Error()
	}
	return ""
}

// Kill kills every process in dir and below (cgroup.kill) and waits,
// until timeout, for the kernel to say none is left: a runner that stops
// a tree of processes this way knows they are gone, shims and children
// that left their process group included. A dir that is not there has
// nothing to kill.
func Kill(dir string, timeout time.Duration) error {
	if err := os.WriteFile(filepath.Join(dir, "cgroup.kill"), []byte("1"), 0o644); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		return fmt.Errorf("killing cgroup %s: %w", dir, err)
	}
	deadline := time.Now().Add(timeout)
	for {
		populated, err := Populated(dir)
		if err != nil || !populated {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("cgroup %s still has processes %v after cgroup.kill", dir, timeout)
		}
		time.Sleep(pollInterval)
	}
}

// Populated reads "populated" from dir's cgroup.events: whether a process
// is left in dir or below. It is the kernel's word that a tree of
// processes is gone, which no wait on the processes one knows of can give.
func Populated(dir string) (bool, error) {
	data, err := os.ReadFile(filepath.Join(dir, "cgroup.events"))
	if err != nil {
		return false, fmt.Errorf("reading %s/cgroup.events: %w", dir, err)
	}
	for line := range strings.Lines(string(data)) {
		if f := strings.Fields(line); len(f) == 2 && f[0] == "populated" {
			return f[1] == "1", nil
		}
	}
	return false, nil
}

// Remove removes dir once no process is left in it or below, waiting
// until timeout while rmdir says EBUSY: the kernel lets go of a cgroup a
// moment after its last process was reaped. A dir that is gone already
// is removed.
func Remove(dir string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		err := syscall.Rmdir(dir)
		if err == nil || errors.Is(err, syscall.ENOENT) {
			return nil
		}
		if !errors.Is(err, syscall.EBUSY) || time.Now().After(deadline) {
			return fmt.Errorf("removing cgroup %s: %w", dir, err)
		}
		time.Sleep(pollInterval)
	}
}
