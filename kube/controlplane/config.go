package controlplane

import (
	"errors"
	"fmt"
	"net/netip"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/polis-os/polis/kube/pki"
)

// Defaults of Config.
const (
	DefaultPort       = 6443
	DefaultEtcdPrefix = "/registry"
	DefaultStopGrace  = 10 * time.Second
)

// DefaultServiceCIDR is Kubernetes' usual service range; its first address
// is the kubernetes service's, which the serving certificate must carry.
var DefaultServiceCIDR = netip.MustParsePrefix("10.96.0.0/12")

// Config is what a Runner needs. Zero fields with a default get it.
type Config struct {
	// Bundle is the path of the polis-kube binary (kube/bundle).
	Bundle string
	// Dir is where the component files are written; it is created 0700.
	Dir string
	// Files are the node's component files (pki.Cluster.ControlPlaneFiles).
	Files pki.Files
	// Address is the node's address: the apiserver listens and advertises
	// there. A loopback address (development, tests) works too; then the
	// apiserver does not publish itself in the kubernetes service, which it
	// would refuse to do with a loopback address.
	Address netip.Addr
	// Port is the apiserver's secure port; DefaultPort if 0.
	Port int
	// EtcdEndpoint is the confined etcd endpoint (etcdproxy's Endpoint).
	EtcdEndpoint string
	// EtcdPrefix is the apiserver's prefix inside that confined key space;
	// DefaultEtcdPrefix if empty.
	EtcdPrefix string
	// ServiceCIDR is the range of service addresses; DefaultServiceCIDR if
	// invalid (zero).
	ServiceCIDR netip.Prefix
	// StopGrace is how long a component may take to stop after SIGTERM
	// before it is killed; DefaultStopGrace if 0.
	StopGrace time.Duration
	// Cgroup, if set, is a cgroup v2 directory under which each component
	// runs in a cgroup of its own, named after it (Cgroup/apiserver, ...),
	// made when missing: the node then accounts each component's CPU and
	// memory apart from the agent's (nodeapi's polis_cgroup_* metrics).
	// Empty: the components share the node agent's cgroup (a node agent
	// that is not PID 1 of a node image).
	Cgroup string
}

// withDefaults validates c and fills in the defaults.
func (c Config) withDefaults() (Config, error) {
	if c.Bundle == "" || !filepath.IsAbs(c.Bundle) {
		return c, fmt.Errorf("controlplane: bundle path %q is not absolute", c.Bundle)
	}
	if c.Dir == "" || !filepath.IsAbs(c.Dir) {
		return c, fmt.Errorf("controlplane: directory %q is not absolute", c.Dir)
	}
	if c.Cgroup != "" && !filepath.IsAbs(c.Cgroup) {
		return c, fmt.Errorf("controlplane: cgroup %q is not absolute", c.Cgroup)
	}
	for _, name := range []string{pki.FileCA, pki.FileServingCert, pki.FileServingKey, pki.FileServiceAccountKey, pki.FileServiceAccountPub, pki.FileControllerManagerKubeconfig, pki.FileSchedulerKubeconfig, pki.FileKubeletClientCert, pki.FileKubeletClientKey, pki.FileReadyzProbeCert, pki.FileReadyzProbeKey} {
		if len(c.Files[name]) == 0 {
			return c, fmt.Errorf("controlplane: component file %s is missing", name)
		}
	}
	if !c.Address.IsValid() || c.Address.IsUnspecified() {
		return c, fmt.Errorf("controlplane: invalid node address %v", c.Address)
	}
	if c.Port == 0 {
		c.Port = DefaultPort
	}
	if c.Port < 0 || c.Port > 65535 {
		return c, fmt.Errorf("controlplane: invalid port %d", c.Port)
	}
	if !strings.HasPrefix(c.EtcdEndpoint, "unix://") {
		return c, errors.New("controlplane: the etcd endpoint must be a confined unix socket (unix://...), got " + strconv.Quote(c.EtcdEndpoint))
	}
	if c.EtcdPrefix == "" {
		c.EtcdPrefix = DefaultEtcdPrefix
	}
	if !c.ServiceCIDR.IsValid() {
		c.ServiceCIDR = DefaultServiceCIDR
	}
	if c.StopGrace == 0 {
		c.StopGrace = DefaultStopGrace
	}
	return c, nil
}

