package kubelet

import (
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"net/url"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Defaults of Config.
const (
	// DefaultPauseImage is the pod sandbox image's reference, carried by
	// the archive on the system disk (launch/systembuild.PauseImage); the
	// two must agree.
	DefaultPauseImage = "polis.internal/pause:v1"
	// DefaultProxyPort is the local apiserver proxy's port on 127.0.0.1.
	DefaultProxyPort = 6444
	// DefaultKubeletPort is where the kubelet serves, at the node's address.
	DefaultKubeletPort = 10250
	// DefaultStopGrace bounds a clean stop of containerd or kubelet.
	DefaultStopGrace = 10 * time.Second
	// DefaultClusterDomain is the cluster's DNS domain.
	DefaultClusterDomain = "cluster.local"
	// LabelPrefix is given to the node's Polis labels without a prefix of
	// their own; see NodeLabels.
	LabelPrefix = "node.polis-os.io/"
	// CgroupMount is where the cgroup v2 hierarchy is mounted.
	CgroupMount = "/sys/fs/cgroup"
)

// DefaultPodCIDR is the range Pods get addresses from when Config.PodCIDR
// is not given (tests). Nodes of a cluster are always given their own
// range by the curator instead: one range on every node would give Pods
// on different nodes the same addresses.
var DefaultPodCIDR = netip.MustParsePrefix("10.88.0.0/16")

// Config is what a Runner needs. Zero fields with a default get it.
type Config struct {
	// Bundle is polis-kube, whose kubelet subcommand runs the kubelet.
	Bundle string
	// BinDir holds containerd, containerd-shim-runc-v2, runc, ctr and the
	// mount and umount kubelet executes; it comes first in their PATH.
	BinDir string
	// CNIBinDir holds the CNI plugins (bridge, host-local, loopback,
	// portmap).
	CNIBinDir string
	// PauseImage is the OCI archive of the sandbox image, imported into
	// containerd at a start unless containerd holds it already (its
	// state is on the data disk); PauseImageRef is its reference
	// (DefaultPauseImage if empty).
	PauseImage    string
	PauseImageRef string
	// StateDir keeps what must survive a reboot (on the data disk):
	// containerd's root (images, snapshots) and the kubelet's root.
	StateDir string
	// RunDir keeps sockets, containerd's state and the generated files
	// (0700; keys and kubeconfig 0600): ephemeral storage. Its path must
	// be short enough for unix sockets.
	RunDir string
	// Cgroup is a cgroup v2 directory under CgroupMount for the node's
	// Kubernetes: containerd (and its shims) run in Cgroup/runtime, the
	// kubelet in Cgroup/kubelet, pods under Cgroup/pods. Empty: no cgroup
	// is touched (only for tests: then containers may outlive a stop).
	Cgroup string

	// NodeName is the Kubernetes node name: the Polis node ID.
	NodeName string
	// NodeIP is the node's address: the kubelet serves there and reports
	// it as the Node's InternalIP.
	NodeIP netip.Addr
	// Labels are the Node's labels (see NodeLabels), set at registration.
	Labels map[string]string
	// Credentials are the kubelet's certificates and keys.
	Credentials Credentials
	// APIServers are the cluster's apiservers, reached through the local
	// proxy; at least one.
	APIServers []netip.AddrPort
	// ProxyPort is the local apiserver proxy's port on 127.0.0.1;
	// DefaultProxyPort if 0.
	ProxyPort uint16
	// KubeletPort: DefaultKubeletPort if 0.
	KubeletPort uint16
	// PodCIDR is the node's pod range, which its Pods get addresses from
	// (the CNI configuration) and the kubelet is told (podCIDR); the
	// curator gives each worker node its own. DefaultPodCIDR if invalid
	// (zero).
	PodCIDR netip.Prefix
	// PodMTU is the MTU of every Pod's interface and of the node's
	// bridge: the pod network's tunnel's (clusternet.TunnelMTU), so that
	// what a Pod sends to another node fits it whole. 0: the kernel's
	// default (1500).
	PodMTU int
	// ResolvConf is the resolv.conf the kubelet gives pods with the
	// Default DNS policy; empty: none.
	ResolvConf string
	// ClusterDNS are the nameservers of Pods with the ClusterFirst DNS
	// policy (the default): the node's DNS server (kube/dns) listens on
	// the node's address. Empty: Pods get no cluster DNS.
	ClusterDNS []netip.Addr
	// Registries configures where images are pulled from: registry host
	// (as in image references, "host:port") → endpoint URL (http or
	// https), written as containerd's hosts directory.
	Registries map[string]string
	// StopGrace: DefaultStopGrace if 0.
	StopGrace time.Duration
}

// Credentials are the kubelet's identity, all PEM.
type Credentials struct {
	// CA is the cluster's Kubernetes CA: it verifies the apiservers, and
	// clients of the kubelet (the apiservers) present certificates from it.
	CA []byte
	// ClientCert and ClientKey: system:node:<NodeName> in system:nodes.
	ClientCert, ClientKey []byte
	// ServingCert and ServingKey: the kubelet's serving pair for NodeIP.
	ServingCert, ServingKey []byte
}

// maxSocketPath is the longest unix socket path (sun_path less its NUL).
const maxSocketPath = 107

// withDefaults validates c and fills in the defaults.
func (c Config) withDefaults() (Config, error) {
	var errs []error
	for name, p := range map[string]string{"Bundle": c.Bundle, "BinDir": c.BinDir, "CNIBinDir": c.CNIBinDir, "PauseImage": c.PauseImage, "StateDir": c.StateDir, "RunDir": c.RunDir} {
		if !filepath.IsAbs(p) {
			errs = append(errs, fmt.Errorf("%s %q is not an absolute path", name, p))
		}
	}
	if c.Cgroup != "" && !strings.HasPrefix(filepath.Clean(c.Cgroup), CgroupMount+"/") {
		errs = append(errs, fmt.Errorf("config field Cgroup %q is not below %s", c.Cgroup, CgroupMount))
	}
	if c.NodeName == "" {
		errs = append(errs, errors.New("config field NodeName is required"))
	}
	if !c.NodeIP.IsValid() || c.NodeIP.IsUnspecified() {
		errs = append(errs, fmt.Errorf("config field NodeIP %v is not a node address", c.NodeIP))
	}
	for name, b := range map[string][]byte{"CA": c.Credentials.CA, "ClientCert": c.Credentials.ClientCert, "ClientKey": c.Credentials.ClientKey, "ServingCert": c.Credentials.ServingCert, "ServingKey": c.Credentials.ServingKey} {
		if len(b) == 0 {
			errs = append(errs, fmt.Errorf("credential %s is missing", name))
		}
	}
	if len(c.APIServers) == 0 {
		errs = append(errs, errors.New("APIServers is empty: the kubelet has no apiserver to reach"))
	}
	for _, a := range c.APIServers {
		if !a.IsValid() || a.Port() == 0 {
			errs = append(errs, fmt.Errorf("apiserver %v is not an address and port", a))
		}
	}
	for _, a := range c.ClusterDNS {
		if !a.IsValid() || a.IsUnspecified() {
			errs = append(errs, fmt.Errorf("config field ClusterDNS: %v is not a nameserver address", a))
		}
	}
	for host, endpoint := range c.Registries {
		if err := checkRegistry(host, endpoint); err != nil {
			errs = append(errs, err)
		}
	}
	if c.PauseImageRef == "" {
		c.PauseImageRef = DefaultPauseImage
	}
	if c.ProxyPort == 0 {
		c.ProxyPort = DefaultProxyPort
	}
	if c.KubeletPort == 0 {
		c.KubeletPort = DefaultKubeletPort
	}
	if !c.PodCIDR.IsValid() {
		c.PodCIDR = DefaultPodCIDR
	}
	if c.StopGrace == 0 {
		c.StopGrace = DefaultStopGrace
	}
	if c.PodMTU != 0 && (c.PodMTU < 1280 || c.PodMTU > 65535) {
		errs = append(errs, fmt.Errorf("PodMTU %d: want 1280 (IPv6's minimum) to 65535", c.PodMTU))
	}
	if s := c.containerdSocket(); len(s) > maxSocketPath {
		errs = append(errs, fmt.Errorf("RunDir %q: containerd's socket %s would be longer than %d bytes", c.RunDir, s, maxSocketPath))
	}
	if err := errors.Join(errs...); err != nil {
		return c, fmt.Errorf("kubelet config: %w", err)
	}
	return c, nil
}

// checkRegistry checks one entry of Config.Registries.
func checkRegistry(host, endpoint string) error {
	if host == "" || strings.ContainsAny(host, "/ \"\\\n") || host == "." || host == ".." {
		return fmt.Errorf("registry host %q: want a host or host:port as in image references", host)
	}
	u, err := url.Parse(endpoint)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || strings.ContainsAny(endpoint, "\"\\\n") {
		return fmt.Errorf("registry %s: endpoint %q is not an http(s) URL", host, endpoint)
	}
	return nil
}

// Paths of what the runner writes and serves.
func (c Config) containerdSocket() string { return filepath.Join(c.RunDir, "containerd.sock") }

// containerdRoot is containerd's root (its persistent state: content,
// snapshots, metadata), on the data disk.
func (c Config) containerdRoot() string  { return filepath.Join(c.StateDir, "containerd") }
func (c Config) file(name string) string { return filepath.Join(c.RunDir, name) }
func (c Config) hostsDir() string        { return filepath.Join(c.RunDir, "certs.d") }
func (c Config) cniConfDir() string      { return filepath.Join(c.RunDir, "cni") }
func (c Config) server() string {
	return "https://localhost:" + strconv.Itoa(int(c.ProxyPort))
}

// Names of the generated files in RunDir.
const (
	fileContainerdConfig = "containerd.toml"
	fileKubeletConfig    = "kubelet.yaml"
	fileKubeconfig       = "kubelet.kubeconfig"
	fileCA               = "ca.crt"
	fileServingCert      = "kubelet.crt"
	fileServingKey       = "kubelet.key"
	fileCNIConfig        = "10-polis.conflist"
)

// NodeLabels maps the node's Polis labels to the Node's: see the package
// doc. The result is sorted by nothing (a map); KubeletLabelsFlag renders it.
func NodeLabels(polis map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range polis {
		prefix, _, ok := strings.Cut(k, "/")
		switch {
		case !ok:
			out[LabelPrefix+k] = v
		case restrictedNamespace(prefix):
			// NodeRestriction would refuse it, and with it the Node.
		default:
			out[k] = v
		}
	}
	return out
}

// restrictedNamespace reports whether a label prefix is in the
// kubernetes.io or k8s.io namespaces.
func restrictedNamespace(prefix string) bool {
	for _, ns := range []string{"kubernetes.io", "k8s.io"} {
		if prefix == ns || strings.HasSuffix(prefix, "."+ns) {
			return true
		}
	}
	return false
}

// labelsFlag renders labels as kubelet's --node-labels, sorted.
func labelsFlag(labels map[string]string) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(labels)) {
		parts = append(parts, k+"="+labels[k])
	}
	return strings.Join(parts, ",")
}
