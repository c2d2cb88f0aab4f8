package curator

import (
	"context"
	"testing"

	cpb "github.com/polis-os/polis/api/curator/v1"
)

// TestWatchLeader checks that a follower's WatchLeader stream names the
// leader at once, and the next leader as soon as the election has one,
// without being asked again.
func TestWatchLeader(t *testing.T) {
	c := newTestCluster(t)
	f := c.startFollower()
	ctx, cancel := context.WithCancel(ctxT(t))
	defer cancel()
	// Anyone may watch: no client certificate.
	s, err := cpb.NewCuratorServiceClient(c.at(followerAddress(t, f)).anonymous()).WatchLeader(ctx, &cpb.WatchLeaderRequest{})
	if err != nil {
		t.Fatal(err)
	}
	// next returns the next message that names a leader (one naming
	// nobody may come between, while the election runs).
	next := func() *cpb.WatchLeaderResponse {
		t.Helper()
		for {
			m, err := s.Recv()
			if err != nil {
				t.Fatalf("WatchLeader at the follower: %v", err)
			}
			if m.Responder.GetNodeId() != f.nodeID {
				t.Fatalf("the responder is %v, want the follower %s", m.Responder, f.nodeID)
			}
			if m.Leader != nil {
				return m
			}
		}
	}
	if m := next(); m.Leader.NodeId != c.curator.nodeID || m.Leader.Port != uint32(c.status.Address.Port()) {
		t.Fatalf("first message names %v, want the leader %s at %s", m.Leader, c.curator.nodeID, c.status.Address)
	}
	// The leader hands over; the follower is the only other candidate.
	c.curator.election.Resign()
	if m := next(); m.Leader.NodeId != f.nodeID {
		t.Fatalf("after the leader resigned the stream names %v, want the follower %s", m.Leader, f.nodeID)
	}
}
