package roleserve

import (
	"os"
	"path/filepath"
	"testing"

	"go.uber.org/zap"
	"google.golang.org/protobuf/proto"

	cpb "github.com/polis-os/polis/api/curator/v1"
	"github.com/polis-os/polis/localstorage"
	"github.com/polis-os/polis/supervisor/supervisortest"
)

func directoryFile(t *testing.T) localstorage.File {
	return localstorage.File{Path: filepath.Join(t.TempDir(), "directory.pb")}
}

func running(addr string, port uint32) *cpb.NodeStatus {
	return &cpb.NodeStatus{ExternalAddress: addr, RunningCurator: &cpb.RunningCurator{Port: port}}
}

// The directory is what the curator's WatchClusterDirectory sends (which
// nodes are curators is the curator's to say, see curator's
// TestCuratorEndpoint); it is saved with the cluster CA before it is
// published.
func TestClusterDirectory(t *testing.T) {
	creds := testCredentials(t)
	f := newFakeCurator()
	a := &cpb.CuratorEndpoint{NodeId: "node-a", Address: "192.0.2.10", Port: 7835}
	d := &cpb.CuratorEndpoint{NodeId: "node-d", Address: "192.0.2.13", Port: 7835}
	f.directory.Set([]*cpb.CuratorEndpoint{a, d})
	v := NewValues()
	file := directoryFile(t)
	var g Graph
	supervisortest.Harness(t, newWorkerClusterDirectory(&g, v, file).run)

	// Nothing saved: an empty directory at once, before any curator.
	waitFor(t, &v.Directory, "an empty directory", func(d []*cpb.CuratorEndpoint) bool { return len(d) == 0 })

	v.Membership.Set(fakeMembership(t, f, creds))
	waitFor(t, &v.Directory, "the curators", endpointsEq(a, d))
	want := &cpb.ClusterDirectory{Curators: []*cpb.CuratorEndpoint{a, d}, CaCertificate: creds.CACertificate.Raw}
	if got := savedDirectory(t, file); !proto.Equal(got, want) {
		t.Errorf("saved directory %v, want %v", got, want)
	}

	// No curator reporting is not taken for an empty cluster: the
	// directory stays, and moves on with the next real list.
	w := v.Directory.Watch()
	defer w.Close()
	f.directory.Set(nil)
	f.directory.Set([]*cpb.CuratorEndpoint{d})
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
// curator is reached; after a broken stream, the worker watches again.
func TestClusterDirectoryRestarts(t *testing.T) {
	a := &cpb.CuratorEndpoint{NodeId: "node-a", Address: "192.0.2.10", Port: 7835}
	file := directoryFile(t)
	if err := file.WriteProto(&cpb.ClusterDirectory{Curators: []*cpb.CuratorEndpoint{a}}); err != nil {
		t.Fatal(err)
	}
	v := NewValues()
	var g Graph
	supervisortest.Harness(t, newWorkerClusterDirectory(&g, v, file).run)
	waitFor(t, &v.Directory, "the saved directory", endpointsEq(a))

	f := newFakeCurator()
	f.directory.Set([]*cpb.CuratorEndpoint{a})
	v.Membership.Set(fakeMembership(t, f, testCredentials(t)))
	waitFor(t, &f.watches, "a WatchClusterDirectory", func(n int) bool { return n >= 1 })
	f.breakWatches()
	waitFor(t, &f.watches, "a second WatchClusterDirectory", func(n int) bool { return n >= 2 })
	b := &cpb.CuratorEndpoint{NodeId: "node-b", Address: "192.0.2.11", Port: 7835}
	f.directory.Set([]*cpb.CuratorEndpoint{a, b})
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

// unwritableFile is a saved file that can be neither read, written nor
// removed: a non-empty directory stands at its path, as a FAT ESP the
// kernel made read-only after finding a broken chain fails every call.
func unwritableFile(t *testing.T) localstorage.File {
	path := filepath.Join(t.TempDir(), "directory.pb")
	if err := os.MkdirAll(filepath.Join(path, "in-the-way"), 0o700); err != nil {
		t.Fatal(err)
	}
	return localstorage.File{Path: path}
}

// A saved directory that is damaged and cannot be removed is no directory,
// not a failure; and a directory that cannot be saved is still followed:
// the file only says where to look first at the next boot, and a node whose
// ESP takes no writes must still follow its curators.
func TestClusterDirectoryOnAnUnwritableESP(t *testing.T) {
	file := unwritableFile(t)
	if got := SavedDirectory(file).Load(zap.NewNop()); got != nil {
		t.Fatalf("Load of a damaged file = %v, want none", got)
	}
	creds := testCredentials(t)
	f := newFakeCurator()
	a := &cpb.CuratorEndpoint{NodeId: "node-a", Address: "192.0.2.10", Port: 7835}
	f.directory.Set([]*cpb.CuratorEndpoint{a})
	v := NewValues()
	var g Graph
	supervisortest.Harness(t, newWorkerClusterDirectory(&g, v, file).run)
	waitFor(t, &v.Directory, "an empty directory", func(d []*cpb.CuratorEndpoint) bool { return len(d) == 0 })
	v.Membership.Set(fakeMembership(t, f, creds))
	waitFor(t, &v.Directory, "the curators, not saved", endpointsEq(a))
	if err := SavedDirectory(file).Save(&cpb.ClusterDirectory{Curators: []*cpb.CuratorEndpoint{a}}); err == nil {
		t.Error("the directory was saved into a path that cannot take it: the test proves nothing")
	}
}
