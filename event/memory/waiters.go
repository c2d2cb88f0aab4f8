package memory

import (
	"context"
	"math"
	"runtime"
	"sync/atomic"
)

// waitState is what a watcher needs once it has waited: made on its first
// wait and kept, so that an idle watcher stays small and a wait allocates
// nothing.
//
// Its word packs a registration: whether the watcher is on the value's
// stack of waiters (onStack), its state, whether Ready handed out the
// channel (forReady), and the version it waits to pass (want, meaningful
// while waiting):
//
//	idle ──register──► waiting ──claim──► (claiming ──►) signalled
//	  ▲                                                      │
//	  └───── register, once the signal is out of the slot ◄──┘
//
// Only the watcher's consumer registers. Set (for a version ≥ want), Close
// and the consumer's context claim; a registration is claimed once, and
// its claimer is the only one who sends, so at most one signal is ever in
// the slot. Before the consumer registers again, it takes the signal of
// the previous claim out of the slot, so a signal is never stale:
//
//   - a registration made by Get is claimed straight to signalled, then
//     signalled: the consumer knows whether its Get received the signal,
//     and if not, receives it (the claimer is about to send);
//   - a registration made by Ready goes through claiming, and its claimer
//     marks it signalled once the signal is in the slot: whoever selects on
//     the channel may have received the signal or not, so the consumer
//     waits for signalled and then drains the slot without blocking.
type waitState[T any] struct {
	w    *watcher[T]
	wake chan struct{} // one slot
	word atomic.Uint64
	// received is set when the consumer's Get received the signal of
	// the current registration; the consumer's.
	received bool
	// next links the stack; written by whoever pushes the waitState,
	// which only one side can do at a time (see push).
	next *waitState[T]

	// ctx is the context registration (see watcher.Get), claimed by
	// context.AfterFunc calling fire. lastDone is the Done channel of
	// the previous wait, owned by the consumer.
	ctx      atomic.Pointer[ctxWake]
	lastDone <-chan struct{}
	fire     func()
}

type ctxWake struct {
	done <-chan struct{}
	stop func() bool
}

// The word's layout.
const (
	onStack    = 1
	forReady   = 2
	stateShift = 2
	stateMask  = 3 << stateShift
	wantShift  = 4

	idle      = 0
	waiting   = 1
	claiming  = 2
	signalled = 3
)

func state(x uint64) uint64 { return (x & stateMask) >> stateShift }
func want(x uint64) uint64  { return x >> wantShift }

func withState(x, s uint64) uint64 { return x&^stateMask | s<<stateShift }

func newWaitState[T any](w *watcher[T]) *waitState[T] {
	ws := &waitState[T]{w: w, wake: make(chan struct{}, 1)}
	ws.fire = func() { ws.claim(math.MaxUint64, false, true) }
	return ws
}

// waitingFor reports whether the watcher is registered to be woken by a
// version above seen, not yet claimed, and (if ready) for Ready.
func (ws *waitState[T]) waitingFor(seen uint64, ready bool) bool {
	x := ws.word.Load()
	return state(x) == waiting && want(x) == seen+1 && (!ready || x&forReady != 0)
}

// register makes the watcher wait for a version above seen (for Ready, if
// ready) and puts it on v's stack unless it is there already. The caller
// checks the version and its closed flag again afterwards: whatever
// changed before the registration, it sees; whatever changes after,
// claims it.
func (ws *waitState[T]) register(v *Value[T], seen uint64, ready bool) {
	for {
		x := ws.word.Load()
		switch state(x) {
		case claiming:
			// A Ready registration's claimer is between its claim
			// and its send.
			runtime.Gosched()
			continue
		case signalled:
			if x&forReady != 0 {
				select {
				case <-ws.wake:
				default:
				}
			} else if !ws.received {
				// Sent right after the claim, if not already.
				<-ws.wake
				ws.received = true
			}
		}
		nx := onStack | waiting<<stateShift | (seen+1)<<wantShift
		if ready {
			nx |= forReady
		}
		if !ws.word.CompareAndSwap(x, nx) {
			continue
		}
		ws.received = false
		if x&onStack == 0 {
			v.push(ws)
		}
		return
	}
}

