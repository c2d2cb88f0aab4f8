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
	if !w.queued {
		if w.wake == nil {
			w.wake = make(chan struct{}, 1)
		}
		// A wake-up left over from an earlier wait (one that ended for
		// another reason) would be a false alarm now.
		select {
		case <-w.wake:
		default:
		}
		w.queued = true
		v.waiting = append(v.waiting, w)
	}
	return v.data, v.version, w.wake
}

// forget takes w out of the queue of waiting watchers.
func (v *Value[T]) forget(w *watcher[T]) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if !w.queued {
		return
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

	mu   sync.Mutex    // guards closed and done
	done chan struct{} // created when a Get first blocks; closed by Close
	// wake is the one-slot channel Set signals while the watcher is
	// queued; made on the first wait and reused. Guarded, with queued,
	// by the value's mutex.
	wake   chan struct{}
	busy   atomic.Bool
	closed bool
	queued bool
}

func (w *watcher[T]) Get(ctx context.Context, opts ...event.GetOption[T]) (T, error) {
	var zero T
	o := event.ParseGetOptions(opts)
	if !w.busy.CompareAndSwap(false, true) {
		return zero, event.ErrConcurrentGet
	}
	defer w.busy.Store(false)

	done, err := w.doneChan()
	if err != nil {
		return zero, err
	}
	for {
		data, version, wake := w.v.load(w)
		if wake == nil {
			w.seen = version
			if o.Accepts(data) {
				w.v.getMetrics().deliveries.Inc()
				return data, nil
			}
			continue
		}
		select {
		case <-wake:
		case <-done:
			return zero, event.ErrClosed
		case <-ctx.Done():
			return zero, ctx.Err()
		}
	}
}

// doneChan returns the channel closed by Close, creating it on first use, or
// ErrClosed if the watcher is already closed.
func (w *watcher[T]) doneChan() (<-chan struct{}, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return nil, event.ErrClosed
	}
	if w.done == nil {
		w.done = make(chan struct{})
	}
	return w.done, nil
}

func (w *watcher[T]) Ready() <-chan struct{} {
	w.mu.Lock()
	closed := w.closed
	w.mu.Unlock()
	if closed {
		return event.ClosedChan()
	}
	_, _, wake := w.v.load(w)
	if wake == nil {
		return event.ClosedChan()
	}
	return wake
}

func (w *watcher[T]) LastVersion() uint64 { return w.seen }

func (w *watcher[T]) Close() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return nil
	}
	w.closed = true
	if w.done != nil {
		close(w.done)
	}
	w.v.forget(w)
	w.v.watchers.Add(-1)
	w.v.getMetrics().watchers.Dec()
	return nil
}
