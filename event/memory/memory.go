// Package memory implements event values that live in the memory of one
// process.
//
// A [Value] keeps only the newest data and its version. Set publishes them
// and wakes the watchers blocked in Get (or selecting on Ready), and only
// those: an idle watcher is a small cursor (a pointer to the value and the
// version it last returned) that Set never looks at, so creating thousands
// of them costs little and a watcher nobody reads never slows anybody down.
//
// # The hand-off
//
// The path from Set to a Get blocked in another goroutine is built to cost
// little more than a channel hand-off: no lock is shared by the two sides,
// nothing is allocated, and the consumer blocks on one channel.
//
//   - The version is an atomic counter, so a Get finds out without a lock
//     whether there is newer data, and reads it from a "box" behind an
//     atomic pointer. Set fills a spare box and publishes it; a value
//     recycles two boxes, and readers count themselves in and out of a box
//     while they copy from it, so that Set never writes into a box being
//     read (it takes a new box then, which is rare), and needs no atomic
//     operation of its own to find out. Steady Sets allocate nothing.
//   - A watcher about to block registers, in an atomic word of its own, the
//     version it waits to pass, and pushes itself onto the value's
//     lock-free stack of waiters if it is not on it already. Set takes the
//     whole stack with one atomic swap, claims each registration with a
//     compare-and-swap, and sends on the claimed watcher's one-slot
//     channel, made on its first wait and reused. A registration is claimed
//     once, by a Set that passes its version, by Close or by the watcher's
//     context, and its claimer alone sends, so a signal is never stale and
//     Ready's channel signals only when Get would not block (waiters.go).
//   - A Get that waits with a context whose Done channel it waited on
//     before (a consumer's loop) lets the context claim its registration
//     through context.AfterFunc, so it too blocks on its channel alone: a
//     select over the channel and ctx.Done() costs more than all the rest
//     of the hand-off. A context made for one Get is selected on instead;
//     registering it would cost an allocation for one wait.
//
// Sets are serialised by a mutex of their own, which Get and Ready never
// take (Close does, when it cleans the stack of closed watchers up): Set
// never blocks on watchers, however slow or abandoned they are. No
// update is missed: a watcher registers before it looks at the version one
// last time, and Set publishes the version before it takes the stack, so
// one of the two sees the other.
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

	// cur is the box of the newest data, nil while unset.
	cur atomic.Pointer[box[T]]
	// version is cur's version, published after cur: a watcher that sees
	// a version finds its box (or a newer one) in cur.
	version atomic.Uint64
	// waiters is the top of the stack of watchers registered to be woken
	// by the next Set (see waiters.go).
	waiters atomic.Pointer[waitState[T]]
	// stale counts watchers closed while on the stack since it was last
	// emptied; pruneAt is how many make Close clean the stack up.
	stale   atomic.Int64
	pruneAt atomic.Int64

	// setMu serialises writers: Sets and the stack's clean-up. Watchers
	// never take it.
	setMu sync.Mutex
	spare *box[T] // the box the next Set fills; guarded by setMu

	watchers atomic.Int64
	metrics  atomic.Pointer[valueMetrics]
}

var (
	_ event.Value[int] = &Value[int]{}
	_ event.Describer  = &Value[int]{}
)

// Equal compares comparable data with ==, for use as Value.Equal.
func Equal[T comparable](a, b T) bool { return a == b }

// box holds one version of a value's data. Only Sets write into a box,
// and only into one that is not current and that no reader is in: users
// counts the readers copying out of it. A reader counts itself in and only
// then checks that the box is still current, so a Set that finds no reader
// in a box that is no longer current knows that none will read it until it
// is published again.
type box[T any] struct {
	data    T
	version uint64
	users   atomic.Int64
}

// Set replaces the value's data and wakes every watcher waiting for it. It
// never blocks on watchers.
func (v *Value[T]) Set(data T) {
	v.setMu.Lock()
	old := v.cur.Load()
	if v.Equal != nil && old != nil && v.Equal(old.data, data) {
		v.setMu.Unlock()
		return
	}
	b := v.spare
	if b == nil || b.users.Load() != 0 {
		// The first Sets, or a reader is still copying out of the
		// spare box (it got in before the previous Set): a new box.
		b = new(box[T])
	}
	version := v.version.Load() + 1
	b.data, b.version = data, version
	v.cur.Store(b)
	v.version.Store(version)
	v.wake(version)
	if old != nil && old.users.Load() == 0 {
		// Nobody reads the box that was current, and nobody will
		// before the next Set fills it: drop its data, so that a value
		// keeps only its newest data alive. (If a reader is in it, the
		// next Set takes a new box anyway.)
		var zero T
		old.data = zero
	}
	v.spare = old
	v.setMu.Unlock()
	v.getMetrics().sets.Inc()
}

// read returns the newest data and its version if that version is above
// seen; ok is false when there is no such data.
func (v *Value[T]) read(seen uint64) (data T, version uint64, ok bool) {
	for {
		b := v.cur.Load()
		if b == nil {
			return data, 0, false
		}
		b.users.Add(1)
		if v.cur.Load() != b {
			// Replaced before we counted ourselves in: a Set may be
			// writing into it. Read the new box.
			b.users.Add(-1)
			continue
		}
		d, ver := b.data, b.version
		b.users.Add(-1)
		if ver > seen {
			return d, ver, true
		}
		return data, 0, false
	}
}

// Watch returns a new watcher whose first Get returns the current data.
func (v *Value[T]) Watch() event.Watcher[T] {
	v.watchers.Add(1)
	v.getMetrics().watchers.Inc()
	return &watcher[T]{v: v}
}

// Info reports the value's name, version and number of open watchers.
func (v *Value[T]) Info() event.Info {
	return event.Info{Name: v.Name, Version: v.version.Load(), Watchers: int(v.watchers.Load())}
}
