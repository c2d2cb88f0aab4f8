package curator

import (
	"context"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	cpb "github.com/polis-os/polis/api/curator/v1"
	"github.com/polis-os/polis/event"
)

func TestCheckPodNetwork(t *testing.T) {
	for _, tc := range []struct {
		p       *cpb.PodNetwork
		mention string // "" if valid
	}{
		{nil, ""},
		{&cpb.PodNetwork{}, ""},
		{&cpb.PodNetwork{ClusterRange: "10.200.0.0/16", NodePrefixLength: 26}, ""},
		{&cpb.PodNetwork{ClusterRange: "10.200.0.0"}, "want an IPv4 prefix"},
		{&cpb.PodNetwork{ClusterRange: "10.200.0.1/16"}, "did you mean 10.200.0.0/16"},
		{&cpb.PodNetwork{ClusterRange: "fd00::/48"}, "only IPv4"},
		{&cpb.PodNetwork{ClusterRange: "127.16.0.0/16"}, "overlaps 127.0.0.0/8 (loopback)"},
		// Ranges whose first address is unicast but which hold addresses
		// no Pod may have; node prefix lengths chosen so that the overlap
		// is the only thing wrong.
		{&cpb.PodNetwork{ClusterRange: "126.0.0.0/7", NodePrefixLength: 23}, "cluster range 126.0.0.0/7 overlaps 127.0.0.0/8 (loopback)"},
		{&cpb.PodNetwork{ClusterRange: "168.0.0.0/6", NodePrefixLength: 22}, "cluster range 168.0.0.0/6 overlaps 169.254.0.0/16 (link-local)"},
		{&cpb.PodNetwork{ClusterRange: "192.0.0.0/2", NodePrefixLength: 18}, "cluster range 192.0.0.0/2 overlaps 224.0.0.0/4 (multicast)"},
		{&cpb.PodNetwork{ClusterRange: "0.1.0.0/16"}, "cluster range 0.1.0.0/16 overlaps 0.0.0.0/8"},
		{&cpb.PodNetwork{ClusterRange: "240.0.0.0/12"}, "cluster range 240.0.0.0/12 overlaps 240.0.0.0/4"},
		{&cpb.PodNetwork{ClusterRange: "255.255.255.0/24", NodePrefixLength: 28}, "overlaps 240.0.0.0/4 (reserved, and the broadcast address)"},
		{&cpb.PodNetwork{ClusterRange: "10.244.0.0/14", NodePrefixLength: 24}, ""},
		{&cpb.PodNetwork{ClusterRange: "10.96.0.0/16"}, "overlaps the Kubernetes service range"},
		{&cpb.PodNetwork{ClusterRange: "10.200.0.0/24", NodePrefixLength: 24}, "node prefix length 24"},
		{&cpb.PodNetwork{ClusterRange: "10.200.0.0/16", NodePrefixLength: 29}, "at most 28"},
		{&cpb.PodNetwork{ClusterRange: "172.0.0.0/10", NodePrefixLength: 28}, "more than 65536 node ranges"},
	} {
		err := CheckPodNetwork(tc.p)
		switch {
		case tc.mention == "" && err != nil:
			t.Errorf("%v: %v", tc.p, err)
		case tc.mention != "" && (err == nil || !strings.Contains(err.Error(), tc.mention)):
			t.Errorf("%v: %v, want an error mentioning %q", tc.p, err, tc.mention)
		}
	}
}

// podRange is node id's pod range in the store.
func (c *testCluster) podRange(id string) string {
	c.t.Helper()
	return c.record(id).GetNetwork().GetPodRange()
}

// podRangeOwners are the pod range keys in the store, by range.
func (c *testCluster) podRangeOwners() map[string]string {
	c.t.Helper()
	resp, err := c.etcd.Get(ctxT(c.t), podRangePrefix, clientv3.WithPrefix())
	if err != nil {
		c.t.Fatal(err)
	}
	out := map[string]string{}
	for _, kv := range resp.Kvs {
		out[strings.TrimPrefix(string(kv.Key), podRangePrefix)] = string(kv.Value)
	}
	return out
}

