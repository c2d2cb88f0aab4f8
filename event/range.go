package event

import (
	"maps"
	"slices"
)

// A range is a set of keys that each hold data of one type: the node
// records under a prefix in etcd, say. It is not a one-key value in
// disguise, nor a stream of per-key changes: its data is a [Snapshot], the
// whole keyed state at one version, and a range is watched and waited on
// exactly like a value of snapshots ([RangeWatch] is a
// [ValueWatch][*Snapshot[T]], so [Inputs] takes it as it is). What a range
// adds is the per-watcher answer to "which keys changed since my previous
// Get", in Snapshot.Changed, so that a consumer need not diff two snapshots
// itself.
//
// The guarantees are a value's: the first Get returns the current state
// (an empty range is a state, so it does not block once the backend has
// listed the range), every later Get blocks until some key changed and then
// returns the newest state, versions only increase, and intermediate states
// may be skipped but a change is never missed. A key created and deleted
// again between two Gets is no change at all. A key whose stored data
// cannot be decoded is reported for that key alone (its Entry's Err), not
// as a failure of Get: one corrupt record never stops a consumer of the
// others.

// RangeWatch is the read side of a range of keys: a value whose data is the
// range's newest Snapshot.
type RangeWatch[T any] interface {
	// Watch returns a new watcher positioned before the first update: its
	// first Get returns the current state. The caller must Close it.
	Watch() Watcher[*Snapshot[T]]
}

// Snapshot is the state of a range at one version, as one watcher's Get
// returned it. It is immutable: consumers must not modify Entries.
type Snapshot[T any] struct {
	// Version is the version the snapshot is current at (in etcd, a
	// revision). It increases from one Get to the next.
	Version uint64
	// Entries holds every key that exists, with its data.
	Entries map[string]Entry[T]
	// Changed lists, sorted, the keys created, updated or deleted since
	// the snapshot this watcher's previous Get returned; on the first Get,
	// every key that exists.
	Changed []string
}

// Entry is one key's data in a Snapshot.
type Entry[T any] struct {
	// Data is the decoded data; the zero T when Err is set.
	Data T
	// Version is the version at which the key last changed.
	Version uint64
	// Err is set when the stored data could not be decoded: the key
	// exists, but its data is unusable. It names the key and the version.
	Err error
}

// Next returns the snapshot that follows prev (nil before the first) once
// the keys in changed took the data in updates (a key missing from updates
// was deleted). Backends use it to build snapshots; prev is not modified.
func Next[T any](prev *Snapshot[T], version uint64, updates map[string]Entry[T], changed []string) *Snapshot[T] {
	next := &Snapshot[T]{Version: version, Changed: changed}
	if prev == nil {
		next.Entries = make(map[string]Entry[T], len(updates))
	} else {
		next.Version = max(version, prev.Version)
		next.Entries = maps.Clone(prev.Entries)
		if next.Entries == nil {
			next.Entries = make(map[string]Entry[T], len(updates))
		}
	}
	for _, k := range changed {
		if e, ok := updates[k]; ok {
			next.Entries[k] = e
		} else {
			delete(next.Entries, k)
		}
	}
	slices.Sort(next.Changed)
	return next
}
