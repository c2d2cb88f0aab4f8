package pid1

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/polis-os/polis/internal/mountinfo"
	"github.com/polis-os/polis/internal/testutil"
)

// The root of a machine still on the initramfs, and after the switch to
// a tmpfs (what the agent sees chrooted: rootfs itself is out of sight).
const (
	mountinfoRootfs = `1 1 0:2 / / rw - rootfs rootfs rw,size=117300k,nr_inodes=29325
21 1 0:20 / /proc rw,nosuid,nodev,noexec,relatime - proc proc rw
`
	mountinfoTmpfs = `23 1 0:21 / / rw shared:1 - tmpfs tmpfs rw,mode=755
24 23 0:22 / /proc rw,nosuid,nodev,noexec,relatime shared:2 - proc proc rw
25 23 0:23 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:9 - cgroup2 cgroup2 rw,nsdelegate
26 23 254:32 / /system ro,nosuid,nodev,relatime shared:12 - squashfs /dev/vdc ro,errors=continue
`
)

func TestRootMount(t *testing.T) {
	for _, tc := range []struct {
		name, mountinfo, fstype string
		pivot                   bool
	}{
		{"initramfs", mountinfoRootfs, "rootfs", false},
		{"switched", mountinfoTmpfs, "tmpfs", true},
	} {
		mounts, err := mountinfo.Parse(tc.mountinfo)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		root, ok := rootMount(mounts)
		if !ok || root.FSType != tc.fstype {
			t.Errorf("%s: root %+v, want %s", tc.name, root, tc.fstype)
		}
		if err := pivotRootAllowed(root); (err == nil) != tc.pivot {
			t.Errorf("%s: pivotRootAllowed = %v, want allowed=%v", tc.name, err, tc.pivot)
		}
	}
	// A mount with no parent is rootfs whatever its type says.
	if err := pivotRootAllowed(mountinfo.Mount{ID: 1, Parent: 1, FSType: "tmpfs"}); err == nil {
		t.Error("a parentless root passes")
	}
}

func TestChooseControllers(t *testing.T) {
	got, err := chooseControllers("cpuset cpu io memory hugetlb pids rdma misc\n")
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"cpu", "cpuset", "io", "memory", "pids", "hugetlb"}; !slices.Equal(got, want) {
		t.Errorf("chose %q, want %q", got, want)
	}
	if s := subtreeControl(got); s != "+cpu +cpuset +io +memory +pids +hugetlb" {
		t.Errorf("subtree_control line %q", s)
	}
	// hugetlb is optional; memory is not.
	if got, err := chooseControllers("cpuset cpu io memory pids"); err != nil || slices.Contains(got, "hugetlb") {
		t.Errorf("without hugetlb: %q, %v", got, err)
	}
	if _, err := chooseControllers("cpuset cpu io pids"); err == nil || !strings.Contains(err.Error(), "memory") {
		t.Errorf("without memory: %v, want an error naming it", err)
	}
}

func TestParseProcCgroup(t *testing.T) {
	if p, err := parseProcCgroup("0::/polis/agent\n"); err != nil || p != "/polis/agent" {
		t.Errorf("parseProcCgroup = %q, %v", p, err)
	}
	// A hybrid (v1) host: no v2 entry.
	if _, err := parseProcCgroup("12:memory:/user.slice\n1:name=systemd:/init.scope\n"); err == nil {
		t.Error("a v1-only file gave a cgroup v2 path")
	}
}

// TestSysctls: the settings a kubelet and bridged pod traffic need are
// there, and each names a file under /proc/sys.
func TestSysctls(t *testing.T) {
	have := map[string]string{}
	for _, s := range sysctls {
		if _, dup := have[s.name]; dup {
			t.Errorf("%s is set twice", s.name)
		}
		have[s.name] = s.value
	}
	for name, want := range map[string]string{
		"net.ipv4.ip_forward":                 "1",
		"net.bridge.bridge-nf-call-iptables":  "1",
		"net.bridge.bridge-nf-call-ip6tables": "1",
		"vm.overcommit_memory":                "1",
		"kernel.panic":                        "10",
		"kernel.panic_on_oops":                "1",
	} {
		if have[name] != want {
			t.Errorf("%s = %q, want %q", name, have[name], want)
		}
	}
	if p := sysctlPath("net.bridge.bridge-nf-call-iptables"); p != "/proc/sys/net/bridge/bridge-nf-call-iptables" {
		t.Errorf("sysctlPath = %s", p)
	}
}

