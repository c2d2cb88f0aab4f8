package kubelet

import (
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// On a directory laid out as cgroup v2 presents one (this host has no
// cgroup v2 to try it on): the children are made, every controller the
// parent offers is enabled for them, and a kill writes cgroup.kill and
// waits for cgroup.events to say the cgroup is empty.
func TestCgroupFiles(t *testing.T) {
	root := t.TempDir()
	cg := filepath.Join(root, "kubernetes")
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

	pods := c.cgroup(cgroupPods)
	events := filepath.Join(pods, "cgroup.events")
	if err := os.WriteFile(events, []byte("populated 1\nfrozen 0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := killCgroup(pods, 50*time.Millisecond); err == nil || !strings.Contains(err.Error(), "still has processes") {
		t.Errorf("a cgroup that stays populated: %v", err)
	}
	if got, _ := os.ReadFile(filepath.Join(pods, "cgroup.kill")); string(got) != "1" {
		t.Errorf("cgroup.kill holds %q", got)
	}
	if err := os.WriteFile(events, []byte("populated 0\nfrozen 0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := killCgroup(pods, time.Minute); err != nil {
		t.Errorf("an emptied cgroup: %v", err)
	}
	if err := killCgroup(filepath.Join(root, "gone"), time.Minute); err != nil {
		t.Errorf("a cgroup that is not there: %v", err)
	}
}

// The kubelet's cgroupRoot is the pods' cgroup, relative to the mount.
func TestKubeletCgroupRoot(t *testing.T) {
	c := Config{Cgroup: CgroupMount + "/kubernetes", StateDir: "/s", RunDir: "/r", NodeIP: netip.MustParseAddr("10.0.0.2"), PodCIDR: DefaultPodCIDR}
	if got := string(c.kubeletConfig()); !strings.Contains(got, "cgroupRoot: \"/kubernetes/pods\"\n") {
		t.Errorf("kubelet config:\n%s", got)
	}
}
