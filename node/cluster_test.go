package node_test

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"

	"go.uber.org/goleak"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	cpb "github.com/polis-os/polis/api/curator/v1"
	"github.com/polis-os/polis/event"
	"github.com/polis-os/polis/internal/testutil"
	"github.com/polis-os/polis/logring"
	"github.com/polis-os/polis/node/nodetest"
	"github.com/polis-os/polis/roleserve"
)

// The in-process cluster tests are in package node_test: they run node
// agents through nodetest, which imports node.

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, testutil.EtcdLeakOptions()...)
}

// Each test cluster's nodes live on 127.27.<n>.1, .2, .3: fixed ports on
// addresses no other test uses.
var subnets = testutil.Subnets{Octet: 27}

// Three node agents form a cluster: the first bootstraps, the others
// register and are approved, both become consensus members; then one is
// stopped and restarted from its storage alone and rejoins.
func TestThreeNodeCluster(t *testing.T) {
	c := nodetest.FormCluster(t, 3, &subnets)
	mgmt, ids := c.Management, c.IDs

	// Make the two others consensus members, one at a time (etcd admits
	// one learner at a time).
	yes := true
	for i, tn := range c.Nodes[1:] {
		if _, err := mgmt.UpdateNodeRoles(nodetest.Context(t), &cpb.UpdateNodeRolesRequest{NodeId: ids[i+1], ConsensusMember: &yes}); err != nil {
			t.Fatalf("UpdateNodeRoles(%s): %v", ids[i+1], err)
		}
		tn.Voter(t)
	}
	healthy := func() error {
		nodes := nodetest.ListNodes(t, mgmt)
		for _, id := range ids {
			n := nodes[id]
			if n.GetState() != cpb.NodeState_NODE_STATE_UP || n.GetHealth() != cpb.NodeHealth_NODE_HEALTH_HEALTHY || n.GetRoles().GetConsensusMember() == nil {
				return fmt.Errorf("node %s: %v %v", id, n.GetState(), n.GetHealth())
			}
		}
		return nil
	}
	nodetest.Eventually(t, "three healthy consensus members", healthy)

	// Stop the second node and start it again from its storage alone.
	second := c.Node(1)
	second.Stop()
	if err := os.Remove(second.ParametersFile()); err != nil {
		t.Fatal(err)
	}
	second.Start(t)
	if got := second.Credentials(t).NodeID; got != ids[1] {
		t.Fatalf("the restarted node is %s, want %s", got, ids[1])
	}
	second.Voter(t)
	nodetest.Eventually(t, "the restarted node healthy again", healthy)

	// Take ConsensusMember from the third node and give it back: the
	// control plane is withdrawn, then the node joins etcd afresh (its old
	// member was removed, so its old data must not be reused).
	no := false
	if _, err := mgmt.UpdateNodeRoles(nodetest.Context(t), &cpb.UpdateNodeRolesRequest{NodeId: ids[2], ConsensusMember: &no}); err != nil {
		t.Fatalf("removing ConsensusMember: %v", err)
	}
	if _, err := event.Get(nodetest.Context(t), &c.Node(2).Agent.Values().LocalControlPlane, event.Filter(func(l *roleserve.LocalControlPlane) bool { return l == nil })); err != nil {
		t.Fatalf("the control plane was not withdrawn: %v", err)
	}
	if _, err := mgmt.UpdateNodeRoles(nodetest.Context(t), &cpb.UpdateNodeRolesRequest{NodeId: ids[2], ConsensusMember: &yes}); err != nil {
		t.Fatalf("giving ConsensusMember back: %v", err)
	}
	c.Node(2).Voter(t)
	nodetest.Eventually(t, "all healthy after the role came back", healthy)

	// The same for the first node, whose curator leads: it hands the
	// leadership over, and the new leader takes the role away (the client
	// follows without the caller seeing any of it).
	if _, err := mgmt.UpdateNodeRoles(nodetest.Context(t), &cpb.UpdateNodeRolesRequest{NodeId: ids[0], ConsensusMember: &no}); err != nil {
		t.Fatalf("removing ConsensusMember from the leader's node: %v", err)
	}
	if _, err := event.Get(nodetest.Context(t), &c.Node(0).Agent.Values().LocalControlPlane, event.Filter(func(l *roleserve.LocalControlPlane) bool { return l == nil })); err != nil {
		t.Fatalf("the first node's control plane was not withdrawn: %v", err)
	}
	if _, err := mgmt.UpdateNodeRoles(nodetest.Context(t), &cpb.UpdateNodeRolesRequest{NodeId: ids[0], ConsensusMember: &yes}); err != nil {
		t.Fatalf("giving the first node ConsensusMember back: %v", err)
	}
	c.Node(0).Voter(t)
	nodetest.Eventually(t, "all healthy after the first node's role came back", healthy)
}

