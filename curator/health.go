package curator

import (
	"time"

	cpb "github.com/polis-os/polis/api/curator/v1"
)

// Health is judged by every curator alike, from its heartbeatBook: the
// heartbeats it received itself and those every curator recorded in etcd
// (heartbeats.go; the costs are in the package documentation, "Health").
// A leader change therefore changes nobody's health: the new leader has
// been reading the records all along.
//
// A node that no record lists and this curator never heard has not
// heartbeated within the recording window, or not since this curator
// started reading: it is UNKNOWN (not judged) for the first timeout after
// the curator started, so that a curator starting with a cluster that has
// just started too does not call every node dead, and HEARTBEAT_TIMEOUT
// after that.

// heartbeatTimeout is how long a node may stay silent before it is judged
// HEARTBEAT_TIMEOUT.
func heartbeatTimeout(interval time.Duration) time.Duration {
	return heartbeatsUntilTimeout * interval
}

// health is node id's health at now as this curator judges it, and how
// long ago its last heartbeat was. The duration is meaningful only for
// HEALTHY and HEARTBEAT_TIMEOUT; for a node not heard from it is the time
// since the curator started reading the records, a lower bound. The
// caller decides whether the node is judged at all: only UP nodes
// heartbeat, and for the others the health to report is
// NODE_HEALTH_UNSPECIFIED.
func (b *heartbeatBook) health(id string, now time.Time) (cpb.NodeHealth, time.Duration) {
	last, heard, since := b.last(id)
	timeout := heartbeatTimeout(b.interval)
	if !heard {
		since := max(now.Sub(since), 0)
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
