// Package eventtest is the conformance suite for event value backends.
//
// The semantics of event values are written down once, here, as tests, and
// every backend (event/memory, event/etcd, ...) runs them against itself:
//
//	func TestConformance(t *testing.T) {
//		eventtest.Run(t, eventtest.Backend{New: func(t *testing.T) (func(int), event.ValueWatch[int]) {
//			var v memory.Value[int]
//			return v.Set, &v
//		}})
//	}
//
// Ranges (event.RangeWatch) have a suite of their own, RunRange, which
// every range backend runs the same way.
//
// The suite works with values of int. A backend's set function must store
// the given int so that watchers eventually see exactly that int; the suite
// only ever sets strictly increasing numbers, so that monotonicity can be
// checked. Every subtest checks that no goroutine outlives it: backends must
// release what New started through t.Cleanup.
package eventtest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/polis-os/polis/event"
)

// Backend describes the implementation under test.
type Backend struct {
	// New returns a new, unset value and a function that sets it. The set
	// function is only called from the test's goroutine and should fail the
	// test (t.Fatal) if the write fails.
	New func(t *testing.T) (set func(int), v event.ValueWatch[int])
	// Patience bounds how long the suite waits for something that must
	// happen. Zero means 10 seconds.
	Patience time.Duration
	// Quiet is how long the suite waits to conclude that something does not
	// happen (a Get that must keep blocking). Zero means 50 milliseconds.
	Quiet time.Duration
	// LeakOptions are passed to goleak when checking for leaked goroutines,
	// for backends with process-wide helpers that outlive a value.
	LeakOptions []goleak.Option
	// Delete, for backends whose data can cease to exist (an etcd key),
	// deletes the data of a value made by New. Deleted is what a watcher
	// that had seen the data gets for the deletion. Without Delete, the
	// tests of deletions are skipped.
	Delete  func(t *testing.T, v event.ValueWatch[int])
	Deleted int
}

// Run runs the whole suite against b.
func Run(t *testing.T, b Backend) {
	if b.Patience == 0 {
		b.Patience = 10 * time.Second
	}
	if b.Quiet == 0 {
		b.Quiet = 50 * time.Millisecond
	}
	tests := []struct {
		name string
		fn   func(t *testing.T, b Backend, set func(int), v event.ValueWatch[int])
	}{
		{"FirstGetBlocksWhileUnset", testFirstGetBlocksWhileUnset},
		{"FirstGetReturnsCurrent", testFirstGetReturnsCurrent},
		{"LaterGetsReturnOnlyNewer", testLaterGetsReturnOnlyNewer},
		{"SkipsToNewest", testSkipsToNewest},
		{"ManyWatchersMonotonic", testManyWatchersMonotonic},
		{"Filter", testFilter},
		{"CancelLeavesWatcherUsable", testCancelLeavesWatcherUsable},
		{"CloseDuringGet", testCloseDuringGet},
		{"ConcurrentGet", testConcurrentGet},
		{"Ready", testReady},
		{"Inputs", testInputs},
		{"FirstGetAfterCreateDelete", testFirstGetAfterCreateDelete},
		{"MonotonicVersions", testMonotonicVersions},
		{"CloseRacesInputGetWait", testCloseRacesInputGetWait},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			checkLeaks(t, b.LeakOptions)
			set, v := b.New(t)
			tc.fn(t, b, set, v)
		})
	}
}

// checkLeaks fails t if goroutines that t starts outlive it, ignoring
// those opts name. Call it first in a test, before the backend's New: a
// cleanup registered first runs last, after the backend's own cleanups
// have released the value.
func checkLeaks(t *testing.T, opts []goleak.Option) {
	ignore := append([]goleak.Option{goleak.IgnoreCurrent()}, opts...)
	t.Cleanup(func() {
		if err := goleak.Find(ignore...); err != nil {
			t.Errorf("goroutines leaked: %v", err)
		}
	})
}

func (b Backend) ctx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), b.Patience)
	t.Cleanup(cancel)
	return ctx
}