// TestMoveTree moves a small tree as the switch from rootfs does: every
// file arrives with its content and mode and leaves its old place, and
// the destination inside the source is left alone.
func TestMoveTree(t *testing.T) {
	src := t.TempDir()
	dst := filepath.Join(src, ".new-root")
	for p, mode := range map[string]os.FileMode{"init": 0o755, "lib/modules/ext4.ko": 0o644, "etc/polis/modules": 0o600} {
		full := filepath.Join(src, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(p), mode); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("init", filepath.Join(src, "sbin-init")); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(dst, 0o755); err != nil {
		t.Fatal(err)
	}
	n, err := moveTree(src, dst)
	if err != nil {
		t.Fatal(err)
	}
	if want := int64(len("init") + len("lib/modules/ext4.ko") + len("etc/polis/modules")); n != want {
		t.Errorf("moved %d bytes, want %d", n, want)
	}
	for p, mode := range map[string]os.FileMode{"init": 0o755, "lib/modules/ext4.ko": 0o644, "etc/polis/modules": 0o600} {
		b, err := os.ReadFile(filepath.Join(dst, p))
		if err != nil || string(b) != p {
			t.Errorf("%s after the move: %q, %v", p, b, err)
		}
		if st, err := os.Stat(filepath.Join(dst, p)); err != nil || st.Mode().Perm() != mode {
			t.Errorf("%s: mode %v, want %v", p, st.Mode(), mode)
		}
		if _, err := os.Lstat(filepath.Join(src, p)); !os.IsNotExist(err) {
			t.Errorf("%s is still in the source (%v): its RAM is not freed", p, err)
		}
	}
	if l, err := os.Readlink(filepath.Join(dst, "sbin-init")); err != nil || l != "init" {
		t.Errorf("the symlink: %q, %v", l, err)
	}
}

func TestParseProcStat(t *testing.T) {
	for _, tc := range []struct {
		stat  string
		state byte
		ppid  int
	}{
		{"4242 (containerd-shim) Z 1 4242 4242 0 -1 4194560", 'Z', 1},
		{"77 (a (tricky) name) S 12 77 77 0", 'S', 12},
	} {
		state, ppid, err := parseProcStat([]byte(tc.stat))
		if err != nil || state != tc.state || ppid != tc.ppid {
			t.Errorf("parseProcStat(%q) = %c, %d, %v; want %c, %d", tc.stat, state, ppid, err, tc.state, tc.ppid)
		}
	}
	for _, bad := range []string{"", "12 (x", "12 (x) ZZ 1", "12 (x) Z one"} {
		if _, _, err := parseProcStat([]byte(bad)); err == nil {
			t.Errorf("parseProcStat(%q) succeeded", bad)
		}
	}
}

// TestOwnChildrenNotReaped: a child started with os/exec is known by the
// pidfd Go holds for it until Wait, so the orphan reaper leaves it (and
// its exit status) to Wait; once waited, nothing refers to it any more.
func TestOwnChildrenNotReaped(t *testing.T) {
	if pid, ok := parseFdinfoPid([]byte("pos:\t0\nflags:\t02000002\nmnt_id:\t15\nino:\t1057\nPid:\t4242\nNSpid:\t4242\n")); !ok || pid != 4242 {
		t.Errorf("parseFdinfoPid = %d, %v", pid, ok)
	}
	if _, ok := parseFdinfoPid([]byte("pos:\t0\nflags:\t02\n")); ok {
		t.Error("a file's fdinfo gave a pid")
	}
	cmd := exec.Command("true")
	if err := cmd.Start(); err != nil {
		t.Skipf("cannot start a child: %v", err)
	}
	pid := cmd.Process.Pid
	if !pidfdTargets()[pid] {
		cmd.Wait()
		t.Skip("os/exec holds no pidfd for its children here (Go's pidfd support needs Linux 5.4)")
	}
	if err := cmd.Wait(); err != nil {
		t.Fatal(err)
	}
	if pidfdTargets()[pid] {
		t.Errorf("a pidfd still refers to %d after Wait", pid)
	}
}

// TestReapOnce: an orphan-like child (started without a pidfd, as a
// process re-parented to PID 1 would be) is reaped; a child os/exec
// started is left, so its Wait still gets its exit status.
func TestReapOnce(t *testing.T) {
	own := exec.Command("sh", "-c", "exit 3")
	if err := own.Start(); err != nil {
		t.Skipf("cannot start a child: %v", err)
	}
	if !pidfdTargets()[own.Process.Pid] {
		own.Wait()
		t.Skip("os/exec holds no pidfd for its children here")
	}
	truePath, err := exec.LookPath("true")
	if err != nil {
		t.Skip(err)
	}
	orphan, err := syscall.ForkExec(truePath, []string{"true"}, &syscall.ProcAttr{})
	if err != nil {
		t.Fatal(err)
	}
	// Polling /proc: a zombie sends no event we may take.
	testutil.Eventually(t, 30*time.Second, "both children exited", func() error {
		if z := zombieChildren(os.Getpid()); !slices.Contains(z, orphan) || !slices.Contains(z, own.Process.Pid) {
			return fmt.Errorf("zombies: %v", z)
		}
		return nil
	})
	reaped := reapOnce(os.Getpid())
	if !slices.Contains(reaped, orphan) {
		t.Errorf("reaped %v, not the orphan %d", reaped, orphan)
	}
	if slices.Contains(reaped, own.Process.Pid) {
		t.Errorf("reaped os/exec's child %d", own.Process.Pid)
	}
	err = own.Wait()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 3 {
		t.Errorf("os/exec's Wait: %v, want exit status 3", err)
	}
}

// TestProbePivotRoot runs the probe where it can (root, here not on
// rootfs): it succeeds, and leaves neither its directory nor a mount in
// this process's namespace.
func TestProbePivotRoot(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the probe needs root (a mount namespace of its own)")
	}
	scratch := t.TempDir()
	before, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	if err := probePivotRoot(scratch); err != nil {
		if strings.Contains(err.Error(), "a mount namespace of its own") {
			t.Skipf("no mount namespaces here: %v", err)
		}
		t.Fatal(err)
	}
	after, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Count(string(after), "\n") != strings.Count(string(before), "\n") || strings.Contains(string(after), "pivot-root-probe") {
		t.Errorf("the probe left a mount behind:\n%s", after)
	}
	if ents, _ := os.ReadDir(scratch); len(ents) != 0 {
		t.Errorf("the probe left %v behind", ents)
	}
	if _, err := os.Stat("/proc/self/mountinfo"); err != nil {
		t.Errorf("this process's root moved: %v", err)
	}
}
