package node_test

import (
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"testing"

	cpb "github.com/polis-os/polis/api/curator/v1"
	"github.com/polis-os/polis/consensus"
	"github.com/polis-os/polis/localstorage"
	"github.com/polis-os/polis/node/nodetest"
)

// etcdDir is where node n keeps its consensus member's data.
func etcdDir(t *testing.T, n *nodetest.Node) string {
	t.Helper()
	root, err := localstorage.New(filepath.Join(n.Dir, "storage"))
	if err != nil {
		t.Fatal(err)
	}
	return root.Data.Etcd.Path
}

// TestRecoverSingleMember: a cluster of three consensus members and a
// worker loses two members' storage for good and stops serving; the
// survivor, started with RecoverConsensus (polis-node
// --recover-single-member), brings back every node and label, the curator
// drops the lost members, the worker reconnects by itself, and new members
// join as usual. While the other members still answer, recovery is
// refused.
func TestRecoverSingleMember(t *testing.T) {
	c := nodetest.FormCluster(t, 4, &subnets)
	mgmt, ids := c.Management, c.IDs
	makeVoters(t, c, 1, 2)
	yes := true
	for i, id := range ids {
		if _, err := mgmt.UpdateNodeLabels(nodetest.Context(t), &cpb.UpdateNodeLabelsRequest{NodeId: id, Set: map[string]string{"index": fmt.Sprint(i)}}); err != nil {
			t.Fatal(err)
		}
	}

	// The survivor stops; the two others still run, so recovery is
	// refused and changes nothing.
	survivor := c.Node(0)
	survivor.Stop()
	if _, err := consensus.PrepareRecovery(nodetest.Context(t), etcdDir(t, survivor)); !errors.Is(err, consensus.ErrQuorumAlive) {
		t.Fatalf("PrepareRecovery while two members run: %v; want ErrQuorumAlive", err)
	}

	// Two members' storage destroyed: the cluster is down.
	for _, lost := range c.Nodes[1:3] {
		lost.Stop()
		if err := os.RemoveAll(lost.Dir); err != nil {
			t.Fatal(err)
		}
	}
	survivor.RecoverConsensus = true
	survivor.Start(t)
	survivor.Voter(t)

	lost := []string{ids[1], ids[2]}
	slices.Sort(lost)
	nodetest.Eventually(t, "the recovered cluster with every node and label, the lost members dropped, the worker healthy", func() error {
		nodes := nodetest.ListNodes(t, mgmt)
		if len(nodes) != 4 {
			return fmt.Errorf("%d nodes: %v", len(nodes), slices.Collect(maps.Keys(nodes)))
		}
		for i, id := range ids {
			n := nodes[id]
			if n.GetLabels()["index"] != fmt.Sprint(i) {
				return fmt.Errorf("node %s has labels %v", id, n.GetLabels())
			}
			if member := n.GetRoles().GetConsensusMember() != nil; member != (i == 0) {
				return fmt.Errorf("node %s: consensus member %v", id, member)
			}
		}
		if h := nodes[ids[3]].GetHealth(); h != cpb.NodeHealth_NODE_HEALTH_HEALTHY {
			return fmt.Errorf("the worker is %v", h)
		}
		info, err := mgmt.GetClusterInfo(nodetest.Context(t), &cpb.GetClusterInfoRequest{})
		if err != nil {
			return err
		}
		rec := info.GetLastRecovery()
		if rec.GetNodeId() != ids[0] || rec.GetFrom() != consensus.RecoveryFromMemberData || !slices.Equal(rec.GetLostNodeIds(), lost) || rec.GetRecoveredAt() == nil {
			return fmt.Errorf("last recovery %v", rec)
		}
		if cs := info.GetClusterDirectory().GetCurators(); len(cs) != 1 || cs[0].NodeId != ids[0] {
			return fmt.Errorf("curators %v", cs)
		}
		return nil
	})

	// New consensus members join as usual.
	ticket := nodetest.RegisterTicket(t, mgmt)
	for _, addr := range subnets.Addrs(2) {
		tn := nodetest.StartNode(t, addr, nodetest.RegisterParameters(ticket))
		var id string
		nodetest.Eventually(t, "the new node registered", func() error {
			for nid, n := range nodetest.ListNodes(t, mgmt) {
				if n.State == cpb.NodeState_NODE_STATE_NEW {
					id = nid
					return nil
				}
			}
			return errors.New("no NEW node")
		})
		if _, err := mgmt.ApproveNode(nodetest.Context(t), &cpb.ApproveNodeRequest{NodeId: id}); err != nil {
			t.Fatal(err)
		}
		tn.Credentials(t)
		if _, err := mgmt.UpdateNodeRoles(nodetest.Context(t), &cpb.UpdateNodeRolesRequest{NodeId: id, ConsensusMember: &yes}); err != nil {
			t.Fatalf("giving the new node %s ConsensusMember: %v", id, err)
		}
		tn.Voter(t)
	}
}

// BenchmarkRecoverSingleMember measures recovery from a survivor's data in
// process mode: from the survivor's agent started with RecoverConsensus
// (what polis-node --recover-single-member does) to its curator serving
// the recovered cluster, with the lost members dropped (GetClusterInfo
// answers with the recovery). Each iteration forms a cluster of three
// consensus members, untimed, and loses two of them.
func BenchmarkRecoverSingleMember(b *testing.B) {
	for b.Loop() {
		b.StopTimer()
		c := nodetest.FormCluster(b, 3, &subnets)
		makeVoters(b, c, 1, 2)
		for _, n := range c.Nodes[1:] {
			n.Stop()
			if err := os.RemoveAll(n.Dir); err != nil {
				b.Fatal(err)
			}
		}
		survivor := c.Node(0)
		survivor.Stop()
		survivor.RecoverConsensus = true
		b.StartTimer()
		survivor.Start(b)
		nodetest.Eventually(b, "the recovered cluster served", func() error {
			info, err := c.Management.GetClusterInfo(nodetest.Context(b), &cpb.GetClusterInfoRequest{})
			if err != nil {
				return err
			}
			if info.GetLastRecovery() == nil {
				return errors.New("no recovery shown yet")
			}
			return nil
		})
		b.StopTimer()
		survivor.Stop()
		b.StartTimer()
	}
}
