package proxy

import (
	"errors"
	"fmt"
	"net/netip"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/polis-os/polis/kube/nodeservice"
	"github.com/polis-os/polis/kube/pki"
	"github.com/polis-os/polis/kube/process"
)

// Ports kube-proxy serves on 127.0.0.1: its health (which upstream also
// serves to load balancers; here the node alone asks) and metrics.
const (
	HealthzPort = 10256
	MetricsPort = 10249
)

// Name is the node service's name: its status value is kube.proxy.status.
const Name = "proxy"

// Config is what kube-proxy needs on one node.
type Config struct {
	// Bundle is polis-kube, whose proxy subcommand is kube-proxy.
	Bundle string
	// BinDir holds nft (and comes first in kube-proxy's PATH).
	BinDir string
	// Dir receives the configuration and kubeconfig (ephemeral storage).
	Dir string
	// NodeName is the Kubernetes node name (the Polis node ID); NodeIP the
	// node's address.
	NodeName string
	NodeIP   netip.Addr
	// ClusterCIDR is the range of every Pod's address in the cluster:
	// traffic from outside it to a Service is masqueraded.
	ClusterCIDR netip.Prefix
	// Server is the apiserver's URL (the kubelet's local proxy).
	Server string
	// CA, Cert and Key (PEM): the Kubernetes CA and kube-proxy's client
	// certificate (pki.ProxyUser) and key.
	CA, Cert, Key []byte
}

func (c Config) validate() error {
	var errs []error
	for name, p := range map[string]string{"Bundle": c.Bundle, "BinDir": c.BinDir, "Dir": c.Dir} {
		if !filepath.IsAbs(p) {
			errs = append(errs, fmt.Errorf("%s %q is not an absolute path", name, p))
		}
	}
	if c.NodeName == "" || strings.ContainsAny(c.NodeName, "\"\\\n") {
		errs = append(errs, fmt.Errorf("config field NodeName %q is not a node name", c.NodeName))
	}
	if !c.NodeIP.IsValid() || c.NodeIP.IsUnspecified() {
		errs = append(errs, fmt.Errorf("config field NodeIP %v is not a node address", c.NodeIP))
	}
	if !c.ClusterCIDR.IsValid() {
		errs = append(errs, errors.New("config field ClusterCIDR is not a range"))
	}
	errs = append(errs, nodeservice.CheckAPIClient(c.Server, c.CA, c.Cert, c.Key)...)
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("kube-proxy config: %w", err)
	}
	return nil
}

// Names of the generated files in Dir.
const (
	fileConfig     = "kube-proxy.yaml"
	fileKubeconfig = "kube-proxy.kubeconfig"
)

func (c Config) file(name string) string { return filepath.Join(c.Dir, name) }

// Files renders kube-proxy's configuration and kubeconfig (0600).
func (c Config) Files() ([]nodeservice.File, error) {
	if err := c.validate(); err != nil {
		return nil, err
	}
	kubeconfig, err := nodeservice.KubeconfigFile(c.file(fileKubeconfig), c.Server, pki.ProxyUser, c.CA, c.Cert, c.Key)
	if err != nil {
		return nil, err
	}
	return []nodeservice.File{{Path: c.file(fileConfig), Data: c.config()}, kubeconfig}, nil
}

// config is the KubeProxyConfiguration: nftables mode; the node named as
// the kubelet names it; health and metrics on loopback; NodePorts on the
// node's address alone; conntrack's table size left as the kernel made it
// (kube-proxy would otherwise resize it through /sys).
func (c Config) config() []byte {
	q := strconv.Quote
	return fmt.Appendf(nil, `apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
mode: nftables
clientConnection:
  kubeconfig: %s
hostnameOverride: %s
bindAddress: %s
healthzBindAddress: %s
metricsBindAddress: %s
clusterCIDR: %s
nodePortAddresses:
  - %s
conntrack:
  maxPerCore: 0
  min: 0
`, q(c.file(fileKubeconfig)), q(c.NodeName), q(c.NodeIP.String()),
		q(netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), HealthzPort).String()),
		q(netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), MetricsPort).String()),
		q(c.ClusterCIDR.Masked().String()), q(netip.PrefixFrom(c.NodeIP, c.NodeIP.BitLen()).String()))
}

// Args are kube-proxy's command line.
func (c Config) Args() []string {
	return []string{"proxy", "--config=" + c.file(fileConfig)}
}

// Spec is the node service that runs kube-proxy.
func (c Config) Spec() (nodeservice.Spec, error) {
	fs, err := c.Files()
	if err != nil {
		return nodeservice.Spec{}, err
	}
	return nodeservice.Spec{
		Name:  Name,
		Files: fs,
		Command: process.Command{
			Path: c.Bundle,
			Args: c.Args(),
			Env:  []string{"PATH=" + c.BinDir + ":/usr/sbin:/usr/bin:/sbin:/bin", "HOME=/"},
			Dir:  c.Dir,
		},
	}, nil
}
