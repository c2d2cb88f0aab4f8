package etcd

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cenkalti/backoff/v5"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/polis-os/polis/event"
)

// entry is one key's undelivered state.
type entry struct {
	key      string
	value    []byte // nil: deleted
	revision int64
	backlog  bool // part of the watcher's first listing
	// existed is whether the key existed as far as Get last told: a key
	// created and deleted again before any Get saw it is no change at all
	// and is dropped, not delivered as a deletion of a key never seen.
	existed bool
}

// watcher follows one key or range. A goroutine (run) keeps the set of
// undelivered changes up to date; Get takes from it. The split keeps Get as
// cheap as an in-memory value and makes Ready possible without a goroutine
// per caller.
type watcher[T any] struct {
	v      *Value[T]
	cancel context.CancelFunc
	exited chan struct{}
	busy   atomic.Bool
	last   int64 // revision of the data last returned; only Get touches it
	// established is set while the watch is established (counted in the
	// value's Health); only run touches it, and Close after run ended.
	established bool

	mu     sync.Mutex
	closed bool
	listed bool // the first listing is complete: the backlog is known
	// queue holds keys with undelivered changes in the order they changed;
	// pending holds their newest state. A key changing again keeps its place.
	queue   []string
	pending map[string]*entry
	// known is the newest data the watcher knows of for every existing key:
	// the base for dropping duplicates and for finding what changed while a
	// watch was broken.
	known map[string][]byte
	wake  chan struct{} // closed when pending grows or the watcher closes
}

func startWatcher[T any](v *Value[T]) *watcher[T] {
	ctx, cancel := context.WithCancel(context.Background())
	w := &watcher[T]{
		v:       v,
		cancel:  cancel,
		exited:  make(chan struct{}),
		pending: make(map[string]*entry),
		known:   make(map[string][]byte),
		wake:    make(chan struct{}),
	}
	go w.run(ctx)
	return w
}

// run lists and watches until ctx is cancelled, re-listing whenever the watch
// breaks.
func (w *watcher[T]) run(ctx context.Context) {
	defer close(w.exited)
	bo := backoff.NewExponentialBackOff()
	bo.InitialInterval = 50 * time.Millisecond
	bo.MaxInterval = 5 * time.Second
	for ctx.Err() == nil {
		err := w.listAndWatch(ctx, bo)
		if ctx.Err() != nil {
			return
		}
		if w.established {
			w.established = false
			w.v.watchChanged(0, -1, 0, err)
		} else {
			w.v.watchChanged(0, 0, 0, err)
		}
		select {
		case <-time.After(bo.NextBackOff()):
		case <-ctx.Done():
			return
		}
	}
}

// listAndWatch reconciles with a fresh listing and then follows the watch
// until it breaks, returning why.
func (w *watcher[T]) listAndWatch(ctx context.Context, bo *backoff.ExponentialBackOff) error {
	opts := []clientv3.OpOption{}
	if w.v.isRange() {
		opts = append(opts, clientv3.WithRange(w.v.RangeEnd))
	}
	resp, err := w.v.Client.Get(ctx, w.v.Key, opts...)
	if err != nil {
		return fmt.Errorf("listing %q: %w", w.v.Key, err)
	}
	rev := resp.Header.Revision
	w.reconcile(resp.Kvs, rev)
	w.v.sawRevision(rev)
	if !w.established {
		w.established = true
		w.v.watchChanged(0, 1, rev, nil)
	}
	bo.Reset()

	// WithRequireLeader makes a watch on a member that lost its leader fail
	// instead of going silent, so that the watcher moves elsewhere.
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	wch := w.v.Client.Watch(wctx, w.v.Key, append(opts, clientv3.WithRev(rev+1))...)
	for wr := range wch {
		if err := wr.Err(); err != nil {
			return fmt.Errorf("watching %q: %w", w.v.Key, err)
		}
		if wr.Canceled {
			return fmt.Errorf("watching %q: watch cancelled by etcd", w.v.Key)
		}
		if len(wr.Events) > 0 {
			w.apply(wr.Events)
		}
		w.v.sawRevision(wr.Header.Revision)
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return fmt.Errorf("watching %q: watch channel closed", w.v.Key)
}

// reconcile compares a listing with what the watcher knows: changed and new
// keys become pending, keys that vanished become pending deletions.
func (w *watcher[T]) reconcile(kvs []*mvccpb.KeyValue, rev int64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	first := !w.listed
	seen := make(map[string]bool, len(kvs))
	for _, kv := range kvs {
		k := string(kv.Key)
		seen[k] = true
		w.changeLocked(k, kv.Value, kv.ModRevision, first)
	}
	for k := range w.known {
		if !seen[k] {
			w.changeLocked(k, nil, rev, false)
		}
	}
	w.listed = true
	w.wakeLocked()
}

// apply records the events of one watch response.
func (w *watcher[T]) apply(events []*clientv3.Event) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, ev := range events {
		var value []byte
		if ev.Type == clientv3.EventTypePut {
			value = ev.Kv.Value
			if value == nil {
				value = []byte{}
			}
		}
		w.changeLocked(string(ev.Kv.Key), value, ev.Kv.ModRevision, false)
	}
	w.wakeLocked()
}

