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
// cluster stops at once (polis-launch's Ctrl-C) that peer is stopping too,
// and the leader waited the full 7 s for a successor that was gone.
// Bounded here, the attempt either succeeds (a live peer takes over within
// a few ticks, and Close skips its own attempt) or, by the time it gives
// up, the stopped peers' connections are known to be dead and Close's own
// attempt finds no peer to hand over to and stops at once. Once Close has
// stopped the server, the attempt here ends too (its context is the
// server's).
func closeEtcd(e *embed.Etcd) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		// A failure only means that the next leader is elected after an
		// election timeout instead of at once.
		_ = e.Server.TryTransferLeadershipOnShutdown()
	}()
	t := time.NewTimer(shutdownTransferWait)
	select {
	case <-done:
	case <-t.C:
	}
	t.Stop()
	e.Close()
	<-done
}
