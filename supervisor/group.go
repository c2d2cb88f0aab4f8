package supervisor

import (
	"context"
	"errors"
	"runtime/debug"
	"time"

	"github.com/cenkalti/backoff/v5"
	"go.uber.org/zap"
)

// group is a restart unit: the runnables started by one Run or RunGroup
// call. Each group has one keeper goroutine that runs its members, waits for
// their outcome and restarts them; a plain Run is a group of one.
type group struct {
	sup     *Supervisor
	members []*node // sorted by name
}

type resultKind int

const (
	resultDone    resultKind = iota // returned nil after SignalDone
	resultStopped                   // returned after the supervisor cancelled it
	resultFailed
)

// result is what a member goroutine reports to its keeper when its runnable
// has returned.
type result struct {
	run       *run
	kind      resultKind
	err       error
	at        time.Time
	healthyAt time.Time
	restarts  int
}

// keep runs the group until its parent context is cancelled, every member is
// done and their subtrees have ended, or the backoff policy gives up. owner
// counts this goroutine for whoever must outlive it.
func (g *group) keep(parentCtx context.Context, owner *tracker) {
	defer owner.done()
	bo := g.sup.cfg.newBackoff()
	bo.Reset()
	for attempt := 0; ; attempt++ {
		wait, again := g.runOnce(parentCtx, bo, attempt)
		if !again {
			return
		}
		if wait > 0 {
			t := time.NewTimer(wait)
			select {
			case <-t.C:
			case <-parentCtx.Done():
				t.Stop()
			}
		}
	}
}

// runOnce starts every member, waits for the first failure (or for the
// parent's cancellation, or for all members to be done), cancels and waits
// for the whole group's subtree when needed, and says whether and after how
// long to run again.
func (g *group) runOnce(parentCtx context.Context, bo backoff.BackOff, attempt int) (time.Duration, bool) {
	s := g.sup
	ctx, cancel := context.WithCancel(parentCtx)
	defer cancel()
	live := &tracker{}
	results := make(chan result, len(g.members))
	runs := make([]*run, len(g.members))

	now := time.Now()
	s.mu.Lock()
	if parentCtx.Err() != nil {
		// Cancelled while new or backing off: there is nothing to stop.
		for _, m := range g.members {
			m.setState(StateStopped, now)
		}
		s.publishLocked()
		s.mu.Unlock()
		return 0, false
	}
	for i, m := range g.members {
		r := &run{node: m, live: live}
		r.ctx = context.WithValue(ctx, runKey{}, r)
		runs[i] = r
		m.cur = r
		m.kids = nil // the new run starts its children afresh
		if attempt > 0 {
			m.restarts++
		}
		m.setState(StateRunning, now)
		s.markDirty(m)
		live.add()
	}
	s.publishLocked()
	s.mu.Unlock()
	for _, r := range runs {
		go g.member(r, results)
	}

	var failure *result
	stopped := false
	for pending := len(runs); pending > 0 && failure == nil && !stopped; {
		select {
		case res := <-results:
			pending--
			switch res.kind {
			case resultFailed:
				failure = &res
			case resultStopped:
				stopped = true
			}
		case <-parentCtx.Done():
			stopped = true
		}
	}

	if failure == nil && !stopped {
		// Every member is done. Their children keep running under ctx,
		// which still ends with the parent; this group must outlive them.
		<-live.idleChan()
		g.runCleanups(runs)
		return 0, false
	}
	wait := backoff.Stop
	switch {
	case failure != nil && parentCtx.Err() == nil:
		wait = g.nextBackoff(bo, failure)
	case failure != nil:
		// It failed on its own just before its parent began stopping.
		g.logFailure(failure, "runnable failed; not restarting, its parent is stopping")
	}
	now = time.Now()
	s.mu.Lock()
	for _, m := range g.members {
		markCancelling(m, now)
	}
	s.publishLocked()
	s.mu.Unlock()
	cancel()
	g.waitExit(live, runs)
	g.runCleanups(runs)

	if wait == backoff.Stop || parentCtx.Err() != nil {
		return 0, false
	}
	now = time.Now()
	s.mu.Lock()
	for _, m := range g.members {
		m.backoffUntil = now.Add(wait)
		m.setState(StateBackoff, now)
	}
	s.publishLocked()
	s.mu.Unlock()
	return wait, true
}

