// Package memory implements event values that live in the memory of one
// process.
//
// A [Value] keeps only the newest data and its version. Set stores them and,
// if any Get is blocked, closes one broadcast channel that all blocked Gets
// wait on; it never looks at individual watchers. An idle watcher is a small
// cursor (a pointer to the value and the version it last returned), so
// creating thousands of them costs little and a watcher nobody reads never
// slows anybody down.
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
	// wake is closed (and cleared) by the next Set. It is created lazily by a
	// Get that has to block, so a Set with no blocked Get allocates nothing.
	wake chan struct{}

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
	wake := v.wake
	v.wake = nil
	v.mu.Unlock()
	if wake != nil {
		close(wake)
	}
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

// load returns the current data and version, and, if the version is not newer
// than seen, a channel closed by the next Set.
func (v *Value[T]) load(seen uint64, wantWake bool) (T, uint64, <-chan struct{}) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.version > seen || !wantWake {
		return v.data, v.version, nil
	}
	if v.wake == nil {
		v.wake = make(chan struct{})
	}
	return v.data, v.version, v.wake
}

// watcher is kept small on purpose: an idle watcher is this struct and
// nothing else.
type watcher[T any] struct {
	v    *Value[T]
	seen uint64 // version last returned by Get
	busy atomic.Bool

	mu     sync.Mutex // guards closed and done
	closed bool
	done   chan struct{} // created when a Get first blocks; closed by Close
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
		data, version, wake := w.v.load(w.seen, true)
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
	_, _, wake := w.v.load(w.seen, true)
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
	w.v.watchers.Add(-1)
	w.v.getMetrics().watchers.Dec()
	return nil
}