// getWithin is Get bounded by the suite's patience, per Get: a run of many
// updates on a loaded machine may take longer than the patience in all,
// but each update must arrive within it.
func getWithin[T any](b Backend, w event.Watcher[T]) (T, error) {
	ctx, cancel := context.WithTimeout(context.Background(), b.Patience)
	defer cancel()
	return w.Get(ctx)
}

// mustGet returns the next datum or fails the test.
func (b Backend) mustGet(t *testing.T, w event.Watcher[int], opts ...event.GetOption[int]) int {
	t.Helper()
	d, err := w.Get(b.ctx(t), opts...)
	if err != nil {
		t.Fatalf("Get: %v", err)
	}
	return d
}

// mustBlock checks that Get does not return within the quiet period.
func (b Backend) mustBlock(t *testing.T, w event.Watcher[int], opts ...event.GetOption[int]) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), b.Quiet)
	defer cancel()
	d, err := w.Get(ctx, opts...)
	if err == nil {
		t.Fatalf("Get returned %d, want it to block", d)
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Get: %v, want it to block until its deadline", err)
	}
}

func watch(t *testing.T, v event.ValueWatch[int]) event.Watcher[int] {
	w := v.Watch()
	t.Cleanup(func() { w.Close() })
	return w
}

func testFirstGetBlocksWhileUnset(t *testing.T, b Backend, set func(int), v event.ValueWatch[int]) {
	w := watch(t, v)
	b.mustBlock(t, w)

	got := make(chan int, 1)
	go func() {
		d, err := w.Get(b.ctx(t))
		if err != nil {
			t.Errorf("Get: %v", err)
		}
		got <- d
	}()
	set(1)
	if d := <-got; d != 1 {
		t.Errorf("Get = %d, want 1", d)
	}
}

func testFirstGetReturnsCurrent(t *testing.T, b Backend, set func(int), v event.ValueWatch[int]) {
	set(1)
	set(2)
	w := watch(t, v)
	// A backend may deliver 1 first if it has not yet caught up with 2 when
	// the watcher starts, but it must end on 2 without another Set.
	for d := b.mustGet(t, w); d != 2; d = b.mustGet(t, w) {
		if d != 1 {
			t.Fatalf("Get = %d, want 1 or 2", d)
		}
	}
}

func testLaterGetsReturnOnlyNewer(t *testing.T, b Backend, set func(int), v event.ValueWatch[int]) {
	set(1)
	w := watch(t, v)
	if d := b.mustGet(t, w); d != 1 {
		t.Fatalf("first Get = %d, want 1", d)
	}
	b.mustBlock(t, w)
	set(2)
	if d := b.mustGet(t, w); d != 2 {
		t.Fatalf("Get after Set(2) = %d, want 2", d)
	}
	b.mustBlock(t, w)
}

func testSkipsToNewest(t *testing.T, b Backend, set func(int), v event.ValueWatch[int]) {
	set(1)
	w := watch(t, v)
	b.mustGet(t, w)
	for i := 2; i <= 20; i++ {
		set(i)
	}
	last := 1
	for last != 20 {
		d := b.mustGet(t, w)
		if d <= last {
			t.Fatalf("Get = %d after %d: not newer", d, last)
		}
		last = d
	}
	b.mustBlock(t, w)
}

func testManyWatchersMonotonic(t *testing.T, b Backend, set func(int), v event.ValueWatch[int]) {
	const watchers, final = 100, 200
	var wg sync.WaitGroup
	ready := make(chan struct{}, watchers)
	for n := range watchers {
		w := watch(t, v)
		seed := uint64(n)
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(seed, 7))
			ready <- struct{}{}
			last := 0
			for last != final {
				d, err := getWithin(b, w)
				if err != nil {
					t.Errorf("watcher %d: Get after %d: %v", seed, last, err)
					return
				}
				if d <= last {
					t.Errorf("watcher %d: Get = %d after %d: not newer", seed, d, last)
					return
				}
				last = d
				// Simulate a consumer that is busy with each update.
				time.Sleep(time.Duration(rng.IntN(200)) * time.Microsecond)
			}
		})
	}
	for range watchers {
		<-ready
	}
	for i := 1; i <= final; i++ {
		set(i)
	}
	wg.Wait()
}

