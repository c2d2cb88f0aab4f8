package roleserve

import (
	"context"
	"crypto/ed25519"
	"net/netip"
	"path/filepath"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
	"google.golang.org/protobuf/proto"

	cpb "github.com/polis-os/polis/api/curator/v1"
	"github.com/polis-os/polis/consensus"
	"github.com/polis-os/polis/curator"
	"github.com/polis-os/polis/event"
	"github.com/polis-os/polis/identity"
	"github.com/polis-os/polis/internal/testutil"
	"github.com/polis-os/polis/supervisor/supervisortest"
)

// Control-plane tests run real consensus members and curators, each test on
// its own loopback address 127.29.<n>.1 so that the fixed ports never
// collide.
var subnets = testutil.Subnets{Octet: 29}

func waitCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// A bootstrapping node runs its control plane without waiting for roles,
// initialises the cluster, and stops the control plane when the role goes.
func TestControlPlaneBootstrapAndRoleRemoval(t *testing.T) {
	key, err := identity.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	owner, err := identity.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	addr := subnets.Addrs(1)[0]
	dataDir := t.TempDir()
	var g Graph
	v := NewValues()
	w := newWorkerControlPlane(&g, v, ControlPlaneConfig{
		NodeKey: key,
		Address: addr,
		EtcdDir: dataDir + "/etcd",
		Bootstrap: &curator.BootstrapParams{
			OwnerKey:   owner.Public().(ed25519.PublicKey),
			NodeKey:    key.Public().(ed25519.PublicKey),
			NodeStatus: &cpb.NodeStatus{ExternalAddress: addr.String()},
		},
		LeaseTTL: 2 * time.Second,
	})
	sup, stop := supervisortest.HarnessTree(t, w.run)

	// "The local curator serves" is published once its Status is set, and
	// says where.
	ep := waitFor(t, &v.LocalCurator, "the local curator", func(ep *cpb.CuratorEndpoint) bool { return ep != nil })
	local, err := event.Get(waitCtx(t), &v.LocalControlPlane, event.Filter(func(l *LocalControlPlane) bool { return l != nil }))
	if err != nil {
		t.Fatalf("waiting for the control plane: %v", err)
	}
	st, err := event.Get(waitCtx(t), local.Curator.Status())
	if err != nil {
		t.Fatal(err)
	}
	if want := netip.AddrPortFrom(addr, DefaultCuratorPort); st == nil || st.Address != want {
		t.Fatalf("curator serves on %v, want %v", st, want)
	}
	if want := st.Endpoint(); !proto.Equal(ep, want) {
		t.Fatalf("local curator published at %v, want %v", ep, want)
	}
	if _, err := event.Get(waitCtx(t), local.Curator.Leader(), event.Filter(func(l *curator.LeaderStatus) bool { return l.Leading != nil })); err != nil {
		t.Fatalf("the bootstrapped curator never led: %v", err)
	}
	// The member's first periodic snapshot is taken at once, kept beside
	// its data and reported.
	snaps := waitFor(t, &v.ConsensusSnapshots, "a periodic snapshot", func(s []*cpb.ConsensusSnapshot) bool { return len(s) > 0 })
	files, err := consensus.ListSnapshots(filepath.Join(dataDir, "consensus-snapshots"))
	if err != nil || len(files) != len(snaps) || files[0].Revision != snaps[0].Revision || files[0].Size != snaps[0].Size {
		t.Fatalf("snapshots on disk %+v (%v), reported %v", files, err, snaps)
	}

	// Roles arrive with ConsensusMember: nothing changes.
	v.LocalRoles.Set(&cpb.Roles{ConsensusMember: &cpb.ConsensusMemberRole{}})
	// The role goes: the control plane stops.
	v.LocalRoles.Set(&cpb.Roles{})
	if _, err := event.Get(waitCtx(t), &v.LocalControlPlane, event.Filter(func(l *LocalControlPlane) bool { return l == nil })); err != nil {
		t.Fatalf("the control plane was not withdrawn: %v", err)
	}
	waitFor(t, &v.LocalCurator, "the local curator withdrawn", func(ep *cpb.CuratorEndpoint) bool { return ep == nil })
	if _, err := event.Get(waitCtx(t), local.Consensus.Status(), event.Filter(func(s *consensus.Status) bool { return s.State == consensus.StateStopped })); err != nil {
		t.Fatalf("consensus did not stop: %v", err)
	}
	// Once bootstrapped, the worker follows the roles: the role back, the
	// control plane back, from the same data.
	v.LocalRoles.Set(&cpb.Roles{ConsensusMember: &cpb.ConsensusMemberRole{}})
	again, err := event.Get(waitCtx(t), &v.LocalControlPlane, event.Filter(func(l *LocalControlPlane) bool { return l != nil }))
	if err != nil {
		t.Fatalf("the control plane did not come back: %v", err)
	}
	if _, err := event.Get(waitCtx(t), again.Curator.Leader(), event.Filter(func(l *curator.LeaderStatus) bool { return l.Leading != nil })); err != nil {
		t.Fatalf("the restarted curator never led: %v", err)
	}
	waitFor(t, &v.LocalCurator, "the local curator back", func(ep *cpb.CuratorEndpoint) bool { return ep != nil })

	// The worker ends (the node agent stops): everything it published is
	// withdrawn, and the stopped curator does not claim to serve (on
	// main, LocalControlPlane and the curator's Status stayed as they
	// were).
	stop()
	sup.Wait()
	if l := latest(&v.LocalControlPlane); l != nil {
		t.Errorf("LocalControlPlane %v still published after the control plane stopped", l)
	}
	if ep := latest(&v.LocalCurator); ep != nil {
		t.Errorf("LocalCurator %v still published after the control plane stopped", ep)
	}
	if s := latest(&v.ConsensusSnapshots); s != nil {
		t.Errorf("ConsensusSnapshots %v still published after the control plane stopped", s)
	}
	if st, err := event.Get(waitCtx(t), again.Curator.Status()); err != nil || st != nil {
		t.Errorf("status of the stopped curator = %v, %v; want nil", st, err)
	}
	// The leading curator revoked its election lease before the member
	// stopped, so that another curator would have led at once: the
	// member's database keeps no lease (the election's is the only one
	// granted here). When both stopped together, the revocation found
	// the member's connection closed, and the lease stayed.
	if n, err := storedLeases(filepath.Join(dataDir, "etcd", "etcd", "member", "snap", "db")); err != nil || n != 0 {
		t.Errorf("the stopped member's database keeps %d leases (%v); want none: the curator did not revoke its election lease before the member stopped", n, err)
	}
}

// storedLeases counts the leases in the etcd database at path, read-only.
func storedLeases(path string) (int, error) {
	db, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true, Timeout: time.Second})
	if err != nil {
		return 0, err
	}
	defer db.Close()
	n := 0
	err = db.View(func(tx *bolt.Tx) error {
		if b := tx.Bucket([]byte("lease")); b != nil {
			n = b.Stats().KeyN
		}
		return nil
	})
	return n, err
}