// A node stopped while it waits for approval comes back as the same node
// (its key was stored before it registered), registers again harmlessly,
// and finishes enrolling once approved.
func TestRegistrationSurvivesRestart(t *testing.T) {
	mgmt := nodetest.FormCluster(t, 1, &subnets).Management
	ticket := nodetest.RegisterTicket(t, mgmt)
	tn := nodetest.StartNode(t, subnets.Addrs(1)[0], nodetest.RegisterParameters(ticket))
	pending := func() (string, error) {
		var ids []string
		for id, n := range nodetest.ListNodes(t, mgmt) {
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
	nodetest.Eventually(t, "the node registered", func() (err error) { id, err = pending(); return err })

	// Stopped before approval; started again from its storage (the
	// parameters were kept on its ESP, so the file is not needed).
	tn.Stop()
	if err := os.Remove(tn.ParametersFile()); err != nil {
		t.Fatal(err)
	}
	tn.Start(t)
	if _, err := mgmt.ApproveNode(nodetest.Context(t), &cpb.ApproveNodeRequest{NodeId: id}); err != nil {
		t.Fatalf("ApproveNode: %v", err)
	}
	if got := tn.Credentials(t).NodeID; got != id {
		t.Fatalf("the restarted node enrolled as %s, want %s", got, id)
	}
	if n := nodetest.ListNodes(t, mgmt); len(n) != 2 {
		t.Fatalf("%d nodes, want 2 (no duplicate registration)", len(n))
	}
}

// A consensus member that is decommissioned stops its control plane: the
// curator cuts it off (PermissionDenied) in the same write that takes its
// roles, and the node must understand that refusal as "no roles any more"
// instead of keeping its last roles and retrying forever (issue 26, item 1).
func TestDecommissionedMemberStopsControlPlane(t *testing.T) {
	c := nodetest.FormCluster(t, 3, &subnets)
	mgmt, ids := c.Management, c.IDs
	yes := true
	if _, err := mgmt.UpdateNodeRoles(nodetest.Context(t), &cpb.UpdateNodeRolesRequest{NodeId: ids[1], ConsensusMember: &yes}); err != nil {
		t.Fatalf("UpdateNodeRoles(%s): %v", ids[1], err)
	}
	victim := c.Node(1)
	victim.Voter(t)

	if _, err := mgmt.DecommissionNode(nodetest.Context(t), &cpb.DecommissionNodeRequest{NodeId: ids[1]}); err != nil {
		t.Fatalf("DecommissionNode: %v", err)
	}
	v := victim.Agent.Values()
	if _, err := event.Get(nodetest.Context(t), &v.LocalRoles, event.Filter(func(r *cpb.Roles) bool { return r != nil && r.ConsensusMember == nil })); err != nil {
		t.Fatalf("the decommissioned node never learnt that its roles are gone: %v", err)
	}
	if _, err := event.Get(nodetest.Context(t), &v.LocalControlPlane, event.Filter(func(l *roleserve.LocalControlPlane) bool { return l == nil })); err != nil {
		t.Fatalf("the decommissioned node's control plane was not stopped: %v", err)
	}
	nodetest.Eventually(t, "the node says why it stopped", func() error {
		for _, e := range victim.Logs.Backlog(logring.Filter{}) {
			if strings.Contains(e.Message, "was decommissioned") {
				return nil
			}
		}
		return errors.New("no log line says the node was decommissioned")
	})
	// The workers that call the curator stop asking instead of being
	// refused forever.
	nodetest.Eventually(t, "heartbeat and statuspush stop asking", func() error {
		stopped := map[string]bool{}
		for _, e := range victim.Logs.Backlog(logring.Filter{}) {
			if strings.Contains(e.Message, "stops asking") {
				stopped[e.Logger[strings.LastIndexByte(e.Logger, '.')+1:]] = true
			}
		}
		if !stopped["heartbeat"] || !stopped["statuspush"] {
			return fmt.Errorf("workers that said they stop asking: %v", stopped)
		}
		return nil
	})
}

// A role change that etcd refuses because a consensus member is down is
// refused at once with that reason (FAILED_PRECONDITION), not answered
// UNAVAILABLE until the caller's deadline, which told the operator to
// check that the cluster runs (issue 26, item 2).
func TestRoleChangeRefusedWhileMemberDown(t *testing.T) {
	c := nodetest.FormCluster(t, 4, &subnets)
	mgmt, ids := c.Management, c.IDs
	makeVoters(t, c, 1, 2)
	yes := true
	c.Node(2).Stop()

	ctx := nodetest.Context(t)
	_, err := mgmt.UpdateNodeRoles(ctx, &cpb.UpdateNodeRolesRequest{NodeId: ids[3], ConsensusMember: &yes})
	if ctx.Err() != nil {
		t.Fatalf("the refusal waited for the caller's deadline: %v", err)
	}
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "consensus") {
		t.Fatalf("giving ConsensusMember while a member is down: %v, want FAILED_PRECONDITION naming the consensus cluster's health", err)
	}
	t.Logf("refused: %v", err)
}

// makeVoters gives the nodes of c at indices ConsensusMember one at a
// time (etcd admits one learner at a time), each a voter before the next.
func makeVoters(t testing.TB, c *nodetest.Cluster, indices ...int) {
	t.Helper()
	yes := true
	for _, i := range indices {
		if _, err := c.Management.UpdateNodeRoles(nodetest.Context(t), &cpb.UpdateNodeRolesRequest{NodeId: c.IDs[i], ConsensusMember: &yes}); err != nil {
			t.Fatalf("UpdateNodeRoles(%s): %v", c.IDs[i], err)
		}
		c.Node(i).Voter(t)
	}
}
