package kubelet

import (
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// On a directory laid out as cgroup v2 presents one (this host has no
// cgroup v2 to try it on): the children are made, and every controller
// the parent offers is enabled for them.
func TestMakeCgroups(t *testing.T) {
	cg := filepath.Join(t.TempDir(), "kubernetes")
	c := Config{Cgroup: cg}
	for _, dir := range []string{cg, c.cgroup(cgroupPods)} {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "cgroup.controllers"), []byte("cpuset cpu io memory pids\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.makeCgroups(); err != nil {
		t.Fatalf("makeCgroups: %v", err)
	}
	for _, name := range []string{cgroupRuntime, cgroupKubelet, cgroupPods} {
		if fi, err := os.Stat(c.cgroup(name)); err != nil || !fi.IsDir() {
			t.Errorf("cgroup %s not made: %v", name, err)
		}
	}
	for _, dir := range []string{cg, c.cgroup(cgroupPods)} {
		got, err := os.ReadFile(filepath.Join(dir, "cgroup.subtree_control"))
		if err != nil || string(got) != "+cpuset +cpu +io +memory +pids" {
			t.Errorf("%s: subtree_control %q (%v)", dir, got, err)
		}
	}
	// A node without cgroupfs there: an error that names the kubelet and
	// the cgroup.
	c = Config{Cgroup: filepath.Join(t.TempDir(), "no-mount", "kubernetes")}
	if err := c.makeCgroups(); err == nil || !strings.HasPrefix(err.Error(), "kubelet: creating cgroup "+c.Cgroup) {
		t.Errorf("makeCgroups without its parent: %v", err)
	}
}

// The kubelet's cgroupRoot is the pods' cgroup, relative to the mount.
func TestKubeletCgroupRoot(t *testing.T) {
	c := Config{Cgroup: CgroupMount + "/kubernetes", StateDir: "/s", RunDir: "/r", NodeIP: netip.MustParseAddr("10.0.0.2"), PodCIDR: DefaultPodCIDR}
	if got := string(c.kubeletConfig()); !strings.Contains(got, "cgroupRoot: \"/kubernetes/pods\"\n") {
		t.Errorf("kubelet config:\n%s", got)
	}
}