// Each node given KubernetesWorker or KubernetesController gets its own
// range, the lowest free one, in the write that gives the role; it keeps
// it when the role is taken away and given again, and it goes back to the
// pool when the node is deleted.
func TestPodRanges(t *testing.T) {
	c, m, ctx := managementTest(t)
	worker := func(id string, on bool) {
		t.Helper()
		if _, err := m.UpdateNodeRoles(ctx, &cpb.UpdateNodeRolesRequest{NodeId: id, KubernetesWorker: proto.Bool(on)}); err != nil {
			t.Fatalf("KubernetesWorker %v for %s: %v", on, id, err)
		}
	}
	a := c.seedNode(cpb.NodeState_NODE_STATE_UP).node.Id
	b := c.seedNode(cpb.NodeState_NODE_STATE_UP).node.Id
	if r := c.podRange(a); r != "" {
		t.Fatalf("a node without a Kubernetes role has pod range %s", r)
	}
	// The first node's controller role gives it the first range.
	first := c.status.NodeID
	if _, err := m.UpdateNodeRoles(ctx, &cpb.UpdateNodeRolesRequest{NodeId: first, KubernetesController: proto.Bool(true)}); err != nil {
		t.Fatal(err)
	}
	if r := c.podRange(first); r != "10.244.0.0/24" {
		t.Fatalf("the first node, given KubernetesController, has pod range %q, want 10.244.0.0/24", r)
	}
	worker(a, true)
	worker(b, true)
	if ra, rb := c.podRange(a), c.podRange(b); ra != "10.244.1.0/24" || rb != "10.244.2.0/24" {
		t.Fatalf("pod ranges %q and %q, want 10.244.1.0/24 and 10.244.2.0/24", ra, rb)
	}
	worker(a, false)
	worker(a, true)
	if r := c.podRange(a); r != "10.244.1.0/24" {
		t.Errorf("after the role was taken and given again: %q, want 10.244.1.0/24", r)
	}
	info, err := m.GetClusterInfo(ctx, &cpb.GetClusterInfoRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if want := (&cpb.PodNetwork{ClusterRange: "10.244.0.0/14", NodePrefixLength: 24}); !proto.Equal(info.PodNetwork, want) {
		t.Errorf("GetClusterInfo: pod network %v, want %v", info.PodNetwork, want)
	}

	if _, err := m.DecommissionNode(ctx, &cpb.DecommissionNodeRequest{NodeId: a}); err != nil {
		t.Fatal(err)
	}
	if r := c.podRange(a); r != "10.244.1.0/24" {
		t.Errorf("a decommissioned node's range %q: kept until it is deleted", r)
	}
	if _, err := m.DeleteNode(ctx, &cpb.DeleteNodeRequest{NodeId: a}); err != nil {
		t.Fatal(err)
	}
	if owners := c.podRangeOwners(); len(owners) != 2 || owners["10.244.0.0/24"] != first || owners["10.244.2.0/24"] != b {
		t.Errorf("after deleting %s, the ranges given out are %v; want only the first node's and b's", a, owners)
	}
	d := c.seedNode(cpb.NodeState_NODE_STATE_UP).node.Id
	worker(d, true)
	if r := c.podRange(d); r != "10.244.1.0/24" {
		t.Errorf("a new worker after a deletion got %q, want the freed 10.244.1.0/24", r)
	}
}

// useSmallPodNetwork makes the cluster's pod network 10.250.0.0/23 in /24s:
// two node ranges in all.
func (c *testCluster) useSmallPodNetwork(t *testing.T) {
	t.Helper()
	small, err := proto.Marshal(&cpb.PodNetwork{ClusterRange: "10.250.0.0/23", NodePrefixLength: 24})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.etcd.Put(ctxT(t), podNetworkKey, string(small)); err != nil {
		t.Fatal(err)
	}
}

// exhaustedPodRanges starts a test cluster whose pod network,
// 10.250.0.0/23 of /24s, holds two node ranges, and gives both to two
// workers: the pool is empty.
func exhaustedPodRanges(t *testing.T) (*testCluster, cpb.ManagementServiceClient) {
	t.Helper()
	c := newTestCluster(t)
	c.useSmallPodNetwork(t)
	m := c.management()
	for range 2 {
		id := c.seedNode(cpb.NodeState_NODE_STATE_UP).node.Id
		if _, err := m.UpdateNodeRoles(ctxT(t), &cpb.UpdateNodeRolesRequest{NodeId: id, KubernetesWorker: proto.Bool(true)}); err != nil {
			t.Fatal(err)
		}
	}
	return c, m
}

// A pool with no range left refuses the role, naming the cluster range
// and both ways to free a range, and writes nothing.
func TestPodRangesExhausted(t *testing.T) {
	c, m := exhaustedPodRanges(t)
	third := c.seedNode(cpb.NodeState_NODE_STATE_UP).node.Id
	before := c.storeState()
	_, err := m.UpdateNodeRoles(ctxT(t), &cpb.UpdateNodeRolesRequest{NodeId: third, KubernetesWorker: proto.Bool(true)})
	wantStatus(t, "a third worker in a /23 of /24s", err, codes.ResourceExhausted, "10.250.0.0/23")
	// Both ways a range is kept from the pool: a node that no longer
	// runs, and an UP node that lost both Kubernetes roles; both free it
	// only when deleted.
	for _, says := range []string{"nodes that no longer run", "hold neither KubernetesWorker nor KubernetesController", "decommission and delete"} {
		wantStatus(t, "a third worker in a /23 of /24s", err, codes.ResourceExhausted, says)
	}
	c.wantStoreUnchanged(t, before, "a refused grant")
}

// A request that changes ConsensusMember and gives KubernetesWorker while
// no range is left is refused before etcd's membership changes, which no
// transaction with the record spans: the member stays, with its peer
// certificate, and so does the record. (Checked only after the change,
// the member was removed and the request then refused.)
func TestPodRangesExhaustedLeavesMembership(t *testing.T) {
	c, m := exhaustedPodRanges(t)
	ctx := ctxT(t)
	member := c.seedNode(cpb.NodeState_NODE_STATE_UP).node.Id
	if _, err := m.UpdateNodeRoles(ctx, &cpb.UpdateNodeRolesRequest{NodeId: member, ConsensusMember: proto.Bool(true)}); err != nil {
		t.Fatal(err)
	}
	if c.member(member) == nil {
		t.Fatal("the node given ConsensusMember has no consensus member")
	}
	before := c.storeState()
	_, err := m.UpdateNodeRoles(ctx, &cpb.UpdateNodeRolesRequest{NodeId: member, ConsensusMember: proto.Bool(false), KubernetesWorker: proto.Bool(true)})
	wantStatus(t, "ConsensusMember taken and KubernetesWorker given with no range left", err, codes.ResourceExhausted, "10.250.0.0/23")
	if c.member(member) == nil {
		t.Error("the refused request removed the node's consensus member")
	}
	c.wantStoreUnchanged(t, before, "a refused change of ConsensusMember and KubernetesWorker")

	// Giving both is refused before the learner is added.
	other := c.seedNode(cpb.NodeState_NODE_STATE_UP).node.Id
	before = c.storeState()
	_, err = m.UpdateNodeRoles(ctx, &cpb.UpdateNodeRolesRequest{NodeId: other, ConsensusMember: proto.Bool(true), KubernetesWorker: proto.Bool(true)})
	wantStatus(t, "ConsensusMember and KubernetesWorker given with no range left", err, codes.ResourceExhausted, "10.250.0.0/23")
	if mem := c.member(other); mem != nil {
		t.Errorf("the refused request left a consensus member: %+v", mem)
	}
	c.wantStoreUnchanged(t, before, "a refused grant of ConsensusMember and KubernetesWorker")
}

// A node given KubernetesController gets a range of its own as a worker
// does, in the write that gives the role, whether the request also gives
// ConsensusMember (which changes etcd's membership first) or the node is
// a member already; a node that holds neither Kubernetes role has none.
// The range stays when the role is taken away, also with ConsensusMember,
// and comes back with the role unchanged.
func TestPodRangesForControllers(t *testing.T) {
	c, m, ctx := managementTest(t)
	first := c.status.NodeID
	both := c.seedNode(cpb.NodeState_NODE_STATE_UP).node.Id
	neither := c.seedNode(cpb.NodeState_NODE_STATE_UP).node.Id
	roles := func(req *cpb.UpdateNodeRolesRequest) {
		t.Helper()
		if _, err := m.UpdateNodeRoles(ctx, req); err != nil {
			t.Fatalf("%v: %v", req, err)
		}
	}

	// A consensus member given KubernetesController alone.
	roles(&cpb.UpdateNodeRolesRequest{NodeId: first, KubernetesController: proto.Bool(true)})
	if r := c.podRange(first); r != "10.244.0.0/24" {
		t.Errorf("the first node, given KubernetesController: pod range %q, want 10.244.0.0/24", r)
	}
	// ConsensusMember and KubernetesController in one request.
	roles(&cpb.UpdateNodeRolesRequest{NodeId: both, ConsensusMember: proto.Bool(true), KubernetesController: proto.Bool(true)})
	if r := c.podRange(both); r != "10.244.1.0/24" {
		t.Errorf("a node given ConsensusMember and KubernetesController: pod range %q, want 10.244.1.0/24", r)
	}
	if c.member(both) == nil {
		t.Errorf("%s was given ConsensusMember but has no consensus member", both)
	}
	// A node given ConsensusMember alone is no Kubernetes node.
	roles(&cpb.UpdateNodeRolesRequest{NodeId: neither, ConsensusMember: proto.Bool(true)})
	if r := c.podRange(neither); r != "" {
		t.Errorf("a node that holds neither Kubernetes role has pod range %q", r)
	}
	want := map[string]string{"10.244.0.0/24": first, "10.244.1.0/24": both}
	if owners := c.podRangeOwners(); !maps.Equal(owners, want) {
		t.Errorf("ranges given out %v, want %v", owners, want)
	}

	// Taken away: KubernetesController alone, and with ConsensusMember
	// (which takes it along). Both keep their ranges.
	roles(&cpb.UpdateNodeRolesRequest{NodeId: first, KubernetesController: proto.Bool(false)})
	roles(&cpb.UpdateNodeRolesRequest{NodeId: both, ConsensusMember: proto.Bool(false)})
	if r := c.record(both).GetRoles(); r.GetKubernetesController() != nil || r.GetConsensusMember() != nil {
		t.Fatalf("%s still holds %v", both, r)
	}
	if ra, rb := c.podRange(first), c.podRange(both); ra != "10.244.0.0/24" || rb != "10.244.1.0/24" {
		t.Errorf("after the roles were taken away: pod ranges %q and %q, want 10.244.0.0/24 and 10.244.1.0/24 kept", ra, rb)
	}
	if owners := c.podRangeOwners(); !maps.Equal(owners, want) {
		t.Errorf("after the roles were taken away: ranges given out %v, want %v", owners, want)
	}
	roles(&cpb.UpdateNodeRolesRequest{NodeId: first, KubernetesController: proto.Bool(true)})
	if r := c.podRange(first); r != "10.244.0.0/24" {
		t.Errorf("given KubernetesController again: pod range %q, want its 10.244.0.0/24", r)
	}
}

// A pool with no range left does not refuse KubernetesController, alone
// or with ConsensusMember: the control plane must not wait for a pod
// range; the controller gets none (its apiserver reaches no Pod until a
// later term's sweep gives it one).
func TestPodRangesExhaustedGrantsController(t *testing.T) {
	c, m := exhaustedPodRanges(t)
	ctx := ctxT(t)
	first := c.status.NodeID
	resp, err := m.UpdateNodeRoles(ctx, &cpb.UpdateNodeRolesRequest{NodeId: first, KubernetesController: proto.Bool(true)})
	if err != nil || resp.GetRoles().GetKubernetesController() == nil {
		t.Fatalf("KubernetesController for a consensus member with no range left: %v, %v; want it granted", resp, err)
	}
	if r := c.podRange(first); r != "" {
		t.Errorf("the controller got pod range %q from an empty pool", r)
	}

	other := c.seedNode(cpb.NodeState_NODE_STATE_UP).node.Id
	resp, err = m.UpdateNodeRoles(ctx, &cpb.UpdateNodeRolesRequest{NodeId: other, ConsensusMember: proto.Bool(true), KubernetesController: proto.Bool(true)})
	if err != nil || resp.GetRoles().GetKubernetesController() == nil || resp.GetRoles().GetConsensusMember() == nil {
		t.Fatalf("ConsensusMember and KubernetesController with no range left: %v, %v; want both granted", resp, err)
	}
	if r := c.podRange(other); r != "" {
		t.Errorf("the controller got pod range %q from an empty pool", r)
	}
}

// A grant that gives a pod range without changing ConsensusMember waits
// for l.membership, which a ConsensusMember change holds from its check
// for a free range (checkPodRangeLeft) to its record's write, with etcd's
// membership changed in between: the grant cannot take the last range
// there, and is refused once the change has it. The test stands in for
// the ConsensusMember change, holding the lock and making its check and
// write itself, with one range left; the grants are a worker's, a
// controller's, and one that asks for no role but finds a worker
// recorded without a range. (Without the lock, each grant took the last
// range at once, and the change's write then failed.)
func TestPodRangeGrantWaitsForMembershipChange(t *testing.T) {
	for _, tc := range []struct {
		name string
		// grant is the request that races, for a node that setup made.
		grant func(c *testCluster) *cpb.UpdateNodeRolesRequest
	}{
		{"worker", func(c *testCluster) *cpb.UpdateNodeRolesRequest {
			id := c.seedNode(cpb.NodeState_NODE_STATE_UP).node.Id
			return &cpb.UpdateNodeRolesRequest{NodeId: id, KubernetesWorker: proto.Bool(true)}
		}},
		{"controller", func(c *testCluster) *cpb.UpdateNodeRolesRequest {
			return &cpb.UpdateNodeRolesRequest{NodeId: c.status.NodeID, KubernetesController: proto.Bool(true)}
		}},
		{"worker recorded without a range", func(c *testCluster) *cpb.UpdateNodeRolesRequest {
			n := c.seedNode(cpb.NodeState_NODE_STATE_UP).node
			n.Roles = &cpb.Roles{KubernetesWorker: &cpb.KubernetesWorkerRole{}}
			c.putNode(n)
			c.waitCachedNode(n.Id, func(cached *cpb.Node) bool { return cached.GetRoles().GetKubernetesWorker() != nil })
			return &cpb.UpdateNodeRolesRequest{NodeId: n.Id, KubernetesController: proto.Bool(false)}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newTestCluster(t)
			c.useSmallPodNetwork(t)
			m := c.management()
			taken := c.seedNode(cpb.NodeState_NODE_STATE_UP).node.Id
			if _, err := m.UpdateNodeRoles(ctxT(t), &cpb.UpdateNodeRolesRequest{NodeId: taken, KubernetesWorker: proto.Bool(true)}); err != nil {
				t.Fatal(err)
			}
			changing := c.seedNode(cpb.NodeState_NODE_STATE_UP).node.Id
			l, err := event.Get(ctxT(t), &c.curator.leader, event.Filter(func(l *leaderState) bool { return l != nil }))
			if err != nil {
				t.Fatal(err)
			}

			// The ConsensusMember change's check, under the lock (held
			// before the setup of the grant, so that the sweep of a new
			// term could not give its node a range first either).
			l.membership.Lock()
			locked := true
			defer func() {
				if locked {
					l.membership.Unlock()
				}
			}()
			req := tc.grant(c)
			if err := checkPodRangeLeft(ctxT(t), c.etcd, c.record(changing), &cpb.Roles{KubernetesWorker: &cpb.KubernetesWorkerRole{}}); err != nil {
				t.Fatalf("one range is left, but: %v", err)
			}
			done := make(chan error, 1)
			go func() {
				_, err := m.UpdateNodeRoles(ctxT(t), req)
				done <- err
			}()
			// Long enough for an unlocked grant to finish: it is one
			// transaction.
			select {
			case err := <-done:
				t.Fatalf("the grant (%v) finished while a ConsensusMember change held the lock: %v; range of %s %q", req, err, req.NodeId, c.podRange(req.NodeId))
			case <-time.After(time.Second):
			}
			// The ConsensusMember change's write gets the range checked
			// for.
			if _, err := updateNodeTxn(ctxT(t), l.leadership, c.etcd, changing, func(n *cpb.Node) (*cpb.Node, []clientv3.Cmp, []clientv3.Op, error) {
				n.Roles.KubernetesWorker = &cpb.KubernetesWorkerRole{}
				cmps, ops, err := givePodRange(ctxT(t), c.etcd, n)
				return n, cmps, ops, err
			}); err != nil {
				t.Fatalf("the ConsensusMember change's write, after its check found a range: %v", err)
			}
			l.membership.Unlock()
			locked = false
			err = <-done
			if req.GetKubernetesController() {
				// A controller is granted its role without a range.
				if err != nil {
					t.Errorf("the controller's grant after the ConsensusMember change took the last range: %v, want it granted without a range", err)
				}
			} else {
				wantStatus(t, "the grant after the ConsensusMember change took the last range", err, codes.ResourceExhausted, "node "+req.NodeId+": no pod range left")
			}
			if r := c.podRange(req.NodeId); r != "" {
				t.Errorf("the grant's node has range %s, which the ConsensusMember change took", r)
			}
			if r := c.podRange(changing); r != "10.250.1.0/24" {
				t.Errorf("the ConsensusMember change's node has range %q, want 10.250.1.0/24", r)
			}
		})
	}
}

// However many grants race, each range goes to one node: the range's key
// is created in the transaction that records it, so a grant that chose a
// range another took meanwhile fails and chooses again.
func TestPodRangesNeverGivenTwice(t *testing.T) {
	c := newTestCluster(t)
	l, err := event.Get(ctxT(t), &c.curator.leader, event.Filter(func(l *leaderState) bool { return l != nil }))
	if err != nil {
		t.Fatal(err)
	}
	const n = 12
	ids := make([]string, n)
	for i := range ids {
		seeded := c.seedNode(cpb.NodeState_NODE_STATE_UP).node
		seeded.Roles = &cpb.Roles{KubernetesWorker: &cpb.KubernetesWorkerRole{}}
		c.putNode(seeded)
		ids[i] = seeded.Id
	}
	// Two clients, as two curators would be: each grant reads the free
	// ranges on its own and races the others.
	clients := []clientv3.KV{c.etcd, curatorClient(t, c.consensusStatus())}
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i, id := range ids {
		kv := clients[i%2]
		wg.Go(func() {
			_, err := updateNodeTxn(ctxT(t), l.leadership, kv, id, func(node *cpb.Node) (*cpb.Node, []clientv3.Cmp, []clientv3.Op, error) {
				cmps, ops, err := givePodRange(context.Background(), kv, node)
				return node, cmps, ops, err
			})
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	seen := map[string]string{}
	for _, id := range ids {
		r := c.podRange(id)
		if r == "" {
			t.Fatalf("node %s got no range", id)
		}
		if other, ok := seen[r]; ok {
			t.Fatalf("range %s given to %s and %s", r, other, id)
		}
		seen[r] = id
	}
	if owners := c.podRangeOwners(); len(owners) != n {
		t.Errorf("%d range keys for %d nodes: %v", len(owners), n, owners)
	}
	for r, id := range seen {
		if owner := c.podRangeOwners()[r]; owner != id {
			t.Errorf("range %s: key names %q, record %s", r, owner, id)
		}
	}
}

func (c *testCluster) watchPeers(conn *grpc.ClientConn) *testStream[cpb.WatchNetworkPeersResponse] {
	c.t.Helper()
	return openWatch(c, "WatchNetworkPeers", cpb.NewCuratorServiceClient(conn).WatchNetworkPeers, &cpb.WatchNetworkPeersRequest{})
}

func peerIDs(m *cpb.WatchNetworkPeersResponse) []string {
	var ids []string
	for _, p := range m.Peers {
		ids = append(ids, p.NodeId)
	}
	return ids
}

// A node sets its own WireGuard key, and only a key; every other worker
// node sees it in its peers, which follow nodes as they get and lose the
// role, are decommissioned and deleted.
func TestNetworkPeers(t *testing.T) {
	c, m, ctx := managementTest(t)
	seeded := make([]*testNode, 3)
	conns := make([]*grpc.ClientConn, 3)
	for i := range seeded {
		seeded[i] = c.seedNode(cpb.NodeState_NODE_STATE_UP)
		conns[i] = c.asNode(nodeCertFor(t, c, seeded[i].key), seeded[i].key)
	}
	a, b, d := seeded[0].node, seeded[1].node, seeded[2].node
	for _, n := range []*cpb.Node{a, b} {
		if _, err := m.UpdateNodeRoles(ctx, &cpb.UpdateNodeRolesRequest{NodeId: n.Id, KubernetesWorker: proto.Bool(true)}); err != nil {
			t.Fatal(err)
		}
	}

	curA := cpb.NewCuratorServiceClient(conns[0])
	_, err := curA.SetWireGuardKey(ctx, &cpb.SetWireGuardKeyRequest{WireguardPublicKey: []byte("short")})
	wantStatus(t, "a 5-byte key", err, codes.InvalidArgument, "32-byte")
	_, err = curA.SetWireGuardKey(ctx, &cpb.SetWireGuardKeyRequest{WireguardPublicKey: make([]byte, 32)})
	wantStatus(t, "a zero key", err, codes.InvalidArgument, "all zeros")

	fromB := c.watchPeers(conns[1])
	first := fromB.until("b's first list", func(*cpb.WatchNetworkPeersResponse) bool { return true })
	want := &cpb.WatchNetworkPeersResponse{PodRange: "10.244.1.0/24", ClusterPodRange: "10.244.0.0/14", Peers: []*cpb.NetworkPeer{{NodeId: a.Id, Address: a.Status.ExternalAddress, PodRange: "10.244.0.0/24"}}}
	if !proto.Equal(first, want) {
		t.Fatalf("b's first list %v, want %v", first, want)
	}

	keyA := []byte(strings.Repeat("a", 32))
	if _, err := curA.SetWireGuardKey(ctx, &cpb.SetWireGuardKeyRequest{WireguardPublicKey: keyA}); err != nil {
		t.Fatalf("SetWireGuardKey: %v", err)
	}
	if got := c.record(a.Id).GetNetwork(); string(got.GetWireguardPublicKey()) != string(keyA) || got.GetPodRange() != "10.244.0.0/24" {
		t.Errorf("a's record after SetWireGuardKey: %v", got)
	}
	fromB.until("a's key", func(m *cpb.WatchNetworkPeersResponse) bool {
		return len(m.Peers) == 1 && string(m.Peers[0].WireguardPublicKey) == string(keyA)
	})
	// A node with no role sets its key too (it may get the role later)
	// and follows the workers, without being one.
	if _, err := cpb.NewCuratorServiceClient(conns[2]).SetWireGuardKey(ctx, &cpb.SetWireGuardKeyRequest{WireguardPublicKey: []byte(strings.Repeat("d", 32))}); err != nil {
		t.Fatal(err)
	}
	fromD := c.watchPeers(conns[2])
	if got := fromD.until("d's list", func(*cpb.WatchNetworkPeersResponse) bool { return true }); got.PodRange != "" || len(got.Peers) != 2 {
		t.Errorf("d's list %v: want no range of its own and two peers", got)
	}
	if _, err := m.UpdateNodeRoles(ctx, &cpb.UpdateNodeRolesRequest{NodeId: d.Id, KubernetesWorker: proto.Bool(true)}); err != nil {
		t.Fatal(err)
	}
	fromB.until("d as a peer", func(m *cpb.WatchNetworkPeersResponse) bool { return len(m.Peers) == 2 })
	fromD.until("d's own range", func(m *cpb.WatchNetworkPeersResponse) bool { return m.PodRange == "10.244.2.0/24" })

	// The first node's status changes touch nobody's peers: no message.
	// Then a is decommissioned: it goes from every list.
	if _, err := m.DecommissionNode(ctx, &cpb.DecommissionNodeRequest{NodeId: a.Id}); err != nil {
		t.Fatal(err)
	}
	got := fromB.until("a gone", func(m *cpb.WatchNetworkPeersResponse) bool { return len(m.Peers) == 1 })
	if ids := peerIDs(got); ids[0] != d.Id {
		t.Errorf("b's peers after a was decommissioned: %v, want d", ids)
	}
	fromD.until("a gone from d's list", func(m *cpb.WatchNetworkPeersResponse) bool { return len(m.Peers) == 1 && m.Peers[0].NodeId == b.Id })
	// A decommissioned node's stream is cut off; it cannot set a key.
	_, err = curA.SetWireGuardKey(ctx, &cpb.SetWireGuardKeyRequest{WireguardPublicKey: keyA})
	wantStatus(t, "SetWireGuardKey by a decommissioned node", err, codes.PermissionDenied, "")
	if _, err := m.UpdateNodeRoles(ctx, &cpb.UpdateNodeRolesRequest{NodeId: d.Id, KubernetesWorker: proto.Bool(false)}); err != nil {
		t.Fatal(err)
	}
	fromB.until("d without the role gone", func(m *cpb.WatchNetworkPeersResponse) bool { return len(m.Peers) == 0 })
}

// A node that holds KubernetesController alone is on the pod network:
// it follows its own range and the workers, and the workers have it as
// their peer, so that its apiserver reaches their Pods. A node that holds
// neither role is in nobody's list. Losing the role takes the controller
// out of the lists (its range stays), and giving it back puts it in.
func TestNetworkPeersWithController(t *testing.T) {
	c, m, ctx := managementTest(t)
	seeded := make([]*testNode, 3)
	conns := make([]*grpc.ClientConn, 3)
	for i := range seeded {
		seeded[i] = c.seedNode(cpb.NodeState_NODE_STATE_UP)
		conns[i] = c.asNode(nodeCertFor(t, c, seeded[i].key), seeded[i].key)
	}
	ctl, worker, neither := seeded[0].node, seeded[1].node, seeded[2].node
	if _, err := m.UpdateNodeRoles(ctx, &cpb.UpdateNodeRolesRequest{NodeId: ctl.Id, ConsensusMember: proto.Bool(true), KubernetesController: proto.Bool(true)}); err != nil {
		t.Fatal(err)
	}
	if _, err := m.UpdateNodeRoles(ctx, &cpb.UpdateNodeRolesRequest{NodeId: worker.Id, KubernetesWorker: proto.Bool(true)}); err != nil {
		t.Fatal(err)
	}
	keyCtl := []byte(strings.Repeat("c", 32))
	if _, err := cpb.NewCuratorServiceClient(conns[0]).SetWireGuardKey(ctx, &cpb.SetWireGuardKeyRequest{WireguardPublicKey: keyCtl}); err != nil {
		t.Fatal(err)
	}

	ctlPeer := &cpb.NetworkPeer{NodeId: ctl.Id, Address: ctl.Status.ExternalAddress, PodRange: "10.244.0.0/24", WireguardPublicKey: keyCtl}
	workerPeer := &cpb.NetworkPeer{NodeId: worker.Id, Address: worker.Status.ExternalAddress, PodRange: "10.244.1.0/24"}
	fromCtl := c.watchPeers(conns[0])
	want := &cpb.WatchNetworkPeersResponse{PodRange: "10.244.0.0/24", ClusterPodRange: "10.244.0.0/14", Peers: []*cpb.NetworkPeer{workerPeer}}
	got := fromCtl.until("the controller's list", func(m *cpb.WatchNetworkPeersResponse) bool { return proto.Equal(m, want) || len(m.Peers) > 1 })
	if !proto.Equal(got, want) {
		t.Errorf("the controller's list %v, want %v", got, want)
	}
	fromWorker := c.watchPeers(conns[1])
	want = &cpb.WatchNetworkPeersResponse{PodRange: "10.244.1.0/24", ClusterPodRange: "10.244.0.0/14", Peers: []*cpb.NetworkPeer{ctlPeer}}
	got = fromWorker.until("the worker's list", func(m *cpb.WatchNetworkPeersResponse) bool {
		return len(m.Peers) > 0 && len(m.Peers[0].WireguardPublicKey) > 0 || len(m.Peers) > 1
	})
	if !proto.Equal(got, want) {
		t.Errorf("the worker's list %v, want %v", got, want)
	}
	// The node with neither role follows both, with no range of its own
	// (it may be given a role later), and is in neither's list above.
	fromNeither := c.watchPeers(conns[2])
	want = &cpb.WatchNetworkPeersResponse{ClusterPodRange: "10.244.0.0/14", Peers: []*cpb.NetworkPeer{ctlPeer, workerPeer}}
	slices.SortFunc(want.Peers, func(a, b *cpb.NetworkPeer) int { return strings.Compare(a.NodeId, b.NodeId) })
	got = fromNeither.until("the list of a node with neither role", func(m *cpb.WatchNetworkPeersResponse) bool { return proto.Equal(m, want) || len(m.Peers) > 2 })
	if !proto.Equal(got, want) {
		t.Errorf("the list of %s, with neither role: %v, want %v", neither.Id, got, want)
	}
	if r := c.podRange(neither.Id); r != "" {
		t.Errorf("%s, with neither role, has pod range %s", neither.Id, r)
	}

	// Without the role the controller is no peer, and keeps its range.
	if _, err := m.UpdateNodeRoles(ctx, &cpb.UpdateNodeRolesRequest{NodeId: ctl.Id, KubernetesController: proto.Bool(false)}); err != nil {
		t.Fatal(err)
	}
	fromWorker.until("the controller gone from the worker's list", func(m *cpb.WatchNetworkPeersResponse) bool { return len(m.Peers) == 0 })
	if r := c.podRange(ctl.Id); r != "10.244.0.0/24" {
		t.Errorf("the former controller's range %q, want 10.244.0.0/24 kept", r)
	}
	if _, err := m.UpdateNodeRoles(ctx, &cpb.UpdateNodeRolesRequest{NodeId: ctl.Id, KubernetesController: proto.Bool(true)}); err != nil {
		t.Fatal(err)
	}
	got = fromWorker.until("the controller back in the worker's list", func(m *cpb.WatchNetworkPeersResponse) bool { return len(m.Peers) > 0 })
	if len(got.Peers) != 1 || !proto.Equal(got.Peers[0], ctlPeer) {
		t.Errorf("the worker's peers after the role came back: %v, want %v", got.Peers, ctlPeer)
	}
}

// The peers of a node are computed from the records alone.
func TestPeerOf(t *testing.T) {
	worker := &cpb.Node{
		Id:      "node-1",
		State:   cpb.NodeState_NODE_STATE_UP,
		Roles:   &cpb.Roles{KubernetesWorker: &cpb.KubernetesWorkerRole{}},
		Status:  &cpb.NodeStatus{ExternalAddress: "10.77.0.3"},
		Network: &cpb.NodeNetwork{PodRange: "10.244.1.0/24"},
	}
	if p := peerOf(worker); p == nil || p.Address != "10.77.0.3" || p.PodRange != "10.244.1.0/24" {
		t.Errorf("peerOf(a worker) = %v", p)
	}
	controller := proto.Clone(worker).(*cpb.Node)
	controller.Roles = &cpb.Roles{ConsensusMember: &cpb.ConsensusMemberRole{}, KubernetesController: &cpb.KubernetesControllerRole{}}
	if p := peerOf(controller); p == nil || p.Address != "10.77.0.3" || p.PodRange != "10.244.1.0/24" {
		t.Errorf("peerOf(a node holding KubernetesController alone) = %v", p)
	}
	for what, change := range map[string]func(n *cpb.Node){
		"decommissioned": func(n *cpb.Node) { n.State = cpb.NodeState_NODE_STATE_DECOMMISSIONED; n.Roles = nil },
		"no role":        func(n *cpb.Node) { n.Roles = &cpb.Roles{} },
		"consensus only": func(n *cpb.Node) { n.Roles = &cpb.Roles{ConsensusMember: &cpb.ConsensusMemberRole{}} },
		"no range":       func(n *cpb.Node) { n.Network = nil },
		"no address":     func(n *cpb.Node) { n.Status = nil },
	} {
		n := proto.Clone(worker).(*cpb.Node)
		change(n)
		if p := peerOf(n); p != nil {
			t.Errorf("peerOf(a node with %s) = %v, want none", what, p)
		}
	}
}

// A worker recorded without a range (before pod ranges existed) gets one
// from the next leader term, without anyone asking; so does a controller
// recorded without one (before controllers got ranges). A node that holds
// neither Kubernetes role gets none.
func TestPodRangesGivenByNewLeader(t *testing.T) {
	c := newTestCluster(t)
	old := c.seedNode(cpb.NodeState_NODE_STATE_UP).node
	old.Roles = &cpb.Roles{KubernetesWorker: &cpb.KubernetesWorkerRole{}}
	c.putNode(old)
	ctl := c.seedNode(cpb.NodeState_NODE_STATE_UP).node
	ctl.Roles = &cpb.Roles{ConsensusMember: &cpb.ConsensusMemberRole{}, KubernetesController: &cpb.KubernetesControllerRole{}}
	c.putNode(ctl)
	member := c.seedNode(cpb.NodeState_NODE_STATE_UP).node
	member.Roles = &cpb.Roles{ConsensusMember: &cpb.ConsensusMemberRole{}}
	c.putNode(member)
	term, err := event.Get(ctxT(t), &c.curator.leader)
	if err != nil {
		t.Fatal(err)
	}
	// A new term, as after losing the leadership and winning it back.
	c.curator.leader.Set(&leaderState{leadership: term.leadership, ca: term.ca, statusWrites: map[string]time.Time{}})
	for _, id := range []string{old.Id, ctl.Id} {
		c.waitCachedNode(id, func(n *cpb.Node) bool { return n.GetNetwork().GetPodRange() != "" })
	}
	// The sweep walks the nodes in no order: the two lowest ranges, one
	// each.
	owners := c.podRangeOwners()
	want := map[string]string{c.podRange(old.Id): old.Id, c.podRange(ctl.Id): ctl.Id}
	if !maps.Equal(owners, want) || len(owners) != 2 || owners["10.244.0.0/24"] == "" || owners["10.244.1.0/24"] == "" {
		t.Errorf("ranges given out %v, want 10.244.0.0/24 and 10.244.1.0/24 to %s and %s, as their records say (%v)", owners, old.Id, ctl.Id, want)
	}
	if r := c.podRange(member.Id); r != "" {
		t.Errorf("a consensus member with no Kubernetes role was given pod range %s", r)
	}
}

// Deleting a node frees its range only if the range's key names it: a
// key that names another node (a record and key out of step, as after an
// operator's edit) is that node's, and stays.
func TestDeleteNodeLeavesAnotherNodesRange(t *testing.T) {
	c, m, ctx := managementTest(t)
	owner := c.seedNode(cpb.NodeState_NODE_STATE_UP).node
	owner.Roles = &cpb.Roles{KubernetesWorker: &cpb.KubernetesWorkerRole{}}
	owner.Network = &cpb.NodeNetwork{PodRange: "10.244.5.0/24"}
	c.putNode(owner)
	gone := c.seedNode(cpb.NodeState_NODE_STATE_DECOMMISSIONED).node
	gone.Network = &cpb.NodeNetwork{PodRange: "10.244.5.0/24"}
	c.putNode(gone)
	if _, err := c.etcd.Put(ctx, podRangeKey(netip.MustParsePrefix("10.244.5.0/24")), owner.Id); err != nil {
		t.Fatal(err)
	}
	if _, err := m.DeleteNode(ctx, &cpb.DeleteNodeRequest{NodeId: gone.Id}); err != nil {
		t.Fatalf("DeleteNode: %v", err)
	}
	if c.record(gone.Id) != nil {
		t.Error("DeleteNode left the record")
	}
	if owners := c.podRangeOwners(); owners["10.244.5.0/24"] != owner.Id {
		t.Errorf("after deleting %s, whose record named 10.244.5.0/24, the ranges given out are %v; want the range still %s's", gone.Id, owners, owner.Id)
	}
}
