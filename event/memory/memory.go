// Package memory implements event values that live in the memory of one
// process.
//
// A [Value] keeps only the newest data and its version. Set stores them and
// wakes the watchers blocked in Get (or selecting on Ready), and only those:
// each has a one-slot channel of its own, made once and reused for every
// wake-up, so a wake-up allocates nothing. An idle watcher is a small cursor
// (a pointer to the value and the version it last returned) that Set never
// looks at, so creating thousands of them costs little and a watcher nobody
// reads never slows anybody down.
//
// The zero Value is ready to use. Its Name and Equal fields configure it and
// must be set before the value is shared:
//
//	roles := memory.Value[Roles]{Name: "roles"}
//	status := memory.Value[string]{Name: "status", Equal: memory.Equal[string]}
//
// With Equal set, a Set whose data equals the current data is dropped: no new
// version, no wake-ups. That lets producers publish unconditionally ("here is
// the status again") without making every consumer react.
//
// Every value counts its Sets, its deliveries to watchers and its open
// watchers; see Metrics for exposing them to Prometheus.
package memory

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/polis-os/polis/event"
)

// Value is an in-memory event value. The zero value is an unset value ready to
// use. A Value must not be copied after first use.
type Value[T any] struct {
	// Name identifies the value in logs, metrics and wake-up explanations.
	// Set it before first use.
	Name string
	// Equal, when set, makes Set a no-op when the new data equals the current
	// data. Set it before first use.
	Equal func(a, b T) bool

	mu      sync.Mutex
	data    T
	version uint64 // 0 while unset
	// waiting are the watchers blocked in Get or selecting on Ready, which
	// the next Set wakes (and forgets). Idle watchers are not in it.
	waiting []*watcher[T]

	watchers atomic.Int64
	metrics  atomic.Pointer[valueMetrics]
}

var (
	_ event.Value[int] = &Value[int]{}
	_ event.Describer  = &Value[int]{}
)

// Equal compares comparable data with ==, for use as Value.Equal.
func Equal[T comparable](a, b T) bool { return a == b }

// Set replaces the value's data and wakes every watcher. It never blocks on
// watchers.
func (v *Value[T]) Set(data T) {
	v.mu.Lock()
	if v.Equal != nil && v.version != 0 && v.Equal(v.data, data) {
		v.mu.Unlock()
		return
	}
	v.data = data
	v.version++
	for i, w := range v.waiting {
		w.queued = false
		// The slot holds at most one wake-up; one is enough.
		select {
		case w.wake <- struct{}{}:
		default:
		}
		v.waiting[i] = nil
	}
	v.waiting = v.waiting[:0]
	v.mu.Unlock()
	v.getMetrics().sets.Inc()
}

// Watch returns a new watcher whose first Get returns the current data.
func (v *Value[T]) Watch() event.Watcher[T] {
	v.watchers.Add(1)
	v.getMetrics().watchers.Inc()
	return &watcher[T]{v: v}
}

// Info reports the value's name, version and number of open watchers.
func (v *Value[T]) Info() event.Info {
	v.mu.Lock()
	version := v.version
	v.mu.Unlock()
	return event.Info{Name: v.Name, Version: version, Watchers: int(v.watchers.Load())}
}

// load returns the current data and version of v if they are newer than
// what w last returned. Otherwise it queues w for the next Set and returns
// the channel that Set will signal.
func (v *Value[T]) load(w *watcher[T]) (T, uint64, <-chan struct{}) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.version > w.seen {
		return v.data, v.version, nil
	}
	if w.closed.Load() {
		// Close set the flag before it took the mutex: a Get that gets
		// here after Close must not wait for a signal already given.
		return v.data, v.version, event.ClosedChan()
	}
	if !w.queued {
		if w.wake == nil {
			w.wake = make(chan struct{}, 1)
		}
		// A wake-up left over from an earlier wait (one that ended for
		// another reason) would be a false alarm now. Only Set and Close
		// fill the slot, under the mutex held here, so len is exact.
		if len(w.wake) > 0 {
			<-w.wake
		}
		w.queued = true
		v.waiting = append(v.waiting, w)
	}
	return v.data, v.version, w.wake
}

// forget takes a closed w out of the queue of waiting watchers and wakes
// its Get, if one waits.
func (v *Value[T]) forget(w *watcher[T]) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if !w.queued {
		return
	}
	select {
	case w.wake <- struct{}{}:
	default:
	}
	w.queued = false
	if i := slices.Index(v.waiting, w); i >= 0 {
		v.waiting = slices.Delete(v.waiting, i, i+1)
	}
}

// watcher is kept small on purpose: an idle watcher is this struct and
// nothing else.
type watcher[T any] struct {
	v    *Value[T]
	seen uint64 // version last returned by Get
	// wake is the one-slot channel Set (and Close) signal while the
	// watcher is queued; made on the first wait and reused. Guarded, with
	// queued, by the value's mutex.
	wake   chan struct{}
	busy   atomic.Bool
	closed atomic.Bool
	queued bool
}

func (w *watcher[T]) Get(ctx context.Context, opts ...event.GetOption[T]) (T, error) {
	var zero T
	o := event.ParseGetOptions(opts)
	if !w.busy.CompareAndSwap(false, true) {
		return zero, event.ErrConcurrentGet
	}
	defer w.busy.Store(false)
	for {
		if w.closed.Load() {
			return zero, event.ErrClosed
		}
		data, version, wake := w.v.load(w)
		if wake == nil {
			w.seen = version
			if o.Accepts(data) {
				w.v.getMetrics().deliveries.Inc()
				return data, nil
			}
			continue
		}
		// Close signals the same channel, so a Get without a deadline
		// waits on one channel only: the wake-up costs what a channel
		// receive costs.
		if done := ctx.Done(); done == nil {
			<-wake
		} else {
			select {
			case <-wake:
			case <-done:
				return zero, ctx.Err()
			}
		}
	}
}

func (w *watcher[T]) Ready() <-chan struct{} {
	_, _, wake := w.v.load(w)
	if wake == nil {
		return event.ClosedChan()
	}
	return wake
}

func (w *watcher[T]) LastVersion() uint64 { return w.seen }

func (w *watcher[T]) Close() error {
	if !w.closed.CompareAndSwap(false, true) {
		return nil
	}
	w.v.forget(w)
	w.v.watchers.Add(-1)
	w.v.getMetrics().watchers.Dec()
	return nil
}
