package roleserve

import (
	"testing"
	"time"

	"github.com/polis-os/polis/supervisor/supervisortest"
)

func beats(n int) func([]time.Time) bool {
	return func(b []time.Time) bool { return len(b) >= n }
}

// The first heartbeat goes at once, and a new membership beats at once too,
// however long the interval.
func TestHeartbeatAtOnce(t *testing.T) {
	f := newFakeCurator()
	f.interval = time.Hour
	v := NewValues()
	v.Membership.Set(fakeMembership(t, f, testCredentials(t)))
	var g Graph
	supervisortest.Harness(t, newWorkerHeartbeat(&g, v).run)
	waitFor(t, &f.heartbeats, "the first heartbeat", beats(1))

	v.Membership.Set(fakeMembership(t, f, testCredentials(t)))
	waitFor(t, &f.heartbeats, "a heartbeat for the new membership", beats(2))
}

// Heartbeats follow the interval the curator asks for: never sooner.
func TestHeartbeatInterval(t *testing.T) {
	const interval = 20 * time.Millisecond
	f := newFakeCurator()
	f.interval = interval
	v := NewValues()
	v.Membership.Set(fakeMembership(t, f, testCredentials(t)))
	var g Graph
	supervisortest.Harness(t, newWorkerHeartbeat(&g, v).run)
	got := waitFor(t, &f.heartbeats, "five heartbeats", beats(5))
	for i := 1; i < len(got); i++ {
		if gap := got[i].Sub(got[i-1]); gap < interval {
			t.Errorf("heartbeat %d came %v after the previous one, want at least %v", i, gap, interval)
		}
	}
}

// A failed heartbeat fails the worker; its restart beats again at once.
func TestHeartbeatRetriesThroughRestart(t *testing.T) {
	f := newFakeCurator()
	f.interval = time.Hour
	f.failHeartbeats = 2
	v := NewValues()
	v.Membership.Set(fakeMembership(t, f, testCredentials(t)))
	var g Graph
	supervisortest.Harness(t, newWorkerHeartbeat(&g, v).run)
	waitFor(t, &f.heartbeats, "a heartbeat after two failures", beats(1))
}
