package etcd

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cenkalti/backoff/v5"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/polis-os/polis/event"
)

// entry is one key's undelivered state.
type entry struct {
	value    []byte // nil: deleted
	revision int64
	// existed is whether the key existed as far as Get last told: a key
	// created and deleted again before any Get saw it is no change at all
	// and is dropped, not delivered as a deletion of a key never seen.
	existed bool
}

// follower follows one key or range for one watcher. A goroutine (run)
// keeps the set of undelivered changes up to date; the watcher's Get takes
// from it. The split keeps Get as cheap as an in-memory value and makes
// Ready possible without a goroutine per caller.
type follower struct {
	cli      *clientv3.Client
	key, end string        // end empty: one key
	grace    time.Duration // LeaderlessGrace
	book     *book
	cancel   context.CancelFunc
	exited   chan struct{}
	// established is set while the watch is established (counted in
	// Health); only run touches it, and Close after run ended.
	established bool

	mu     sync.Mutex
	closed bool
	listed bool // the first listing is complete
	// fresh is set by the first listing and cleared by the first Get of a
	// range, whose first Get returns the listed state even if empty.
	fresh bool
	// pending holds the keys with undelivered changes, at their newest
	// state.
	pending map[string]*entry
	// known is the newest data the follower knows of for every existing
	// key: the base for dropping duplicates and for finding what changed
	// while a watch was broken.
	known map[string][]byte
	// rev is the newest revision applied: the listing's, or the newest
	// event's.
	rev  int64
	wake chan struct{} // closed when there is something to Get or on Close
	// progress is the newest revision up to which etcd said the watch
	// has delivered every change: a listing's, or a progress
	// notification's (waitProgress). progressed is closed, and replaced,
	// whenever it moves.
	progress   int64
	progressed chan struct{}
	// watchCtx is the context of the watch running now (nil between
	// watches), whose stream a progress request goes on; asked is set
	// once a request went out and no progress has come since.
	watchCtx context.Context
	asked    bool
}

func startFollower(cli *clientv3.Client, key, end string, grace time.Duration, b *book) *follower {
	b.watchChanged(1, 0, 0, nil)
	ctx, cancel := context.WithCancel(context.Background())
	f := &follower{
		cli:     cli,
		key:     key,
		end:     end,
		grace:   grace,
		book:    b,
		cancel:  cancel,
		exited:  make(chan struct{}),
		pending: make(map[string]*entry),
		known:   make(map[string][]byte),
		wake:    make(chan struct{}),

		progressed: make(chan struct{}),
	}
	go f.run(ctx)
	return f
}

// run lists and watches until ctx is cancelled, re-listing whenever the watch
// breaks.
func (f *follower) run(ctx context.Context) {
	defer close(f.exited)
	bo := backoff.NewExponentialBackOff()
	bo.InitialInterval = 50 * time.Millisecond
	bo.MaxInterval = 5 * time.Second
	for ctx.Err() == nil {
		err := f.listAndWatch(ctx, bo)
		if ctx.Err() != nil {
			return
		}
		est := 0
		if f.established {
			f.established, est = false, -1
		}
		f.book.watchChanged(0, est, 0, err)
		select {
		case <-time.After(bo.NextBackOff()):
		case <-ctx.Done():
			return
		}
	}
}

