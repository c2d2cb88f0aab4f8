package curator

import (
	"bytes"
	"fmt"
	"slices"
	"strconv"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	cpb "github.com/polis-os/polis/api/curator/v1"
	"github.com/polis-os/polis/consensus"
)

// followerRounds is how many times each read is checked straight after a
// write. One round would rarely catch a follower that answers from a view
// a watch event behind; many do.
const followerRounds = 20

// TestFollowerReads checks that a follower serves every SERVE_ANY read
// that reads node records, correctly, and never with data older than a
// write acknowledged before the call: each round writes straight into
// etcd and, as soon as etcd acknowledged it, asks the follower.
func TestFollowerReads(t *testing.T) {
	c := newTestCluster(t)
	follower := c.at(followerAddress(t, c.startFollower()))
	mgmt := cpb.NewManagementServiceClient(follower.asOwner())
	node := follower.asFirstNode()

	directory := func() []string {
		t.Helper()
		resp, err := mgmt.GetClusterInfo(ctxT(t), &cpb.GetClusterInfoRequest{})
		if err != nil {
			t.Fatalf("GetClusterInfo at the follower: %v", err)
		}
		if !bytes.Equal(resp.ClusterDirectory.CaCertificate, c.ca.Certificate().Raw) {
			t.Fatal("GetClusterInfo at the follower: not the cluster's CA certificate")
		}
		if p := resp.ConsensusSnapshots; p.GetInterval().AsDuration() != consensus.DefaultSnapshotInterval || p.GetKeep() != consensus.DefaultSnapshotKeep {
			t.Fatalf("GetClusterInfo at the follower: snapshot policy %v, want the defaults", p)
		}
		var ids []string
		for _, ep := range resp.ClusterDirectory.Curators {
			ids = append(ids, ep.NodeId)
		}
		return ids
	}

	t.Run("GetClusterInfo", func(t *testing.T) {
		for i := range followerRounds {
			// A curator appears in the directory, and goes again: the
			// second half checks a deletion, which leaves etcd with no
			// newer revision on any node record.
			n := c.seedNode(cpb.NodeState_NODE_STATE_UP).node
			n.Roles = &cpb.Roles{ConsensusMember: &cpb.ConsensusMemberRole{}}
			n.Status.RunningCurator = &cpb.RunningCurator{Port: 7000}
			c.putNode(n)
			if ids := directory(); !slices.Contains(ids, n.Id) {
				t.Fatalf("round %d: the directory %v lacks curator %s, written before the call", i, ids, n.Id)
			}
			if _, err := c.etcd.Delete(ctxT(t), nodeKey(n.Id)); err != nil {
				t.Fatal(err)
			}
			if ids := directory(); slices.Contains(ids, n.Id) {
				t.Fatalf("round %d: the directory %v still lists curator %s, deleted before the call", i, ids, n.Id)
			}
		}
	})

	t.Run("WatchClusterDirectory", func(t *testing.T) {
		for i := range followerRounds {
			n := curatorNode(c.seedNode(cpb.NodeState_NODE_STATE_UP).node, 7000)
			c.putNode(n)
			d := follower.watchDirectory(node)
			if ids := d.next(); !slices.Contains(ids, n.Id) {
				t.Fatalf("round %d: the directory %v lacks curator %s, written before the call", i, ids, n.Id)
			}
			if _, err := c.etcd.Delete(ctxT(t), nodeKey(n.Id)); err != nil {
				t.Fatal(err)
			}
			if ids := d.next(); slices.Contains(ids, n.Id) {
				t.Fatalf("round %d: after the curator's deletion, the directory %v still lists it", i, ids)
			}
		}
	})

	t.Run("Watch one node", func(t *testing.T) {
		n := c.seedNode(cpb.NodeState_NODE_STATE_UP).node
		for i := range followerRounds {
			n = proto.Clone(n).(*cpb.Node)
			n.Labels = map[string]string{"round": strconv.Itoa(i)}
			c.putNode(n)
			w := c.watch(node, &cpb.WatchRequest{Target: &cpb.WatchRequest_NodeId{NodeId: n.Id}})
			got := w.initial()[n.Id]
			if got.GetLabels()["round"] != strconv.Itoa(i) {
				t.Fatalf("round %d: the initial state has %v, older than the write before the call", i, got)
			}
			// The stream then follows the records.
			n = proto.Clone(n).(*cpb.Node)
			n.Labels = map[string]string{"round": strconv.Itoa(i) + "-after"}
			c.putNode(n)
			m := w.next()
			if len(m.Nodes) != 1 || m.Nodes[0].Labels["round"] != strconv.Itoa(i)+"-after" {
				t.Fatalf("round %d: after a change, the stream sent %v", i, m)
			}
		}
	})

	t.Run("Watch all nodes", func(t *testing.T) {
		for i := range followerRounds {
			n := c.seedNode(cpb.NodeState_NODE_STATE_STANDBY).node
			w := c.watch(node, allNodes())
			init := w.initial()
			if init[n.Id] == nil {
				t.Fatalf("round %d: the initial state lacks node %s, written before the call", i, n.Id)
			}
			if _, err := c.etcd.Delete(ctxT(t), nodeKey(n.Id)); err != nil {
				t.Fatal(err)
			}
			if m := w.next(); len(m.NodeTombstones) != 1 || m.NodeTombstones[0].GetNodeId() != n.Id {
				t.Fatalf("round %d: after a deletion, the stream sent %v", i, m)
			}
			w2 := c.watch(node, allNodes())
			if init := w2.initial(); init[n.Id] != nil {
				t.Fatalf("round %d: the initial state holds node %s, deleted before the call", i, n.Id)
			}
		}
	})
}

// A Watch stream ends with UNAVAILABLE when its curator's node cache stops
// following etcd, so that its node watches again (elsewhere) instead of
// waiting on a view that no longer moves. Here etcd stops under both
// curators.
func TestWatchEndsWhenCuratorLosesEtcd(t *testing.T) {
	c := newTestCluster(t)
	follower := c.at(followerAddress(t, c.startFollower()))
	var streams []*watchStream
	for _, at := range []*testCluster{c, follower} {
		w := at.watch(at.asFirstNode(), allNodes())
		w.initial()
		streams = append(streams, w)
	}
	c.stopConsensus()
	for i, w := range streams {
		_, err := w.s.Recv()
		wantCode(t, fmt.Sprintf("Watch %d after etcd stopped", i), err, codes.Unavailable)
	}
}
