package roleserve

import (
	"path/filepath"
	"testing"

	"google.golang.org/protobuf/proto"

	cpb "github.com/polis-os/polis/api/curator/v1"
	"github.com/polis-os/polis/localstorage"
	"github.com/polis-os/polis/supervisor/supervisortest"
)

func rolesFile(t *testing.T) localstorage.File {
	return localstorage.File{Path: filepath.Join(t.TempDir(), "roles.pb")}
}

func savedRoles(t *testing.T, f localstorage.File) *cpb.Roles {
	t.Helper()
	r := &cpb.Roles{}
	if err := f.ReadProto(r); err != nil {
		t.Fatalf("reading the saved roles: %v", err)
	}
	return r
}

var (
	consensusRoles  = &cpb.Roles{ConsensusMember: &cpb.ConsensusMemberRole{}}
	workerRoles     = &cpb.Roles{KubernetesWorker: &cpb.KubernetesWorkerRole{}}
	controllerRoles = &cpb.Roles{KubernetesController: &cpb.KubernetesControllerRole{}}
	noRoles         = &cpb.Roles{}
)

// runRoleFetch runs the rolefetch worker for the test over file, with a
// membership whose fake curator holds this node's record with roles, and
// others.
func runRoleFetch(t *testing.T, file localstorage.File, roles *cpb.Roles, others ...*cpb.Node) (*fakeCurator, *Values, *Credentials) {
	t.Helper()
	creds := testCredentials(t)
	f := newFakeCurator()
	f.nodes.Set(append([]*cpb.Node{node(creds.NodeID, roles, nil)}, others...))
	v := NewValues()
	v.Membership.Set(fakeMembership(t, f, creds))
	var g Graph
	supervisortest.Harness(t, newWorkerRoleFetch(&g, v, file).run)
	return f, v, creds
}

// Roles follow this node's record in the curator, and are saved before they
// are published.
func TestRoleFetchFollowsTheCurator(t *testing.T) {
	file := rolesFile(t)
	f, v, creds := runRoleFetch(t, file, consensusRoles, node("node-other", workerRoles, nil))

	waitFor(t, &v.LocalRoles, "the roles", protoEq(consensusRoles))
	if got := savedRoles(t, file); !proto.Equal(got, consensusRoles) {
		t.Errorf("saved roles %v, want %v", got, consensusRoles)
	}

	f.nodes.Set([]*cpb.Node{node(creds.NodeID, workerRoles, nil)})
	waitFor(t, &v.LocalRoles, "the new roles", protoEq(workerRoles))
	if got := savedRoles(t, file); !proto.Equal(got, workerRoles) {
		t.Errorf("saved roles %v, want %v", got, workerRoles)
	}

	// A node whose record is gone holds no roles, and must not find old
	// ones after a reboot either.
	f.nodes.Set(nil)
	waitFor(t, &v.LocalRoles, "no roles", protoEq(noRoles))
	if got := savedRoles(t, file); !proto.Equal(got, noRoles) {
		t.Errorf("saved roles %v, want none", got)
	}
}

// A node that restarts publishes its saved roles before any curator
// answers: that is how a lone control-plane node gets its control plane
// back.
func TestRoleFetchPublishesSavedRolesFirst(t *testing.T) {
	file := rolesFile(t)
	if err := file.WriteProto(consensusRoles); err != nil {
		t.Fatal(err)
	}
	v := NewValues()
	var g Graph
	supervisortest.Harness(t, newWorkerRoleFetch(&g, v, file).run)
	// No membership at all: no curator can answer.
	waitFor(t, &v.LocalRoles, "the saved roles", protoEq(consensusRoles))

	// Once a curator answers, its roles win.
	creds := testCredentials(t)
	f := newFakeCurator()
	f.nodes.Set([]*cpb.Node{node(creds.NodeID, workerRoles, nil)})
	v.Membership.Set(fakeMembership(t, f, creds))
	waitFor(t, &v.LocalRoles, "the curator's roles", protoEq(workerRoles))
}

// A damaged file does not keep the node from asking the curator.
func TestRoleFetchIgnoresADamagedFile(t *testing.T) {
	file := rolesFile(t)
	if err := file.Write([]byte("not a protobuf \xff\xff")); err != nil {
		t.Fatal(err)
	}
	_, v, _ := runRoleFetch(t, file, workerRoles)
	waitFor(t, &v.LocalRoles, "the curator's roles", protoEq(workerRoles))
	if got := savedRoles(t, file); !proto.Equal(got, workerRoles) {
		t.Errorf("saved roles %v, want %v", got, workerRoles)
	}
}

// A broken Watch fails the worker; its restart watches again and follows
// the roles from there.
func TestRoleFetchRestartsAfterTheWatchBreaks(t *testing.T) {
	f, v, creds := runRoleFetch(t, rolesFile(t), consensusRoles)
	waitFor(t, &v.LocalRoles, "the roles", protoEq(consensusRoles))

	f.breakWatches()
	waitFor(t, &f.watches, "a second Watch", func(n int) bool { return n >= 2 })
	f.nodes.Set([]*cpb.Node{node(creds.NodeID, workerRoles, nil)})
	waitFor(t, &v.LocalRoles, "the roles after the restart", protoEq(workerRoles))
}
