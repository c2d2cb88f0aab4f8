package launch

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"time"

	cpb "github.com/polis-os/polis/api/curator/v1"
	"github.com/polis-os/polis/curator"
	"github.com/polis-os/polis/nodeapi"
	"github.com/polis-os/polis/roleserve"
)

// DefaultFirstAddress is the first node's address when Options.Addresses
// is empty; node i gets the i-th address from it.
var DefaultFirstAddress = netip.MustParseAddr("127.77.0.1")

// Options describe a cluster to launch. The zero value launches three nodes
// with one consensus member (the first) on 127.77.0.1–3, in a temporary
// directory that Close removes, building polis-node from source.
type Options struct {
	// Nodes is how many nodes to start; 0 means 3.
	Nodes int
	// ConsensusMembers makes every node a consensus member (as soon as it
	// is UP, as far as the curator admits joining members at once), so
	// that the control plane survives the loss of any one node. Off, only the first node runs consensus and the curator.
	// polis-launch turns it on by default; tests that exercise adding the
	// role themselves leave it off.
	ConsensusMembers bool
	// BaseDir holds everything: node directories, logs, the node binary
	// when built, and polisctl's configuration. Empty means a new temporary
	// directory.
	BaseDir string
	// Keep leaves BaseDir in place at Close; otherwise Close removes it.
	Keep bool
	// ConfigDir is the polisctl configuration directory to save the
	// owner's credentials in; it must not hold another cluster's. Empty
	// means BaseDir/polisctl.
	ConfigDir string
	// Addresses are the nodes' addresses, one per node; empty means
	// consecutive addresses from DefaultFirstAddress.
	Addresses []netip.Addr
	// ConsensusPort and CuratorPort are every node's ports; 0 means the
	// roleserve defaults.
	ConsensusPort, CuratorPort uint16
	// NodeBinary is the polis-node executable. Empty means a polis-node
	// next to the running executable if there is one, else one built with
	// "go build" into BaseDir (which needs the working directory inside
	// the Polis module).
	NodeBinary string
	// LeaseTTL and HeartbeatInterval are passed to every node (tests
	// shorten them); 0 means the curator's defaults.
	LeaseTTL, HeartbeatInterval time.Duration
	// ConsensusHeartbeat and ConsensusElectionTimeout are every consensus
	// member's raft timings (polis-node --consensus-heartbeat and
	// --consensus-election-timeout); 0 means etcd's defaults (100ms, 1s),
	// except for VMs under TCG, which get TCGConsensusHeartbeat and
	// TCGConsensusElectionTimeout.
	ConsensusHeartbeat, ConsensusElectionTimeout time.Duration
	// LogFormat is the nodes' log format, "console" (the default) or
	// "json".
	LogFormat string
	// StepTimeout bounds each step (a node's curator serving, a node
	// registering, becoming UP, ...); 0 means two minutes, enough for a
	// slow machine.
	StepTimeout time.Duration
	// StopTimeout is how long Close waits for a node to stop after SIGTERM
	// before it kills it; 0 means 15 seconds.
	StopTimeout time.Duration
	// Progress receives a line for every step; nil discards them.
	Progress io.Writer
	// VM, when set, launches qemu VMs booting the node image instead of
	// processes (vmnode.go); Addresses then default to VM.Network's.
	VM *VMOptions
	// Kubernetes runs Kubernetes in the cluster (kubernetes.go): every
	// node gets the bundle, the first node KubernetesController, and
	// Launch returns once its apiserver is ready. With VM, the bundle and
	// the container runtime come on the system disk (VMOptions.SystemDir,
	// built by launch/systembuild when empty), every other node gets
	// KubernetesWorker, and Launch also waits for their Nodes to be
	// Ready. Off, no node holds a Kubernetes role and the bundle is not
	// built.
	Kubernetes bool
	// Images are served to the nodes from a registry inside the launcher
	// (registry.go); VM clusters with Kubernetes only.
	Images []Image
	// KubernetesBundle is the polis-kube binary for Kubernetes; empty
	// means one next to the running executable, else the one kube/bundle
	// builds (a quarter of an hour the first time, seconds after).
	KubernetesBundle string
	// PodRange is the cluster's pod range, out of which each worker node
	// gets a range of PodNodePrefixLength; the zero Prefix and 0 mean the
	// curator's defaults (curator.DefaultPodRange, a /24 each). It must
	// not overlap the nodes' addresses (the VM network). Both are for a
	// new cluster: with RestoreBackup they are refused, since a restored
	// cluster keeps the backup's pod network.
	PodRange            netip.Prefix
	PodNodePrefixLength int
	// RestoreBackup, when set, restores a cluster from this backup file
	// (polisctl cluster backup) instead of bootstrapping one
	// (restore.go): ConfigDir must be the polisctl configuration of the
	// cluster it was taken from, whose owner key decrypts it. Process
	// nodes only.
	RestoreBackup string
}