// changeLocked records that key now holds value (nil: deleted) unless that is
// what the watcher already knows.
func (w *watcher[T]) changeLocked(key string, value []byte, rev int64, backlog bool) {
	old, existed := w.known[key]
	if value == nil && !existed {
		return
	}
	if value != nil && existed && bytes.Equal(old, value) {
		return
	}
	if value == nil {
		delete(w.known, key)
	} else {
		w.known[key] = value
	}
	if e, ok := w.pending[key]; ok {
		if value == nil && !e.existed {
			// Created and deleted again before Get told anyone.
			delete(w.pending, key)
			w.queue = slices.DeleteFunc(w.queue, func(k string) bool { return k == key })
			return
		}
		e.value, e.revision = value, rev
		return
	}
	w.pending[key] = &entry{key: key, value: value, revision: rev, backlog: backlog, existed: existed}
	w.queue = append(w.queue, key)
}

// wakeLocked wakes blocked Gets if anything is pending.
func (w *watcher[T]) wakeLocked() {
	if len(w.queue) > 0 || w.closed {
		select {
		case <-w.wake:
		default:
			close(w.wake)
		}
	}
}

// next takes the oldest pending change. If there is none it returns a
// channel that the next change closes; for a backlog-only Get, done is true
// once the backlog is exhausted.
func (w *watcher[T]) next(backlogOnly bool) (e *entry, wake <-chan struct{}, done bool, err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return nil, nil, false, event.ErrClosed
	}
	if backlogOnly && w.listed {
		if len(w.queue) == 0 || !w.pending[w.queue[0]].backlog {
			return nil, nil, true, nil
		}
	}
	if len(w.queue) == 0 || (backlogOnly && !w.listed) {
		// Re-arm: a fresh channel that the next change closes.
		select {
		case <-w.wake:
			w.wake = make(chan struct{})
		default:
		}
		return nil, w.wake, false, nil
	}
	key := w.queue[0]
	w.queue[0] = ""
	w.queue = w.queue[1:]
	e = w.pending[key]
	delete(w.pending, key)
	return e, nil, false, nil
}

func (w *watcher[T]) Get(ctx context.Context, opts ...event.GetOption[T]) (T, error) {
	var zero T
	if !w.busy.CompareAndSwap(false, true) {
		return zero, event.ErrConcurrentGet
	}
	defer w.busy.Store(false)
	o := event.ParseGetOptions(opts)
	for {
		e, wake, done, err := w.next(o.BacklogOnly)
		if err != nil {
			return zero, err
		}
		if done {
			return zero, event.ErrBacklogDone
		}
		if e == nil {
			select {
			case <-wake:
				continue
			case <-ctx.Done():
				return zero, ctx.Err()
			}
		}
		w.last = e.revision
		data, err := w.v.Decode([]byte(e.key), e.value)
		if err != nil {
			return zero, fmt.Errorf("decoding %q at revision %d: %w", e.key, e.revision, err)
		}
		if o.Accepts(data) {
			return data, nil
		}
	}
}

func (w *watcher[T]) Ready() <-chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed || len(w.queue) > 0 {
		return event.ClosedChan()
	}
	select {
	case <-w.wake:
		w.wake = make(chan struct{})
	default:
	}
	return w.wake
}

func (w *watcher[T]) LastVersion() uint64 { return uint64(w.last) }

// Close stops the watcher's goroutine and waits for it, so that a closed
// watcher leaves nothing running.
func (w *watcher[T]) Close() error {
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return nil
	}
	w.closed = true
	w.wakeLocked()
	w.mu.Unlock()
	w.cancel()
	<-w.exited
	est := 0
	if w.established {
		est = -1
	}
	w.v.watchChanged(-1, est, 0, nil)
	return nil
}
