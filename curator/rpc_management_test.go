package curator

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	cpb "github.com/polis-os/polis/api/curator/v1"
	"github.com/polis-os/polis/consensus"
	"github.com/polis-os/polis/event"
	"github.com/polis-os/polis/identity"
	"github.com/polis-os/polis/supervisor/supervisortest"
)

// storeDump is every key of the curator's namespace but the heartbeat
// records (written by a loop, not by calls) with its value and
// revision: two equal dumps mean that nothing was written in between.
type storeDump map[string]string

func (c *testCluster) storeState() storeDump {
	c.t.Helper()
	resp, err := c.etcd.Get(ctxT(c.t), "", clientv3.WithPrefix())
	if err != nil {
		c.t.Fatal(err)
	}
	d := storeDump{}
	for _, kv := range resp.Kvs {
		if strings.HasPrefix(string(kv.Key), heartbeatPrefix) {
			continue // rewritten every interval, whatever the calls do
		}
		d[string(kv.Key)] = fmt.Sprintf("rev %d: %x", kv.ModRevision, kv.Value)
	}
	return d
}

// diff describes how d differs from before, "" if it does not.
func (d storeDump) diff(before storeDump) string {
	var out []string
	for _, k := range slices.Sorted(maps.Keys(d)) {
		if before[k] != d[k] {
			out = append(out, "changed "+k)
		}
	}
	for k := range before {
		if _, ok := d[k]; !ok {
			out = append(out, "deleted "+k)
		}
	}
	return strings.Join(out, ", ")
}

// wantStoreUnchanged fails t if the store differs from before: what (the
// calls made since) should have written nothing.
func (c *testCluster) wantStoreUnchanged(t testing.TB, before storeDump, what string) {
	t.Helper()
	if diff := c.storeState().diff(before); diff != "" {
		t.Errorf("%s changed the store: %s", what, diff)
	}
}

// testNode is a node record written straight into the store, as if the
// node had got there through the CuratorService calls.
type testNode struct {
	key  ed25519.PrivateKey
	node *cpb.Node
}

// seedNode stores a node in state; UP nodes get a node certificate's worth
// of status: an external address of their own (127.25.<n>.1, so that their
// consensus member would not collide with anything) and a consensus peer
// port.
func (c *testCluster) seedNode(state cpb.NodeState) *testNode {
	c.t.Helper()
	key := mustKey(c.t)
	pub := key.Public().(ed25519.PublicKey)
	peer := netip.MustParseAddrPort(freeAddress(c.t))
	n := &cpb.Node{
		Id:        identity.NodeID(pub),
		PublicKey: pub,
		State:     state,
		Status:    &cpb.NodeStatus{ExternalAddress: peer.Addr().String(), ConsensusPeerPort: uint32(peer.Port())},
	}
	if state == cpb.NodeState_NODE_STATE_UP {
		n.Roles = &cpb.Roles{}
	}
	c.putNode(n)
	return &testNode{key: key, node: n}
}

func (c *testCluster) putNode(n *cpb.Node) {
	c.t.Helper()
	op, err := putNodeOp(n)
	if err != nil {
		c.t.Fatal(err)
	}
	if _, err := c.etcd.Do(ctxT(c.t), op); err != nil {
		c.t.Fatal(err)
	}
}

// record reads node id's record from the store; nil if there is none.
func (c *testCluster) record(id string) *cpb.Node {
	c.t.Helper()
	n, _, err := getNode(ctxT(c.t), c.etcd, id)
	if err != nil {
		c.t.Fatal(err)
	}
	return n
}

// waitCached waits until the curator's node cache agrees with pred, for
// the calls that read it (ListNodes, the directory, authorisation).
func (c *testCluster) waitCached(pred func(nodes map[string]*cpb.Node) bool) {
	c.t.Helper()
	_, err := event.Get(ctxT(c.t), c.curator.nodes.Snapshots(), event.Filter(func(s *nodeSnapshot) bool { return s.complete && pred(s.nodes) }))
	if err != nil {
		c.t.Fatalf("waiting for the node cache: %v", err)
	}
}

func (c *testCluster) management() cpb.ManagementServiceClient {
	return cpb.NewManagementServiceClient(c.asOwner())
}

// managementTest starts a test cluster for a test of the management
// service: the cluster, a client of the service as its owner, and the
// test's context.
func managementTest(t *testing.T) (*testCluster, cpb.ManagementServiceClient, context.Context) {
	t.Helper()
	c := newTestCluster(t)
	return c, c.management(), ctxT(t)
}

// consensusStatus is the test cluster's consensus member, a voter.
func (c *testCluster) consensusStatus() *consensus.Status {
	c.t.Helper()
	st, err := event.Get(ctxT(c.t), c.consensus.Status(), event.Filter(consensus.IsVoter))
	if err != nil {
		c.t.Fatal(err)
	}
	return st
}

// member finds node id's consensus member; nil if it has none.
func (c *testCluster) member(id string) *consensus.Member {
	c.t.Helper()
	members, err := c.consensusStatus().Members(ctxT(c.t))
	if err != nil {
		c.t.Fatal(err)
	}
	for _, m := range members {
		if m.Name == id {
			return &m
		}
	}
	return nil
}

