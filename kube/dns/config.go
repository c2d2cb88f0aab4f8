package dns

import (
	"errors"
	"fmt"
	"net/netip"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/polis-os/polis/kube/nodeservice"
	"github.com/polis-os/polis/kube/pki"
	"github.com/polis-os/polis/kube/process"
)

// Defaults and ports.
const (
	// DefaultDomain is the cluster's DNS domain (the kubelet's
	// clusterDomain).
	DefaultDomain = "cluster.local"
	// HealthPort, ReadyPort and MetricsPort are where /health, /ready
	// and /metrics answer, on 127.0.0.1.
	HealthPort  = 8080
	ReadyPort   = 8181
	MetricsPort = 9153
	// CacheSeconds is how long answers are cached.
	CacheSeconds = 30
)

// Name is the node service's name: its status value is kube.dns.status.
const Name = "dns"

// Config is what the node's DNS server needs.
type Config struct {
	// Binary is polis-coredns.
	Binary string
	// Dir receives the Corefile and kubeconfig (ephemeral storage).
	Dir string
	// NodeIP is the node's address, where the server listens (port 53).
	NodeIP netip.Addr
	// Domain is the cluster's DNS domain; DefaultDomain if empty.
	Domain string
	// Server is the apiserver's URL (the kubelet's local proxy).
	Server string
	// CA, Cert and Key (PEM): the Kubernetes CA and the server's client
	// certificate (pki.DNSUser) and key.
	CA, Cert, Key []byte
}

// domainName is what a cluster domain may be: dot-separated DNS labels.
var domainName = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?(\.[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)*$`)

func (c Config) withDefaults() (Config, error) {
	var errs []error
	for name, p := range map[string]string{"Binary": c.Binary, "Dir": c.Dir} {
		if !filepath.IsAbs(p) {
			errs = append(errs, fmt.Errorf("%s %q is not an absolute path", name, p))
		}
	}
	if strings.ContainsAny(c.Dir, " \t\n\"{}#") {
		errs = append(errs, fmt.Errorf("config field Dir %q holds a character a Corefile cannot take", c.Dir))
	}
	if !c.NodeIP.IsValid() || c.NodeIP.IsUnspecified() {
		errs = append(errs, fmt.Errorf("config field NodeIP %v is not a node address", c.NodeIP))
	}
	if c.Domain == "" {
		c.Domain = DefaultDomain
	}
	if !domainName.MatchString(c.Domain) {
		errs = append(errs, fmt.Errorf("config field Domain %q is not a DNS domain", c.Domain))
	}
	errs = append(errs, nodeservice.CheckAPIClient(c.Server, c.CA, c.Cert, c.Key)...)
	if err := errors.Join(errs...); err != nil {
		return c, fmt.Errorf("dns config: %w", err)
	}
	return c, nil
}

// Names of the generated files in Dir.
const (
	fileCorefile   = "Corefile"
	fileKubeconfig = "dns.kubeconfig"
)

func (c Config) file(name string) string { return filepath.Join(c.Dir, name) }

// kubeconfigContext is the context pki.Kubeconfig names.
const kubeconfigContext = "polis"

// Files renders the Corefile and the kubeconfig (0600).
func (c Config) Files() ([]nodeservice.File, error) {
	c, err := c.withDefaults()
	if err != nil {
		return nil, err
	}
	kubeconfig, err := nodeservice.KubeconfigFile(c.file(fileKubeconfig), c.Server, pki.DNSUser, c.CA, c.Cert, c.Key)
	if err != nil {
		return nil, err
	}
	return []nodeservice.File{{Path: c.file(fileCorefile), Data: c.corefile()}, kubeconfig}, nil
}

// corefile is the server's configuration: one server block for the
// cluster's domain on the node's address; the kubernetes plugin with the
// Services of every namespace (no Pod records: that would need a Pod
// watch); cache and errors; health, ready and metrics on loopback.
func (c Config) corefile() []byte {
	return fmt.Appendf(nil, `%s:53 {
	bind %s
	errors
	health 127.0.0.1:%d
	ready 127.0.0.1:%d
	prometheus 127.0.0.1:%d
	kubernetes %s {
		kubeconfig %s %s
		pods disabled
	}
	cache %d
}
`, c.Domain, c.NodeIP, HealthPort, ReadyPort, MetricsPort, c.Domain, c.file(fileKubeconfig), kubeconfigContext, CacheSeconds)
}

// Args are the server's command line.
func (c Config) Args() []string {
	return []string{"-conf", c.file(fileCorefile)}
}

// Spec is the node service that runs the DNS server.
func (c Config) Spec() (nodeservice.Spec, error) {
	c, err := c.withDefaults()
	if err != nil {
		return nodeservice.Spec{}, err
	}
	fs, err := c.Files()
	if err != nil {
		return nodeservice.Spec{}, err
	}
	return nodeservice.Spec{
		Name:    Name,
		Files:   fs,
		Command: process.Command{Path: c.Binary, Args: c.Args(), Env: []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "HOME=/"}, Dir: c.Dir},
	}, nil
}
