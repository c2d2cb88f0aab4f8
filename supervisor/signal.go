package supervisor

import (
	"context"
	"fmt"
	"time"

	"go.uber.org/zap"
)

// SignalType is what a runnable tells its supervisor about itself.
type SignalType int

const (
	// SignalHealthy means the runnable has started its work: it has set up
	// what it serves or watches and its children are launched. Until then a
	// runnable is Running, which lets operators tell a stuck start from a
	// working service. It also starts the clock of the backoff reset.
	SignalHealthy SignalType = iota
	// SignalDone means the runnable has nothing more to do and is about to
	// return nil. It implies SignalHealthy. A done runnable is not restarted
	// and its children keep running.
	SignalDone
)

// String names the signal for messages.
func (s SignalType) String() string {
	switch s {
	case SignalHealthy:
		return "healthy"
	case SignalDone:
		return "done"
	}
	return fmt.Sprintf("signal(%d)", int(s))
}

// Signal reports the state of the runnable that owns ctx (or a context
// derived from it).
//
// Misuse is handled so that it cannot corrupt the tree: Signal panics when
// ctx belongs to no runnable or s is not a known signal, because both are
// programming errors that would otherwise go unnoticed. Signals from a run
// that has already returned (a goroutine it left behind) are ignored, so
// they cannot affect the next run; so are repeated signals, SignalHealthy
// after SignalDone, and signals while the runnable is being cancelled.
func Signal(ctx context.Context, s SignalType) {
	r := runFrom(ctx)
	if r == nil {
		panic(fmt.Sprintf("supervisor: Signal(%v) called with a context that does not belong to a supervised runnable", s))
	}
	if s != SignalHealthy && s != SignalDone {
		panic(fmt.Sprintf("supervisor: Signal called with unknown %v", s))
	}
	sup := r.node.sup
	sup.mu.Lock()
	defer sup.mu.Unlock()
	if r.exited {
		return
	}
	now := time.Now()
	if r.healthyAt.IsZero() {
		r.healthyAt = now
	}
	if s == SignalDone {
		r.doneSignal = true
	}
	if r.node.state == StateRunning {
		r.node.setState(StateHealthy, now)
		sup.publishLocked()
	}
}

// Logger returns the logger of the runnable that owns ctx, named after its
// place in the tree ("root.roleserve.controlplane"). For a context that
// belongs to no runnable it returns a no-op logger rather than failing, so
// that helpers can log whether or not they run supervised.
func Logger(ctx context.Context) *zap.Logger {
	if r := runFrom(ctx); r != nil {
		return r.node.logger
	}
	return zap.NewNop()
}
