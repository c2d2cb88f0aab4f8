package roleserve

import (
	"path/filepath"
	"testing"

	"google.golang.org/protobuf/proto"

	cpb "github.com/polis-os/polis/api/curator/v1"
	"github.com/polis-os/polis/localstorage"
	"github.com/polis-os/polis/supervisor"
)

func directoryFile(t *testing.T) localstorage.File {
	return localstorage.File{Path: filepath.Join(t.TempDir(), "directory.pb")}
}

// member is the roles of a node the curator made a consensus member.
var member = &cpb.Roles{ConsensusMember: &cpb.ConsensusMemberRole{}}

func running(addr string, port uint32) *cpb.NodeStatus {
	return &cpb.NodeStatus{ExternalAddress: addr, RunningCurator: &cpb.RunningCurator{Port: port}}
}

// The directory lists the UP nodes that hold ConsensusMember and run a
// curator, by node ID (a curator reported by a node without the role is
// not listed); it is
// saved with the cluster CA before it is published.
func TestClusterDirectory(t *testing.T) {
	creds := testCredentials(t)
	f := newFakeCurator()
	newNode := node("node-c", member, running("192.0.2.12", 7835))
	newNode.State = cpb.NodeState_NODE_STATE_NEW
	f.nodes.Set([]*cpb.Node{
		node("node-d", member, running("192.0.2.13", 7835)),
		node("node-a", member, running("192.0.2.10", 7835)),
		node("node-b", member, &cpb.NodeStatus{ExternalAddress: "192.0.2.11"}), // no curator
		// Reports a curator, but the cluster did not make it one.
		node("node-f", nil, running("192.0.2.15", 7835)),
		newNode,
		node("node-e", member, running("not an address", 7835)),
	})
	v := NewValues()
	file := directoryFile(t)
	var g Graph
	supervisor.TestHarness(t, newWorkerClusterDirectory(&g, v, file).run)

	// Nothing saved: an empty directory at once, before any curator.
	waitFor(t, &v.Directory, "an empty directory", func(d []*cpb.CuratorEndpoint) bool { return len(d) == 0 })

	v.Membership.Set(fakeMembership(t, f, creds))
	a := &cpb.CuratorEndpoint{NodeId: "node-a", Address: "192.0.2.10", Port: 7835}
	d := &cpb.CuratorEndpoint{NodeId: "node-d", Address: "192.0.2.13", Port: 7835}
	waitFor(t, &v.Directory, "the curators", endpointsEq(a, d))
	want := &cpb.ClusterDirectory{Curators: []*cpb.CuratorEndpoint{a, d}, CaCertificate: creds.CACertificate.Raw}
	if got := savedDirectory(t, file); !proto.Equal(got, want) {
		t.Errorf("saved directory %v, want %v", got, want)
	}

	// No curator reporting is not taken for an empty cluster: the
	// directory stays, and moves on with the next real list.
	w := v.Directory.Watch()
	defer w.Close()
	f.nodes.Set(nil)
	f.nodes.Set([]*cpb.Node{node("node-d", member, running("192.0.2.13", 7835))})
	for {
		got, err := w.Get(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if len(got) == 0 {
			t.Fatal("an empty directory was published")
		}
		if sameEndpoints(got, []*cpb.CuratorEndpoint{d}) {
			break
		}
	}
	want = &cpb.ClusterDirectory{Curators: []*cpb.CuratorEndpoint{d}, CaCertificate: creds.CACertificate.Raw}
	if got := savedDirectory(t, file); !proto.Equal(got, want) {
		t.Errorf("saved directory %v, want %v", got, want)
	}
}

// After a restart of the node, the saved directory is published before any
// curator is reached; after a broken Watch, the worker watches again.
func TestClusterDirectoryRestarts(t *testing.T) {
	a := &cpb.CuratorEndpoint{NodeId: "node-a", Address: "192.0.2.10", Port: 7835}
	file := directoryFile(t)
	if err := file.WriteProto(&cpb.ClusterDirectory{Curators: []*cpb.CuratorEndpoint{a}}); err != nil {
		t.Fatal(err)
	}
	v := NewValues()
	var g Graph
	supervisor.TestHarness(t, newWorkerClusterDirectory(&g, v, file).run)
	waitFor(t, &v.Directory, "the saved directory", endpointsEq(a))

	f := newFakeCurator()
	f.nodes.Set([]*cpb.Node{node("node-a", member, running("192.0.2.10", 7835))})
	v.Membership.Set(fakeMembership(t, f, testCredentials(t)))
	waitFor(t, &f.watches, "a Watch", func(n int) bool { return n >= 1 })
	f.breakWatches()
	waitFor(t, &f.watches, "a second Watch", func(n int) bool { return n >= 2 })
	b := &cpb.CuratorEndpoint{NodeId: "node-b", Address: "192.0.2.11", Port: 7835}
	f.nodes.Set([]*cpb.Node{node("node-a", member, running("192.0.2.10", 7835)), node("node-b", member, running("192.0.2.11", 7835))})
	waitFor(t, &v.Directory, "the directory after the restart", endpointsEq(a, b))
}

func savedDirectory(t *testing.T, f localstorage.File) *cpb.ClusterDirectory {
	t.Helper()
	d := &cpb.ClusterDirectory{}
	if err := f.ReadProto(d); err != nil {
		t.Fatalf("reading the saved directory: %v", err)
	}
	return d
}