// listAndWatch reconciles with a fresh listing and then follows the watch
// until it breaks, returning why.
func (f *follower) listAndWatch(ctx context.Context, bo *backoff.ExponentialBackOff) error {
	opts := []clientv3.OpOption{}
	if f.end != "" {
		opts = append(opts, clientv3.WithRange(f.end))
	}
	resp, err := f.cli.Get(ctx, f.key, opts...)
	if err != nil {
		return fmt.Errorf("listing %q: %w", f.key, err)
	}
	rev := resp.Header.Revision
	f.mu.Lock()
	again := f.listed
	f.mu.Unlock()
	f.reconcile(resp.Kvs, rev)
	if again {
		f.book.relisted()
	}
	f.book.sawRevision(rev)
	if !f.established {
		f.established = true
		f.book.watchChanged(0, 1, rev, nil)
	}
	bo.Reset()

	// A watch that broke because the member lost its raft leader resumes
	// from the revision the follower had, without a re-listing and still
	// counted as established, for up to f.grace: etcd replays every
	// change after that revision (one compacted away ends the watch, and
	// the follower lists again), so the watcher misses nothing, and its
	// readers (streams of the curator's clients) need not start over for
	// an election.
	var leaderless time.Time // when the member lost its leader; zero while it has one
	defer func() {
		if !leaderless.IsZero() {
			f.book.leaderlessChanged(-1)
		}
	}()
	for {
		f.mu.Lock()
		from := f.rev + 1
		f.mu.Unlock()
		err := f.watchFrom(ctx, from, opts, func() {
			if !leaderless.IsZero() {
				leaderless = time.Time{}
				f.book.leaderlessChanged(-1)
				bo.Reset()
			}
		})
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if !errors.Is(err, rpctypes.ErrNoLeader) {
			return err
		}
		if leaderless.IsZero() {
			leaderless = time.Now()
			f.book.leaderlessChanged(1)
		}
		if time.Since(leaderless) > f.grace {
			return fmt.Errorf("%w (for %v)", err, f.grace)
		}
		select {
		case <-time.After(min(bo.NextBackOff(), leaderlessRetry, time.Until(leaderless.Add(f.grace))+time.Millisecond)):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// DefaultLeaderlessGrace is how long a watch whose etcd member lost its
// raft leader keeps resuming from its revision, still established, before
// the follower gives it up and re-lists. etcd itself ends such a watch
// only after three election timeouts without a leader; an election on a
// loaded machine can take that long, and a member cut off from the others
// for longer than both is then reported as not Connected.
const DefaultLeaderlessGrace = 5 * time.Second

// leaderlessRetry bounds the pause between attempts to resume a watch
// while its member has no leader, so that it resumes soon after an
// election ends.
const leaderlessRetry = 200 * time.Millisecond

// watchFrom follows the watch from revision from until it breaks,
// returning why; resumed is called at its first response.
func (f *follower) watchFrom(ctx context.Context, from int64, opts []clientv3.OpOption, resumed func()) error {
	// WithRequireLeader makes a watch on a member that lost its leader fail
	// instead of going silent, so that the watcher does not wait on a
	// member cut off from the cluster for ever.
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	wch := f.cli.Watch(wctx, f.key, append(opts, clientv3.WithRev(from), clientv3.WithCreatedNotify())...)
	f.mu.Lock()
	f.watchCtx, f.asked = wctx, false
	f.mu.Unlock()
	defer func() {
		f.mu.Lock()
		f.watchCtx = nil
		f.mu.Unlock()
	}()
	for wr := range wch {
		if err := wr.Err(); err != nil {
			return fmt.Errorf("watching %q: %w", f.key, err)
		}
		if wr.Canceled {
			return fmt.Errorf("watching %q: watch cancelled by etcd", f.key)
		}
		resumed()
		if wr.Created {
			// Its header is etcd's revision now, which the events
			// from revision from on have yet to reach.
			continue
		}
		if len(wr.Events) > 0 {
			f.apply(wr.Events)
		}
		if wr.IsProgressNotify() {
			// etcd sends one only once every watch of the stream has
			// caught up: every change up to its revision has arrived.
			f.progressTo(wr.Header.Revision)
		}
		f.book.sawRevision(wr.Header.Revision)
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return fmt.Errorf("watching %q: watch channel closed", f.key)
}

// reconcile compares a listing with what the follower knows: changed and new
// keys become pending, keys that vanished become pending deletions.
func (f *follower) reconcile(kvs []*mvccpb.KeyValue, rev int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	seen := make(map[string]bool, len(kvs))
	for _, kv := range kvs {
		k := string(kv.Key)
		seen[k] = true
		f.changeLocked(k, kv.Value, kv.ModRevision)
	}
	for k := range f.known {
		if !seen[k] {
			f.changeLocked(k, nil, rev)
		}
	}
	f.rev = max(f.rev, rev)
	if !f.listed {
		f.listed, f.fresh = true, true
	}
	f.progressToLocked(rev)
	f.wakeLocked()
}

// progressTo records that etcd has delivered every change up to rev.
func (f *follower) progressTo(rev int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.progressToLocked(rev)
}

func (f *follower) progressToLocked(rev int64) {
	if rev <= f.progress {
		return
	}
	f.progress, f.asked = rev, false
	close(f.progressed)
	f.progressed = make(chan struct{})
}

// progressRetry is how often waitProgress asks again while no progress
// comes: etcd drops a request that arrives while a watch of the stream is
// still catching up, and answers none while no watch runs.
const progressRetry = 100 * time.Millisecond

// waitProgress waits until etcd has said that the watch has delivered
// every change up to rev, asking it (a progress request on the watch's
// stream, shared by the calls waiting at the time), and returns the
// revision of the newest change applied then: a watcher whose Get has
// returned that revision holds every change up to rev. A listing at rev
// or later counts too. It costs etcd no read, whatever the range's size.
func (f *follower) waitProgress(ctx context.Context, rev int64) (int64, error) {
	retry := time.NewTicker(progressRetry)
	defer retry.Stop()
	for {
		f.mu.Lock()
		if f.closed {
			f.mu.Unlock()
			return 0, event.ErrClosed
		}
		if f.progress >= rev {
			applied := f.rev
			f.mu.Unlock()
			return applied, nil
		}
		progressed := f.progressed
		var ask context.Context
		if !f.asked && f.watchCtx != nil {
			ask, f.asked = f.watchCtx, true
		}
		f.mu.Unlock()
		if ask != nil {
			// An error means the watch is ending; the next one lists,
			// which is progress too.
			_ = f.cli.RequestProgress(ask)
		}
		select {
		case <-progressed:
		case <-retry.C:
			f.mu.Lock()
			f.asked = false
			f.mu.Unlock()
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
}

// apply records the events of one watch response.
func (f *follower) apply(events []*clientv3.Event) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, ev := range events {
		var value []byte
		if ev.Type == clientv3.EventTypePut {
			value = ev.Kv.Value
			if value == nil {
				value = []byte{}
			}
		}
		f.changeLocked(string(ev.Kv.Key), value, ev.Kv.ModRevision)
		f.rev = max(f.rev, ev.Kv.ModRevision)
	}
	f.wakeLocked()
}

// changeLocked records that key now holds value (nil: deleted) unless that is
// what the follower already knows.
func (f *follower) changeLocked(key string, value []byte, rev int64) {
	old, existed := f.known[key]
	if value == nil && !existed {
		return
	}
	if value != nil && existed && bytes.Equal(old, value) {
		return
	}
	if value == nil {
		delete(f.known, key)
	} else {
		f.known[key] = value
	}
	if e, ok := f.pending[key]; ok {
		if value == nil && !e.existed {
			// Created and deleted again before Get told anyone.
			delete(f.pending, key)
			return
		}
		e.value, e.revision = value, rev
		return
	}
	f.pending[key] = &entry{value: value, revision: rev, existed: existed}
}

func (f *follower) readyLocked() bool {
	return f.closed || len(f.pending) > 0 || (f.fresh && f.end != "")
}

// wakeLocked wakes blocked Gets if there is anything to Get.
func (f *follower) wakeLocked() {
	if f.readyLocked() {
		select {
		case <-f.wake:
		default:
			close(f.wake)
		}
	}
}

// take hands the pending changes to a Get, or, if there are none, returns
// a channel that the next change closes.
func (f *follower) take() (pending map[string]*entry, rev int64, wake <-chan struct{}, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return nil, 0, nil, event.ErrClosed
	}
	if !f.readyLocked() {
		// Re-arm: a fresh channel that the next change closes.
		select {
		case <-f.wake:
			f.wake = make(chan struct{})
		default:
		}
		return nil, 0, f.wake, nil
	}
	pending = f.pending
	f.pending = make(map[string]*entry)
	f.fresh = false
	return pending, f.rev, nil, nil
}

func (f *follower) ready() <-chan struct{} {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.readyLocked() {
		return event.ClosedChan()
	}
	select {
	case <-f.wake:
		f.wake = make(chan struct{})
	default:
	}
	return f.wake
}

// close stops the follower's goroutine and waits for it, so that a closed
// watcher leaves nothing running.
func (f *follower) close() {
	f.mu.Lock()
	if f.closed {
		f.mu.Unlock()
		return
	}
	f.closed = true
	f.wakeLocked()
	f.mu.Unlock()
	f.cancel()
	<-f.exited
	est := 0
	if f.established {
		est = -1
	}
	f.book.watchChanged(-1, est, 0, nil)
}

// wait is the blocking part of a Get: it returns the pending changes once
// there are some.
func (f *follower) wait(ctx context.Context) (map[string]*entry, int64, error) {
	for {
		pending, rev, wake, err := f.take()
		if err != nil || pending != nil {
			return pending, rev, err
		}
		select {
		case <-wake:
		case <-ctx.Done():
			return nil, 0, ctx.Err()
		}
	}
}

// keyWatcher is a watcher of a Value: one key.
type keyWatcher[T any] struct {
	f      *follower
	decode Decoder[T]
	busy   atomic.Bool
	last   int64 // revision of the data last returned; only Get touches it
}

func (w *keyWatcher[T]) Get(ctx context.Context, opts ...event.GetOption[T]) (T, error) {
	var zero T
	if !w.busy.CompareAndSwap(false, true) {
		return zero, event.ErrConcurrentGet
	}
	defer w.busy.Store(false)
	o := event.ParseGetOptions(opts)
	for {
		pending, _, err := w.f.wait(ctx)
		if err != nil {
			return zero, err
		}
		e := pending[w.f.key]
		if e == nil {
			continue
		}
		w.last = e.revision
		data, err := w.decode([]byte(w.f.key), e.value)
		if err != nil {
			err = fmt.Errorf("decoding %q at revision %d: %w", w.f.key, e.revision, err)
		}
		w.f.book.decoded(w.f.key, e.revision, err)
		if err != nil {
			return zero, err
		}
		if o.Accepts(data) {
			return data, nil
		}
	}
}

func (w *keyWatcher[T]) Ready() <-chan struct{} { return w.f.ready() }
func (w *keyWatcher[T]) LastVersion() uint64    { return uint64(w.last) }
func (w *keyWatcher[T]) Close() error {
	w.f.close()
	return nil
}

// rangeWatcher is a watcher of a Range.
type rangeWatcher[T any] struct {
	f      *follower
	decode Decoder[T]
	busy   atomic.Bool
	// last is the snapshot last built, the base of the next; only Get
	// touches it.
	last *event.Snapshot[T]
	// carry are the keys of snapshots a filter refused: they changed since
	// the snapshot Get last returned, and the next one says so.
	carry []string
}

func (w *rangeWatcher[T]) Get(ctx context.Context, opts ...event.GetOption[*event.Snapshot[T]]) (*event.Snapshot[T], error) {
	if !w.busy.CompareAndSwap(false, true) {
		return nil, event.ErrConcurrentGet
	}
	defer w.busy.Store(false)
	o := event.ParseGetOptions(opts)
	for {
		pending, rev, err := w.f.wait(ctx)
		if err != nil {
			return nil, err
		}
		updates := make(map[string]event.Entry[T], len(pending))
		changed := make([]string, 0, len(pending))
		for k, e := range pending {
			changed = append(changed, k)
			if e.value == nil {
				w.f.book.decoded(k, e.revision, nil)
				continue
			}
			data, err := w.decode([]byte(k), e.value)
			if err != nil {
				var zero T
				data, err = zero, fmt.Errorf("decoding %q at revision %d: %w", k, e.revision, err)
			}
			w.f.book.decoded(k, e.revision, err)
			updates[k] = event.Entry[T]{Data: data, Version: uint64(e.revision), Err: err}
		}
		w.last = event.Next(w.last, uint64(rev), updates, changed)
		if !o.Accepts(w.last) {
			w.carry = append(w.carry, w.last.Changed...)
			continue
		}
		if len(w.carry) > 0 {
			w.last.Changed = slices.Compact(slices.Sorted(slices.Values(append(w.carry, w.last.Changed...))))
			w.carry = nil
		}
		return w.last, nil
	}
}

func (w *rangeWatcher[T]) Ready() <-chan struct{} { return w.f.ready() }

// Progress implements Progresser.
func (w *rangeWatcher[T]) Progress(ctx context.Context, rev int64) (uint64, error) {
	applied, err := w.f.waitProgress(ctx, rev)
	return uint64(applied), err
}

func (w *rangeWatcher[T]) LastVersion() uint64 {
	if w.last == nil {
		return 0
	}
	return w.last.Version
}

func (w *rangeWatcher[T]) Close() error {
	w.f.close()
	return nil
}
