package curator

import (
	"testing"
	"time"

	cpb "github.com/polis-os/polis/api/curator/v1"
)

func TestHealth(t *testing.T) {
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	const interval = 5 * time.Second
	timeout := heartbeatTimeout(interval)
	// A term that began at t0: nodes heard of before it are unknown to it.
	l := &leaderState{since: t0, heartbeatInterval: interval, heartbeats: map[string]time.Time{}}

	check := func(what, id string, now time.Time, wantHealth cpb.NodeHealth, wantAgo time.Duration) {
		t.Helper()
		h, ago := l.health(id, now)
		if h != wantHealth || ago != wantAgo {
			t.Errorf("%s: health = %v, %v; want %v, %v", what, h, ago, wantHealth, wantAgo)
		}
	}
	// The leader change itself never makes a node look dead: silence is
	// counted from the start of the term.
	check("at the start of the term", "a", t0, cpb.NodeHealth_NODE_HEALTH_UNKNOWN, 0)
	check("a full timeout into the term", "a", t0.Add(timeout), cpb.NodeHealth_NODE_HEALTH_UNKNOWN, 0)
	check("past the timeout, never heard of", "a", t0.Add(timeout+time.Second), cpb.NodeHealth_NODE_HEALTH_HEARTBEAT_TIMEOUT, timeout+time.Second)

	l.heartbeat("b", t0.Add(time.Second))
	check("just after a heartbeat", "b", t0.Add(2*time.Second), cpb.NodeHealth_NODE_HEALTH_HEALTHY, time.Second)
	check("timeout after the heartbeat", "b", t0.Add(time.Second+timeout), cpb.NodeHealth_NODE_HEALTH_HEALTHY, timeout)
	check("past the timeout after the heartbeat", "b", t0.Add(2*time.Second+timeout), cpb.NodeHealth_NODE_HEALTH_HEARTBEAT_TIMEOUT, time.Second+timeout)
	check("clock stepped back", "b", t0, cpb.NodeHealth_NODE_HEALTH_HEALTHY, 0)

	// A new term starts from nothing, not from the previous term's
	// heartbeats, and judges b by its own start.
	next := &leaderState{since: t0.Add(time.Hour), heartbeatInterval: interval, heartbeats: map[string]time.Time{}}
	if h, _ := next.health("b", t0.Add(time.Hour+time.Second)); h != cpb.NodeHealth_NODE_HEALTH_UNKNOWN {
		t.Errorf("new term, before b's first heartbeat: %v, want UNKNOWN", h)
	}
}
