// Package etcd implements read-only event values backed by etcd: one key, or
// a range of keys, decoded into a Go type.
//
// A worker waits on "this node's record in the cluster store" exactly as it
// waits on an in-memory value: it depends on event.ValueWatch[T] and never
// sees etcd. Writes go through etcd (a Put by whoever owns the key); this
// package only reads, which is why it offers no Set.
//
// # Single key
//
// A Value over one key is unset while the key does not exist: the first Get
// blocks until it is created. Each later Get returns the newest data once the
// key has changed. A deletion of a key that a watcher has seen is delivered
// as the decoder's result for a nil value, so a decoder decides what "gone"
// means for its type (a nil pointer, a zero struct, an error).
//
// # Key ranges
//
// A Value over a range delivers keys one at a time, each as its decoder's
// result. A watcher first receives every key that exists when it starts (the
// backlog), then every key that changes. Changes are coalesced per key: a key
// that changed five times since the watcher last looked is delivered once,
// with its newest data. With the event.BacklogOnly option, Get returns the
// keys of the backlog and then event.ErrBacklogDone, which lists a range
// without waiting for changes.
//
// # Surviving etcd
//
// Each watcher lists its key or range, then watches from the revision after
// the listing. When the watch breaks (the member restarts, loses its leader,
// or the revision it resumes from was compacted away), the watcher lists
// again and compares the result with what it already knows: keys that changed
// during the gap are delivered with their newest data, keys that disappeared
// are delivered as deletions, and nothing is delivered twice. An update that
// writes the same bytes again (a new revision, equal data) wakes nobody.
//
// The state of the underlying watches is itself a value: Health reports, for
// the value as a whole, how many watchers are open and how many of them have
// an established watch, so a worker can wait for "the store is reachable"
// like anything else. It changes only when a watch is established, breaks or
// closes, never on an ordinary update, so watching it costs nothing while
// etcd is healthy. A value with no open watcher is not Connected: nobody is
// watching.
//
// # Decoder errors
//
// When the decoder rejects a key's bytes, Get returns the error (naming the
// key and revision) and moves past that update; the next Get returns the
// next good update. A corrupt key therefore surfaces once per change and
// never wedges the watcher.
package etcd

import (
	"sync"
	"sync/atomic"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/polis-os/polis/event"
	"github.com/polis-os/polis/event/memory"
)

// Decoder turns a key's stored bytes into T. value is nil when the key was
// deleted.
type Decoder[T any] func(key, value []byte) (T, error)

// Value is a read-only event value backed by one etcd key (RangeEnd empty)
// or by the keys in [Key, RangeEnd). The fields must be set before the first
// Watch; NewValue and NewPrefix fill them for the common cases.
type Value[T any] struct {
	// Client reaches etcd; usually a namespaced client.
	Client *clientv3.Client
	// Key is the watched key, or the start of the watched range.
	Key string
	// RangeEnd, when set, makes the value cover the keys in [Key, RangeEnd).
	RangeEnd string
	// Decode turns stored bytes into data.
	Decode Decoder[T]
	// Name identifies the value in logs and wake-up explanations.
	Name string

	health   memory.Value[Health]
	watchers atomic.Int64
	revision atomic.Int64 // newest revision any watcher has seen

	hmu         sync.Mutex // guards the health bookkeeping below
	established int        // open watchers whose watch is established
	listedAt    int64      // newest revision a watcher (re)started from
	lastErr     error      // why a watch last broke
}

// Health is the state of a value's etcd watches, summed over its open
// watchers.
type Health struct {
	// Watchers is the number of open watchers.
	Watchers int
	// Established is how many of them have a working watch.
	Established int
	// Connected holds when there is at least one watcher and every one of
	// them has a working watch.
	Connected bool
	// Revision is the newest etcd revision a watcher listed the key (or
	// range) at when its watch was last (re)established: the watchers are
	// at least this current.
	Revision int64
	// Err is why a watch last broke; nil once every watcher is connected
	// again.
	Err error
}

var (
	_ event.ValueWatch[int] = &Value[int]{}
	_ event.Describer       = &Value[int]{}
)

// NewValue returns a value backed by a single key.
func NewValue[T any](cli *clientv3.Client, key string, decode Decoder[T]) *Value[T] {
	return &Value[T]{Client: cli, Key: key, Decode: decode, Name: key}
}

// NewPrefix returns a value backed by every key that starts with prefix.
func NewPrefix[T any](cli *clientv3.Client, prefix string, decode Decoder[T]) *Value[T] {
	return &Value[T]{Client: cli, Key: prefix, RangeEnd: clientv3.GetPrefixRangeEnd(prefix), Decode: decode, Name: prefix}
}

// Watch returns a new watcher. It starts listing and watching etcd at once,
// in a goroutine of its own that Close stops.
func (v *Value[T]) Watch() event.Watcher[T] {
	v.watchChanged(1, 0, 0, nil)
	return startWatcher(v)
}

// Info reports the value's name, the newest revision its watchers have seen
// and the number of open watchers.
func (v *Value[T]) Info() event.Info {
	return event.Info{Name: v.Name, Version: uint64(v.revision.Load()), Watchers: int(v.watchers.Load())}
}

// Health is the state of the value's etcd watches, as an event value.
func (v *Value[T]) Health() event.ValueWatch[Health] { return &v.health }

func (v *Value[T]) isRange() bool { return v.RangeEnd != "" }

// sawRevision records rev as seen, keeping the maximum.
func (v *Value[T]) sawRevision(rev int64) {
	for {
		cur := v.revision.Load()
		if rev <= cur || v.revision.CompareAndSwap(cur, rev) {
			return
		}
	}
}

// watchChanged updates the health bookkeeping: delta watchers opened (+1)
// or closed (-1), est watches established (+1) or lost (-1), at revision
// rev, because of err. It publishes Health: it is only called when a watch
// starts, breaks or ends, never for an ordinary update.
func (v *Value[T]) watchChanged(delta, est int, rev int64, err error) {
	v.hmu.Lock()
	defer v.hmu.Unlock()
	v.established += est
	v.listedAt = max(v.listedAt, rev)
	if err != nil {
		v.lastErr = err
	}
	open := int(v.watchers.Add(int64(delta)))
	if open > 0 && v.established == open {
		v.lastErr = nil
	}
	v.health.Set(Health{
		Watchers:    open,
		Established: v.established,
		Connected:   open > 0 && v.established == open,
		Revision:    v.listedAt,
		Err:         v.lastErr,
	})
}
