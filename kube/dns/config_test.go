package dns

import (
	"net/netip"
	"strings"
	"testing"
)

func testConfig() Config {
	return Config{
		Binary: "/system/bin/polis-coredns", Dir: "/run/polis/dns", NodeIP: netip.MustParseAddr("10.77.0.2"),
		Server: "https://localhost:6444", CA: []byte("ca"), Cert: []byte("cert"), Key: []byte("key"),
	}
}

// The Corefile serves cluster.local on the node's address from the
// apiserver, with health and ready on loopback; the kubeconfig is secret
// and names polis:dns.
func TestFiles(t *testing.T) {
	fs, err := testConfig().Files()
	if err != nil {
		t.Fatal(err)
	}
	if len(fs) != 2 || fs[0].Path != "/run/polis/dns/Corefile" || fs[1].Path != "/run/polis/dns/dns.kubeconfig" {
		t.Fatalf("files %v", fs)
	}
	want := `cluster.local:53 {
	bind 10.77.0.2
	errors
	health 127.0.0.1:8080
	ready 127.0.0.1:8181
	prometheus 127.0.0.1:9153
	kubernetes cluster.local {
		kubeconfig /run/polis/dns/dns.kubeconfig polis
		pods disabled
	}
	cache 30
}
`
	if got := string(fs[0].Data); got != want {
		t.Errorf("Corefile:\n%s\nwant:\n%s", got, want)
	}
	if fs[0].Secret || !fs[1].Secret {
		t.Errorf("secret: Corefile %v, kubeconfig %v; want only the kubeconfig", fs[0].Secret, fs[1].Secret)
	}
	if kc := string(fs[1].Data); !strings.Contains(kc, "polis:dns") || !strings.Contains(kc, `server: "https://localhost:6444"`) {
		t.Errorf("kubeconfig:\n%s", kc)
	}
	c := testConfig()
	c.Domain = "example.internal"
	fs, err = c.Files()
	if err != nil {
		t.Fatal(err)
	}
	if got := string(fs[0].Data); !strings.HasPrefix(got, "example.internal:53 {") || !strings.Contains(got, "kubernetes example.internal {") {
		t.Errorf("a domain of its own is not served:\n%s", got)
	}
	spec, err := testConfig().Spec()
	if err != nil {
		t.Fatal(err)
	}
	if spec.Command.Path != "/system/bin/polis-coredns" || strings.Join(spec.Command.Args, " ") != "-conf /run/polis/dns/Corefile" {
		t.Errorf("command %s %v", spec.Command.Path, spec.Command.Args)
	}
}

func TestValidation(t *testing.T) {
	for name, tc := range map[string]struct {
		change func(*Config)
		says   string
	}{
		"relative binary":   {func(c *Config) { c.Binary = "coredns" }, `Binary "coredns" is not an absolute path`},
		"space in dir":      {func(c *Config) { c.Dir = "/run/a b" }, "a Corefile cannot take"},
		"no address":        {func(c *Config) { c.NodeIP = netip.Addr{} }, "not a node address"},
		"domain with brace": {func(c *Config) { c.Domain = "a{b" }, `Domain "a{b" is not a DNS domain`},
		"upper-case domain": {func(c *Config) { c.Domain = "Cluster.Local" }, "not a DNS domain"},
		"plain http":        {func(c *Config) { c.Server = "http://x" }, "not an https URL"},
		"no certificate":    {func(c *Config) { c.Cert = nil }, "credential Cert is missing"},
	} {
		c := testConfig()
		tc.change(&c)
		if _, err := c.Files(); err == nil || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("%s: %v, want it to say %q", name, err, tc.says)
		}
	}
}