// claim wakes the watcher if it waits for a version up to limit: a Set's,
// or any (Close, the context). offStack also marks it off the stack, for
// the Set that took it off. A context claims only registrations made by
// Get (getOnly): Ready's channel says nothing about contexts, and
// AfterFunc may call fire after the Get it was made for has returned.
func (ws *waitState[T]) claim(limit uint64, offStack, getOnly bool) (claimed, waits bool) {
	for {
		x := ws.word.Load()
		if getOnly && x&forReady != 0 {
			return false, state(x) == waiting
		}
		if state(x) != waiting || want(x) > limit {
			if !offStack || state(x) == waiting {
				return false, state(x) == waiting
			}
			if ws.word.CompareAndSwap(x, x&^onStack) {
				return false, false
			}
			continue
		}
		nx := x
		if offStack {
			nx &^= onStack
		}
		if x&forReady == 0 {
			if ws.word.CompareAndSwap(x, withState(nx, signalled)) {
				ws.send()
				return true, false
			}
			continue
		}
		if ws.word.CompareAndSwap(x, withState(nx, claiming)) {
			ws.send()
			for {
				x := ws.word.Load()
				if ws.word.CompareAndSwap(x, withState(x, signalled)) {
					return true, false
				}
			}
		}
	}
}

func (ws *waitState[T]) send() {
	select {
	case ws.wake <- struct{}{}:
	default:
		// Unreachable: the slot is emptied before every registration
		// and only a registration's claimer sends.
	}
}

// dropCtx ends the context registration, if any.
func (ws *waitState[T]) dropCtx() {
	if c := ws.ctx.Swap(nil); c != nil {
		c.stop()
	}
}

// watchCtx has ctx claim the registration once it is done, replacing the
// registration of another context.
func (ws *waitState[T]) watchCtx(ctx context.Context, done <-chan struct{}) {
	c := &ctxWake{done: done, stop: context.AfterFunc(ctx, ws.fire)}
	if old := ws.ctx.Swap(c); old != nil {
		old.stop()
	}
	if ws.w.closed.Load() {
		// Close ran between our check and the Swap: it may have
		// missed c.
		ws.dropCtx()
	}
}

// push puts ws on the stack. Only one side pushes a given waitState at a
// time: the consumer when its registration found it off the stack, or the
// holder of setMu that took it off.
func (v *Value[T]) push(ws *waitState[T]) {
	for {
		top := v.waiters.Load()
		ws.next = top
		if v.waiters.CompareAndSwap(top, ws) {
			return
		}
	}
}

// wake claims, for version, every registration on the stack that waits for
// it, and takes those watchers off the stack; watchers that already saw
// version (they registered between its publication and now) stay on it.
// The caller holds setMu.
func (v *Value[T]) wake(version uint64) {
	if v.waiters.Load() == nil {
		return
	}
	top := v.waiters.Swap(nil)
	var keep *waitState[T]
	for ws := top; ws != nil; {
		next := ws.next
		if v.takeOff(ws, version) {
			ws.next = keep
			keep = ws
		}
		ws = next
	}
	for keep != nil {
		next := keep.next
		v.push(keep)
		keep = next
	}
	if v.stale.Load() != 0 {
		v.stale.Store(0)
	}
}

// takeOff claims ws's registration if it waits for version and marks it
// off the stack; it reports whether ws must stay on the stack instead: its
// watcher registered after version was published, to wait for a newer one.
func (v *Value[T]) takeOff(ws *waitState[T], version uint64) bool {
	_, waits := ws.claim(version, true, false)
	return waits
}

// minPrune is the number of watchers closed while on the stack that makes
// Close clean the stack up, at least.
const minPrune = 64

// closedOnStack notes that a watcher on the stack was closed. A value that
// is not Set again would otherwise keep such watchers forever; cleaning up
// once as many have been closed as were left on the stack by the previous
// clean-up keeps the cost per Close constant.
func (v *Value[T]) closedOnStack() {
	at := max(v.pruneAt.Load(), minPrune)
	if v.stale.Add(1) < at {
		return
	}
	v.setMu.Lock()
	defer v.setMu.Unlock()
	top := v.waiters.Swap(nil)
	var kept int64
	for ws := top; ws != nil; {
		next := ws.next
		if ws.w.closed.Load() {
			for {
				x := ws.word.Load()
				if ws.word.CompareAndSwap(x, x&^onStack) {
					break
				}
			}
		} else {
			// No Set runs while we hold setMu, so none misses ws
			// while it is off the stack.
			v.push(ws)
			kept++
		}
		ws = next
	}
	v.stale.Store(0)
	v.pruneAt.Store(kept)
}
