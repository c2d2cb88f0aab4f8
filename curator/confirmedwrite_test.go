package curator

import (
	"crypto/ed25519"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	cpb "github.com/polis-os/polis/api/curator/v1"
	"github.com/polis-os/polis/event"
)

// UpdateNodeRoles checks the owner's standing in its write: once the
// owner key has been rotated, a certificate of the old one changes no
// role, learns of no refusal and of no record, whether the call would
// change the record, change nothing, be refused, or add a consensus
// member; and nothing is written.
func TestUpdateNodeRolesStandingInTheWrite(t *testing.T) {
	c := newTestCluster(t)
	m := c.management()
	up := c.seedNode(cpb.NodeState_NODE_STATE_UP).node
	fresh := c.seedNode(cpb.NodeState_NODE_STATE_NEW).node
	// It works while the owner stands, the first call from the cache.
	c.waitCached(func(nodes map[string]*cpb.Node) bool { return nodes[up.Id] != nil })
	if _, err := m.UpdateNodeRoles(ctxT(t), &cpb.UpdateNodeRolesRequest{NodeId: up.Id, KubernetesWorker: proto.Bool(true)}); err != nil {
		t.Fatalf("giving KubernetesWorker: %v", err)
	}
	if c.record(up.Id).GetRoles().GetKubernetesWorker() == nil {
		t.Fatal("the role was not recorded")
	}

	if _, err := c.etcd.Put(ctxT(t), ownerKey, string(mustKey(t).Public().(ed25519.PublicKey))); err != nil {
		t.Fatal(err)
	}
	before := c.storeState()
	for _, tc := range []struct {
		what string
		req  *cpb.UpdateNodeRolesRequest
	}{
		{"a change", &cpb.UpdateNodeRolesRequest{NodeId: up.Id, KubernetesWorker: proto.Bool(false)}},
		{"no change", &cpb.UpdateNodeRolesRequest{NodeId: up.Id, KubernetesWorker: proto.Bool(true)}},
		{"a refused change", &cpb.UpdateNodeRolesRequest{NodeId: fresh.Id, KubernetesWorker: proto.Bool(true)}},
		{"a missing node", &cpb.UpdateNodeRolesRequest{NodeId: "node-000000000000000000000000", KubernetesWorker: proto.Bool(true)}},
		{"a consensus member", &cpb.UpdateNodeRolesRequest{NodeId: up.Id, ConsensusMember: proto.Bool(true)}},
	} {
		_, err := m.UpdateNodeRoles(ctxT(t), tc.req)
		wantStatus(t, "UpdateNodeRoles with a rotated owner key, "+tc.what, err, codes.PermissionDenied, "no longer the owner key")
	}
	c.wantStoreUnchanged(t, before, "refused calls")
	if mem := c.member(up.Id); mem != nil {
		t.Errorf("a consensus member was added: %+v", mem)
	}
}

// A change planned from a node cache that is behind etcd is not lost and
// does not undo what the cache had not seen: the write's compare on the
// record's revision fails, and the change is made again from etcd. A
// refusal the stale record would earn is not given either.
func TestChangeFromAStaleCache(t *testing.T) {
	c := newTestCluster(t)
	leader := c.curator.election.Current().Leading
	for _, tc := range []struct {
		name  string
		state cpb.NodeState // in the cache; etcd's is UP
	}{
		{"a stale record the change accepts", cpb.NodeState_NODE_STATE_UP},
		{"a stale record the change refuses", cpb.NodeState_NODE_STATE_NEW},
	} {
		id := c.seedNode(tc.state).node.Id
		stale, rev, err := getNode(ctxT(t), c.etcd, id)
		if err != nil {
			t.Fatal(err)
		}
		// etcd moves on: the node is UP, and labelled.
		if _, err := updateNode(ctxT(t), leader, c.etcd, id, func(n *cpb.Node) (*cpb.Node, error) {
			n.State = cpb.NodeState_NODE_STATE_UP
			n.Labels = map[string]string{"rack": "a1"}
			return n, nil
		}); err != nil {
			t.Fatal(err)
		}
		// A cache that still holds the record as it was.
		cache := newNodeCache(c.etcd)
		cache.value.Set(&nodeSnapshot{
			complete: true,
			nodes:    map[string]*cpb.Node{id: stale},
			entries:  map[string]event.Entry[*cpb.Node]{nodeKey(id): {Data: stale, Version: uint64(rev)}},
		})
		d := &deferredChecks{s: c.curator, leader: leader}
		d.standing = []clientv3.Cmp{clientv3.Compare(clientv3.Value(ownerKey), "=", string(c.ownerKey.Public().(ed25519.PublicKey)))}
		calls := 0
		next, err := d.updateNode(ctxT(t), cache, id, func(n *cpb.Node) (*cpb.Node, []clientv3.Cmp, []clientv3.Op, error) {
			calls++
			roles, err := planRoles(n, &cpb.UpdateNodeRolesRequest{NodeId: id, KubernetesWorker: proto.Bool(true)})
			if err != nil {
				return nil, nil, nil, err
			}
			n.Roles = roles
			return n, nil, nil, nil
		})
		if err != nil {
			t.Errorf("%s: the change refused or failed: %v", tc.name, err)
			continue
		}
		if calls != 2 {
			t.Errorf("%s: the change was planned %d times, want 2 (the stale cache, then etcd)", tc.name, calls)
		}
		got := c.record(id)
		if got.State != cpb.NodeState_NODE_STATE_UP || got.Labels["rack"] != "a1" || got.GetRoles().GetKubernetesWorker() == nil {
			t.Errorf("%s: the record is %v, want UP, labelled and with the role", tc.name, got)
		}
		if !proto.Equal(next, got) {
			t.Errorf("%s: the change returned %v, the store holds %v", tc.name, next, got)
		}
	}
}