// markCancelling shows, in one snapshot, every live run of n's subtree as
// cancelling. The keepers below would each do it for their own members, but
// only after a scheduling delay during which the tree would look healthy.
func markCancelling(n *node, now time.Time) {
	if n.cur != nil && !n.cur.exited {
		n.setState(StateCancelling, now)
	}
	for _, k := range n.kids {
		markCancelling(k, now)
	}
}

// nextBackoff decides how long to wait before the restart and logs the
// failure with that decision.
func (g *group) nextBackoff(bo backoff.BackOff, f *result) time.Duration {
	if !f.healthyAt.IsZero() && f.at.Sub(f.healthyAt) >= g.sup.cfg.backoffReset {
		bo.Reset()
	}
	wait := bo.NextBackOff()
	if wait == backoff.Stop {
		g.logFailure(f, "runnable failed; the backoff policy gave up, not restarting")
	} else {
		g.logFailure(f, "runnable failed; restarting after backoff", zap.Duration("backoff", wait))
	}
	return wait
}

// logFailure logs f on the failed runnable's logger, with its group and, for
// a panic, the stack.
func (g *group) logFailure(f *result, msg string, extra ...zap.Field) {
	fields := []zap.Field{zap.Error(f.err), zap.Int("restarts", f.restarts)}
	if len(g.members) > 1 {
		names := make([]string, len(g.members))
		for i, m := range g.members {
			names[i] = m.name
		}
		fields = append(fields, zap.Strings("group", names))
	}
	if pe := (*panicError)(nil); errors.As(f.err, &pe) {
		fields = append(fields, zap.ByteString("stack", pe.stack))
	}
	f.run.node.logger.Error(msg, append(fields, extra...)...)
}

// waitExit waits for every goroutine of a cancelled group run, warning about
// its own members that take long to return. Deeper runnables are warned
// about by their own keepers, which are waiting too.
func (g *group) waitExit(live *tracker, runs []*run) {
	idle := live.idleChan()
	every := g.sup.cfg.exitWarning
	if every <= 0 {
		<-idle
		return
	}
	start := time.Now()
	t := time.NewTimer(every)
	defer t.Stop()
	for {
		select {
		case <-idle:
			return
		case <-t.C:
			g.warnSlow(runs, time.Since(start))
			t.Reset(every)
		}
	}
}

func (g *group) warnSlow(runs []*run, waited time.Duration) {
	var slow []*node
	g.sup.mu.Lock()
	for _, r := range runs {
		if !r.exited {
			slow = append(slow, r.node)
		}
	}
	g.sup.mu.Unlock()
	for _, n := range slow {
		n.logger.Warn("runnable is slow to return after cancellation", zap.Duration("waited", waited))
	}
}

// member calls one runnable and reports its outcome. The report is deferred
// so that it also happens when the runnable ends through runtime.Goexit.
func (g *group) member(r *run, results chan<- result) {
	err := ErrGoexit
	defer func() {
		results <- g.finish(r, err)
		r.live.done()
	}()
	err = call(r)
}

// call runs the runnable, turning a panic into an error that keeps its stack.
func call(r *run) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = &panicError{value: v, stack: debug.Stack()}
		}
	}()
	return r.node.runnable(r.ctx)
}

// finish classifies a returned run and records it in the tree.
func (g *group) finish(r *run, err error) result {
	s := g.sup
	n := r.node
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	r.exited = true
	res := result{run: r, at: now, healthyAt: r.healthyAt, restarts: n.restarts}
	switch {
	case err == nil && r.doneSignal:
		res.kind = resultDone
		n.setState(StateDone, now)
	case r.ctx.Err() != nil:
		// Whatever it returned, it returned because we cancelled it.
		res.kind = resultStopped
		n.setState(StateStopped, now)
	default:
		if err == nil {
			err = ErrReturnedWithoutDone
		}
		res.kind = resultFailed
		res.err = err
		n.lastErr = err.Error()
		n.setState(StateFailed, now)
		s.markDirty(n)
	}
	s.publishLocked()
	return res
}
