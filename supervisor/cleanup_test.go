package supervisor

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
)

// A cleanup runs only once the runnable and its whole subtree have
// returned: the child below leaves only after its parent has returned, and
// the cleanup must still see it gone.
func TestCleanupRunsAfterSubtree(t *testing.T) {
	var childExited atomic.Bool
	parentReturned := make(chan struct{})
	cleaned := make(chan bool, 1)
	started, childStarted := make(chan struct{}), make(chan struct{})
	root := func(ctx context.Context) error {
		defer close(parentReturned)
		if err := Run(ctx, "child", func(ctx context.Context) error {
			Signal(ctx, SignalHealthy)
			close(childStarted)
			<-ctx.Done()
			<-parentReturned
			childExited.Store(true)
			return ctx.Err()
		}); err != nil {
			return err
		}
		Cleanup(ctx, func() { cleaned <- childExited.Load() })
		Signal(ctx, SignalHealthy)
		<-childStarted
		close(started)
		<-ctx.Done()
		return ctx.Err()
	}
	cancel := startTree(t, root).cancel
	<-started
	cancel()
	if !<-cleaned {
		t.Fatal("the cleanup ran while a child was still running")
	}
}

// A failed run's cleanups run before it is restarted, in reverse order of
// registration, and a panicking cleanup does not keep the others from
// running.
func TestCleanupBeforeRestart(t *testing.T) {
	var runs atomic.Int32
	order := make(chan string, 10)
	second := make(chan struct{})
	root := func(ctx context.Context) error {
		switch runs.Add(1) {
		case 1:
			Cleanup(ctx, func() { order <- "first registered" })
			Cleanup(ctx, func() { panic("a broken cleanup") })
			Cleanup(ctx, func() { order <- "last registered" })
			return errors.New("fail once")
		default:
			order <- "restarted"
			close(second)
			Signal(ctx, SignalHealthy)
			<-ctx.Done()
			return ctx.Err()
		}
	}
	startTree(t, root)
	<-second
	want := []string{"last registered", "first registered", "restarted"}
	for _, w := range want {
		if got := <-order; got != w {
			t.Fatalf("got %q, want %q (order %v)", got, w, want)
		}
	}
}

// A Cleanup registered after the run's cleanups have run (by a goroutine
// the runnable left behind) runs at once instead of being lost.
func TestLateCleanupRunsAtOnce(t *testing.T) {
	ctxs := make(chan context.Context, 1)
	root := func(ctx context.Context) error {
		ctxs <- ctx
		Signal(ctx, SignalDone)
		return nil
	}
	tr := startTree(t, root)
	s, cancel := tr.Supervisor, tr.cancel
	ctx := <-ctxs
	cancel()
	s.Wait()
	ran := false
	Cleanup(ctx, func() { ran = true })
	if !ran {
		t.Fatal("a late Cleanup did not run")
	}
}

func TestCleanupOutsideTreePanics(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("Cleanup outside a runnable did not panic")
		}
	}()
	Cleanup(context.Background(), func() {})
}
