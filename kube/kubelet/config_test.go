package kubelet

import (
	"maps"
	"net/netip"
	"strings"
	"testing"
)

// Bad configuration is refused with an error naming what is wrong.
func TestConfigValidation(t *testing.T) {
	good := Config{
		Bundle: "/system/bin/polis-kube", BinDir: "/system/bin", CNIBinDir: "/system/cni/bin", PauseImage: "/system/images/pause.tar",
		StateDir: "/polis/data/kubernetes", RunDir: "/polis/ephemeral/kubelet", Cgroup: "/sys/fs/cgroup/kubernetes",
		NodeName: "node-1", NodeIP: netip.MustParseAddr("10.0.0.2"),
		Credentials: Credentials{CA: []byte("x"), ClientCert: []byte("x"), ClientKey: []byte("x"), ServingCert: []byte("x"), ServingKey: []byte("x")},
		APIServers:  []netip.AddrPort{netip.MustParseAddrPort("10.0.0.1:6443")},
	}
	if _, err := good.withDefaults(); err != nil {
		t.Fatalf("a good config: %v", err)
	}
	for name, tc := range map[string]struct {
		change func(*Config)
		says   string
	}{
		"relative state dir":  {func(c *Config) { c.StateDir = "data" }, `StateDir "data" is not an absolute path`},
		"cgroup elsewhere":    {func(c *Config) { c.Cgroup = "/tmp/cg" }, "not below /sys/fs/cgroup"},
		"no node name":        {func(c *Config) { c.NodeName = "" }, "NodeName is required"},
		"no address":          {func(c *Config) { c.NodeIP = netip.Addr{} }, "not a node address"},
		"no client key":       {func(c *Config) { c.Credentials.ClientKey = nil }, "credential ClientKey is missing"},
		"no apiserver":        {func(c *Config) { c.APIServers = nil }, "no apiserver to reach"},
		"registry not a URL":  {func(c *Config) { c.Registries = map[string]string{"demo:5000": "10.0.0.1:5000"} }, "not an http(s) URL"},
		"registry with slash": {func(c *Config) { c.Registries = map[string]string{"a/b": "http://x"} }, `registry host "a/b"`},
		"long run dir":        {func(c *Config) { c.RunDir = "/" + strings.Repeat("r", 100) }, "longer than 107 bytes"},
		"unspecified DNS":     {func(c *Config) { c.ClusterDNS = []netip.Addr{netip.IPv4Unspecified()} }, "ClusterDNS: 0.0.0.0 is not a nameserver"},
	} {
		c := good
		c.Credentials = good.Credentials
		tc.change(&c)
		if _, err := c.withDefaults(); err == nil || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("%s: %v, want it to say %q", name, err, tc.says)
		}
	}
}

// Polis labels become Node labels a kubelet may set under
// NodeRestriction.
func TestNodeLabels(t *testing.T) {
	got := NodeLabels(map[string]string{
		"zone": "a", "example.com/rack": "7",
		"kubernetes.io/hostname": "x", "node-role.kubernetes.io/worker": "", "k8s.io/x": "y",
	})
	want := map[string]string{LabelPrefix + "zone": "a", "example.com/rack": "7"}
	if !maps.Equal(got, want) {
		t.Errorf("NodeLabels = %v, want %v", got, want)
	}
}

// The kubelet names the node's DNS server as Pods' nameserver, and only
// when given one.
func TestKubeletConfigClusterDNS(t *testing.T) {
	c := Config{NodeIP: netip.MustParseAddr("10.0.0.2"), RunDir: "/run/k", StateDir: "/data/k", PodCIDR: DefaultPodCIDR}
	if got := string(c.kubeletConfig()); strings.Contains(got, "clusterDNS") {
		t.Errorf("without ClusterDNS the configuration names one:\n%s", got)
	}
	c.ClusterDNS = []netip.Addr{c.NodeIP}
	if got := string(c.kubeletConfig()); !strings.Contains(got, "\nclusterDNS:\n  - \"10.0.0.2\"\n") || !strings.Contains(got, "\nclusterDomain: cluster.local\n") {
		t.Errorf("the configuration does not name 10.0.0.2 as the cluster's DNS for cluster.local:\n%s", got)
	}
}

// All of the runtime's state that a reboot empties is in RunDir, where
// cleanRuntimeState finds it: containerd's state, runc's root and the
// sandboxes' network namespaces (under containerd's state); its root is
// on the data disk.
func TestContainerdConfigKeepsRuntimeStateInRunDir(t *testing.T) {
	c := Config{RunDir: "/run/k", StateDir: "/data/k", BinDir: "/system/bin", PodCIDR: DefaultPodCIDR}
	got := string(c.containerdConfig())
	for _, want := range []string{
		"\nroot = \"/data/k/containerd\"\n",
		"\nstate = \"/run/k/containerd\"\n",
		"\n        Root = \"/run/k/runc\"\n",
		"\n  netns_mounts_under_state_dir = true\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("containerd's configuration does not say %q:\n%s", want, got)
		}
	}
	if dirs := c.runtimeStateDirs(); len(dirs) != 2 || dirs[0] != "/run/k/containerd" || dirs[1] != "/run/k/runc" {
		t.Errorf("runtimeStateDirs = %v", dirs)
	}
}
