package curator

import (
	"crypto/ed25519"
	"crypto/x509"
	"errors"
	"fmt"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	cpb "github.com/polis-os/polis/api/curator/v1"
	"github.com/polis-os/polis/event"
	"github.com/polis-os/polis/identity"
	"github.com/polis-os/polis/internal/testutil"
)

// TestHealthSurvivesFailover stops the leader of three curators and checks
// that every node's health, judged by the new leader and by the other
// follower, is exactly what it was before: heartbeats reach every curator
// through the records in etcd, whichever curator received them. A node
// that stopped heartbeating before the failover still turns
// HEARTBEAT_TIMEOUT afterwards, judged from its last recorded heartbeat,
// not from when the new leader took over.
//
// Health is judged on a shared test clock that moves only when the test
// moves it, so nothing times out because the machine is slow; the records
// are written every HeartbeatInterval of real time.
func TestHealthSurvivesFailover(t *testing.T) {
	const interval = 50 * time.Millisecond
	base := time.Now().Truncate(time.Millisecond) // records carry milliseconds
	var offset atomic.Int64
	now := func() time.Time { return base.Add(time.Duration(offset.Load())) }
	opts := func(cfg *Config) { cfg.Now, cfg.HeartbeatInterval = now, interval }
	c := newTestCluster(t, opts)
	curators := []*Service{c.curator, c.startFollower(opts), c.startFollower(opts)}
	var addrs []netip.AddrPort
	for _, s := range curators {
		addrs = append(addrs, followerAddress(t, s))
	}

	type node struct {
		id   string
		key  ed25519.PrivateKey
		cert *x509.Certificate
	}
	var nodes []node
	for i := range 6 {
		key, cert := c.enrolNode(&cpb.NodeStatus{ExternalAddress: fmt.Sprintf("127.0.0.%d", 90+i)})
		nodes = append(nodes, node{identity.NodeID(key.Public().(ed25519.PublicKey)), key, cert})
	}
	for _, s := range curators {
		for _, n := range nodes {
			if _, err := event.Get(ctxT(t), s.nodes.Snapshots(), event.Filter(func(snap *nodeSnapshot) bool {
				return snap.complete && snap.nodes[n.id].GetState() == cpb.NodeState_NODE_STATE_UP
			})); err != nil {
				t.Fatal(err)
			}
		}
	}

	// beat sends a heartbeat of each node in which, node i to the i-th
	// live curator, so that every curator hears some nodes and none
	// hears all; then it waits until every live curator knows each
	// node's newest heartbeat, as want says.
	want := map[string]time.Time{}
	beat := func(live []int, which ...int) {
		t.Helper()
		for _, i := range which {
			at := addrs[live[i%len(live)]]
			if _, err := cpb.NewCuratorServiceClient(c.at(at).asNode(nodes[i].cert, nodes[i].key)).Heartbeat(ctxT(t), &cpb.HeartbeatRequest{}); err != nil {
				t.Fatalf("heartbeat of node %d at %v: %v", i, at, err)
			}
			want[nodes[i].id] = now()
		}
		for _, ci := range live {
			for id, at := range want {
				testutil.Eventually(t, time.Minute, fmt.Sprintf("curator %d to know node %s heartbeated at %v", ci, id, at.Sub(base)), func() error {
					if last, _, _ := curators[ci].heartbeats.last(id); !last.Equal(at) {
						return fmt.Errorf("it knows a heartbeat at %v", last.Sub(base))
					}
					return nil
				})
			}
		}
	}
	health := func(ci int) map[string]*cpb.Node {
		t.Helper()
		all, _ := listNodes(t, c.at(addrs[ci]).management(), &cpb.ListNodesRequest{})
		got := map[string]*cpb.Node{}
		for _, n := range all {
			got[n.Id] = n
		}
		return got
	}
	check := func(what string, ci int, id string, wantHealth cpb.NodeHealth, wantAgo time.Duration) {
		t.Helper()
		n := health(ci)[id]
		if n.GetHealth() != wantHealth || n.GetTimeSinceHeartbeat().AsDuration() != wantAgo {
			t.Errorf("%s, at curator %d: node %s is %v, %v ago; want %v, %v ago", what, ci, id, n.GetHealth(), n.GetTimeSinceHeartbeat().AsDuration(), wantHealth, wantAgo)
		}
	}

	beat([]int{0, 1, 2}, 0, 1, 2, 3, 4, 5)
	// Node 0 stops heartbeating; the others go on.
	offset.Add(int64(2 * interval))
	beat([]int{0, 1, 2}, 1, 2, 3, 4, 5)
	for ci := range curators {
		check("before the failover", ci, nodes[0].id, cpb.NodeHealth_NODE_HEALTH_HEALTHY, 2*interval)
		for _, n := range nodes[1:] {
			check("before the failover", ci, n.id, cpb.NodeHealth_NODE_HEALTH_HEALTHY, 0)
		}
	}

	// The leader stops; one of the followers takes over.
	c.stopCurator()
	testutil.Eventually(t, time.Minute, "a follower to lead", testutil.Holds(func() bool {
		return curators[1].election.Current().Leading != nil || curators[2].election.Current().Leading != nil
	}))
	// Nothing changed for anyone, at the new leader and at the other
	// follower alike.
	for _, ci := range []int{1, 2} {
		check("straight after the failover", ci, nodes[0].id, cpb.NodeHealth_NODE_HEALTH_HEALTHY, 2*interval)
		for _, n := range nodes[1:] {
			check("straight after the failover", ci, n.id, cpb.NodeHealth_NODE_HEALTH_HEALTHY, 0)
		}
	}

	// Node 0 stays silent past the timeout, counted from its last
	// heartbeat before the failover; the others heartbeat to the
	// curators that are left.
	offset.Add(int64(2 * interval))
	beat([]int{1, 2}, 1, 2, 3, 4, 5)
	for _, ci := range []int{1, 2} {
		check("after the failover", ci, nodes[0].id, cpb.NodeHealth_NODE_HEALTH_HEARTBEAT_TIMEOUT, 4*interval)
		for _, n := range nodes[1:] {
			check("after the failover", ci, n.id, cpb.NodeHealth_NODE_HEALTH_HEALTHY, 0)
		}
	}
}