func testFilter(t *testing.T, b Backend, set func(int), v event.ValueWatch[int]) {
	even := event.Filter(func(d int) bool { return d%2 == 0 })
	set(1)
	w := watch(t, v)
	b.mustBlock(t, w, even)
	set(3)
	b.mustBlock(t, w, even)
	set(4)
	if d := b.mustGet(t, w, even); d != 4 {
		t.Fatalf("filtered Get = %d, want 4", d)
	}
	set(5)
	set(6)
	if d := b.mustGet(t, w, even); d != 6 {
		t.Fatalf("filtered Get = %d, want 6", d)
	}
	// Several filters must all hold.
	big := event.Filter(func(d int) bool { return d > 7 })
	set(7)
	set(8)
	if d := b.mustGet(t, w, even, big); d != 8 {
		t.Fatalf("Get with two filters = %d, want 8", d)
	}
}

func testCancelLeavesWatcherUsable(t *testing.T, b Backend, set func(int), v event.ValueWatch[int]) {
	w := watch(t, v)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := w.Get(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Get with cancelled context: %v, want context.Canceled", err)
	}
	b.mustBlock(t, w)
	set(1)
	if d := b.mustGet(t, w); d != 1 {
		t.Fatalf("Get after cancellations = %d, want 1", d)
	}
}

func testCloseDuringGet(t *testing.T, b Backend, set func(int), v event.ValueWatch[int]) {
	w := v.Watch()
	errc := make(chan error, 1)
	go func() {
		_, err := w.Get(b.ctx(t))
		errc <- err
	}()
	if err := w.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := <-errc; !errors.Is(err, event.ErrClosed) {
		t.Fatalf("Get during Close: %v, want ErrClosed", err)
	}
	if err := w.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	set(1)
	if _, err := w.Get(b.ctx(t)); !errors.Is(err, event.ErrClosed) {
		t.Fatalf("Get after Close: %v, want ErrClosed", err)
	}
	select {
	case <-w.Ready():
	default:
		t.Fatalf("Ready of a closed watcher is not closed")
	}
}

func testConcurrentGet(t *testing.T, b Backend, set func(int), v event.ValueWatch[int]) {
	w := watch(t, v)
	ctx, cancel := context.WithCancel(b.ctx(t))
	first := make(chan error, 1)
	go func() {
		// Our own probes below may hold the watcher when this starts.
		_, err := w.Get(ctx)
		for errors.Is(err, event.ErrConcurrentGet) {
			_, err = w.Get(ctx)
		}
		first <- err
	}()
	// The first Get may not have started yet: poll until a second Get is
	// refused, with the suite's patience as deadline. The probes use a
	// context that is done already, so that they hold the watcher for
	// an instant only: probes that waited would leave the first Get
	// little chance to start on a loaded machine.
	deadline := time.Now().Add(b.Patience)
	probe, cancelProbe := context.WithCancel(context.Background())
	cancelProbe()
	for {
		_, err := w.Get(probe)
		if errors.Is(err, event.ErrConcurrentGet) {
			break
		}
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("second Get: %v, want ErrConcurrentGet", err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("a second concurrent Get was never refused")
		}
		time.Sleep(time.Millisecond)
	}
	cancel()
	if err := <-first; !errors.Is(err, context.Canceled) {
		t.Fatalf("first Get: %v, want context.Canceled", err)
	}
	set(1)
	if d := b.mustGet(t, w); d != 1 {
		t.Fatalf("Get after the concurrent one = %d, want 1", d)
	}
}

func testReady(t *testing.T, b Backend, set func(int), v event.ValueWatch[int]) {
	w := watch(t, v)
	select {
	case <-w.Ready():
		t.Fatalf("Ready closed on an unset value")
	default:
	}
	ready := w.Ready()
	set(1)
	select {
	case <-ready:
	case <-b.ctx(t).Done():
		t.Fatalf("Ready not closed after Set")
	}
	b.mustGet(t, w)
	select {
	case <-w.Ready():
		t.Fatalf("Ready closed although the watcher has seen the newest data")
	default:
	}
}

