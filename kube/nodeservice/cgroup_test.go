package nodeservice

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/polis-os/polis/internal/testutil"
	"github.com/polis-os/polis/kube/process"
	"github.com/polis-os/polis/supervisor/supervisortest"
)

// On a tree laid out like cgroup v2's (a directory standing in for the
// mount), the service's cgroup and its parent are made, the parent gets
// CPUWeight only where the cpu controller is enabled for it (how that is
// read: internal/cgroupdir), and closing removes the service's cgroup but
// not the parent the services share.
func TestOpenCgroup(t *testing.T) {
	for _, weighted := range []bool{true, false} {
		t.Run(fmt.Sprintf("weighted=%v", weighted), func(t *testing.T) {
			root := t.TempDir()
			enabled := "io memory pids\n"
			if weighted {
				enabled = "cpu " + enabled
			}
			if err := os.WriteFile(filepath.Join(root, "cgroup.subtree_control"), []byte(enabled), 0o644); err != nil {
				t.Fatal(err)
			}
			parent := filepath.Join(root, "kube-services")
			dir := filepath.Join(parent, "proxy")
			cg, noWeight, err := openCgroup(dir)
			if err != nil {
				t.Fatal(err)
			}
			if st, err := os.Stat(dir); err != nil || !st.IsDir() {
				t.Errorf("the service's cgroup %s: %v", dir, err)
			}
			if got, err := os.Readlink(fmt.Sprintf("/proc/self/fd/%d", cg.fd.Fd())); err != nil || got != dir {
				t.Errorf("the open directory is %q (%v), want %s", got, err, dir)
			}
			weight, err := os.ReadFile(filepath.Join(parent, "cpu.weight"))
			switch {
			case weighted && (err != nil || string(weight) != strconv.Itoa(CPUWeight) || noWeight != ""):
				t.Errorf("cpu.weight %q (%v), why not %q; want %d", weight, err, noWeight, CPUWeight)
			case !weighted && (!errors.Is(err, fs.ErrNotExist) || !strings.Contains(noWeight, "the cpu controller is not enabled in "+root)):
				t.Errorf("cpu.weight %q (%v) though the cpu controller is not enabled; why not: %q", weight, err, noWeight)
			}
			cg.close(zap.NewNop())
			if _, err := os.Stat(dir); !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("the service's cgroup is still there after close: %v", err)
			}
			if _, err := os.Stat(parent); err != nil {
				t.Errorf("the services' cgroup is gone after close: %v", err)
			}
			// A second run finds the parent there.
			cg, _, err = openCgroup(dir)
			if err != nil {
				t.Fatalf("opening again: %v", err)
			}
			cg.close(zap.NewNop())
		})
	}
}

// A cgroup that cannot be made is an error naming it.
func TestOpenCgroupFails(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "no-mount", "kube-services", "proxy")
	if _, _, err := openCgroup(dir); err == nil || !strings.Contains(err.Error(), "creating cgroup "+filepath.Dir(dir)) {
		t.Errorf("openCgroup(%s) = %v, want it to say it could not create the parent", dir, err)
	}
}

// With a real cgroup v2 hierarchy (as root), the process runs in the
// service's cgroup, and the cgroup is removed once it has stopped.
func TestRunnerInCgroup(t *testing.T) {
	mount := cgroup2Mount(t)
	suffix := make([]byte, 6)
	_, _ = rand.Read(suffix)
	parent := filepath.Join(mount, "polis-nodeservice-test-"+hex.EncodeToString(suffix))
	t.Cleanup(func() {
		if err := syscall.Rmdir(parent); err != nil && !errors.Is(err, syscall.ENOENT) {
			t.Errorf("removing the test's cgroup %s: %v", parent, err)
		}
	})
	dir := filepath.Join(parent, "svc")
	r, err := New(Spec{Name: "svc", Command: process.Command{Path: "/bin/sleep", Args: []string{"600"}}, StopGrace: 5 * time.Second, Cgroup: dir})
	if err != nil {
		t.Fatal(err)
	}
	cancel := supervisortest.Harness(t, r.Run)
	st := waitStatus(t, r, "running", func(s *Status) bool { return s.Running })
	procCgroup, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", st.PID))
	if err != nil {
		t.Fatal(err)
	}
	want := "0::/" + filepath.Base(parent) + "/svc"
	if !strings.Contains(string(procCgroup), want+"\n") {
		t.Errorf("pid %d's cgroups:\n%s\nwant it in %s (%s)", st.PID, procCgroup, dir, want)
	}
	// Where the cpu controller is delegated (not on a host that keeps it
	// for cgroup v1), the parent has the services' weight.
	if enabled, _ := os.ReadFile(filepath.Join(mount, "cgroup.subtree_control")); slices.Contains(strings.Fields(string(enabled)), "cpu") {
		if w, err := os.ReadFile(filepath.Join(parent, "cpu.weight")); err != nil || strings.TrimSpace(string(w)) != strconv.Itoa(CPUWeight) {
			t.Errorf("%s/cpu.weight: %q (%v), want %d", parent, w, err, CPUWeight)
		}
	}
	cancel()
	waitStatus(t, r, "stopped", func(s *Status) bool { return !s.Running })
	testutil.Eventually(t, waitTimeout, "the service's cgroup removed", func() error {
		if _, err := os.Stat(dir); !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("%s: %v", dir, err)
		}
		return nil
	})
}

// cgroup2Mount finds a cgroup v2 hierarchy this test may make cgroups in,
// or skips the test.
func cgroup2Mount(t *testing.T) string {
	t.Helper()
	if os.Getuid() != 0 {
		t.Skip("making cgroups needs root")
	}
	mounts, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Skipf("no mount table: %v", err)
	}
	for line := range strings.Lines(string(mounts)) {
		// ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTIONS ... - FSTYPE SOURCE SUPER
		before, after, ok := strings.Cut(line, " - ")
		fields, fstype := strings.Fields(before), strings.Fields(after)
		if !ok || len(fields) < 6 || len(fstype) == 0 || fstype[0] != "cgroup2" || fields[3] != "/" {
			continue
		}
		if syscall.Access(fields[4], 2 /* W_OK */) == nil {
			return fields[4]
		}
	}
	t.Skip("no writable cgroup v2 hierarchy")
	return ""
}