// A record whose curator stopped writing long ago is deleted by the
// curators that read it; a recent one, and a curator's own, stay.
func TestStaleHeartbeatRecordsDeleted(t *testing.T) {
	c := newTestCluster(t)
	put := func(curator string, written time.Time) {
		t.Helper()
		rec := &cpb.HeartbeatRecord{WrittenAt: timestamppb.New(written), Nodes: []*cpb.HeardNode{{NodeId: c.status.NodeID, AgeMs: 10}}}
		if _, err := c.etcd.Put(ctxT(t), heartbeatKey(curator), string(mustMarshal(t, rec))); err != nil {
			t.Fatal(err)
		}
	}
	stale, recent := identity.NodeID(mustKey(t).Public().(ed25519.PublicKey)), identity.NodeID(mustKey(t).Public().(ed25519.PublicKey))
	put(recent, time.Now())
	put(stale, time.Now().Add(-staleRecordAge(DefaultHeartbeatInterval)-time.Minute))
	testutil.Eventually(t, time.Minute, "the stale record to be deleted", func() error {
		resp, err := c.etcd.Get(ctxT(t), heartbeatKey(stale))
		if err == nil && len(resp.Kvs) != 0 {
			err = errors.New("it is still there")
		}
		return err
	})
	if resp, err := c.etcd.Get(ctxT(t), heartbeatKey(recent)); err != nil || len(resp.Kvs) != 1 {
		t.Errorf("the recent record: %v, %v; want it kept", resp, err)
	}
	// What the recent record says was merged.
	if _, heard, _ := c.curator.heartbeats.last(c.status.NodeID); !heard {
		t.Error("the recent record's heartbeat was not merged")
	}
}
