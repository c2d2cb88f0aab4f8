// Package nodetest runs node agents in the test process: one at a time
// (Node), or as a cluster formed the way an operator forms one (FormCluster:
// the first node bootstraps, the owner takes ownership, the others register
// with a ticket and are approved).
//
// The agents are real: real etcd members, curators and gRPC with mTLS, on
// loopback addresses. Their curator and consensus ports are fixed, so every
// cluster needs addresses no other test uses; the caller passes its
// package's own testutil.Subnets, which keeps packages that go test runs in
// parallel apart. Short timings (a 2 s lease, 500 ms heartbeats) make
// failover and health take seconds. Everything started stops when the test
// ends.
package nodetest

import (
	"context"
	"crypto/ed25519"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	cpb "github.com/polis-os/polis/api/curator/v1"
	nodev1 "github.com/polis-os/polis/api/node/v1"
	"github.com/polis-os/polis/consensus"
	"github.com/polis-os/polis/curator/client"
	"github.com/polis-os/polis/event"
	"github.com/polis-os/polis/identity"
	"github.com/polis-os/polis/internal/testutil"
	"github.com/polis-os/polis/logring"
	"github.com/polis-os/polis/node"
	"github.com/polis-os/polis/nodeapi"
	"github.com/polis-os/polis/roleserve"
	"github.com/polis-os/polis/supervisor"
	"github.com/polis-os/polis/supervisor/supervisortest"
)

// Timings of the agents and the waits of the helpers.
const (
	// LeaseTTL is the agents' curator lease: what a dead leader costs.
	LeaseTTL = 2 * time.Second
	// HeartbeatInterval is how often the agents report to the curator.
	HeartbeatInterval = 500 * time.Millisecond

	// callTimeout bounds one RPC or one wait on a value. Generous: under
	// -race on a busy machine an etcd election can take seconds.
	callTimeout = 90 * time.Second
	// eventuallyTimeout bounds Eventually.
	eventuallyTimeout = 60 * time.Second
)

// Context is a context for one call or wait of a test, cancelled when the
// test ends.
func Context(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	t.Cleanup(cancel)
	return ctx
}

// Node is one node agent run in the test, with the directory that holds its
// storage and parameters.
type Node struct {
	// Dir holds the node's storage and its parameters file.
	Dir string
	// Addr is the node's address; its curator and consensus ports are the
	// defaults.
	Addr netip.Addr
	// Agent is the running agent, set by Start.
	Agent *node.Node
	// Logs holds the agent's log lines (the node API's Logs), set by Start.
	Logs *logring.Ring
	// PowerRequests receives the node API's Reboot and PowerOff requests;
	// nothing else happens to the agent (the test decides).
	PowerRequests chan nodeapi.PowerAction
	// KubernetesBundle and KubernetesAPIServerPort are passed to the agent
	// (node.Config); set them before Start.
	KubernetesBundle        string
	KubernetesAPIServerPort uint16
	// RecoverConsensus is passed to the agent (node.Config): set it
	// before Start to recover a cluster that lost its quorum on this
	// node.
	RecoverConsensus bool
	// DataDisk is passed to the agent (node.Config): the data disk it
	// binds to its cluster. Set it before Start.
	DataDisk node.DataDisk
	// Restore is passed to the agent (node.Config): set it before Start
	// to restore a cluster from a backup onto the node's fresh storage.
	Restore *node.RestoreSource

	stop func()
}

// NewNode returns a node on addr with a fresh directory, not started.
func NewNode(t testing.TB, addr netip.Addr) *Node {
	return &Node{Dir: t.TempDir(), Addr: addr, PowerRequests: make(chan nodeapi.PowerAction, 8)}
}

// StartNode writes p as a new node's parameters and starts it on addr.
func StartNode(t testing.TB, addr netip.Addr, p *nodev1.NodeParameters) *Node {
	t.Helper()
	n := NewNode(t, addr)
	n.WriteParameters(t, p)
	n.Start(t)
	return n
}

// ParametersFile is where the node reads its parameters; remove it to
// restart the node from its storage alone.
func (n *Node) ParametersFile() string { return filepath.Join(n.Dir, "parameters.pb") }