func (o *Options) setDefaults() error {
	if o.Nodes == 0 {
		o.Nodes = 3
	}
	if o.Nodes < 1 || o.Nodes > 200 {
		return fmt.Errorf("launch: %d nodes: want 1 to 200", o.Nodes)
	}
	if o.VM != nil {
		if err := o.VM.setDefaults(); err != nil {
			return err
		}
	}
	if len(o.Addresses) == 0 && o.VM != nil {
		var err error
		if o.Addresses, err = vmAddresses(o.VM.Network, o.Nodes); err != nil {
			return err
		}
	}
	if len(o.Addresses) == 0 {
		a := DefaultFirstAddress
		for range o.Nodes {
			o.Addresses = append(o.Addresses, a)
			a = a.Next()
		}
	}
	if len(o.Addresses) != o.Nodes {
		return fmt.Errorf("launch: %d addresses for %d nodes", len(o.Addresses), o.Nodes)
	}
	seen := map[netip.Addr]bool{}
	for _, a := range o.Addresses {
		if !a.IsValid() || a.IsUnspecified() {
			return fmt.Errorf("launch: address %v: want one a node can be reached on", a)
		}
		if seen[a] {
			return fmt.Errorf("launch: address %v given twice: every node needs its own", a)
		}
		seen[a] = true
	}
	if o.ConsensusPort == 0 {
		o.ConsensusPort = roleserve.DefaultConsensusPort
	}
	if o.CuratorPort == 0 {
		o.CuratorPort = roleserve.DefaultCuratorPort
	}
	if o.ConsensusPort == o.CuratorPort {
		return fmt.Errorf("launch: consensus and curator port are both %d", o.CuratorPort)
	}
	switch o.LogFormat {
	case "":
		o.LogFormat = "console"
	case "console", "json":
	default:
		return fmt.Errorf("launch: log format %q: want console or json", o.LogFormat)
	}
	if o.StepTimeout == 0 {
		o.StepTimeout = 2 * time.Minute
	}
	if o.StopTimeout == 0 {
		o.StopTimeout = 15 * time.Second
	}
	if o.Progress == nil {
		o.Progress = io.Discard
	}
	if err := o.checkPodNetwork(); err != nil {
		return err
	}
	if len(o.Images) > 0 && (o.VM == nil || !o.Kubernetes) {
		return errors.New("launch: images (Options.Images) are served to the nodes of a VM cluster with Kubernetes only")
	}
	return nil
}

// podNetwork is the pod network the first node bootstraps with; nil for
// the curator's defaults.
func (o *Options) podNetwork() *cpb.PodNetwork {
	if !o.PodRange.IsValid() && o.PodNodePrefixLength == 0 {
		return nil
	}
	p := &cpb.PodNetwork{NodePrefixLength: uint32(o.PodNodePrefixLength)}
	if o.PodRange.IsValid() {
		p.ClusterRange = o.PodRange.String()
	}
	return p
}

// checkPodNetwork refuses a pod network the curator would refuse, or one
// over the nodes' own addresses, whose traffic would be routed to Pods.
func (o *Options) checkPodNetwork() error {
	// Checked before podNetwork's conversion to uint32, which would make
	// 2^32+24 a valid 24. The curator's own bound (at most 28) is checked
	// by CheckPodNetwork below.
	if o.PodNodePrefixLength < 0 || o.PodNodePrefixLength > 32 {
		return fmt.Errorf("launch: pod node prefix length %d (--pod-node-prefix): want 0 (the default) to 32, the length of an IPv4 prefix", o.PodNodePrefixLength)
	}
	if err := curator.CheckPodNetwork(o.podNetwork()); err != nil {
		return fmt.Errorf("launch: %w", err)
	}
	r := o.PodRange
	if !r.IsValid() {
		r = curator.DefaultPodRange
	}
	if o.VM != nil && r.Overlaps(o.VM.Network) {
		return fmt.Errorf("launch: pod range %s overlaps the VM network %s", r, o.VM.Network)
	}
	for _, a := range o.Addresses {
		if r.Contains(a) {
			return fmt.Errorf("launch: pod range %s holds node address %s", r, a)
		}
	}
	return nil
}

// checkPortsFree fails when any of the nodes' ports at addrs is taken,
// most likely by another cluster on the same addresses, which the new
// nodes would otherwise try to talk to.
func checkPortsFree(addrs []netip.Addr, o *Options) error {
	for _, a := range addrs {
		for _, p := range []uint16{o.ConsensusPort, o.CuratorPort, nodeapi.DefaultPort, nodeapi.DefaultMetricsPort} {
			ap := netip.AddrPortFrom(a, p)
			l, err := net.Listen("tcp", ap.String())
			if err != nil {
				return fmt.Errorf("launch: %v is not free (%w): is another cluster running on these addresses? Stop it, or choose other addresses", ap, err)
			}
			l.Close()
		}
	}
	return nil
}

// refuseKeptDir refuses a base directory that already holds nodes (a
// cluster kept with Keep): the launcher forms new clusters only, and its
// first node, finding storage, would rejoin the old cluster instead of
// bootstrapping while the launcher waited for a new one.
func refuseKeptDir(dir string) error {
	if dir == "" {
		return nil
	}
	nodes, err := filepath.Glob(filepath.Join(dir, "node[0-9]*"))
	if err != nil {
		return err
	}
	for _, n := range nodes {
		if st, err := os.Stat(n); err == nil && st.IsDir() {
			return fmt.Errorf("launch: %s holds the nodes of a cluster launched before (kept with --keep; %s is one): the launcher forms new clusters only. Choose another --dir, remove this one, or start the kept nodes by hand from their storage (polis-node --storage %s --address IP, with the address the node had)",
				dir, n, filepath.Join(n, "storage"))
		}
	}
	return nil
}
