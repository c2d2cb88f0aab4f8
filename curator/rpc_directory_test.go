package curator

import (
	"context"
	"crypto/ed25519"
	"slices"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	cpb "github.com/polis-os/polis/api/curator/v1"
	"github.com/polis-os/polis/identity"
)

// directoryStream reads a WatchClusterDirectory stream.
type directoryStream struct {
	*testStream[cpb.WatchClusterDirectoryResponse]
}

func (c *testCluster) watchDirectory(conn *grpc.ClientConn) *directoryStream {
	c.t.Helper()
	return &directoryStream{openWatch(c, "WatchClusterDirectory", cpb.NewCuratorServiceClient(conn).WatchClusterDirectory, &cpb.WatchClusterDirectoryRequest{})}
}

// testStream reads a server stream of the curator's as a test does.
type testStream[M any] struct {
	t testing.TB
	s grpc.ServerStreamingClient[M]
}

// openWatch opens a server stream (the watch called what) with req and a
// context that ends with the test.
func openWatch[Req, M any](c *testCluster, what string, open func(context.Context, *Req, ...grpc.CallOption) (grpc.ServerStreamingClient[M], error), req *Req) *testStream[M] {
	c.t.Helper()
	ctx, cancel := context.WithCancel(ctxT(c.t))
	c.t.Cleanup(cancel)
	s, err := open(ctx, req)
	if err != nil {
		c.t.Fatalf("%s: %v", what, err)
	}
	return &testStream[M]{t: c.t, s: s}
}

// until reads messages until one satisfies pred, and returns it.
func (p *testStream[M]) until(what string, pred func(*M) bool) *M {
	p.t.Helper()
	for {
		m, err := p.s.Recv()
		if err != nil {
			p.t.Fatalf("waiting for %s: %v", what, err)
		}
		if pred(m) {
			return m
		}
	}
}

// next returns the IDs of the next directory's curators.
func (d *directoryStream) next() []string {
	d.t.Helper()
	m, err := d.s.Recv()
	if err != nil {
		d.t.Fatalf("WatchClusterDirectory: %v", err)
	}
	var ids []string
	for _, ep := range m.GetDirectory().GetCurators() {
		ids = append(ids, ep.NodeId)
	}
	return ids
}

// curatorNode is an UP consensus member reporting a curator at port.
func curatorNode(n *cpb.Node, port uint32) *cpb.Node {
	n = proto.Clone(n).(*cpb.Node)
	n.Roles = &cpb.Roles{ConsensusMember: &cpb.ConsensusMemberRole{}}
	n.Status.RunningCurator = &cpb.RunningCurator{Port: port}
	return n
}

// The directory stream sends the curators as they are, then a directory
// only when a curator or its endpoint changed: a change of an ordinary
// node, or of a curator's record beside its endpoint, sends nothing (the
// next message is the next curator change, not a copy of the directory).
func TestWatchClusterDirectory(t *testing.T) {
	c := newTestCluster(t)
	key, cert := c.enrolNode(&cpb.NodeStatus{ExternalAddress: "127.0.0.60"})
	d := c.watchDirectory(c.asNode(cert, key))
	initial := c.directoryNow()
	if got := d.next(); !slices.Equal(got, initial) {
		t.Fatalf("initial directory %v, want %v", got, initial)
	}

	ordinary := c.seedNode(cpb.NodeState_NODE_STATE_UP).node
	ordinary.Roles = &cpb.Roles{KubernetesWorker: &cpb.KubernetesWorkerRole{}}
	c.putNode(ordinary)
	cur := curatorNode(c.seedNode(cpb.NodeState_NODE_STATE_UP).node, 7000)
	c.putNode(cur)
	want := slices.Sorted(slices.Values(append(slices.Clone(initial), cur.Id)))
	if got := d.next(); !slices.Equal(got, want) {
		t.Fatalf("after an ordinary node's change and a new curator: %v, want %v", got, want)
	}

	// A curator's labels are not its endpoint; its port is.
	cur.Labels = map[string]string{"a": "b"}
	c.putNode(cur)
	cur = proto.Clone(cur).(*cpb.Node)
	cur.Status.RunningCurator.Port = 7001
	c.putNode(cur)
	m, err := d.s.Recv()
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(m.Directory.Curators, func(ep *cpb.CuratorEndpoint) bool { return ep.NodeId == cur.Id })
	if i < 0 || m.Directory.Curators[i].Port != 7001 {
		t.Fatalf("after the curator's labels and then its port changed: %v, want port 7001", m)
	}

	// A curator that loses its role leaves the directory.
	cur = proto.Clone(cur).(*cpb.Node)
	cur.Roles = &cpb.Roles{}
	c.putNode(cur)
	if got := d.next(); !slices.Equal(got, initial) {
		t.Fatalf("after the curator lost its role: %v, want %v", got, initial)
	}

	// The caller decommissioned: its stream ends.
	c.forceNodeState(identity.NodeID(key.Public().(ed25519.PublicKey)), cpb.NodeState_NODE_STATE_DECOMMISSIONED)
	_, err = d.s.Recv()
	wantCode(t, "WatchClusterDirectory of a decommissioned node", err, codes.PermissionDenied)
}

