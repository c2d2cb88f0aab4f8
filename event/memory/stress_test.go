package memory

import (
	"context"
	"errors"
	"math/rand/v2"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/polis-os/polis/event"
)

// The stress tests race Sets, Gets of every kind (no deadline, a context
// reused across Gets, a context per Get, Ready), Closes and new watchers,
// and check what a lost wake-up would break: after the last Set, every
// watcher still open sees it, and Ready never signals a Get that would
// block.

// stressFinal is the last datum set; the setter only sets smaller ones
// before it.
const stressFinal = 1 << 30

func TestStressNoMissedWakeup(t *testing.T) {
	rounds := 20
	if testing.Short() {
		rounds = 3
	}
	for round := range rounds {
		stressRound(t, uint64(round))
	}
}

func stressRound(t *testing.T, seed uint64) {
	var v Value[int]
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const consumers = 24
	var wg sync.WaitGroup
	var started sync.WaitGroup
	// Watchers that some goroutine closes while its consumer may wait.
	closers := make(chan event.Watcher[int], consumers)
	for n := range consumers {
		w := v.Watch()
		closable := n%4 == 3
		if closable {
			closers <- w
		}
		started.Add(1)
		wg.Go(func() {
			defer w.Close()
			rng := rand.New(rand.NewPCG(seed, uint64(n)))
			started.Done()
			last := -1
			for last != stressFinal {
				d, err := stressGet(ctx, rng, n, w)
				if errors.Is(err, event.ErrClosed) && closable {
					return
				}
				if errors.Is(err, errTryAgain) {
					continue
				}
				if err != nil {
					t.Errorf("consumer %d: Get after %d: %v", n, last, err)
					return
				}
				if d <= last {
					t.Errorf("consumer %d: Get = %d after %d: not newer", n, d, last)
					return
				}
				last = d
			}
		})
	}
	close(closers)
	started.Wait()
	// Churn: watchers that wait a little and are closed while on the
	// stack, enough to make Close clean the stack up several times.
	wg.Go(func() {
		for range 4 * minPrune {
			w := v.Watch()
			short, cancelShort := context.WithTimeout(ctx, time.Microsecond)
			_, _ = w.Get(short)
			cancelShort()
			_ = w.Ready()
			w.Close()
		}
	})
	wg.Go(func() {
		rng := rand.New(rand.NewPCG(seed, 99))
		for w := range closers {
			time.Sleep(time.Duration(rng.IntN(300)) * time.Microsecond)
			w.Close()
		}
	})
	for i := range 3000 {
		v.Set(i)
		if i%500 == 0 {
			time.Sleep(100 * time.Microsecond)
		}
	}
	v.Set(stressFinal)
	wg.Wait()
	if n := v.Info().Watchers; n != 0 {
		t.Fatalf("%d watchers left open", n)
	}
}

var errTryAgain = errors.New("try again")

// stressGet gets the next datum one of several ways, chosen per consumer
// and call.
func stressGet(ctx context.Context, rng *rand.Rand, n int, w event.Watcher[int]) (int, error) {
	switch (n + rng.IntN(2)) % 4 {
	case 0:
		// A context reused across Gets: registered with the context.
		return w.Get(ctx)
	case 1:
		// A context per Get, sometimes too short to see anything.
		short, cancel := context.WithTimeout(ctx, time.Duration(rng.IntN(200))*time.Microsecond)
		defer cancel()
		d, err := w.Get(short)
		if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
			return 0, errTryAgain
		}
		return d, err
	case 2:
		// Ready, then a Get that must not block.
		select {
		case <-w.Ready():
		case <-ctx.Done():
			return 0, ctx.Err()
		}
		return getNow(w)
	default:
		// Filters that refuse odd data, except the last.
		return w.Get(ctx, event.Filter(func(d int) bool { return d%2 == 0 || d == stressFinal }))
	}
}

// getNow is a Get that must not block: with a context that is already
// cancelled, a Get that would block fails instead.
func getNow(w event.Watcher[int]) (int, error) {
	done, cancel := context.WithCancel(context.Background())
	cancel()
	d, err := w.Get(done)
	if errors.Is(err, context.Canceled) {
		return 0, errors.New("Ready signalled, but Get would block")
	}
	return d, err
}

