package kubelet

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/polis-os/polis/internal/mountinfo"
)

// mountinfo lines as the kernel writes them, with containerd's mounts
// (a task's rootfs, a sandbox's shm and network namespace) below its state
// and others that are not its.
const testMountinfo = `22 1 0:20 / / rw,relatime - tmpfs rootfs rw
30 22 0:25 / /run rw,nosuid - tmpfs tmpfs rw
31 22 8:16 / /var/lib/polis rw,relatime - ext4 /dev/vdb rw
40 30 0:40 / /run/polis/kubelet/containerd/io.containerd.runtime.v2.task/k8s.io/aaa/rootfs rw - overlay overlay rw,lowerdir=/x
41 30 0:41 / /run/polis/kubelet/containerd/io.containerd.grpc.v1.cri/sandboxes/bbb/shm rw - tmpfs shm rw
42 30 0:4 net:[4026532] /run/polis/kubelet/containerd/io.containerd.grpc.v1.cri/netns/cni-1234 rw - nsfs nsfs rw
43 40 0:42 / /run/polis/kubelet/containerd/io.containerd.runtime.v2.task/k8s.io/aaa/rootfs/dev rw - tmpfs tmpfs rw
44 40 0:43 / /run/polis/kubelet/containerd/io.containerd.runtime.v2.task/k8s.io/aaa/rootfs rw - overlay overlay rw,lowerdir=/y
45 30 0:44 / /run/polis/kubelet/containerd-other/x rw - tmpfs tmpfs rw
46 30 0:45 / /run/polis/kubelet/containerd rw - tmpfs tmpfs rw
47 30 0:46 / /run/polis/kubelet/runc/with\040space rw - tmpfs tmpfs rw
48 31 0:47 / /var/lib/polis/kubelet/containerd/io.containerd.snapshotter.v1.overlayfs/x rw - overlay overlay rw
`

// Only the mounts strictly below the runtime's state directories are
// chosen, deepest first, the last of stacked mounts first; its root
// (the data disk) and neighbours with a common prefix are left alone.
func TestMountsUnder(t *testing.T) {
	cfg := Config{RunDir: "/run/polis/kubelet", StateDir: "/var/lib/polis/kubelet"}
	mounts, err := mountinfo.Parse(testMountinfo)
	if err != nil {
		t.Fatal(err)
	}
	got := mountsUnder(mounts, cfg.runtimeStateDirs())
	task := "/run/polis/kubelet/containerd/io.containerd.runtime.v2.task/k8s.io/aaa/rootfs"
	want := []string{
		task + "/dev",
		task, // 44, stacked on 40
		"/run/polis/kubelet/containerd/io.containerd.grpc.v1.cri/sandboxes/bbb/shm",
		task, // 40: as deep as the shm, mounted before it
		"/run/polis/kubelet/containerd/io.containerd.grpc.v1.cri/netns/cni-1234",
		"/run/polis/kubelet/runc/with space",
	}
	if !slices.Equal(got, want) {
		t.Errorf("mountsUnder:\n got %q\nwant %q", got, want)
	}
	if got := mountsUnder(mounts, []string{"/nowhere"}); len(got) != 0 {
		t.Errorf("mounts chosen below a directory with none: %q", got)
	}
}

// With nothing mounted below them, the state directories are emptied
// (task bundles, runc's state) and kept; a missing one is empty already.
func TestCleanRuntimeState(t *testing.T) {
	dir := t.TempDir()
	cfg := Config{RunDir: dir}
	for _, p := range []string{
		"containerd/io.containerd.runtime.v2.task/k8s.io/aaa/config.json",
		"containerd/io.containerd.grpc.v1.cri/sandboxes/bbb/x",
		"runc/k8s.io/aaa/state.json",
		"kubelet.yaml", // the runner's own file beside them stays
	} {
		p = filepath.Join(dir, p)
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	info := filepath.Join(t.TempDir(), "mountinfo")
	if err := os.WriteFile(info, []byte("22 1 0:20 / / rw - tmpfs rootfs rw\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	done, err := cleanRuntimeState(info, cfg.runtimeStateDirs())
	if err != nil {
		t.Fatal(err)
	}
	if done != (cleaned{Unmounted: 0, Removed: 3}) {
		t.Errorf("cleaned %+v, want 3 entries removed", done)
	}
	for _, d := range cfg.runtimeStateDirs() {
		entries, err := os.ReadDir(d)
		if err != nil || len(entries) != 0 {
			t.Errorf("%s: %v, %d entries left", d, err, len(entries))
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "kubelet.yaml")); err != nil {
		t.Errorf("a file beside the state was removed: %v", err)
	}
	if _, err := cleanRuntimeState(info, []string{filepath.Join(dir, "missing")}); err != nil {
		t.Errorf("a missing directory: %v", err)
	}
}

// A mount still listed after the unmounts (here: one the mountinfo file
// goes on listing; unmounting its directory, not a mount point, fails)
// keeps everything in place, with an error naming it.
func TestCleanRuntimeStateKeepsWhatIsMounted(t *testing.T) {
	dir := t.TempDir()
	cfg := Config{RunDir: dir}
	bundle := filepath.Join(cfg.containerdState(), "io.containerd.runtime.v2.task/k8s.io/aaa/rootfs")
	if err := os.MkdirAll(bundle, 0o700); err != nil {
		t.Fatal(err)
	}
	info := filepath.Join(t.TempDir(), "mountinfo")
	if err := os.WriteFile(info, []byte("40 30 0:40 / "+bundle+" rw - overlay overlay rw\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := cleanRuntimeState(info, cfg.runtimeStateDirs())
	if err == nil || !strings.Contains(err.Error(), "nothing removed") || !strings.Contains(err.Error(), bundle) {
		t.Errorf("got %v, want an error naming the mount and saying nothing was removed", err)
	}
	if _, err := os.Stat(bundle); err != nil {
		t.Errorf("the bundle under a mount was removed: %v", err)
	}
}
