// Package etcd implements read-only event values backed by etcd: one key as
// an event.ValueWatch, or a range of keys as an event.RangeWatch, decoded
// into a Go type.
//
// A worker waits on "this node's record in the cluster store" exactly as it
// waits on an in-memory value: it depends on event.ValueWatch[T] and never
// sees etcd. Writes go through etcd (a Put by whoever owns the key); this
// package only reads, which is why it offers no Set.
//
// # One key: Value
//
// A Value over one key is unset while the key does not exist: the first Get
// blocks until it is created. A key created and deleted again before the
// first Get is, for that watcher, a key that never existed: the first Get
// keeps blocking. Each later Get returns the newest data once the key has
// changed. A deletion of a key that a watcher has seen is delivered as the
// decoder's result for a nil value, so a decoder decides what "gone" means
// for its type (a nil pointer, a zero struct, an error). Versions are the
// key's modification revisions.
//
// # Key ranges: Range
//
// A Range over [Start, End) (NewPrefix: every key under a prefix) delivers
// event.Snapshots: every existing key with its decoded data, the revision
// the snapshot is current at, and which keys changed since the watcher's
// previous Get. The first Get returns the whole range as listed (empty if
// no key exists); later Gets block until a key changes. Changes are
// coalesced: a key that changed five times since the watcher last looked
// appears once, with its newest data, and a key created and deleted in
// between does not appear at all. Snapshot versions are etcd revisions and
// only increase.
//
// # Surviving etcd
//
// Each watcher lists its key or range, then watches from the revision after
// the listing. When the member loses its raft leader (an election, or a
// member cut off from the others) etcd ends the watch after three election
// timeouts; the watcher then resumes it from the revision it had, without
// listing again and still counted as established (Health.Leaderless), for
// up to LeaderlessGrace: from that revision etcd replays every change made
// meanwhile, so nothing is missed. When the watch breaks
// otherwise (the member restarts, the revision it resumes from was
// compacted away) or stays leaderless beyond the grace, the watcher lists
// again and compares the result with what it already knows: keys that changed
// during the gap are delivered with their newest data, keys that disappeared
// are delivered as deletions, and nothing is delivered twice. An update that
// writes the same bytes again (a new revision, equal data) wakes nobody.
//
// # Progress
//
// A range's watchers also say where they stand (Progresser): given etcd's
// revision from any quorum read, Progress asks etcd for a progress
// notification on the watch's stream and returns the snapshot Version by
// which the watcher holds every change up to that revision, even when the
// range's own keys have not changed since. A consumer that serves reads
// from a range's snapshots (the curator's node cache) makes them
// linearizable with one read of a single key and this, instead of a read
// of the range, whose cost grows with it.
//
// # Health
//
// The state of the underlying watches is itself a value: Health reports, for
// the Value or Range as a whole, how many watchers are open, how many of them
// have an established watch, and which keys hold data the decoder rejects,
// so a worker can wait for "the store is reachable" like anything else. It
// changes only when a watch is established, breaks or closes, or when a key
// turns corrupt or is repaired, never on an ordinary update, so watching it
// costs nothing while etcd is healthy. A value with no open watcher is not
// Connected: nobody is watching.
//
// # Decoder errors
//
// When the decoder rejects a single key's bytes, Get returns the error
// (naming the key and revision) and moves past that update; the next Get
// returns the next good update. In a range, a rejected key is reported for
// that key alone (its Entry's Err) and Get succeeds with the other keys.
// Either way the key is listed in Health.Corrupt until good data replaces
// it, and a corrupt key never wedges a watcher.
package etcd

import (
	"cmp"
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/polis-os/polis/event"
	"github.com/polis-os/polis/event/memory"
)

// Decoder turns a key's stored bytes into T. value is nil when the key was
// deleted (only for a Value: a Range drops deleted keys).
type Decoder[T any] func(key, value []byte) (T, error)

