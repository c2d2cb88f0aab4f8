package roleserve

import (
	"cmp"
	"context"
	"sync"
	"time"

	"github.com/polis-os/polis/supervisor"
)

// The control plane stops in order: the curator before the consensus
// member it uses.
//
// When the control plane stops (the role goes, or the whole agent stops
// for a reboot or a shutdown), the supervisor cancels the member and the
// curator at the same moment. The curator's last act as leader is to
// revoke its election lease, which lets the next curator lead at once
// instead of after the lease ran out. That revocation goes through the
// local member: stopped first, the member closes the connection under it,
// the revocation fails, and every client's writes wait the whole lease
// (curator.Config.LeaseTTL) on each planned reboot of the leader's node.
//
// So the member's run outlives the curator's: its context ends once the
// control plane's run has ended and every curator run holding the member
// (memberUsers.hold) has ended with its children, or memberGrace after
// the control plane's run ended, whichever comes first, so that a user
// that cannot stop cannot keep the member, and the node's stop, waiting.

// memberGrace is how long a stopping member waits for its users at most:
// more than the curator's own bound on its revocation
// (curator.resignTimeout, a second).
const memberGrace = 3 * time.Second

// memberUsers counts the runs that use the local consensus member and
// must end before it stops.
type memberUsers struct {
	// grace is memberGrace if zero (tests shorten it).
	grace time.Duration

	mu   sync.Mutex
	n    int
	idle chan struct{} // closed while n is zero; nil means closed
}

// hold wraps a runnable that uses the member: from its start until it
// and its children have ended (supervisor.Cleanup), the member outlives
// the control plane's run (up to memberGrace).
func (u *memberUsers) hold(r supervisor.Runnable) supervisor.Runnable {
	return func(ctx context.Context) error {
		u.add()
		supervisor.Cleanup(ctx, u.done)
		return r(ctx)
	}
}

func (u *memberUsers) add() {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.n == 0 {
		u.idle = make(chan struct{})
	}
	u.n++
}

func (u *memberUsers) done() {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.n--
	if u.n == 0 {
		close(u.idle)
	}
}

// idleChan is closed once no user runs.
func (u *memberUsers) idleChan() <-chan struct{} {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.n == 0 {
		c := make(chan struct{})
		close(c)
		return c
	}
	return u.idle
}

// outlive returns the member's context: ctx's values (the supervisor's
// run among them), cancelled once ctx has ended and no user runs, or
// memberGrace after ctx ended.
func (u *memberUsers) outlive(ctx context.Context) context.Context {
	mctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	context.AfterFunc(ctx, func() {
		t := time.NewTimer(cmp.Or(u.grace, memberGrace))
		defer t.Stop()
		select {
		case <-u.idleChan():
		case <-t.C:
		}
		cancel()
	})
	return mctx
}
