package proxy

import (
	"net/netip"
	"strings"
	"testing"
)

func testConfig() Config {
	return Config{
		Bundle: "/system/bin/polis-kube", BinDir: "/system/bin", Dir: "/run/polis/proxy",
		NodeName: "node-1", NodeIP: netip.MustParseAddr("10.77.0.2"), ClusterCIDR: netip.MustParsePrefix("10.88.0.0/16"),
		Server: "https://localhost:6444", CA: []byte("ca"), Cert: []byte("cert"), Key: []byte("key"),
	}
}

// The rendered files: nftables mode, the node's name and address, health
// and metrics on loopback, and a kubeconfig (secret) for system:kube-proxy.
func TestFiles(t *testing.T) {
	fs, err := testConfig().Files()
	if err != nil {
		t.Fatal(err)
	}
	if len(fs) != 2 || fs[0].Path != "/run/polis/proxy/kube-proxy.yaml" || fs[1].Path != "/run/polis/proxy/kube-proxy.kubeconfig" {
		t.Fatalf("files %v", fs)
	}
	conf := string(fs[0].Data)
	for _, want := range []string{
		"kind: KubeProxyConfiguration\n", "\nmode: nftables\n",
		"\n  kubeconfig: \"/run/polis/proxy/kube-proxy.kubeconfig\"\n",
		"\nhostnameOverride: \"node-1\"\n", "\nbindAddress: \"10.77.0.2\"\n",
		"\nhealthzBindAddress: \"127.0.0.1:10256\"\n", "\nmetricsBindAddress: \"127.0.0.1:10249\"\n",
		"\nclusterCIDR: \"10.88.0.0/16\"\n", "\nnodePortAddresses:\n  - \"10.77.0.2/32\"\n",
		"\n  maxPerCore: 0\n",
	} {
		if !strings.Contains(conf, want) {
			t.Errorf("the configuration lacks %q:\n%s", want, conf)
		}
	}
	if fs[0].Secret || !fs[1].Secret {
		t.Errorf("secret: configuration %v, kubeconfig %v; want only the kubeconfig", fs[0].Secret, fs[1].Secret)
	}
	kc := string(fs[1].Data)
	for _, want := range []string{`server: "https://localhost:6444"`, "system:kube-proxy"} {
		if !strings.Contains(kc, want) {
			t.Errorf("the kubeconfig lacks %q:\n%s", want, kc)
		}
	}
	spec, err := testConfig().Spec()
	if err != nil {
		t.Fatal(err)
	}
	if spec.Command.Path != "/system/bin/polis-kube" || strings.Join(spec.Command.Args, " ") != "proxy --config=/run/polis/proxy/kube-proxy.yaml" {
		t.Errorf("command %s %v", spec.Command.Path, spec.Command.Args)
	}
	// nft comes from the system disk before anything else on PATH.
	if !strings.HasPrefix(spec.Command.Env[0], "PATH=/system/bin:") {
		t.Errorf("environment %v: PATH does not start with BinDir", spec.Command.Env)
	}
}

func TestValidation(t *testing.T) {
	for name, tc := range map[string]struct {
		change func(*Config)
		says   string
	}{
		"relative bundle": {func(c *Config) { c.Bundle = "polis-kube" }, `Bundle "polis-kube" is not an absolute path`},
		"no node name":    {func(c *Config) { c.NodeName = "" }, "NodeName"},
		"no address":      {func(c *Config) { c.NodeIP = netip.Addr{} }, "not a node address"},
		"no pod range":    {func(c *Config) { c.ClusterCIDR = netip.Prefix{} }, "ClusterCIDR"},
		"plain http":      {func(c *Config) { c.Server = "http://localhost:6444" }, "not an https URL"},
		"no key":          {func(c *Config) { c.Key = nil }, "credential Key is missing"},
		"quote in a name": {func(c *Config) { c.NodeName = `a"b` }, "NodeName"},
	} {
		c := testConfig()
		tc.change(&c)
		if _, err := c.Files(); err == nil || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("%s: %v, want it to say %q", name, err, tc.says)
		}
	}
}