// Value is a read-only event value backed by one etcd key. The fields must
// be set before the first Watch; NewValue fills them.
type Value[T any] struct {
	// Client reaches etcd; usually a namespaced client.
	Client *clientv3.Client
	// Key is the watched key.
	Key string
	// Decode turns stored bytes into data.
	Decode Decoder[T]
	// Name identifies the value in logs and wake-up explanations.
	Name string
	// LeaderlessGrace is how long a watch whose etcd member lost its raft
	// leader resumes from its revision, still established, before it is
	// given up and the key re-read; 0 means DefaultLeaderlessGrace.
	LeaderlessGrace time.Duration

	book book
}

// Range is a read-only event range backed by the etcd keys in [Start, End).
// The fields must be set before the first Watch; NewPrefix fills them.
type Range[T any] struct {
	// Client reaches etcd; usually a namespaced client.
	Client *clientv3.Client
	// Start is the first key of the range; End is the first key after it.
	Start, End string
	// Decode turns stored bytes into data.
	Decode Decoder[T]
	// Name identifies the range in logs and wake-up explanations.
	Name string
	// LeaderlessGrace is as Value's.
	LeaderlessGrace time.Duration

	book book
}

// Progresser is implemented by the watchers of a Range (Range.Watch's):
// what a consumer of the range needs to serve a linearizable read from
// what it has got, without reading the range again. Given etcd's revision
// rev (from any quorum read made after the read's call arrived), Progress
// waits until etcd has said that this watcher's watch has delivered every
// change up to rev (it asks etcd, with a progress request on the watch's
// stream), and returns a snapshot Version: once this watcher's Get has
// returned a snapshot of that Version or later, that snapshot holds every
// change up to rev. It costs etcd no read of the range, whatever its
// size; it waits while the watch is broken, until ctx ends.
type Progresser interface {
	Progress(ctx context.Context, rev int64) (uint64, error)
}

var _ Progresser = &rangeWatcher[int]{}

// Health is the state of a value's (or range's) etcd watches, summed over
// its open watchers.
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
	// Leaderless is how many of the established watchers have a watch
	// that broke because their etcd member lost its raft leader and that
	// resume it from their revision once the member has one again
	// (LeaderlessGrace).
	Leaderless int
	// Relists counts the times a watcher re-read the whole key or range
	// because its watch broke (its first listing is not counted).
	Relists int
	// Err is why a watch last broke; nil once every watcher is connected
	// again.
	Err error
	// Corrupt lists, sorted, the keys whose newest data the decoder
	// rejected.
	Corrupt []string
}

var (
	_ event.ValueWatch[int] = &Value[int]{}
	_ event.Describer       = &Value[int]{}
	_ event.RangeWatch[int] = &Range[int]{}
	_ event.Describer       = &Range[int]{}
)

// NewValue returns a value backed by a single key.
func NewValue[T any](cli *clientv3.Client, key string, decode Decoder[T]) *Value[T] {
	return &Value[T]{Client: cli, Key: key, Decode: decode, Name: key}
}

// NewPrefix returns a range of every key that starts with prefix.
func NewPrefix[T any](cli *clientv3.Client, prefix string, decode Decoder[T]) *Range[T] {
	return &Range[T]{Client: cli, Start: prefix, End: clientv3.GetPrefixRangeEnd(prefix), Decode: decode, Name: prefix}
}

// Watch returns a new watcher. It starts listing and watching etcd at once,
// in a goroutine of its own that Close stops.
func (v *Value[T]) Watch() event.Watcher[T] {
	return &keyWatcher[T]{f: startFollower(v.Client, v.Key, "", cmp.Or(v.LeaderlessGrace, DefaultLeaderlessGrace), &v.book), decode: v.Decode}
}

// Watch returns a new watcher of the range. It starts listing and watching
// etcd at once, in a goroutine of its own that Close stops.
func (r *Range[T]) Watch() event.Watcher[*event.Snapshot[T]] {
	return &rangeWatcher[T]{f: startFollower(r.Client, r.Start, r.End, cmp.Or(r.LeaderlessGrace, DefaultLeaderlessGrace), &r.book), decode: r.Decode}
}

