package roleserve

import (
	"crypto/ed25519"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	cpb "github.com/polis-os/polis/api/curator/v1"
	"github.com/polis-os/polis/clusternet"
	"github.com/polis-os/polis/consensus"
	"github.com/polis-os/polis/curator"
	"github.com/polis-os/polis/event"
	"github.com/polis-os/polis/event/memory"
)

// Values are the role server's state. Each is written by exactly one worker
// (or, for Credentials and DataClusterBound, by the node agent, outside
// the role server) and read by
// the workers that declared it; see Graph.
type Values struct {
	// Credentials are the node's identity in its cluster, set by enrolment
	// (bootstrap, register, or join after reboot).
	Credentials memory.Value[*Credentials]
	// Membership is how this node reaches the cluster's curators.
	Membership memory.Value[*ClusterMembership]
	// LocalRoles are the roles the curator gives this node; nil before they
	// are known.
	LocalRoles memory.Value[*cpb.Roles]
	// LocalControlPlane is the consensus member and curator running on this
	// node; nil when none runs. The kubernetes worker reads it for the
	// consensus member (and waits on that member's own status).
	LocalControlPlane memory.Value[*LocalControlPlane]
	// LocalCurator is where the curator on this node serves: set only
	// while it serves (its Status is set), nil otherwise, never unset once
	// the controlplane worker has started.
	LocalCurator memory.Value[*cpb.CuratorEndpoint]
	// Directory is the list of the cluster's curators, kept current.
	Directory memory.Value[[]*cpb.CuratorEndpoint]
	// Kubernetes is what the kubernetes worker runs of the Kubernetes
	// control plane (KubernetesController).
	Kubernetes memory.Value[*KubernetesStatus]
	// KubernetesWorker is what the kubernetesworker worker runs of the
	// Kubernetes node (KubernetesWorker: containerd, kubelet).
	KubernetesWorker memory.Value[*KubernetesWorkerStatus]
	// LocalLabels are this node's labels in the curator; nil before they
	// are known. The Kubernetes Node is registered with them.
	LocalLabels memory.Value[map[string]string]
	// ConsensusSnapshots are the periodic snapshots the node's consensus
	// member keeps on its disk, newest first, as the node reports them;
	// nil while it runs none.
	ConsensusSnapshots memory.Value[[]*cpb.ConsensusSnapshot]
	// LocalPodRange is this node's pod range, as the curator gave it; the
	// zero Prefix while the node has none (it never held
	// KubernetesWorker) or the curator has not answered yet.
	LocalPodRange memory.Value[netip.Prefix]
	// ClusterPodRange is the cluster's pod range, out of which every
	// node's is given (curator WatchNetworkPeers): what the node's Pods
	// send outside it leaves with the node's address (clusternet's
	// egress rule). The zero Prefix until the curator has said.
	ClusterPodRange memory.Value[netip.Prefix]
	// NetworkPeers are the other worker nodes whose Pods this node
	// reaches, by node ID (curator WatchNetworkPeers). Unset until the
	// curator has been asked.
	NetworkPeers memory.Value[[]clusternet.Peer]
	// DataClusterBound says whether the node's data disk is bound to its
	// cluster (docs/threat-model.md, "Data at rest"), as the node reports
	// it: written outside the role server, by the node agent, which binds
	// the disk; false until it says otherwise.
	DataClusterBound memory.Value[bool]
}