// directoryNow is the directory's curators as GetClusterInfo gives them.
func (c *testCluster) directoryNow() []string {
	c.t.Helper()
	resp, err := c.management().GetClusterInfo(ctxT(c.t), &cpb.GetClusterInfoRequest{})
	if err != nil {
		c.t.Fatal(err)
	}
	var ids []string
	for _, ep := range resp.ClusterDirectory.Curators {
		ids = append(ids, ep.NodeId)
	}
	return ids
}

// Who is a curator: an UP node that holds ConsensusMember (which only the
// curator gives) and reports a running curator at a valid address; its
// own report alone never suffices.
func TestCuratorEndpoint(t *testing.T) {
	member := &cpb.Roles{ConsensusMember: &cpb.ConsensusMemberRole{}}
	running := &cpb.NodeStatus{ExternalAddress: "192.0.2.10", RunningCurator: &cpb.RunningCurator{Port: 7835}}
	for _, tc := range []struct {
		name string
		n    *cpb.Node
		want bool
	}{
		{"a curator", &cpb.Node{Id: "node-a", State: cpb.NodeState_NODE_STATE_UP, Roles: member, Status: running}, true},
		{"not UP", &cpb.Node{Id: "node-a", State: cpb.NodeState_NODE_STATE_NEW, Roles: member, Status: running}, false},
		{"no ConsensusMember", &cpb.Node{Id: "node-a", State: cpb.NodeState_NODE_STATE_UP, Roles: &cpb.Roles{}, Status: running}, false},
		{"no curator running", &cpb.Node{Id: "node-a", State: cpb.NodeState_NODE_STATE_UP, Roles: member, Status: &cpb.NodeStatus{ExternalAddress: "192.0.2.10"}}, false},
		{"port 0", &cpb.Node{Id: "node-a", State: cpb.NodeState_NODE_STATE_UP, Roles: member, Status: &cpb.NodeStatus{ExternalAddress: "192.0.2.10", RunningCurator: &cpb.RunningCurator{}}}, false},
		{"not an address", &cpb.Node{Id: "node-a", State: cpb.NodeState_NODE_STATE_UP, Roles: member, Status: &cpb.NodeStatus{ExternalAddress: "not an address", RunningCurator: &cpb.RunningCurator{Port: 7835}}}, false},
		{"no record", nil, false},
	} {
		ep := curatorEndpoint(tc.n)
		if (ep != nil) != tc.want {
			t.Errorf("%s: %v, want a curator: %t", tc.name, ep, tc.want)
		}
		if ep != nil && (ep.NodeId != "node-a" || ep.Address != "192.0.2.10" || ep.Port != 7835) {
			t.Errorf("%s: endpoint %v", tc.name, ep)
		}
	}
}