// Server is the apiserver's URL.
func (c Config) Server() string {
	return "https://" + netip.AddrPortFrom(c.Address, uint16(c.Port)).String()
}

func (c Config) file(name string) string { return filepath.Join(c.Dir, name) }

// apiserverArgs are kube-apiserver's flags.
func (c Config) apiserverArgs() []string {
	args := []string{
		"--advertise-address=" + c.Address.String(),
		"--bind-address=" + c.Address.String(),
		"--secure-port=" + strconv.Itoa(c.Port),
		"--etcd-servers=" + c.EtcdEndpoint,
		"--etcd-prefix=" + c.EtcdPrefix,
		// Compaction is global to etcd: the confined endpoint refuses it,
		// and the cluster's etcd compacts itself.
		"--etcd-compaction-interval=0",
		"--client-ca-file=" + c.file(pki.FileCA),
		"--tls-cert-file=" + c.file(pki.FileServingCert),
		"--tls-private-key-file=" + c.file(pki.FileServingKey),
		"--service-account-key-file=" + c.file(pki.FileServiceAccountPub),
		"--service-account-signing-key-file=" + c.file(pki.FileServiceAccountKey),
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-cluster-ip-range=" + c.ServiceCIDR.String(),
		// The Node authorizer lets a kubelet (system:node:NAME in
		// system:nodes) read what its own Pods need and write its own Node
		// and Pods only; NodeRestriction keeps it from changing other
		// Nodes, or its own labels outside the kubelet's prefixes.
		"--authorization-mode=Node,RBAC",
		"--enable-admission-plugins=NodeRestriction",
		// Towards kubelets (logs, exec): the apiserver authenticates with
		// its own client certificate and checks the kubelet's serving
		// certificate, issued by the curator from the same CA for the
		// node's address, which it prefers over the node's name.
		"--kubelet-client-certificate=" + c.file(pki.FileKubeletClientCert),
		"--kubelet-client-key=" + c.file(pki.FileKubeletClientKey),
		"--kubelet-certificate-authority=" + c.file(pki.FileCA),
		"--kubelet-preferred-address-types=InternalIP,ExternalIP,Hostname",
		"--allow-privileged=false",
		"--profiling=false",
		// Aggregated APIs and admission webhooks behind a Service are
		// called at one of the Service's endpoints (a Pod's address),
		// which the node's pod network routes, rather than at the
		// ClusterIP, which only a worker's kube-proxy translates: a
		// controller runs none.
		"--enable-aggregator-routing=true",
	}
	if c.Address.IsLoopback() {
		args = append(args, "--endpoint-reconciler-type=none")
	}
	return args
}

// leaderElectionArgs are the controller-manager's and the scheduler's
// leader election timings: a lease of 30 s renewed within 25 s, twice
// Kubernetes' 15 s and 10 s. A renewal goes through the apiserver to etcd;
// under TCG on a loaded host it took longer than 10 s several times a run
// (docs/benchmarks.md, issue 19), and each time the component exited and
// started again, which held up every Deployment for a minute. The price:
// when a controller node dies, another takes over after 30 s, not 15 s.
var leaderElectionArgs = []string{
	"--leader-elect-lease-duration=30s",
	"--leader-elect-renew-deadline=25s",
	"--leader-elect-retry-period=3s",
}

// controllerManagerArgs are kube-controller-manager's flags. It serves no
// port of its own (--secure-port=0): the node's status says how it is.
func (c Config) controllerManagerArgs() []string {
	kc := c.file(pki.FileControllerManagerKubeconfig)
	return append([]string{
		"--kubeconfig=" + kc,
		"--secure-port=0",
		"--service-account-private-key-file=" + c.file(pki.FileServiceAccountKey),
		"--root-ca-file=" + c.file(pki.FileCA),
		"--use-service-account-credentials=true",
		"--service-cluster-ip-range=" + c.ServiceCIDR.String(),
		"--cluster-name=polis",
		"--profiling=false",
	}, leaderElectionArgs...)
}

// schedulerArgs are kube-scheduler's flags.
func (c Config) schedulerArgs() []string {
	return append([]string{
		"--kubeconfig=" + c.file(pki.FileSchedulerKubeconfig),
		"--secure-port=0",
		"--profiling=false",
	}, leaderElectionArgs...)
}