// wantCode fails the test unless err has code want and names what it
// should, so that an error is about the problem the test set up.
func wantStatus(t testing.TB, what string, err error, want codes.Code, mentions string) {
	t.Helper()
	if status.Code(err) != want {
		t.Errorf("%s: %v, want %v", what, err, want)
		return
	}
	if mentions != "" && !strings.Contains(status.Convert(err).Message(), mentions) {
		t.Errorf("%s: %q does not mention %q", what, status.Convert(err).Message(), mentions)
	}
}

func listNodes(t testing.TB, m cpb.ManagementServiceClient, req *cpb.ListNodesRequest) (nodes []*cpb.Node, batches int) {
	t.Helper()
	stream, err := m.ListNodes(ctxT(t), req)
	if err != nil {
		t.Fatalf("ListNodes: %v", err)
	}
	for {
		resp, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return nodes, batches
		}
		if err != nil {
			t.Fatalf("ListNodes: %v", err)
		}
		batches++
		nodes = append(nodes, resp.Nodes...)
	}
}

func nodeIDs(nodes []*cpb.Node) []string {
	var ids []string
	for _, n := range nodes {
		ids = append(ids, n.Id)
	}
	return ids
}

// TestManagementPermissionDenied calls every Management and AAA method as
// every caller that may not make it, with requests that would change the
// state if they were let through, and checks that none was, and that
// nothing changed.
func TestManagementPermissionDenied(t *testing.T) {
	c := newTestCluster(t)
	fresh := c.seedNode(cpb.NodeState_NODE_STATE_NEW).node
	up := c.seedNode(cpb.NodeState_NODE_STATE_UP).node
	before := c.storeState()

	// A user the CA certified, other than the owner: it holds no
	// permission yet.
	aliceKey := mustKey(t)
	alice, err := c.ca.IssueUser("alice", aliceKey.Public().(ed25519.PublicKey), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	callers := []struct {
		name string
		dial func() *grpc.ClientConn
		// holdsOwnerKey: TakeOwnership is this caller's to make.
		holdsOwnerKey bool
	}{
		{"anonymous", c.anonymous, false},
		{"key holder", func() *grpc.ClientConn { return c.asKeyHolder(mustKey(t)) }, false},
		// The owner key proves nothing but itself until it is exchanged
		// for the owner certificate.
		{"key holder with the owner key", func() *grpc.ClientConn { return c.asKeyHolder(c.ownerKey) }, true},
		{"node", c.asFirstNode, false},
		{"user other than the owner", func() *grpc.ClientConn { return c.asUserCert(alice, aliceKey) }, false},
	}
	denied := func(err error) bool {
		return status.Code(err) == codes.PermissionDenied || status.Code(err) == codes.Unauthenticated
	}
	for _, cl := range callers {
		conn := cl.dial()
		m := cpb.NewManagementServiceClient(conn)
		ctx := ctxT(t)
		calls := map[string]error{}
		_, calls["GetClusterInfo"] = m.GetClusterInfo(ctx, &cpb.GetClusterInfoRequest{})
		if stream, err := m.ListNodes(ctx, &cpb.ListNodesRequest{}); err != nil {
			calls["ListNodes"] = err
		} else {
			_, calls["ListNodes"] = stream.Recv()
		}
		_, calls["GetRegisterTicket"] = m.GetRegisterTicket(ctx, &cpb.GetRegisterTicketRequest{})
		_, calls["ApproveNode"] = m.ApproveNode(ctx, &cpb.ApproveNodeRequest{NodeId: fresh.Id})
		_, calls["UpdateNodeRoles"] = m.UpdateNodeRoles(ctx, &cpb.UpdateNodeRolesRequest{NodeId: up.Id, KubernetesWorker: proto.Bool(true)})
		_, calls["DecommissionNode"] = m.DecommissionNode(ctx, &cpb.DecommissionNodeRequest{NodeId: up.Id})
		_, calls["DeleteNode"] = m.DeleteNode(ctx, &cpb.DeleteNodeRequest{NodeId: fresh.Id})
		_, calls["UpdateNodeLabels"] = m.UpdateNodeLabels(ctx, &cpb.UpdateNodeLabelsRequest{NodeId: up.Id, Set: map[string]string{"a": "b"}})
		_, calls["RotateRegisterTicket"] = m.RotateRegisterTicket(ctx, &cpb.RotateRegisterTicketRequest{})
		_, calls["IssueKubernetesCredentials"] = m.IssueKubernetesCredentials(ctx, &cpb.IssueKubernetesCredentialsRequest{})
		if stream, err := m.BackupCluster(ctx, &cpb.BackupClusterRequest{}); err != nil {
			calls["BackupCluster"] = err
		} else {
			_, calls["BackupCluster"] = stream.Recv()
		}
		_, calls["RotateOwnerKey"] = cpb.NewAAAServiceClient(conn).RotateOwnerKey(ctx, &cpb.RotateOwnerKeyRequest{})
		if !cl.holdsOwnerKey {
			_, calls["TakeOwnership"] = cpb.NewAAAServiceClient(conn).TakeOwnership(ctx, &cpb.TakeOwnershipRequest{})
		}
		// Every method of both services is tried.
		want := len(cpb.ManagementService_ServiceDesc.Methods) + len(cpb.ManagementService_ServiceDesc.Streams) + len(cpb.AAAService_ServiceDesc.Methods)
		if cl.holdsOwnerKey {
			want-- // TakeOwnership
		}
		if len(calls) != want {
			t.Fatalf("%s: tried %d methods, the services have %d", cl.name, len(calls), want)
		}
		for method, err := range calls {
			if !denied(err) {
				t.Errorf("%s called %s: %v, want PermissionDenied or Unauthenticated", cl.name, method, err)
			}
		}
	}
	c.wantStoreUnchanged(t, before, "refused calls")
}

func TestApproveNode(t *testing.T) {
	c, m, ctx := managementTest(t)
	fresh := c.seedNode(cpb.NodeState_NODE_STATE_NEW).node
	up := c.seedNode(cpb.NodeState_NODE_STATE_UP).node
	gone := c.seedNode(cpb.NodeState_NODE_STATE_DECOMMISSIONED).node

	if _, err := m.ApproveNode(ctx, &cpb.ApproveNodeRequest{NodeId: fresh.Id}); err != nil {
		t.Fatalf("ApproveNode of a NEW node: %v", err)
	}
	if got := c.record(fresh.Id).State; got != cpb.NodeState_NODE_STATE_STANDBY {
		t.Fatalf("approved node is %v, want STANDBY", got)
	}

	// Approving again, or an UP node, succeeds without a write; the rest
	// is refused without one.
	before := c.storeState()
	for _, id := range []string{fresh.Id, up.Id} {
		if _, err := m.ApproveNode(ctx, &cpb.ApproveNodeRequest{NodeId: id}); err != nil {
			t.Errorf("ApproveNode of an approved node: %v", err)
		}
	}
	_, err := m.ApproveNode(ctx, &cpb.ApproveNodeRequest{NodeId: gone.Id})
	wantStatus(t, "ApproveNode of a decommissioned node", err, codes.FailedPrecondition, gone.Id)
	_, err = m.ApproveNode(ctx, &cpb.ApproveNodeRequest{NodeId: identity.NodeID(mustKey(t).Public().(ed25519.PublicKey))})
	wantStatus(t, "ApproveNode of an unknown node", err, codes.NotFound, "does not exist")
	for _, bad := range []string{"", "node-", "node-ZZZ", fresh.Id + "0", " " + fresh.Id, strings.ToUpper(fresh.Id)} {
		_, err = m.ApproveNode(ctx, &cpb.ApproveNodeRequest{NodeId: bad})
		wantStatus(t, fmt.Sprintf("ApproveNode(%q)", bad), err, codes.InvalidArgument, "node_id")
	}
	c.wantStoreUnchanged(t, before, "ApproveNode of an approved or refused node")
}

func TestUpdateNodeRolesRules(t *testing.T) {
	c, m, ctx := managementTest(t)
	up := c.seedNode(cpb.NodeState_NODE_STATE_UP).node
	standby := c.seedNode(cpb.NodeState_NODE_STATE_STANDBY).node
	noPort := c.seedNode(cpb.NodeState_NODE_STATE_UP).node
	noPort.Status.ConsensusPeerPort = 0
	c.putNode(noPort)
	noAddress := c.seedNode(cpb.NodeState_NODE_STATE_UP).node
	noAddress.Status = nil
	c.putNode(noAddress)
	first := c.status.NodeID

	// Allowed changes, each checked against the record.
	resp, err := m.UpdateNodeRoles(ctx, &cpb.UpdateNodeRolesRequest{NodeId: up.Id, KubernetesWorker: proto.Bool(true)})
	if err != nil {
		t.Fatalf("giving KubernetesWorker: %v", err)
	}
	want := &cpb.Roles{KubernetesWorker: &cpb.KubernetesWorkerRole{}}
	if !proto.Equal(resp.Roles, want) || !proto.Equal(c.record(up.Id).Roles, want) {
		t.Errorf("after giving KubernetesWorker: response %v, record %v; want %v", resp.Roles, c.record(up.Id).Roles, want)
	}
	// The first node holds ConsensusMember; it may gain and lose
	// KubernetesController alone.
	if _, err := m.UpdateNodeRoles(ctx, &cpb.UpdateNodeRolesRequest{NodeId: first, KubernetesController: proto.Bool(true)}); err != nil {
		t.Fatalf("giving KubernetesController to a consensus member: %v", err)
	}
	if _, err := m.UpdateNodeRoles(ctx, &cpb.UpdateNodeRolesRequest{NodeId: first, KubernetesController: proto.Bool(false)}); err != nil {
		t.Fatalf("taking KubernetesController from a consensus member: %v", err)
	}

	before := c.storeState()
	for _, tc := range []struct {
		what     string
		req      *cpb.UpdateNodeRolesRequest
		code     codes.Code
		mentions string
	}{
		{"KubernetesController without ConsensusMember", &cpb.UpdateNodeRolesRequest{NodeId: up.Id, KubernetesController: proto.Bool(true)}, codes.FailedPrecondition, "KubernetesController needs ConsensusMember"},
		{"ConsensusMember taken, KubernetesController kept", &cpb.UpdateNodeRolesRequest{NodeId: up.Id, ConsensusMember: proto.Bool(false), KubernetesController: proto.Bool(true)}, codes.FailedPrecondition, "KubernetesController needs ConsensusMember"},
		{"roles for a STANDBY node", &cpb.UpdateNodeRolesRequest{NodeId: standby.Id, KubernetesWorker: proto.Bool(true)}, codes.FailedPrecondition, "STANDBY"},
		{"ConsensusMember without a peer port", &cpb.UpdateNodeRolesRequest{NodeId: noPort.Id, ConsensusMember: proto.Bool(true)}, codes.FailedPrecondition, "consensus peer port"},
		{"ConsensusMember without an address", &cpb.UpdateNodeRolesRequest{NodeId: noAddress.Id, ConsensusMember: proto.Bool(true)}, codes.FailedPrecondition, "external address"},
		{"ConsensusMember taken from the leader's node", &cpb.UpdateNodeRolesRequest{NodeId: first, ConsensusMember: proto.Bool(false)}, codes.FailedPrecondition, "leading curator"},
		{"unknown node", &cpb.UpdateNodeRolesRequest{NodeId: identity.NodeID(mustKey(t).Public().(ed25519.PublicKey)), KubernetesWorker: proto.Bool(true)}, codes.NotFound, "does not exist"},
		{"malformed node ID", &cpb.UpdateNodeRolesRequest{NodeId: "node-1", KubernetesWorker: proto.Bool(true)}, codes.InvalidArgument, "node_id"},
	} {
		_, err := m.UpdateNodeRoles(ctx, tc.req)
		wantStatus(t, tc.what, err, tc.code, tc.mentions)
	}
	c.wantStoreUnchanged(t, before, "refused role changes")
	if c.member(noPort.Id) != nil || c.member(noAddress.Id) != nil {
		t.Errorf("a refused ConsensusMember added a consensus member")
	}
}

// TestConsensusMemberRole gives a node ConsensusMember, starts its
// consensus member from the join data the curator recorded and sees it
// become a voter, then takes the role away again.
func TestConsensusMemberRole(t *testing.T) {
	c, m, ctx := managementTest(t)
	tn := c.seedNode(cpb.NodeState_NODE_STATE_UP)
	id := tn.node.Id
	peer := netip.AddrPortFrom(netip.MustParseAddr(tn.node.Status.ExternalAddress), uint16(tn.node.Status.ConsensusPeerPort)).String()

	resp, err := m.UpdateNodeRoles(ctx, &cpb.UpdateNodeRolesRequest{NodeId: id, ConsensusMember: proto.Bool(true), KubernetesController: proto.Bool(true)})
	if err != nil {
		t.Fatalf("giving ConsensusMember and KubernetesController: %v", err)
	}
	if resp.Roles.GetConsensusMember() == nil || resp.Roles.GetKubernetesController() == nil {
		t.Fatalf("roles after the change: %v", resp.Roles)
	}
	if resp.Roles.ConsensusMember.JoinData != nil {
		t.Errorf("UpdateNodeRoles returned the join data")
	}
	mem := c.member(id)
	if mem == nil || !mem.Learner || mem.Address != peer {
		t.Fatalf("the node's consensus member is %+v, want a learner at %s", mem, peer)
	}
	jd := c.record(id).GetRoles().GetConsensusMember().GetJoinData()
	if jd == nil {
		t.Fatal("the record holds no join data")
	}
	// The join data reach nobody but the node: not operators.
	c.waitCached(func(nodes map[string]*cpb.Node) bool { return nodes[id].GetRoles().GetConsensusMember() != nil })
	listed, _ := listNodes(t, m, &cpb.ListNodesRequest{NodeIds: []string{id}})
	if len(listed) != 1 || listed[0].Roles.GetConsensusMember() == nil || listed[0].Roles.ConsensusMember.JoinData != nil {
		t.Errorf("ListNodes gave %v, want the role without join data", listed)
	}

	// Asking again changes nothing, and keeps the join data the node may
	// have started with.
	before := c.storeState()
	if _, err := m.UpdateNodeRoles(ctx, &cpb.UpdateNodeRolesRequest{NodeId: id, ConsensusMember: proto.Bool(true)}); err != nil {
		t.Fatalf("giving ConsensusMember again: %v", err)
	}
	c.wantStoreUnchanged(t, before, "giving ConsensusMember again")

	// A second node joins beside the first learner at once (the cluster
	// has one voter, so etcd's strict check lets it in); a third must
	// wait until one of them is a voter (consensus.MaxLearners).
	second := c.seedNode(cpb.NodeState_NODE_STATE_UP).node
	if _, err := m.UpdateNodeRoles(ctx, &cpb.UpdateNodeRolesRequest{NodeId: second.Id, ConsensusMember: proto.Bool(true)}); err != nil {
		t.Fatalf("ConsensusMember for a second node while the first is a learner: %v", err)
	}
	if mem := c.member(second.Id); mem == nil || !mem.Learner {
		t.Fatalf("the second node's member is %+v, want a learner", mem)
	}
	other := c.seedNode(cpb.NodeState_NODE_STATE_UP).node
	_, err = m.UpdateNodeRoles(ctx, &cpb.UpdateNodeRolesRequest{NodeId: other.Id, ConsensusMember: proto.Bool(true)})
	wantStatus(t, "ConsensusMember while two other nodes are learners", err, codes.FailedPrecondition, "2 consensus members are still learners")
	if c.member(other.Id) != nil {
		t.Errorf("the refused node was added")
	}
	// The second learner never starts: taking the role away removes it.
	if _, err := m.UpdateNodeRoles(ctx, &cpb.UpdateNodeRolesRequest{NodeId: second.Id, ConsensusMember: proto.Bool(false)}); err != nil {
		t.Fatalf("taking ConsensusMember from the second node: %v", err)
	}
	if mem := c.member(second.Id); mem != nil {
		t.Errorf("the second node's learner is still there: %+v", mem)
	}

	// The join data are good: a member started from them joins and
	// promotes itself.
	joiner, err := consensus.New(consensus.Config{
		Name:        id,
		DataDir:     t.TempDir(),
		PeerAddress: peer,
		PeerKey:     tn.key,
		Join:        joinDataFromProto(jd),
	})
	if err != nil {
		t.Fatalf("consensus config from the join data: %v", err)
	}
	stopJoiner := supervisortest.Harness(t, joiner.Run)
	if _, err := event.Get(ctx, joiner.Status(), event.Filter(consensus.IsVoter)); err != nil {
		t.Fatalf("waiting for the new member to become a voter: %v", err)
	}

	// Taking ConsensusMember away removes the member and takes
	// KubernetesController along.
	resp, err = m.UpdateNodeRoles(ctx, &cpb.UpdateNodeRolesRequest{NodeId: id, ConsensusMember: proto.Bool(false)})
	if err != nil {
		t.Fatalf("taking ConsensusMember away: %v", err)
	}
	stopJoiner()
	if resp.Roles.GetConsensusMember() != nil || resp.Roles.GetKubernetesController() != nil {
		t.Errorf("roles after taking ConsensusMember away: %v", resp.Roles)
	}
	if r := c.record(id).Roles; r.GetConsensusMember() != nil || r.GetKubernetesController() != nil {
		t.Errorf("record after taking ConsensusMember away: %v", r)
	}
	if mem := c.member(id); mem != nil {
		t.Errorf("the removed node is still a consensus member: %+v", mem)
	}
}

func joinDataFromProto(jd *cpb.ConsensusJoinData) *consensus.JoinData {
	out := &consensus.JoinData{CACertificate: jd.CaCertificate, PeerCertificate: jd.PeerCertificate, CRL: jd.Crl}
	for _, p := range jd.Peers {
		out.Peers = append(out.Peers, consensus.Peer{Name: p.Name, Address: p.Address})
	}
	return out
}

// TestConsensusMemberRoleRetry simulates a curator that died between the
// change to etcd's membership and the record update: the same request,
// sent again, completes the change.
func TestConsensusMemberRoleRetry(t *testing.T) {
	c, m, ctx := managementTest(t)
	tn := c.seedNode(cpb.NodeState_NODE_STATE_UP)
	id := tn.node.Id
	peer := netip.AddrPortFrom(netip.MustParseAddr(tn.node.Status.ExternalAddress), uint16(tn.node.Status.ConsensusPeerPort)).String()
	st := c.consensusStatus()

	// Died after AddLearner: a learner that never started, its join data
	// lost with the curator.
	lost, err := st.AddLearner(ctx, id, peer, tn.key.Public().(ed25519.PublicKey))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.UpdateNodeRoles(ctx, &cpb.UpdateNodeRolesRequest{NodeId: id, ConsensusMember: proto.Bool(true)}); err != nil {
		t.Fatalf("giving ConsensusMember after a half-done attempt: %v", err)
	}
	jd := c.record(id).GetRoles().GetConsensusMember().GetJoinData()
	if jd == nil || mustParseCert(t, jd.PeerCertificate).Equal(mustParseCert(t, lost.PeerCertificate)) {
		t.Errorf("the record holds %v, want fresh join data", jd)
	}
	if mem := c.member(id); mem == nil || !mem.Learner {
		t.Errorf("the node's member is %+v, want a learner", mem)
	}

	// Died after Remove: the member is gone, the record still shows it.
	if err := st.Remove(ctx, id); err != nil {
		t.Fatal(err)
	}
	if _, err := m.UpdateNodeRoles(ctx, &cpb.UpdateNodeRolesRequest{NodeId: id, ConsensusMember: proto.Bool(false)}); err != nil {
		t.Fatalf("taking ConsensusMember away after a half-done attempt: %v", err)
	}
	if r := c.record(id).Roles; r.GetConsensusMember() != nil {
		t.Errorf("record after taking ConsensusMember away: %v", r)
	}
}

func TestDecommissionAndDelete(t *testing.T) {
	c, m, ctx := managementTest(t)
	tn := c.seedNode(cpb.NodeState_NODE_STATE_UP)
	id := tn.node.Id
	if _, err := m.UpdateNodeRoles(ctx, &cpb.UpdateNodeRolesRequest{NodeId: id, ConsensusMember: proto.Bool(true), KubernetesWorker: proto.Bool(true)}); err != nil {
		t.Fatal(err)
	}
	fresh := c.seedNode(cpb.NodeState_NODE_STATE_NEW).node
	standby := c.seedNode(cpb.NodeState_NODE_STATE_STANDBY).node

	// The node calls the curator as a node until it is decommissioned.
	cert, err := c.ca.IssueNode(tn.key.Public().(ed25519.PublicKey), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	asNode := cpb.NewCuratorServiceClient(c.asNode(cert, tn.key))
	c.waitCached(func(nodes map[string]*cpb.Node) bool { return nodes[id].GetRoles().GetConsensusMember() != nil })
	if _, err := asNode.Heartbeat(ctx, &cpb.HeartbeatRequest{}); status.Code(err) == codes.PermissionDenied {
		t.Fatalf("the UP node is refused: %v", err)
	}

	before := c.storeState()
	for _, tc := range []struct {
		what     string
		err      error
		code     codes.Code
		mentions string
	}{
		{"DeleteNode of an UP node", second(m.DeleteNode(ctx, &cpb.DeleteNodeRequest{NodeId: id})), codes.FailedPrecondition, "decommission it first"},
		{"DecommissionNode of a NEW node", second(m.DecommissionNode(ctx, &cpb.DecommissionNodeRequest{NodeId: fresh.Id})), codes.FailedPrecondition, "delete it instead"},
		{"DecommissionNode of a STANDBY node", second(m.DecommissionNode(ctx, &cpb.DecommissionNodeRequest{NodeId: standby.Id})), codes.FailedPrecondition, "STANDBY"},
		{"DecommissionNode of the leader's node", second(m.DecommissionNode(ctx, &cpb.DecommissionNodeRequest{NodeId: c.status.NodeID})), codes.FailedPrecondition, "leading curator"},
		{"DecommissionNode of an unknown node", second(m.DecommissionNode(ctx, &cpb.DecommissionNodeRequest{NodeId: identity.NodeID(mustKey(t).Public().(ed25519.PublicKey))})), codes.NotFound, "does not exist"},
		{"DeleteNode of an unknown node", second(m.DeleteNode(ctx, &cpb.DeleteNodeRequest{NodeId: identity.NodeID(mustKey(t).Public().(ed25519.PublicKey))})), codes.NotFound, "does not exist"},
		{"DecommissionNode of a malformed ID", second(m.DecommissionNode(ctx, &cpb.DecommissionNodeRequest{NodeId: "x"})), codes.InvalidArgument, "node_id"},
		{"DeleteNode of a malformed ID", second(m.DeleteNode(ctx, &cpb.DeleteNodeRequest{NodeId: "x"})), codes.InvalidArgument, "node_id"},
	} {
		wantStatus(t, tc.what, tc.err, tc.code, tc.mentions)
	}
	c.wantStoreUnchanged(t, before, "refused calls")

	if _, err := m.DecommissionNode(ctx, &cpb.DecommissionNodeRequest{NodeId: id}); err != nil {
		t.Fatalf("DecommissionNode: %v", err)
	}
	n := c.record(id)
	if n.State != cpb.NodeState_NODE_STATE_DECOMMISSIONED || n.Roles != nil {
		t.Errorf("decommissioned record: state %v, roles %v", n.State, n.Roles)
	}
	if mem := c.member(id); mem != nil {
		t.Errorf("the decommissioned node is still a consensus member: %+v", mem)
	}
	c.waitCached(func(nodes map[string]*cpb.Node) bool {
		return nodes[id].GetState() == cpb.NodeState_NODE_STATE_DECOMMISSIONED
	})
	_, err = asNode.Heartbeat(ctx, &cpb.HeartbeatRequest{})
	wantStatus(t, "Heartbeat of a decommissioned node", err, codes.PermissionDenied, "decommissioned")
	before = c.storeState()
	if _, err := m.DecommissionNode(ctx, &cpb.DecommissionNodeRequest{NodeId: id}); err != nil {
		t.Errorf("DecommissionNode again: %v", err)
	}
	c.wantStoreUnchanged(t, before, "decommissioning again")
	_, err = m.ApproveNode(ctx, &cpb.ApproveNodeRequest{NodeId: id})
	wantStatus(t, "ApproveNode of a decommissioned node", err, codes.FailedPrecondition, "DECOMMISSIONED")

	for _, del := range []string{id, fresh.Id, standby.Id} {
		if _, err := m.DeleteNode(ctx, &cpb.DeleteNodeRequest{NodeId: del}); err != nil {
			t.Errorf("DeleteNode(%s): %v", del, err)
		}
		if c.record(del) != nil {
			t.Errorf("DeleteNode(%s) left the record", del)
		}
	}
	_, err = m.DeleteNode(ctx, &cpb.DeleteNodeRequest{NodeId: id})
	wantStatus(t, "DeleteNode again", err, codes.NotFound, "does not exist")
}

// second returns the error of a call's results.
func second[T any](_ T, err error) error { return err }

func TestUpdateNodeLabels(t *testing.T) {
	c, m, ctx := managementTest(t)
	id := c.seedNode(cpb.NodeState_NODE_STATE_NEW).node.Id

	resp, err := m.UpdateNodeLabels(ctx, &cpb.UpdateNodeLabelsRequest{NodeId: id, Set: map[string]string{"rack": "r1", "polis.dev/zone": "a", "empty": ""}})
	if err != nil {
		t.Fatalf("setting labels: %v", err)
	}
	want := map[string]string{"rack": "r1", "polis.dev/zone": "a", "empty": ""}
	if !maps.Equal(resp.Labels, want) || !maps.Equal(c.record(id).Labels, want) {
		t.Errorf("labels: response %v, record %v; want %v", resp.Labels, c.record(id).Labels, want)
	}
	resp, err = m.UpdateNodeLabels(ctx, &cpb.UpdateNodeLabelsRequest{NodeId: id, Set: map[string]string{"rack": "r2"}, Remove: []string{"empty", "never-there"}})
	if err != nil {
		t.Fatalf("replacing and removing labels: %v", err)
	}
	want = map[string]string{"rack": "r2", "polis.dev/zone": "a"}
	if !maps.Equal(resp.Labels, want) || !maps.Equal(c.record(id).Labels, want) {
		t.Errorf("labels: response %v, record %v; want %v", resp.Labels, c.record(id).Labels, want)
	}

	before := c.storeState()
	full := map[string]string{}
	for i := range maxLabels - len(want) + 1 {
		full[fmt.Sprintf("l%d", i)] = "x"
	}
	_, err = m.UpdateNodeLabels(ctx, &cpb.UpdateNodeLabelsRequest{NodeId: id, Set: full})
	wantStatus(t, "one label too many", err, codes.ResourceExhausted, "65 labels")
	_, err = m.UpdateNodeLabels(ctx, &cpb.UpdateNodeLabelsRequest{NodeId: id, Set: map[string]string{"rack": "r3"}, Remove: []string{"rack"}})
	wantStatus(t, "a key both set and removed", err, codes.InvalidArgument, `"rack" is both set and removed`)
	_, err = m.UpdateNodeLabels(ctx, &cpb.UpdateNodeLabelsRequest{NodeId: id, Set: map[string]string{"ok": "x", "-bad": "x"}})
	wantStatus(t, "a malformed key among good ones", err, codes.InvalidArgument, `"-bad"`)
	_, err = m.UpdateNodeLabels(ctx, &cpb.UpdateNodeLabelsRequest{NodeId: id, Set: map[string]string{"ok": strings.Repeat("v", 64)}})
	wantStatus(t, "an oversized value", err, codes.InvalidArgument, `label "ok": value`)
	// A huge value or key is named, not echoed back whole (issue 26).
	huge := strings.Repeat("v", 100<<10)
	for what, req := range map[string]*cpb.UpdateNodeLabelsRequest{
		"a 100 KB value":         {NodeId: id, Set: map[string]string{"ok": huge}},
		"a 100 KB key":           {NodeId: id, Set: map[string]string{huge: "x"}},
		"a 100 KB key to remove": {NodeId: id, Remove: []string{huge}},
		"a 100 KB node ID":       {NodeId: huge},
	} {
		_, err = m.UpdateNodeLabels(ctx, req)
		wantStatus(t, what, err, codes.InvalidArgument, "102400 bytes")
		if len(err.Error()) > 1000 {
			t.Errorf("%s: a %d-byte error", what, len(err.Error()))
		}
	}
	_, err = m.UpdateNodeLabels(ctx, &cpb.UpdateNodeLabelsRequest{NodeId: id, Remove: []string{"a/b/c"}})
	wantStatus(t, "a malformed key to remove", err, codes.InvalidArgument, `"a/b/c"`)
	_, err = m.UpdateNodeLabels(ctx, &cpb.UpdateNodeLabelsRequest{NodeId: identity.NodeID(mustKey(t).Public().(ed25519.PublicKey)), Set: map[string]string{"a": "b"}})
	wantStatus(t, "an unknown node", err, codes.NotFound, "does not exist")
	c.wantStoreUnchanged(t, before, "refused label changes")
}

func TestLabelSyntax(t *testing.T) {
	long := func(n int) string { return strings.Repeat("a", n) }
	for _, k := range []string{"a", "A", "a.b-c_d", "0", long(63), "polis.dev/role", "a/b", "a-b.c0/X_y", long(253) + "/n", strings.Repeat("a.", 126) + "a/n"} {
		if err := validateLabelKey(k); err != nil {
			t.Errorf("key %q: %v, want valid", k, err)
		}
	}
	for _, k := range []string{"", "-a", "a-", ".a", "a b", long(64), "/a", "a/", "a/b/c", "A/b", "a_b/c", "-a/b", "a./b", "a..b/c", long(254) + "/n", "a/-b", "ä", "a\n"} {
		if err := validateLabelKey(k); err == nil {
			t.Errorf("key %q: valid, want invalid", k)
		}
	}
	for _, v := range []string{"", "a", "a.b-c_d", long(63)} {
		if err := validateLabelValue(v); err != nil {
			t.Errorf("value %q: %v, want valid", v, err)
		}
	}
	for _, v := range []string{"-", "a-", long(64), "a/b", "a b"} {
		if err := validateLabelValue(v); err == nil {
			t.Errorf("value %q: valid, want invalid", v)
		}
	}
	// Node IDs are used as consensus member names as they are.
	id := identity.NodeID(mustKey(t).Public().(ed25519.PublicKey))
	if _, err := consensusMemberName(id); err != nil {
		t.Errorf("node ID %s: %v", id, err)
	}
}

func TestListNodesAndDirectory(t *testing.T) {
	c, m, ctx := managementTest(t)
	first := c.status.NodeID

	// More nodes than fit in one batch.
	var ids []string
	ops := []clientv3.Op{}
	flush := func() {
		if _, err := c.etcd.Txn(ctx).Then(ops...).Commit(); err != nil {
			t.Fatal(err)
		}
		ops = ops[:0]
	}
	for i := range listNodesBatch + 20 {
		pub := mustKey(t).Public().(ed25519.PublicKey)
		n := &cpb.Node{Id: identity.NodeID(pub), PublicKey: pub, State: cpb.NodeState_NODE_STATE_NEW}
		if i%2 == 0 {
			n.Labels = map[string]string{"even": "yes"}
		}
		op, err := putNodeOp(n)
		if err != nil {
			t.Fatal(err)
		}
		ops = append(ops, op)
		ids = append(ids, n.Id)
		if len(ops) == 100 {
			flush()
		}
	}
	flush()
	// An UP consensus member that serves a curator, a STANDBY node that
	// claims to, and an UP node without ConsensusMember that claims to:
	// only the first is in the directory. A node's own report never makes
	// it a curator.
	curator := c.seedNode(cpb.NodeState_NODE_STATE_UP).node
	curator.Status.RunningCurator = &cpb.RunningCurator{Port: 7835}
	curator.Roles = &cpb.Roles{ConsensusMember: &cpb.ConsensusMemberRole{}}
	c.putNode(curator)
	standby := c.seedNode(cpb.NodeState_NODE_STATE_STANDBY).node
	standby.Status.RunningCurator = &cpb.RunningCurator{Port: 7835}
	c.putNode(standby)
	selfReported := c.seedNode(cpb.NodeState_NODE_STATE_UP).node
	selfReported.Status.RunningCurator = &cpb.RunningCurator{Port: 7835}
	c.putNode(selfReported)
	ids = append(ids, first, curator.Id, standby.Id, selfReported.Id)
	slices.Sort(ids)
	c.waitCached(func(nodes map[string]*cpb.Node) bool { return len(nodes) == len(ids) })

	// The curator's node has been heard of; the other UP node not yet,
	// by a curator that has just started.
	c.curator.heartbeats.heard(curator.Id, time.Now())

	all, batches := listNodes(t, m, &cpb.ListNodesRequest{})
	if !slices.Equal(nodeIDs(all), ids) {
		t.Fatalf("ListNodes listed %d nodes, want %d, by ID", len(all), len(ids))
	}
	if batches != 2 {
		t.Errorf("ListNodes sent %d batches of %d nodes, want 2", batches, len(ids))
	}
	for _, n := range all {
		switch {
		case n.Id == curator.Id:
			if n.Health != cpb.NodeHealth_NODE_HEALTH_HEALTHY || n.TimeSinceHeartbeat == nil {
				t.Errorf("node that heartbeat: health %v, since %v", n.Health, n.TimeSinceHeartbeat)
			}
		case n.Id == first || n.Id == selfReported.Id:
			if n.Health != cpb.NodeHealth_NODE_HEALTH_UNKNOWN || n.TimeSinceHeartbeat != nil {
				t.Errorf("node not heard of yet: health %v, since %v", n.Health, n.TimeSinceHeartbeat)
			}
			if n.Id == first && (n.Roles.GetConsensusMember() == nil || n.Roles.GetKubernetesController() != nil) {
				t.Errorf("the first node's roles: %v", n.Roles)
			}
		default:
			if n.Health != cpb.NodeHealth_NODE_HEALTH_UNSPECIFIED || n.TimeSinceHeartbeat != nil {
				t.Errorf("node %s (%v): health %v, since %v", n.Id, n.State, n.Health, n.TimeSinceHeartbeat)
			}
		}
	}

	// Conditions, ANDed.
	got, _ := listNodes(t, m, &cpb.ListNodesRequest{States: []cpb.NodeState{cpb.NodeState_NODE_STATE_UP}})
	if want := slices.Sorted(slices.Values([]string{first, curator.Id, selfReported.Id})); !slices.Equal(nodeIDs(got), want) {
		t.Errorf("UP nodes: %v, want %v", nodeIDs(got), want)
	}
	got, _ = listNodes(t, m, &cpb.ListNodesRequest{Labels: map[string]string{"even": "yes"}})
	if len(got) != (listNodesBatch+20+1)/2 {
		t.Errorf("labelled nodes: %d", len(got))
	}
	got, _ = listNodes(t, m, &cpb.ListNodesRequest{NodeIds: []string{ids[0], ids[1], "node-unknown"}, Labels: map[string]string{"even": "no"}})
	if len(got) != 0 {
		t.Errorf("no node is labelled even=no, got %v", nodeIDs(got))
	}
	got, _ = listNodes(t, m, &cpb.ListNodesRequest{NodeIds: []string{standby.Id, "node-unknown"}, States: []cpb.NodeState{cpb.NodeState_NODE_STATE_STANDBY}})
	if !slices.Equal(nodeIDs(got), []string{standby.Id}) {
		t.Errorf("one STANDBY node by ID: %v", nodeIDs(got))
	}

	wantDir := &cpb.ClusterDirectory{
		Curators:      []*cpb.CuratorEndpoint{{NodeId: curator.Id, Address: curator.Status.ExternalAddress, Port: 7835}},
		CaCertificate: c.ca.Certificate().Raw,
	}
	info, err := m.GetClusterInfo(ctx, &cpb.GetClusterInfoRequest{})
	if err != nil {
		t.Fatalf("GetClusterInfo: %v", err)
	}
	if !proto.Equal(info.ClusterDirectory, wantDir) {
		t.Errorf("GetClusterInfo = %v, want %v", info.ClusterDirectory, wantDir)
	}
	ticket, err := m.GetRegisterTicket(ctx, &cpb.GetRegisterTicketRequest{})
	if err != nil {
		t.Fatalf("GetRegisterTicket: %v", err)
	}
	stored, err := c.etcd.Get(ctx, ticketKey)
	if err != nil {
		t.Fatal(err)
	}
	if len(ticket.RegisterTicket) != 32 || string(ticket.RegisterTicket) != string(stored.Kvs[0].Value) {
		t.Errorf("GetRegisterTicket gave %x, the store holds %x", ticket.RegisterTicket, stored.Kvs[0].Value)
	}
	if !proto.Equal(ticket.ClusterDirectory, wantDir) {
		t.Errorf("GetRegisterTicket directory = %v, want %v", ticket.ClusterDirectory, wantDir)
	}
}