// Ready signals only when a Get would not block, also while Sets race with
// the consumer between its Gets.
func TestStressReadyExact(t *testing.T) {
	var v Value[int]
	w := v.Watch()
	defer w.Close()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			v.Set(i)
			if i%4 == 0 {
				// Let the consumer run now and then even on one
				// core: a setter that never yields starves it.
				runtime.Gosched()
			}
		}
	})
	defer wg.Wait()
	defer close(stop)
	end := time.Now().Add(time.Second)
	for n := 0; n < 5000 && time.Now().Before(end); n++ {
		patience := time.NewTimer(10 * time.Second)
		select {
		case <-w.Ready():
		case <-patience.C:
			t.Fatalf("Ready not signalled in 10 s while Sets keep coming")
		}
		patience.Stop()
		if _, err := getNow(w); err != nil {
			t.Fatal(err)
		}
	}
}

// A value that is never Set again does not keep the watchers that were
// closed while waiting on it, and the clean-up does not lose the watchers
// still waiting.
func TestClosedWaitersAreDropped(t *testing.T) {
	var v Value[int]
	v.Set(0)
	live := v.Watch()
	defer live.Close()
	if _, err := live.Get(ctx(t)); err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() {
		_, err := live.Get(ctx(t))
		got <- err
	}()
	for range 20 * minPrune {
		w := v.Watch()
		if _, err := w.Get(ctx(t)); err != nil {
			t.Fatal(err)
		}
		_ = w.Ready() // registers: w is on the stack now
		w.Close()
	}
	if n := stackLen(&v); n > 2*minPrune {
		t.Fatalf("%d watchers on the stack after the closes, want at most %d", n, 2*minPrune)
	}
	v.Set(1)
	if err := <-got; err != nil {
		t.Fatalf("the live watcher's Get: %v", err)
	}
}

func stackLen[T any](v *Value[T]) int {
	v.setMu.Lock()
	defer v.setMu.Unlock()
	n := 0
	for ws := v.waiters.Load(); ws != nil; ws = ws.next {
		n++
	}
	return n
}

// A Get waiting with a context it reuses (registered through
// context.AfterFunc) still returns when the context ends, and the
// registration does not outlive Close.
func TestGetReusedContext(t *testing.T) {
	var v Value[int]
	w := v.Watch()
	ctx, cancel := context.WithCancel(context.Background())
	for i := range 3 {
		go v.Set(i)
		if _, err := w.Get(ctx); err != nil {
			t.Fatal(err)
		}
	}
	errc := make(chan error, 1)
	go func() {
		_, err := w.Get(ctx)
		errc <- err
	}()
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("Get after cancel: %v, want context.Canceled", err)
	}
	ctx2, cancel2 := context.WithCancel(context.Background())
	defer cancel2()
	for range 2 {
		short, cancelShort := context.WithTimeout(ctx2, time.Millisecond)
		_, _ = w.Get(short)
		cancelShort()
	}
	w.Close()
	if c := w.(*watcher[int]).ws.Load().ctx.Load(); c != nil {
		t.Fatalf("a context registration outlived Close")
	}
}

// Contexts that are done before their first Done call share one closed
// channel; they must not be taken for one context reused, which would
// register the context with AfterFunc and have it claim a later wait.
func TestGetDoneContexts(t *testing.T) {
	var v Value[int]
	w := v.Watch()
	defer w.Close()
	for range 3 {
		done, cancel := context.WithCancel(context.Background())
		cancel()
		if _, err := w.Get(done); !errors.Is(err, context.Canceled) {
			t.Fatalf("Get with a done context: %v, want context.Canceled", err)
		}
	}
	if c := w.(*watcher[int]).ws.Load().ctx.Load(); c != nil {
		t.Fatalf("a done context was registered")
	}
	select {
	case <-w.Ready():
		t.Fatalf("Ready signalled on an unset value")
	default:
	}
}
