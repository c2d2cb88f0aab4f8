package curator

import (
	"time"

	cpb "github.com/polis-os/polis/api/curator/v1"
)

// Health is judged by the leader alone, from heartbeats it keeps in memory
// (leaderState.heartbeats): a heartbeat is a fact about one moment, and
// writing every one to etcd would cost a consensus round per node every
// few seconds for data nobody needs after the next heartbeat.
//
// The price is that a new leader knows nothing of earlier heartbeats. It
// must not conclude that every node is dead: for the first timeout of its
// term a node it has not heard from yet is UNKNOWN (not judged), and only a
// node still silent a full timeout after the term began is
// HEARTBEAT_TIMEOUT. A node that heartbeats on schedule therefore never
// looks dead because the leader moved.

// heartbeatTimeout is how long a node may stay silent before it is judged
// HEARTBEAT_TIMEOUT.
func heartbeatTimeout(interval time.Duration) time.Duration {
	return heartbeatsUntilTimeout * interval
}

// health is node id's health at now as this term judges it, and how long
// ago its last heartbeat was. The duration is meaningful only for HEALTHY
// and HEARTBEAT_TIMEOUT; for a node not heard from in this term it is the
// time since the term began, a lower bound. The caller decides whether the
// node is judged at all: only UP nodes heartbeat, and for the others the
// health to report is NODE_HEALTH_UNSPECIFIED.
func (l *leaderState) health(id string, now time.Time) (cpb.NodeHealth, time.Duration) {
	l.mu.Lock()
	last, heard := l.heartbeats[id]
	l.mu.Unlock()
	timeout := heartbeatTimeout(l.heartbeatInterval)
	if !heard {
		since := max(now.Sub(l.since), 0)
		if since <= timeout {
			return cpb.NodeHealth_NODE_HEALTH_UNKNOWN, 0
		}
		return cpb.NodeHealth_NODE_HEALTH_HEARTBEAT_TIMEOUT, since
	}
	// A clock that stepped back counts as no time passed.
	ago := max(now.Sub(last), 0)
	if ago <= timeout {
		return cpb.NodeHealth_NODE_HEALTH_HEALTHY, ago
	}
	return cpb.NodeHealth_NODE_HEALTH_HEARTBEAT_TIMEOUT, ago
}
