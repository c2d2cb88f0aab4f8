package memory

import (
	"context"
	"maps"
	"slices"
	"sync"

	"github.com/polis-os/polis/event"
)

// Range is an in-memory event range: keys that each hold data of type T,
// watched as event.Snapshots (see event.RangeWatch). It is what a worker's
// unit test hands the worker instead of an etcd range, and it passes the
// same conformance suite.
//
// Put and Delete copy the key map (snapshots are immutable and shared by
// every watcher), so they cost O(keys): fine for tests and small ranges.
// The zero Range is an empty range ready to use; set Name before first use.
type Range[T any] struct {
	// Name identifies the range in logs and wake-up explanations.
	Name string

	mu      sync.Mutex // serialises writers
	version uint64
	entries map[string]event.Entry[T]
	value   Value[*rangeState[T]]
}

type rangeState[T any] struct {
	version uint64
	entries map[string]event.Entry[T]
}

var (
	_ event.RangeWatch[int] = &Range[int]{}
	_ event.Describer       = &Range[int]{}
)

// Put sets key's data.
func (r *Range[T]) Put(key string, data T) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.version++
	r.publishLocked(key, &event.Entry[T]{Data: data, Version: r.version})
}

// Delete removes key; deleting a missing key does nothing.
func (r *Range[T]) Delete(key string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.entries[key]; !ok {
		return
	}
	r.version++
	r.publishLocked(key, nil)
}

func (r *Range[T]) publishLocked(key string, e *event.Entry[T]) {
	entries := maps.Clone(r.entries)
	if entries == nil {
		entries = map[string]event.Entry[T]{}
	}
	if e != nil {
		entries[key] = *e
	} else {
		delete(entries, key)
	}
	r.entries = entries
	r.value.Set(&rangeState[T]{version: r.version, entries: entries})
}

// Watch returns a watcher whose first Get returns the current keys (none,
// for a new range).
func (r *Range[T]) Watch() event.Watcher[*event.Snapshot[T]] {
	r.mu.Lock()
	if r.value.Info().Version == 0 {
		// An empty range is a state: the first Get must not block.
		r.value.Set(&rangeState[T]{entries: map[string]event.Entry[T]{}})
	}
	r.mu.Unlock()
	return &rangeWatcher[T]{w: r.value.Watch()}
}

// Info reports the range's name, version and number of open watchers.
func (r *Range[T]) Info() event.Info {
	r.mu.Lock()
	defer r.mu.Unlock()
	return event.Info{Name: r.Name, Version: r.version, Watchers: r.value.Info().Watchers}
}

type rangeWatcher[T any] struct {
	w     event.Watcher[*rangeState[T]]
	last  *event.Snapshot[T]
	carry []string // keys of snapshots a filter refused
}

func (w *rangeWatcher[T]) Get(ctx context.Context, opts ...event.GetOption[*event.Snapshot[T]]) (*event.Snapshot[T], error) {
	o := event.ParseGetOptions(opts)
	for {
		st, err := w.w.Get(ctx)
		if err != nil {
			return nil, err
		}
		var prev map[string]event.Entry[T]
		if w.last != nil {
			prev = w.last.Entries
		}
		changed := w.carry
		for k, e := range st.entries {
			if p, ok := prev[k]; !ok || p.Version != e.Version {
				changed = append(changed, k)
			}
		}
		for k := range prev {
			if _, ok := st.entries[k]; !ok {
				changed = append(changed, k)
			}
		}
		snap := &event.Snapshot[T]{Version: st.version, Entries: st.entries, Changed: slices.Compact(slices.Sorted(slices.Values(changed)))}
		w.last = snap
		if !o.Accepts(snap) {
			w.carry = snap.Changed
			continue
		}
		w.carry = nil
		return snap, nil
	}
}

func (w *rangeWatcher[T]) Ready() <-chan struct{} { return w.w.Ready() }
func (w *rangeWatcher[T]) Close() error           { return w.w.Close() }

func (w *rangeWatcher[T]) LastVersion() uint64 {
	if w.last == nil {
		return 0
	}
	return w.last.Version
}
