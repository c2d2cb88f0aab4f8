package node

import (
	"context"
	"crypto/ed25519"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	cpb "github.com/polis-os/polis/api/curator/v1"
	nodev1 "github.com/polis-os/polis/api/node/v1"
	"github.com/polis-os/polis/consensus"
	"github.com/polis-os/polis/curator/client"
	"github.com/polis-os/polis/event"
	"github.com/polis-os/polis/identity"
	"github.com/polis-os/polis/internal/testutil"
	"github.com/polis-os/polis/roleserve"
	"github.com/polis-os/polis/supervisor"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, testutil.EtcdLeakOptions()...)
}

// Each test cluster's nodes live on 127.27.<n>.1, .2, .3: fixed ports on
// addresses no other test uses.
var subnets = testutil.Subnets{Octet: 27}

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// testNode is one node agent run in the test, with the directory that
// holds its storage and parameters.
type testNode struct {
	dir  string
	addr netip.Addr
	node *Node
	stop func()
}

func (tn *testNode) start(t testing.TB) {
	t.Helper()
	n, err := New(Config{
		StorageRoot:       filepath.Join(tn.dir, "storage"),
		Address:           tn.addr,
		ParametersFile:    filepath.Join(tn.dir, "parameters.pb"),
		LeaseTTL:          2 * time.Second,
		HeartbeatInterval: 500 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	tn.node = n
	tn.stop = supervisor.TestHarness(t, n.Run)
}

func (tn *testNode) writeParameters(t testing.TB, p *nodev1.NodeParameters) {
	t.Helper()
	b, err := proto.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(tn.dir, "parameters.pb"), b, 0o600); err != nil {
		t.Fatal(err)
	}
}

func (tn *testNode) credentials(t testing.TB) *roleserve.Credentials {
	t.Helper()
	c, err := event.Get(ctxT(t), &tn.node.Values().Credentials, event.Filter(func(c *roleserve.Credentials) bool { return c != nil }))
	if err != nil {
		t.Fatalf("node on %v never got credentials: %v", tn.addr, err)
	}
	return c
}

func (tn *testNode) voter(t testing.TB) {
	t.Helper()
	lcp, err := event.Get(ctxT(t), &tn.node.Values().LocalControlPlane, event.Filter(func(l *roleserve.LocalControlPlane) bool { return l != nil }))
	if err != nil {
		t.Fatalf("node on %v never ran a control plane: %v", tn.addr, err)
	}
	if _, err := event.Get(ctxT(t), lcp.Consensus.Status(), event.Filter(consensus.IsVoter)); err != nil {
		t.Fatalf("node on %v never became a voter: %v", tn.addr, err)
	}
}

// owner takes ownership of the cluster through the first node's curator
// and returns a Management client that follows the leader.
func owner(t testing.TB, ownerKey ed25519.PrivateKey, ca *x509.Certificate, curators []*cpb.CuratorEndpoint) cpb.ManagementServiceClient {
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
	resp, err := cpb.NewAAAServiceClient(conn).TakeOwnership(ctxT(t), &cpb.TakeOwnershipRequest{})
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
	uc, err := identity.UserClientConfig(v, tc)
	if err != nil {
		t.Fatal(err)
	}
	return cpb.NewManagementServiceClient(dial(t, client.Config{Endpoints: curators, TLS: uc}))
}

func dial(t testing.TB, cfg client.Config) *grpc.ClientConn {
	t.Helper()
	conn, err := client.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

func listNodes(t testing.TB, mgmt cpb.ManagementServiceClient) map[string]*cpb.Node {
	t.Helper()
	stream, err := mgmt.ListNodes(ctxT(t), &cpb.ListNodesRequest{})
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

// eventually polls cond until it holds or the deadline passes: for state
// only the curator knows (a node's health as the leader judges it).
func eventually(t testing.TB, what string, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %v", what, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// formCluster starts n node agents: the first bootstraps a cluster, the
// others register and are approved. It returns the nodes, a Management
// client acting as the owner, and the node IDs in order.
func formCluster(t testing.TB, n int) ([]*testNode, cpb.ManagementServiceClient, []string) {
	t.Helper()
	addrs := subnets.Addrs(n)
	nodes := make([]*testNode, n)
	for i := range nodes {
		nodes[i] = &testNode{dir: t.TempDir(), addr: addrs[i]}
	}
	ownerKey, err := identity.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	nodes[0].writeParameters(t, &nodev1.NodeParameters{Cluster: &nodev1.NodeParameters_ClusterBootstrap{
		ClusterBootstrap: &nodev1.ClusterBootstrap{OwnerPublicKey: ownerKey.Public().(ed25519.PublicKey)},
	}})
	nodes[0].start(t)
	first := nodes[0].credentials(t)
	curators := []*cpb.CuratorEndpoint{{NodeId: first.NodeID, Address: addrs[0].String(), Port: roleserve.DefaultCuratorPort}}
	mgmt := owner(t, ownerKey, first.CACertificate, curators)
	if n == 1 {
		return nodes, mgmt, []string{first.NodeID}
	}

	ticket := registerTicket(t, mgmt)
	for _, tn := range nodes[1:] {
		tn.writeParameters(t, &nodev1.NodeParameters{Cluster: &nodev1.NodeParameters_ClusterRegister{
			ClusterRegister: &nodev1.ClusterRegister{RegisterTicket: ticket.RegisterTicket, ClusterDirectory: ticket.ClusterDirectory},
		}})
		tn.start(t)
	}

	// Approve the registered nodes once they show up.
	eventually(t, "nodes registered", func() error {
		var pending int
		for _, n := range listNodes(t, mgmt) {
			if n.State == cpb.NodeState_NODE_STATE_NEW {
				pending++
			}
		}
		if pending != n-1 {
			return fmt.Errorf("%d NEW nodes", pending)
		}
		return nil
	})
	for id, n := range listNodes(t, mgmt) {
		if n.State == cpb.NodeState_NODE_STATE_NEW {
			if _, err := mgmt.ApproveNode(ctxT(t), &cpb.ApproveNodeRequest{NodeId: id}); err != nil {
				t.Fatalf("ApproveNode(%s): %v", id, err)
			}
		}
	}
	ids := []string{first.NodeID}
	for _, tn := range nodes[1:] {
		ids = append(ids, tn.credentials(t).NodeID)
	}
	return nodes, mgmt, ids
}

// registerTicket returns the register ticket once its directory lists a
// curator, which it does once the first node has reported its running
// curator.
func registerTicket(t testing.TB, mgmt cpb.ManagementServiceClient) *cpb.GetRegisterTicketResponse {
	t.Helper()
	var ticket *cpb.GetRegisterTicketResponse
	eventually(t, "a register ticket naming a curator", func() error {
		var err error
		ticket, err = mgmt.GetRegisterTicket(ctxT(t), &cpb.GetRegisterTicketRequest{})
		if err == nil && len(ticket.ClusterDirectory.GetCurators()) == 0 {
			err = errors.New("no curator in the directory yet")
		}
		return err
	})
	return ticket
}

// Three node agents form a cluster: the first bootstraps, the others
// register and are approved, both become consensus members; then one is
// stopped and restarted from its storage alone and rejoins.
func TestThreeNodeCluster(t *testing.T) {
	nodes, mgmt, ids := formCluster(t, 3)

	// Make the two others consensus members, one at a time (etcd admits
	// one learner at a time).
	yes := true
	for i, tn := range nodes[1:] {
		if _, err := mgmt.UpdateNodeRoles(ctxT(t), &cpb.UpdateNodeRolesRequest{NodeId: ids[i+1], ConsensusMember: &yes}); err != nil {
			t.Fatalf("UpdateNodeRoles(%s): %v", ids[i+1], err)
		}
		tn.voter(t)
	}
	healthy := func() error {
		nodes := listNodes(t, mgmt)
		for _, id := range ids {
			n := nodes[id]
			if n.GetState() != cpb.NodeState_NODE_STATE_UP || n.GetHealth() != cpb.NodeHealth_NODE_HEALTH_HEALTHY || n.GetRoles().GetConsensusMember() == nil {
				return fmt.Errorf("node %s: %v %v", id, n.GetState(), n.GetHealth())
			}
		}
		return nil
	}
	eventually(t, "three healthy consensus members", healthy)

	// Stop the second node and start it again from its storage alone.
	nodes[1].stop()
	if err := os.Remove(filepath.Join(nodes[1].dir, "parameters.pb")); err != nil {
		t.Fatal(err)
	}
	nodes[1].start(t)
	if got := nodes[1].credentials(t).NodeID; got != ids[1] {
		t.Fatalf("the restarted node is %s, want %s", got, ids[1])
	}
	nodes[1].voter(t)
	eventually(t, "the restarted node healthy again", healthy)

	// Take ConsensusMember from the third node and give it back: the
	// control plane is withdrawn, then the node joins etcd afresh (its old
	// member was removed, so its old data must not be reused).
	no := false
	if _, err := mgmt.UpdateNodeRoles(ctxT(t), &cpb.UpdateNodeRolesRequest{NodeId: ids[2], ConsensusMember: &no}); err != nil {
		t.Fatalf("removing ConsensusMember: %v", err)
	}
	if _, err := event.Get(ctxT(t), &nodes[2].node.Values().LocalControlPlane, event.Filter(func(l *roleserve.LocalControlPlane) bool { return l == nil })); err != nil {
		t.Fatalf("the control plane was not withdrawn: %v", err)
	}
	if _, err := mgmt.UpdateNodeRoles(ctxT(t), &cpb.UpdateNodeRolesRequest{NodeId: ids[2], ConsensusMember: &yes}); err != nil {
		t.Fatalf("giving ConsensusMember back: %v", err)
	}
	nodes[2].voter(t)
	eventually(t, "all healthy after the role came back", healthy)
}

// A node stopped while it waits for approval comes back as the same node
// (its key was stored before it registered), registers again harmlessly,
// and finishes enrolling once approved.
func TestRegistrationSurvivesRestart(t *testing.T) {
	_, mgmt, _ := formCluster(t, 1)
	ticket := registerTicket(t, mgmt)
	tn := &testNode{dir: t.TempDir(), addr: subnets.Addrs(1)[0]}
	tn.writeParameters(t, &nodev1.NodeParameters{Cluster: &nodev1.NodeParameters_ClusterRegister{
		ClusterRegister: &nodev1.ClusterRegister{RegisterTicket: ticket.RegisterTicket, ClusterDirectory: ticket.ClusterDirectory},
	}})
	tn.start(t)
	pending := func() (string, error) {
		var ids []string
		for id, n := range listNodes(t, mgmt) {
			if n.State == cpb.NodeState_NODE_STATE_NEW {
				ids = append(ids, id)
			}
		}
		if len(ids) != 1 {
			return "", fmt.Errorf("%d NEW nodes", len(ids))
		}
		return ids[0], nil
	}
	var id string
	eventually(t, "the node registered", func() (err error) { id, err = pending(); return err })

	// Stopped before approval; started again from its storage (the
	// parameters were kept on its ESP, so the file is not needed).
	tn.stop()
	if err := os.Remove(filepath.Join(tn.dir, "parameters.pb")); err != nil {
		t.Fatal(err)
	}
	tn.start(t)
	if _, err := mgmt.ApproveNode(ctxT(t), &cpb.ApproveNodeRequest{NodeId: id}); err != nil {
		t.Fatalf("ApproveNode: %v", err)
	}
	if got := tn.credentials(t).NodeID; got != id {
		t.Fatalf("the restarted node enrolled as %s, want %s", got, id)
	}
	if n := listNodes(t, mgmt); len(n) != 2 {
		t.Fatalf("%d nodes, want 2 (no duplicate registration)", len(n))
	}
}
