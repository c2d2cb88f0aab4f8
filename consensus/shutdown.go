package consensus

import (
	"time"

	"go.etcd.io/etcd/server/v3/embed"
)

// shutdownTransferWait bounds how long a stopping member that leads tries
// to hand the leadership to another member before it stops anyway.
const shutdownTransferWait = time.Second

// closeEtcd stops e, first handing the leadership over if this member
// leads, but waiting for that at most shutdownTransferWait.
//
// etcd's own Close makes the same hand-over, and waits for it for up to
// its request timeout (5 s plus two election timeouts). It picks the peer
// to hand over to from the connections it had a moment ago: when a whole
// cluster stops at once (polis-launch's Ctrl-C) that peer may be stopping
// too, and the leader waited the full 7 s for a successor that was gone.
// Here the attempt is bounded; when it did not hand the leadership over
// in time, the server is stopped without a second attempt (HardStop)
// before Close, whose own attempt then ends at once: the other members
// elect a leader after an election timeout, as they would after a crash.
// Once the server has stopped, the attempt here ends too (its context is
// the server's).
func closeEtcd(e *embed.Etcd) {
	done := make(chan error, 1)
	go func() {
		// Nil also when this member does not lead, or leads alone.
		done <- e.Server.TryTransferLeadershipOnShutdown()
	}()
	t := time.NewTimer(shutdownTransferWait)
	handedOver := false
	select {
	case err := <-done:
		handedOver = err == nil
		done <- err
	case <-t.C:
	}
	t.Stop()
	if !handedOver {
		e.Server.HardStop()
	}
	e.Close()
	<-done
}