// Info reports the value's name, the newest revision its watchers have seen
// and the number of open watchers.
func (v *Value[T]) Info() event.Info { return v.book.info(v.Name) }

// Info reports the range's name, the newest revision its watchers have seen
// and the number of open watchers.
func (r *Range[T]) Info() event.Info { return r.book.info(r.Name) }

// Health is the state of the value's etcd watches, as an event value.
func (v *Value[T]) Health() event.ValueWatch[Health] { return &v.book.health }

// Health is the state of the range's etcd watches, as an event value.
func (r *Range[T]) Health() event.ValueWatch[Health] { return &r.book.health }

// book is the bookkeeping a Value or Range shares among its watchers.
type book struct {
	health   memory.Value[Health]
	revision atomic.Int64 // newest revision any watcher has seen

	mu          sync.Mutex // guards the rest
	watchers    int
	established int              // open watchers whose watch is established
	leaderless  int              // established watchers resuming after their member lost its leader
	relists     int              // re-listings after a broken watch
	listedAt    int64            // newest revision a watcher (re)started from
	lastErr     error            // why a watch last broke
	decodedAt   map[string]int64 // revision of the newest decoding of a key
	corrupt     map[string]bool
}

func (b *book) info(name string) event.Info {
	b.mu.Lock()
	n := b.watchers
	b.mu.Unlock()
	return event.Info{Name: name, Version: uint64(b.revision.Load()), Watchers: n}
}

// sawRevision records rev as seen, keeping the maximum.
func (b *book) sawRevision(rev int64) {
	for {
		cur := b.revision.Load()
		if rev <= cur || b.revision.CompareAndSwap(cur, rev) {
			return
		}
	}
}

// watchChanged updates the health bookkeeping: delta watchers opened (+1)
// or closed (-1), est watches established (+1) or lost (-1), at revision
// rev, because of err. It is only called when a watch starts, breaks or
// ends, never for an ordinary update.
func (b *book) watchChanged(delta, est int, rev int64, err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.watchers += delta
	b.established += est
	b.listedAt = max(b.listedAt, rev)
	if err != nil {
		b.lastErr = err
	}
	if b.watchers > 0 && b.established == b.watchers {
		b.lastErr = nil
	}
	b.publishLocked()
}

// leaderlessChanged counts a watcher whose member lost (+1) or found
// again (-1) its raft leader.
func (b *book) leaderlessChanged(delta int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.leaderless += delta
	b.publishLocked()
}

// relisted counts a re-listing after a broken watch.
func (b *book) relisted() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.relists++
	b.publishLocked()
}

// decoded records the outcome of decoding key's data of revision rev (err
// nil for good data or a deletion), publishing Health when the set of
// corrupt keys changes. A watcher that lags behind another cannot bring
// back a corruption already repaired.
func (b *book) decoded(key string, rev int64, err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if rev < b.decodedAt[key] {
		return
	}
	if b.decodedAt == nil {
		b.decodedAt, b.corrupt = map[string]int64{}, map[string]bool{}
	}
	b.decodedAt[key] = rev
	if (err != nil) == b.corrupt[key] {
		return
	}
	if err != nil {
		b.corrupt[key] = true
	} else {
		delete(b.corrupt, key)
	}
	b.publishLocked()
}

func (b *book) publishLocked() {
	var corrupt []string
	for k := range b.corrupt {
		corrupt = append(corrupt, k)
	}
	slices.Sort(corrupt)
	b.health.Set(Health{
		Watchers:    b.watchers,
		Established: b.established,
		Connected:   b.watchers > 0 && b.established == b.watchers,
		Leaderless:  b.leaderless,
		Relists:     b.relists,
		Revision:    b.listedAt,
		Err:         b.lastErr,
		Corrupt:     corrupt,
	})
}
