package node_test

import (
	"crypto/ed25519"
	"fmt"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	cpb "github.com/polis-os/polis/api/curator/v1"
	nodev1 "github.com/polis-os/polis/api/node/v1"
	"github.com/polis-os/polis/event"
	"github.com/polis-os/polis/identity"
	"github.com/polis-os/polis/node/nodetest"
	"github.com/polis-os/polis/roleserve"
)

// The snapshot policy in the first node's parameters is the cluster's: its
// consensus member takes snapshots as often as it says, keeps no more than
// it says, and the node reports them in its status for node describe.
func TestSnapshotPolicyFromParameters(t *testing.T) {
	const keep = 2
	owner, err := identity.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	n := nodetest.NewNode(t, subnets.Addrs(1)[0])
	n.WriteParameters(t, &nodev1.NodeParameters{Cluster: &nodev1.NodeParameters_ClusterBootstrap{ClusterBootstrap: &nodev1.ClusterBootstrap{
		OwnerPublicKey: owner.Public().(ed25519.PublicKey),
		InitialClusterConfiguration: &nodev1.ClusterConfiguration{
			ConsensusSnapshots: &cpb.SnapshotPolicy{Interval: durationpb.New(time.Second), Keep: keep},
		},
	}}})
	n.Start(t)
	creds := n.Credentials(t)
	mgmt := nodetest.Owner(t, owner, creds.CACertificate, []*cpb.CuratorEndpoint{{NodeId: creds.NodeID, Address: n.Addr.String(), Port: roleserve.DefaultCuratorPort}})

	info, err := mgmt.GetClusterInfo(nodetest.Context(t), &cpb.GetClusterInfoRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if p := info.ConsensusSnapshots; p.GetInterval().AsDuration() != time.Second || p.GetKeep() != keep {
		t.Fatalf("cluster info says snapshot policy %v, want the parameters' (1s, %d)", p, keep)
	}

	// Follow the node's list until snapshots three seconds apart have been
	// taken (so at least keep+1 in all): no list ever holds more than keep.
	w := n.Agent.Values().ConsensusSnapshots.Watch()
	defer w.Close()
	var first time.Time
	for {
		snaps, err := w.Get(nodetest.Context(t), event.Filter(func(s []*cpb.ConsensusSnapshot) bool { return len(s) > 0 }))
		if err != nil {
			t.Fatalf("waiting for snapshots: %v", err)
		}
		if len(snaps) > keep {
			t.Fatalf("the node lists %d snapshots, more than the %d kept", len(snaps), keep)
		}
		if first.IsZero() {
			first = snaps[len(snaps)-1].TakenAt.AsTime()
		}
		if snaps[0].TakenAt.AsTime().Sub(first) >= 3*time.Second {
			break
		}
	}
	nodetest.Eventually(t, "the node's status listing its snapshots", func() error {
		st := nodetest.ListNodes(t, mgmt)[creds.NodeID].GetStatus()
		if got := len(st.GetConsensusSnapshots()); got != keep {
			return fmt.Errorf("status lists %d snapshots, want %d", got, keep)
		}
		return nil
	})
}