// NewValues returns the role server's values, named for logs and the graph.
func NewValues() *Values {
	v := &Values{}
	v.Credentials.Name = "credentials"
	v.Membership.Name = "membership"
	v.LocalRoles.Name = "localRoles"
	v.LocalControlPlane.Name = "localControlPlane"
	v.LocalCurator.Name = "localCurator"
	v.Directory.Name = "directory"
	v.Kubernetes.Name = "kubernetes"
	v.KubernetesWorker.Name = "kubernetesWorker"
	v.LocalLabels.Name = "localLabels"
	v.ConsensusSnapshots.Name = "consensusSnapshots"
	v.LocalPodRange.Name = "localPodRange"
	v.LocalPodRange.Equal = func(a, b netip.Prefix) bool { return a == b }
	v.ClusterPodRange.Name = "clusterPodRange"
	v.ClusterPodRange.Equal = func(a, b netip.Prefix) bool { return a == b }
	v.NetworkPeers.Name = "networkPeers"
	v.DataClusterBound.Name = "dataClusterBound"
	v.DataClusterBound.Set(false)
	v.NetworkPeers.Equal = func(a, b []clusternet.Peer) bool { return (a == nil) == (b == nil) && slices.Equal(a, b) }
	v.ConsensusSnapshots.Equal = func(a, b []*cpb.ConsensusSnapshot) bool {
		return (a == nil) == (b == nil) && slices.EqualFunc(a, b, func(x, y *cpb.ConsensusSnapshot) bool { return proto.Equal(x, y) })
	}
	// Workers publish these whenever they have looked again (after a
	// restart, after a new Watch message); an unchanged answer must not wake
	// every reader.
	v.LocalRoles.Equal = func(a, b *cpb.Roles) bool { return proto.Equal(a, b) }
	v.Directory.Equal = sameEndpoints
	v.LocalCurator.Equal = func(a, b *cpb.CuratorEndpoint) bool { return proto.Equal(a, b) }
	v.Kubernetes.Equal = kubernetesStatusEqual
	v.KubernetesWorker.Equal = (*KubernetesWorkerStatus).equal
	v.LocalLabels.Equal = func(a, b map[string]string) bool { return (a == nil) == (b == nil) && maps.Equal(a, b) }
	return v
}

// sameEndpoints reports whether two lists of curators are the same, in the
// same order.
func sameEndpoints(a, b []*cpb.CuratorEndpoint) bool {
	return slices.EqualFunc(a, b, func(x, y *cpb.CuratorEndpoint) bool { return proto.Equal(x, y) })
}

// Credentials are a node's key and certificate in its cluster.
type Credentials struct {
	// NodeID is the node's ID, derived from Key.
	NodeID string
	// Key is the node's private key.
	Key ed25519.PrivateKey
	// Certificate is the node's certificate from the cluster CA.
	Certificate *x509.Certificate
	// CACertificate is the cluster CA's certificate.
	CACertificate *x509.Certificate
	// Curators are the curators enrolment knew of: the way to the cluster
	// until the directory worker has learnt the current list (which it
	// can only do through a curator).
	Curators []*cpb.CuratorEndpoint
}

// TLSCertificate returns the credentials as a certificate for TLS.
func (c *Credentials) TLSCertificate() tls.Certificate {
	return tls.Certificate{Certificate: [][]byte{c.Certificate.Raw}, PrivateKey: c.Key, Leaf: c.Certificate}
}

// ClusterMembership answers "how do I reach a curator?". It is the only
// thing in the node that dials curators: workers make their calls on Curator,
// a connection to every curator it knows (the local one when this node
// runs the control plane, and the cluster directory) that routes each call
// by its method's declaration: mutations to the leading curator, reads and
// Watch streams to any healthy one (curator/client).
//
// A membership is replaced only when the credentials change, and the
// connection of the replaced one is closed: calls and streams on it fail,
// and the workers that made them restart and pick up the new one.
type ClusterMembership struct {
	// Credentials the connection authenticates with.
	Credentials *Credentials
	// Curator reaches the curators, each call the one its method is
	// served by; use it with the generated clients
	// (cpb.NewCuratorServiceClient).
	Curator grpc.ClientConnInterface
}

