package memory

import (
	"context"
	"sync/atomic"

	"github.com/polis-os/polis/event"
)

// watcher is kept small on purpose: an idle watcher that never waited is
// this struct and nothing else.
type watcher[T any] struct {
	v    *Value[T]
	seen uint64 // version last returned by Get; the consumer's
	// ws is made by the first wait (Get or Ready) and kept; Close reads
	// it from any goroutine.
	ws     atomic.Pointer[waitState[T]]
	busy   atomic.Bool
	closed atomic.Bool
}

func (w *watcher[T]) waitState() *waitState[T] {
	if ws := w.ws.Load(); ws != nil {
		return ws
	}
	ws := newWaitState(w)
	w.ws.Store(ws)
	return ws
}

func (w *watcher[T]) Get(ctx context.Context, opts ...event.GetOption[T]) (T, error) {
	var zero T
	o := event.ParseGetOptions(opts)
	if !w.busy.CompareAndSwap(false, true) {
		return zero, event.ErrConcurrentGet
	}
	defer w.busy.Store(false)
	done := ctx.Done()
	for {
		if w.closed.Load() {
			return zero, event.ErrClosed
		}
		if w.v.version.Load() > w.seen {
			if data, version, ok := w.v.read(w.seen); ok {
				w.seen = version
				if o.Accepts(data) {
					w.v.getMetrics().deliveries.Inc()
					return data, nil
				}
				continue
			}
		}
		ws := w.waitState()
		if !ws.waitingFor(w.seen, false) {
			// Register, then look again (closed, version) before
			// blocking: see register.
			ws.register(w.v, w.seen, false)
			continue
		}
		// Registered, and nothing newer: block until the registration
		// is claimed. Close claims it too, so a Get without a deadline
		// waits on its one channel.
		if done == nil {
			<-ws.wake
			ws.received = true
			continue
		}
		if c := ws.ctx.Load(); c != nil && c.done == done {
			// The context claims the registration once it is done
			// (context.AfterFunc), so this wait is one channel too.
			select {
			case <-done:
				return zero, ctx.Err()
			default:
			}
			<-ws.wake
			ws.received = true
			continue
		}
		select {
		case <-done:
			// Done already. (Contexts that were done before their
			// first Done call share one closed channel, so lastDone
			// must never be taken for them.)
			return zero, ctx.Err()
		default:
		}
		if ws.lastDone == done {
			// The second wait with this context: the consumer waits
			// in a loop with it, so registering it with the context
			// (one allocation) pays off. A context made for one Get
			// is never registered: its cancel would only start the
			// AfterFunc goroutine for nothing. The registration lasts
			// until the context ends, another is made, or Close.
			// (A Context type of one's own,
			// not derived from the standard ones, costs a goroutine
			// for as long: that is how AfterFunc watches it.)
			ws.watchCtx(ctx, done)
			continue
		}
		ws.lastDone = done
		select {
		case <-ws.wake:
			ws.received = true
		case <-done:
			return zero, ctx.Err()
		}
	}
}

func (w *watcher[T]) Ready() <-chan struct{} {
	for {
		if w.closed.Load() || w.v.version.Load() > w.seen {
			return event.ClosedChan()
		}
		ws := w.waitState()
		if ws.waitingFor(w.seen, true) {
			return ws.wake
		}
		ws.register(w.v, w.seen, true)
	}
}

func (w *watcher[T]) LastVersion() uint64 { return w.seen }

func (w *watcher[T]) Close() error {
	if !w.closed.CompareAndSwap(false, true) {
		return nil
	}
	if ws := w.ws.Load(); ws != nil {
		// Wake a Get (or a select on Ready) waiting on the watcher.
		ws.claim(^uint64(0), false, false)
		ws.dropCtx()
		if ws.word.Load()&onStack != 0 {
			w.v.closedOnStack()
		}
	}
	w.v.watchers.Add(-1)
	w.v.getMetrics().watchers.Dec()
	return nil
}
