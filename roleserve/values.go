package roleserve

import (
	"crypto/ed25519"
	"crypto/tls"
	"crypto/x509"

	"google.golang.org/grpc"

	cpb "github.com/polis-os/polis/api/curator/v1"
	"github.com/polis-os/polis/consensus"
	"github.com/polis-os/polis/curator"
	"github.com/polis-os/polis/event/memory"
)

// Values are the role server's state. Each is written by exactly one worker
// (or, for Credentials, by enrolment, outside the role server) and read by
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
	// node; nil when none runs.
	LocalControlPlane memory.Value[*LocalControlPlane]
	// Directory is the list of the cluster's curators, kept current.
	Directory memory.Value[[]*cpb.CuratorEndpoint]
	// Kubernetes is what the Kubernetes worker runs.
	Kubernetes memory.Value[*KubernetesStatus]
}

// NewValues returns the role server's values, named for logs and the graph.
func NewValues() *Values {
	v := &Values{}
	v.Credentials.Name = "credentials"
	v.Membership.Name = "membership"
	v.LocalRoles.Name = "localRoles"
	v.LocalControlPlane.Name = "localControlPlane"
	v.Directory.Name = "directory"
	v.Kubernetes.Name = "kubernetes"
	return v
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
}

// TLSCertificate returns the credentials as a certificate for TLS.
func (c *Credentials) TLSCertificate() tls.Certificate {
	return tls.Certificate{Certificate: [][]byte{c.Certificate.Raw}, PrivateKey: c.Key, Leaf: c.Certificate}
}

// ClusterMembership answers "how do I reach a curator?". It is the only
// thing in the node that dials curators: workers make their calls on Curator,
// a connection that always reaches the leading curator, through the local
// one when this node runs the control plane and through the cluster
// directory otherwise.
type ClusterMembership struct {
	// Credentials the connection authenticates with.
	Credentials *Credentials
	// Curator reaches the leading curator; use it with the generated
	// clients (cpb.NewCuratorServiceClient).
	Curator grpc.ClientConnInterface
}

// LocalControlPlane is the control plane running on this node.
type LocalControlPlane struct {
	// Consensus is the local consensus member.
	Consensus *consensus.Service
	// Curator is the local curator.
	Curator *curator.Service
}

// KubernetesStatus is what the Kubernetes worker runs on this node.
type KubernetesStatus struct {
	// Controller is set when the node holds KubernetesController and the
	// worker has acted on it.
	Controller bool
	// Worker is set likewise for KubernetesWorker.
	Worker bool
	// Running lists the Kubernetes services actually running. Empty for
	// now: running them is the subject of a later issue, and this status
	// says so rather than pretending.
	Running []string
	// Note explains what is and is not running.
	Note string
}