func testInputs(t *testing.T, b Backend, set func(int), v event.ValueWatch[int]) {
	var in event.Inputs
	defer in.Close()
	a := event.Input(&in, v, func(d int) bool { return d >= 2 })
	ctx := b.ctx(t)

	quiet, cancel := context.WithTimeout(ctx, b.Quiet)
	if _, err := in.Wait(quiet); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Wait on an unset value: %v, want a timeout", err)
	}
	cancel()
	set(1)
	set(2)
	why, err := in.Wait(ctx)
	if err != nil {
		t.Fatalf("Wait: %v", err)
	}
	if got := a.Latest(); got != 2 {
		t.Fatalf("Latest = %d, want 2", got)
	}
	if len(why.Changes) != 1 || why.Changes[0].From != 0 || why.Changes[0].To == 0 {
		t.Fatalf("Why = %+v, want one change from v0", why)
	}
	quiet, cancel = context.WithTimeout(ctx, b.Quiet)
	defer cancel()
	if _, err := in.Wait(quiet); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Wait without a change: %v, want a timeout", err)
	}
}

// A value created and deleted before a watcher's first Get must not be
// delivered as a deletion: the watcher never saw it exist. Whether the
// backend caught up with both changes before the first Get is timing, so
// the check is that the first datum is never the deletion.
func testFirstGetAfterCreateDelete(t *testing.T, b Backend, set func(int), v event.ValueWatch[int]) {
	if b.Delete == nil {
		t.Skip("the backend has no deletions")
	}
	w := watch(t, v)
	set(1)
	b.Delete(t, v)
	set(2)
	first := true
	for last := 0; last != 2; first = false {
		d := b.mustGet(t, w)
		if d == b.Deleted && first {
			t.Fatalf("first Get returned the deletion of data it never saw")
		}
		if d != 1 && d != 2 && d != b.Deleted {
			t.Fatalf("Get = %d, want 1, 2 or the deletion", d)
		}
		last = d
	}
	b.mustBlock(t, w)
}

// Versions only increase: every Get returns a version newer than the
// previous one, however the Sets and Gets interleave.
func testMonotonicVersions(t *testing.T, b Backend, set func(int), v event.ValueWatch[int]) {
	w := watch(t, v)
	vw, ok := w.(event.Versioned)
	if !ok {
		t.Skip("the backend's watchers do not report versions")
	}
	const final = 60
	done := make(chan error, 1)
	go func() {
		var last uint64
		for d := 0; d != final; {
			var err error
			if d, err = getWithin(b, w); err != nil {
				done <- err
				return
			}
			if v := vw.LastVersion(); v <= last {
				done <- fmt.Errorf("version %d after %d", v, last)
				return
			} else {
				last = v
			}
		}
		done <- nil
	}()
	for i := 1; i <= final; i++ {
		set(i)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// Close may race with Input, Get and Wait from other goroutines: nothing
// panics, nothing races (under -race), every call ends with data or
// ErrClosed, and no watcher is left running (the suite's leak check).
func testCloseRacesInputGetWait(t *testing.T, b Backend, set func(int), v event.ValueWatch[int]) {
	set(1)
	for range 5 {
		var in event.Inputs
		w := v.Watch()
		var wg sync.WaitGroup
		ctx := b.ctx(t)
		wg.Go(func() {
			for range 3 {
				event.Input(&in, v, nil)
				if _, err := in.Wait(ctx); err != nil && !errors.Is(err, event.ErrClosed) {
					t.Errorf("Wait: %v", err)
					return
				}
			}
		})
		wg.Go(func() {
			if _, err := w.Get(ctx); err != nil && !errors.Is(err, event.ErrClosed) {
				t.Errorf("Get: %v", err)
			}
		})
		wg.Go(func() { in.Close() })
		wg.Go(func() { w.Close() })
		wg.Wait()
		// Whatever Close raced with, the Inputs and the watcher are
		// closed now.
		if _, err := in.Wait(ctx); !errors.Is(err, event.ErrClosed) {
			t.Fatalf("Wait after Close: %v", err)
		}
		if _, err := w.Get(ctx); !errors.Is(err, event.ErrClosed) {
			t.Fatalf("Get after Close: %v", err)
		}
	}
	if d, ok := v.(event.Describer); ok {
		if n := d.Info().Watchers; n != 0 {
			t.Fatalf("%d watchers left open", n)
		}
	}
}