// LocalControlPlane is the control plane running on this node: handles on
// its services, for the node and its tests. Its writer (the controlplane
// worker) sets it to nil when it starts and when its run ends, and publishes
// it once the consensus member votes and the curator has been started.
// Workers that need the curator do not read it: "the local curator serves"
// is LocalCurator, published only while it is true. The kubernetes worker
// reads it for the consensus member, whose own status it then waits on.
type LocalControlPlane struct {
	// Consensus is the local consensus member.
	Consensus *consensus.Service
	// Curator is the local curator; nil if only consensus runs.
	Curator LocalCuratorService
}

// LocalCuratorService is what the node uses of the local curator: where it
// serves and whether it leads. *curator.Service provides it.
type LocalCuratorService interface {
	// Status is unset until the curator serves.
	Status() event.ValueWatch[*curator.Status]
	// Leader is the curator's view of the election.
	Leader() event.ValueWatch[*curator.LeaderStatus]
}

var _ LocalCuratorService = (*curator.Service)(nil)

// KubernetesStatus is what the kubernetes worker runs of the control
// plane on this node. It tells the truth: a role the node holds but does
// not run has a note saying why.
type KubernetesStatus struct {
	// Controller is set when the node holds KubernetesController.
	Controller bool
	// Running lists the control-plane components whose processes run
	// (controlplane.APIServer, ...), in that order.
	Running []string
	// Ready is set while the apiserver answers /readyz with ok.
	Ready bool
	// APIServer is where the apiserver serves (https) while the control
	// plane runs; the zero AddrPort otherwise.
	APIServer netip.AddrPort
	// ControllerNote says why KubernetesController, when held, is not run
	// in full (not available, starting, a component down); empty when it
	// runs and is ready.
	ControllerNote string
}

func kubernetesStatusEqual(a, b *KubernetesStatus) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.Controller == b.Controller && slices.Equal(a.Running, b.Running) &&
		a.Ready == b.Ready && a.APIServer == b.APIServer && a.ControllerNote == b.ControllerNote
}

// KubernetesWorkerStatus is what the kubernetesworker worker runs of the
// Kubernetes node on this node. It tells the truth like KubernetesStatus.
type KubernetesWorkerStatus struct {
	// Held is set when the node holds KubernetesWorker.
	Held bool
	// PodRoutes is set, Held not, while the node routes to the workers'
	// Pods for KubernetesController alone (its apiserver's way to
	// webhooks and aggregated APIs served by Pods): NetworkPeers,
	// NetworkInSync and Note then say how the pod network is.
	PodRoutes bool
	// ContainerdRunning and KubeletRunning are set while their processes
	// run.
	ContainerdRunning, KubeletRunning bool
	// ProxyRunning and DNSRunning are set while kube-proxy's and the node
	// DNS server's processes run.
	ProxyRunning, DNSRunning bool
	// NodeReady is set while the apiserver says the node's Node is Ready.
	NodeReady bool
	// NetworkPeers are the node IDs of the other workers whose pod ranges
	// the pod network routes to (clusternet: a WireGuard peer and a route
	// each), sorted; NetworkInSync is set while the kernel matched them
	// at its last look.
	NetworkPeers  []string
	NetworkInSync bool
	// Note says why the role, when held, is not run in full (not
	// available, starting, a process down, the Node not Ready, the pod
	// network not in line); empty when all runs and the Node is Ready.
	Note string
}

// equal reports whether a and b say the same.
func (s *KubernetesWorkerStatus) equal(b *KubernetesWorkerStatus) bool {
	if s == nil || b == nil {
		return s == b
	}
	return s.Held == b.Held && s.PodRoutes == b.PodRoutes && s.ContainerdRunning == b.ContainerdRunning && s.KubeletRunning == b.KubeletRunning &&
		s.ProxyRunning == b.ProxyRunning && s.DNSRunning == b.DNSRunning && s.NodeReady == b.NodeReady &&
		slices.Equal(s.NetworkPeers, b.NetworkPeers) && s.NetworkInSync == b.NetworkInSync && s.Note == b.Note
}