// WriteParameters writes p where the node reads its parameters.
func (n *Node) WriteParameters(t testing.TB, p *nodev1.NodeParameters) {
	t.Helper()
	b, err := proto.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(n.ParametersFile(), b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// Start starts a new agent over the node's directory, run under a
// supervisor test harness until Stop or the end of the test.
func (n *Node) Start(t testing.TB) {
	t.Helper()
	n.Logs = logring.New(logring.Config{})
	a, err := node.New(node.Config{
		StorageRoot:             filepath.Join(n.Dir, "storage"),
		Address:                 n.Addr,
		ParametersFile:          n.ParametersFile(),
		LeaseTTL:                LeaseTTL,
		HeartbeatInterval:       HeartbeatInterval,
		LogRing:                 n.Logs,
		KubernetesBundle:        n.KubernetesBundle,
		KubernetesAPIServerPort: n.KubernetesAPIServerPort,
		RecoverConsensus:        n.RecoverConsensus,
		DataDisk:                n.DataDisk,
		Restore:                 n.Restore,
		Power: func(a nodeapi.PowerAction) {
			select {
			case n.PowerRequests <- a:
			default:
			}
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	n.Agent = a
	logger := zap.New(zapcore.NewTee(zaptest.NewLogger(t).Core(), n.Logs.Core(zapcore.DebugLevel)))
	s, cancel := supervisortest.HarnessTree(t, a.Run, supervisor.WithLogger(logger))
	n.stop = func() {
		cancel()
		s.Wait()
	}
}

// Stop stops the agent Start started and waits until it has returned.
func (n *Node) Stop() { n.stop() }

// Credentials waits until the node has its certificate, and returns its
// credentials.
func (n *Node) Credentials(t testing.TB) *roleserve.Credentials {
	t.Helper()
	c, err := event.Get(Context(t), &n.Agent.Values().Credentials, event.Filter(func(c *roleserve.Credentials) bool { return c != nil }))
	if err != nil {
		t.Fatalf("node on %v never got credentials: %v", n.Addr, err)
	}
	return c
}

// APICertificate waits until the node serves its API with a node API
// certificate naming its address, which stock TLS clients (and polisctl)
// verify, and returns it.
func (n *Node) APICertificate(t testing.TB) *x509.Certificate {
	t.Helper()
	c, err := event.Get(Context(t), n.Agent.APICertificate(), event.Filter(func(c *x509.Certificate) bool {
		return c != nil && slices.ContainsFunc(c.IPAddresses, func(ip net.IP) bool { return ip.Equal(n.Addr.AsSlice()) })
	}))
	if err != nil {
		t.Fatalf("node on %v never got a node API certificate naming its address: %v", n.Addr, err)
	}
	return c
}

// Voter waits until the node runs a control plane whose consensus member
// is a voter.
func (n *Node) Voter(t testing.TB) {
	t.Helper()
	lcp, err := event.Get(Context(t), &n.Agent.Values().LocalControlPlane, event.Filter(func(l *roleserve.LocalControlPlane) bool { return l != nil }))
	if err != nil {
		t.Fatalf("node on %v never ran a control plane: %v", n.Addr, err)
	}
	if _, err := event.Get(Context(t), lcp.Consensus.Status(), event.Filter(consensus.IsVoter)); err != nil {
		t.Fatalf("node on %v never became a voter: %v", n.Addr, err)
	}
}

// Curator is where the node's curator listens (once it runs one).
func (n *Node) Curator() netip.AddrPort {
	return netip.AddrPortFrom(n.Addr, roleserve.DefaultCuratorPort)
}

// BootstrapParameters are the parameters of a node that bootstraps a new
// cluster owned by the holder of ownerKey.
func BootstrapParameters(ownerKey ed25519.PrivateKey) *nodev1.NodeParameters {
	return &nodev1.NodeParameters{Cluster: &nodev1.NodeParameters_ClusterBootstrap{
		ClusterBootstrap: &nodev1.ClusterBootstrap{OwnerPublicKey: ownerKey.Public().(ed25519.PublicKey)},
	}}
}

// RegisterParameters are the parameters of a node that registers with the
// cluster that issued ticket.
func RegisterParameters(ticket *cpb.GetRegisterTicketResponse) *nodev1.NodeParameters {
	return &nodev1.NodeParameters{Cluster: &nodev1.NodeParameters_ClusterRegister{
		ClusterRegister: &nodev1.ClusterRegister{RegisterTicket: ticket.RegisterTicket, ClusterDirectory: ticket.ClusterDirectory},
	}}
}

// Cluster is a cluster formed by FormCluster.
type Cluster struct {
	// Nodes are the node agents, the bootstrapping one first.
	Nodes []*Node
	// IDs are the nodes' IDs, in the order of Nodes.
	IDs []string
	// OwnerKey is the key the cluster was bootstrapped for.
	OwnerKey ed25519.PrivateKey
	// OwnerCertificate is the owner's certificate with OwnerKey, and CA
	// the cluster CA's certificate, to call the node API as the owner.
	OwnerCertificate tls.Certificate
	CA               *x509.Certificate
	// Management is a Management client acting as the owner, following the
	// curator leader.
	Management cpb.ManagementServiceClient
}

// Node returns the i-th node (0 bootstrapped the cluster).
func (c *Cluster) Node(i int) *Node { return c.Nodes[i] }

// FormCluster starts n node agents on a fresh /24 of subnets: the first
// bootstraps a cluster with a fresh owner key, the owner takes ownership
// through its curator, the others register and are approved. It returns
// once every node has its credentials; only the first is a consensus
// member.
func FormCluster(t testing.TB, n int, subnets *testutil.Subnets) *Cluster {
	t.Helper()
	return FormClusterWith(t, n, subnets, nil)
}

// FormClusterWith is FormCluster with setup, if not nil, called on each
// node before it starts (to set its KubernetesBundle, say).
func FormClusterWith(t testing.TB, n int, subnets *testutil.Subnets, setup func(*Node)) *Cluster {
	t.Helper()
	addrs := subnets.Addrs(n)
	nodes := make([]*Node, n)
	for i := range nodes {
		nodes[i] = NewNode(t, addrs[i])
		if setup != nil {
			setup(nodes[i])
		}
	}
	ownerKey, err := identity.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	nodes[0].WriteParameters(t, BootstrapParameters(ownerKey))
	nodes[0].Start(t)
	first := nodes[0].Credentials(t)
	curators := []*cpb.CuratorEndpoint{{NodeId: first.NodeID, Address: addrs[0].String(), Port: roleserve.DefaultCuratorPort}}
	ownerCert := OwnerCertificate(t, ownerKey, first.CACertificate, curators)
	// The owner's client knows where every node's curator would serve,
	// as polisctl does once it has refreshed its curators: a test that
	// makes other nodes consensus members and then takes the role from
	// the first must not leave the client knowing one stopped curator
	// (it failed so once, at the deadline, while the second node led).
	// Nodes that run no curator refuse the connection, which discovery
	// counts as down and asks last.
	for _, a := range addrs[1:] {
		curators = append(curators, &cpb.CuratorEndpoint{Address: a.String(), Port: roleserve.DefaultCuratorPort})
	}
	mgmt := management(t, ownerCert, first.CACertificate, curators)
	c := &Cluster{Nodes: nodes, IDs: []string{first.NodeID}, OwnerKey: ownerKey, OwnerCertificate: ownerCert, CA: first.CACertificate, Management: mgmt}
	if n == 1 {
		nodes[0].APICertificate(t)
		return c
	}

	ticket := RegisterTicket(t, mgmt)
	for _, tn := range nodes[1:] {
		tn.WriteParameters(t, RegisterParameters(ticket))
		tn.Start(t)
	}

	// Approve the registered nodes once they show up.
	Eventually(t, "nodes registered", func() error {
		var pending int
		for _, n := range ListNodes(t, mgmt) {
			if n.State == cpb.NodeState_NODE_STATE_NEW {
				pending++
			}
		}
		if pending != n-1 {
			return fmt.Errorf("%d NEW nodes", pending)
		}
		return nil
	})
	for id, n := range ListNodes(t, mgmt) {
		if n.State == cpb.NodeState_NODE_STATE_NEW {
			if _, err := mgmt.ApproveNode(Context(t), &cpb.ApproveNodeRequest{NodeId: id}); err != nil {
				t.Fatalf("ApproveNode(%s): %v", id, err)
			}
		}
	}
	for _, tn := range nodes[1:] {
		c.IDs = append(c.IDs, tn.Credentials(t).NodeID)
	}
	// Every node's API is verifiable (by polisctl, and by stock clients)
	// once it has its node API certificate.
	for _, tn := range nodes {
		tn.APICertificate(t)
	}
	return c
}

// Owner takes ownership of the cluster whose CA is ca through curators and
// returns a Management client acting as the owner that follows the leader.
func Owner(t testing.TB, ownerKey ed25519.PrivateKey, ca *x509.Certificate, curators []*cpb.CuratorEndpoint) cpb.ManagementServiceClient {
	t.Helper()
	return management(t, OwnerCertificate(t, ownerKey, ca, curators), ca, curators)
}

// OwnerCertificate takes ownership of the cluster whose CA is ca through
// curators and returns the owner certificate.
func OwnerCertificate(t testing.TB, ownerKey ed25519.PrivateKey, ca *x509.Certificate, curators []*cpb.CuratorEndpoint) tls.Certificate {
	t.Helper()
	v, err := identity.NewVerifier(ca)
	if err != nil {
		t.Fatal(err)
	}
	kh, err := identity.KeyHolderClientConfig(v, ownerKey)
	if err != nil {
		t.Fatal(err)
	}
	conn := dial(t, client.Config{Endpoints: curators, TLS: kh})
	resp, err := cpb.NewAAAServiceClient(conn).TakeOwnership(Context(t), &cpb.TakeOwnershipRequest{})
	if err != nil {
		t.Fatalf("TakeOwnership: %v", err)
	}
	cert, err := x509.ParseCertificate(resp.OwnerCertificate)
	if err != nil {
		t.Fatal(err)
	}
	tc, err := identity.TLSCertificate(cert, ownerKey)
	if err != nil {
		t.Fatal(err)
	}
	return tc
}

// management is a Management client presenting the owner certificate tc.
func management(t testing.TB, tc tls.Certificate, ca *x509.Certificate, curators []*cpb.CuratorEndpoint) cpb.ManagementServiceClient {
	t.Helper()
	v, err := identity.NewVerifier(ca)
	if err != nil {
		t.Fatal(err)
	}
	uc, err := identity.UserClientConfig(v, tc)
	if err != nil {
		t.Fatal(err)
	}
	return cpb.NewManagementServiceClient(dial(t, client.Config{Endpoints: curators, TLS: uc}))
}

// dial connects with cfg; the connection closes when the test ends.
func dial(t testing.TB, cfg client.Config) *grpc.ClientConn {
	t.Helper()
	conn, err := client.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// ListNodes returns the cluster's nodes by ID.
func ListNodes(t testing.TB, mgmt cpb.ManagementServiceClient) map[string]*cpb.Node {
	t.Helper()
	stream, err := mgmt.ListNodes(Context(t), &cpb.ListNodesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	nodes := map[string]*cpb.Node{}
	for {
		resp, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return nodes
		}
		if err != nil {
			t.Fatalf("ListNodes: %v", err)
		}
		for _, n := range resp.Nodes {
			nodes[n.Id] = n
		}
	}
}

// RegisterTicket returns the register ticket once its directory lists a
// curator, which it does once the first node has reported its running
// curator.
func RegisterTicket(t testing.TB, mgmt cpb.ManagementServiceClient) *cpb.GetRegisterTicketResponse {
	t.Helper()
	var ticket *cpb.GetRegisterTicketResponse
	Eventually(t, "a register ticket naming a curator", func() error {
		var err error
		ticket, err = mgmt.GetRegisterTicket(Context(t), &cpb.GetRegisterTicketRequest{})
		if err == nil && len(ticket.ClusterDirectory.GetCurators()) == 0 {
			err = errors.New("no curator in the directory yet")
		}
		return err
	})
	return ticket
}

// Eventually polls cond until it holds or the deadline passes: for state
// only the curator knows (a node's health as the leader judges it).
func Eventually(t testing.TB, what string, cond func() error) {
	t.Helper()
	testutil.Eventually(t, eventuallyTimeout, what, cond)
}
