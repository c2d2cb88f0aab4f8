// Package event defines Polis' event values: typed, versioned pieces of state
// that one side Sets and any number of consumers Watch.
//
// # Why not channels
//
// A channel is a queue. A producer that publishes "the current roles of this
// node" through a channel forces every consumer to drain every stale update
// before it sees the one that matters, and the producer must either block on
// the slowest consumer or guess a buffer size and lose data once the guess is
// wrong. A consumer that starts late has nothing to read at all, and a
// condition variable cannot be cancelled by a context. Most state in a cluster
// node is not a log of events but a current value: the roles, the membership,
// the status of a service. Event values model exactly that.
//
// # The model
//
// A [Value] holds data of one type. It starts unset. [Value.Set] replaces the
// data and bumps its version; it never blocks on consumers, however slow or
// abandoned they are, and it keeps no queue. [ValueWatch.Watch] returns a
// [Watcher], a consumer's private cursor into the value:
//
//   - the first [Watcher.Get] returns the current data, blocking while the
//     value is unset;
//   - every later Get blocks until the value has been Set again and returns the
//     newest data. Intermediate updates may be skipped, but an update is never
//     missed: a watcher whose last-seen version is older than the value's
//     always wakes;
//   - Get honours its context, and a cancelled Get leaves the watcher usable;
//   - the [Filter] option makes Get wait for data that satisfies a predicate;
//   - Get on one watcher from two goroutines at once is an error
//     ([ErrConcurrentGet]); use one watcher per consumer;
//   - [Watcher.Close] releases the watcher and wakes a Get blocked on it, which
//     returns [ErrClosed]. Closing twice is harmless.
//
// The read side ([ValueWatch]) is split from the write side ([Value]) so that
// a backend whose writes go elsewhere (etcd: writes are etcd Puts) can still
// hand consumers the one type they depend on.
//
// # Waiting on several values
//
// Workers usually react to a combination of values: "once the node has
// credentials and its roles are known, do X". [Inputs] expresses that without a
// goroutine per input: each input is registered once with a predicate, and
// [Inputs.Wait] blocks until every input satisfies its predicate and at least
// one of them changed since the previous Wait. It then reports why it woke up
// ([Why]: which inputs changed, from which version to which), so a worker can
// log the cause of each reaction. This works for every backend because every
// [Watcher] exposes [Watcher.Ready], a channel that becomes ready to receive
// once Get would return without blocking.
//
// # Ranges
//
// A set of keys that each hold data (the node records of a cluster) is a
// range, with a type of its own: [RangeWatch], whose data is a [Snapshot] of
// every key at one version, plus which keys changed since the watcher's
// previous Get. A range is waited on like any value, and a key whose data is
// corrupt is reported for that key, not as a failure of every Get.
//
// # What this package does not do
//
// It does not keep history: a consumer that needs every update needs a queue,
// not a value. It does not copy data: a value
// of a pointer or slice type hands the same memory to every consumer, so such
// data must be treated as immutable once Set.
//
// Implementations live in subpackages: event/memory for in-process values and
// event/etcd for values backed by etcd. event/eventtest is the conformance
// suite every implementation passes.
package event

import (
	"context"
	"errors"
)

// ValueWatch is the read side of an event value. Consumers depend on it, so
// that any backend can feed them.
type ValueWatch[T any] interface {
	// Watch returns a new watcher positioned before the first update: its first
	// Get returns the current data. The caller must Close it.
	Watch() Watcher[T]
}

// Value is an event value that can be both Set and watched.
type Value[T any] interface {
	ValueWatch[T]
	// Set replaces the value's data, waking all watchers. It never blocks on
	// watchers.
	Set(data T)
}

// Watcher is one consumer's cursor into a value. It is not safe for
// concurrent Get calls; Close may be called from any goroutine.
type Watcher[T any] interface {
	// Get returns data newer than what this watcher last returned (or the
	// current data, on the first call), blocking until there is some. See the
	// package documentation for the exact semantics.
	Get(ctx context.Context, opts ...GetOption[T]) (T, error)
	// Ready returns a channel that becomes ready to receive (it is closed,
	// or it receives a value) once a Get without options would return
	// without blocking: newer data is available, or the watcher is closed.
	// It lets one goroutine wait on many watchers at once (see Inputs).
	// A receive may consume the signal: call Ready again rather than
	// receive twice. The channel must not be kept across Gets, and one
	// obtained before Close need not be signalled by Close: whoever closes
	// a watcher it selects on must wake itself (Inputs does, through its
	// own Close).
	Ready() <-chan struct{}
	// Close releases the watcher and wakes a Get blocked on it. It is safe to
	// call more than once and from any goroutine.
	Close() error
}

// Versioned is implemented by watchers that can say which version of the
// value their last Get returned. Versions increase with every update; their
// meaning is the backend's (a sequence number in memory, an etcd revision in
// etcd). Inputs uses it to explain wake-ups.
type Versioned interface {
	// LastVersion is the version of the data last returned by Get, or 0 if Get
	// has not returned data yet.
	LastVersion() uint64
}

// Info is a snapshot of a value's bookkeeping, for logs, status pages, metrics
// and tests.
type Info struct {
	// Name identifies the value in logs and metrics; it may be empty.
	Name string
	// Version is the number of the newest update, 0 while unset.
	Version uint64
	// Watchers is the number of watchers that have not been closed.
	Watchers int
}

// Describer is implemented by values that can report their bookkeeping.
type Describer interface {
	Info() Info
}

// Errors returned by watchers.
var (
	// ErrClosed is returned by Get on a closed watcher.
	ErrClosed = errors.New("event: watcher closed")
	// ErrConcurrentGet is returned by Get when another Get is already running
	// on the same watcher. Each consumer needs its own watcher.
	ErrConcurrentGet = errors.New("event: concurrent Get on one watcher")
)

// GetOption changes the behaviour of one Watcher.Get call. Options are plain
// values made by Filter.
type GetOption[T any] struct {
	filter func(T) bool
}

// Filter makes Get wait for data that satisfies pred. Data that does not is
// consumed silently: the watcher moves past it.
func Filter[T any](pred func(T) bool) GetOption[T] {
	return GetOption[T]{filter: pred}
}

// GetOptions is the combined effect of a list of options. Backends call
// ParseGetOptions; consumers never need it.
type GetOptions[T any] struct {
	// Filter is nil when every datum is acceptable.
	Filter func(T) bool
}

// ParseGetOptions combines opts. Several filters must all be satisfied.
func ParseGetOptions[T any](opts []GetOption[T]) GetOptions[T] {
	var res GetOptions[T]
	for _, o := range opts {
		if o.filter == nil {
			continue
		}
		if prev := res.Filter; prev != nil {
			next := o.filter
			res.Filter = func(d T) bool { return prev(d) && next(d) }
		} else {
			res.Filter = o.filter
		}
	}
	return res
}

// Accepts reports whether d passes the filter (if any).
func (o GetOptions[T]) Accepts(d T) bool {
	return o.Filter == nil || o.Filter(d)
}

// closedChan is a channel that is always closed, returned by Ready when a
// watcher has something to return.
var closedChan = func() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}()

// ClosedChan returns a channel that is already closed. Backends return it from
// Ready when Get would not block, so that no channel is allocated.
func ClosedChan() <-chan struct{} { return closedChan }

// Get is a convenience for a one-off read: it watches v, returns the first
// datum that passes opts, and closes the watcher.
func Get[T any](ctx context.Context, v ValueWatch[T], opts ...GetOption[T]) (T, error) {
	w := v.Watch()
	defer w.Close()
	return w.Get(ctx, opts...)
}