// String summarises the status on one line, for logs and the node API.
func (s *KubernetesWorkerStatus) String() string {
	switch {
	case s == nil:
		return "none"
	case !s.Held && s.PodRoutes:
		out := "no KubernetesWorker role; routing to Pods for KubernetesController: " + s.podNetworkSummary()
		if s.Note != "" {
			out += " (" + s.Note + ")"
		}
		return out
	case !s.Held && s.Note != "":
		// Removing what the role left, or why that failed.
		return "no KubernetesWorker role (" + s.Note + ")"
	case !s.Held:
		return "no KubernetesWorker role"
	}
	var parts []string
	for name, on := range map[string]bool{"containerd": s.ContainerdRunning, "kubelet": s.KubeletRunning, "kube-proxy": s.ProxyRunning, "dns": s.DNSRunning} {
		if on {
			parts = append(parts, name)
		}
	}
	slices.Sort(parts)
	out := "worker: " + orNothing(strings.Join(parts, ", ")) + " running"
	if s.NodeReady {
		out += ", Node Ready"
	}
	if s.ContainerdRunning || len(s.NetworkPeers) > 0 {
		out += "; " + s.podNetworkSummary()
	}
	if s.Note != "" {
		out += " (" + s.Note + ")"
	}
	return out
}

// podNetworkSummary is the pod network's part of String: its peers, and
// whether the kernel is in line with them.
func (s *KubernetesWorkerStatus) podNetworkSummary() string {
	out := fmt.Sprintf("pod network: %d peers", len(s.NetworkPeers))
	if len(s.NetworkPeers) > 0 {
		out += " (" + strings.Join(s.NetworkPeers, ", ") + ")"
	}
	if s.NetworkInSync {
		return out + ", in sync"
	}
	return out + ", not in sync"
}

// String summarises the status on one line, for logs and the node API.
func (s *KubernetesStatus) String() string {
	if s == nil {
		return "none"
	}
	var parts []string
	if s.Controller {
		c := "controller: " + orNothing(strings.Join(s.Running, ", ")) + " running"
		if s.Ready {
			c += ", apiserver ready at https://" + s.APIServer.String()
		}
		if s.ControllerNote != "" {
			c += " (" + s.ControllerNote + ")"
		}
		parts = append(parts, c)
	}
	if len(parts) == 0 {
		return "no Kubernetes roles"
	}
	return strings.Join(parts, "; ")
}

func orNothing(s string) string {
	if s == "" {
		return "nothing"
	}
	return s
}

// kubernetesProto is the status of both Kubernetes roles as the node
// reports it to the curator (NodeStatus), nil while the node holds
// neither and has nothing to say of the worker's: the worker's part is
// sent while KubernetesWorker is held, while the node routes to Pods for
// KubernetesController alone (the pod network's peers and note), and
// while removing what a KubernetesWorker role left fails (its note).
func kubernetesProto(s *KubernetesStatus, w *KubernetesWorkerStatus) *cpb.KubernetesStatus {
	controller, worker := s != nil && s.Controller, w != nil && (w.Held || w.PodRoutes || w.Note != "")
	if !controller && !worker {
		return nil
	}
	p := &cpb.KubernetesStatus{}
	if controller {
		p.Running = slices.Clone(s.Running)
		p.ApiserverReady = s.Ready
		p.ControllerNote = s.ControllerNote
		if s.APIServer.IsValid() {
			p.ApiserverPort = uint32(s.APIServer.Port())
		}
	}
	if worker {
		p.ContainerdRunning = w.ContainerdRunning
		p.KubeletRunning = w.KubeletRunning
		p.ProxyRunning = w.ProxyRunning
		p.DnsRunning = w.DNSRunning
		p.NodeReady = w.NodeReady
		p.NetworkPeers = uint32(len(w.NetworkPeers))
		p.NetworkInSync = w.NetworkInSync
		p.WorkerNote = w.Note
	}
	return p
}
