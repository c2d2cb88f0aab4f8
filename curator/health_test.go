package curator

import (
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	cpb "github.com/polis-os/polis/api/curator/v1"
)

func TestHealth(t *testing.T) {
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	const interval = 5 * time.Second
	timeout := heartbeatTimeout(interval)
	// A curator that began reading the records at t0.
	b := newHeartbeatBook(nil, "node-000000000000000000000000", interval, func() time.Time { return t0 })
	b.since = t0

	check := func(what, id string, now time.Time, wantHealth cpb.NodeHealth, wantAgo time.Duration) {
		t.Helper()
		h, ago := b.health(id, now)
		if h != wantHealth || ago != wantAgo {
			t.Errorf("%s: health = %v, %v; want %v, %v", what, h, ago, wantHealth, wantAgo)
		}
	}
	// A curator that just started never makes a node look dead: silence
	// is counted from when it started reading the records.
	check("when the curator started", "a", t0, cpb.NodeHealth_NODE_HEALTH_UNKNOWN, 0)
	check("a full timeout later", "a", t0.Add(timeout), cpb.NodeHealth_NODE_HEALTH_UNKNOWN, 0)
	check("past the timeout, never heard of", "a", t0.Add(timeout+time.Second), cpb.NodeHealth_NODE_HEALTH_HEARTBEAT_TIMEOUT, timeout+time.Second)

	b.heard("b", t0.Add(time.Second))
	check("just after a heartbeat", "b", t0.Add(2*time.Second), cpb.NodeHealth_NODE_HEALTH_HEALTHY, time.Second)
	check("timeout after the heartbeat", "b", t0.Add(time.Second+timeout), cpb.NodeHealth_NODE_HEALTH_HEALTHY, timeout)
	check("past the timeout after the heartbeat", "b", t0.Add(2*time.Second+timeout), cpb.NodeHealth_NODE_HEALTH_HEARTBEAT_TIMEOUT, time.Second+timeout)
	check("clock stepped back", "b", t0, cpb.NodeHealth_NODE_HEALTH_HEALTHY, 0)

	// A heartbeat another curator recorded counts like one received here;
	// the newer of the two wins.
	b.recorded["c"] = t0.Add(-time.Second)
	check("recorded elsewhere", "c", t0.Add(time.Second), cpb.NodeHealth_NODE_HEALTH_HEALTHY, 2*time.Second)
	b.recorded["b"] = t0.Add(3 * time.Second)
	check("recorded elsewhere, newer than here", "b", t0.Add(4*time.Second), cpb.NodeHealth_NODE_HEALTH_HEALTHY, time.Second)
	b.recorded["b"] = t0
	check("recorded elsewhere, older than here", "b", t0.Add(4*time.Second), cpb.NodeHealth_NODE_HEALTH_HEALTHY, 3*time.Second)
}

// A record written by one curator is read back as the same heartbeats,
// and records that are not what the curator writes are refused.
func TestHeartbeatRecordCodec(t *testing.T) {
	const a, c = "node-aaaaaaaaaaaaaaaaaaaaaaaa", "node-cccccccccccccccccccccccc"
	good := []byte(heartbeatKey(a))
	for name, rec := range map[string]*cpb.HeartbeatRecord{
		"no written_at": {Nodes: []*cpb.HeardNode{{NodeId: c}}},
		"bad node ID":   {WrittenAt: nowPB(), Nodes: []*cpb.HeardNode{{NodeId: "nope"}}},
		"twice":         {WrittenAt: nowPB(), Nodes: []*cpb.HeardNode{{NodeId: c}, {NodeId: c, AgeMs: 3}}},
	} {
		if _, err := decodeHeartbeatRecord(good, mustMarshal(t, rec)); err == nil {
			t.Errorf("%s: decoded", name)
		}
	}
	if _, err := decodeHeartbeatRecord([]byte(heartbeatPrefix+"x"), mustMarshal(t, &cpb.HeartbeatRecord{WrittenAt: nowPB()})); err == nil {
		t.Error("a key naming no node: decoded")
	}
	if _, err := decodeHeartbeatRecord(good, []byte{0xff}); err == nil {
		t.Error("garbage: decoded")
	}
	rec := &cpb.HeartbeatRecord{WrittenAt: nowPB(), Nodes: []*cpb.HeardNode{{NodeId: c, AgeMs: 1500}}}
	got, err := decodeHeartbeatRecord(good, mustMarshal(t, rec))
	if err != nil || len(got.Nodes) != 1 || got.Nodes[0].NodeId != c || got.Nodes[0].AgeMs != 1500 {
		t.Errorf("a good record: %v, %v", got, err)
	}
}

func nowPB() *timestamppb.Timestamp { return timestamppb.Now() }

func mustMarshal(t *testing.T, m proto.Message) []byte {
	t.Helper()
	b, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
