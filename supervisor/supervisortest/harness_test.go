package supervisortest_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cenkalti/backoff/v5"
	"go.uber.org/goleak"

	"github.com/polis-os/polis/event"
	"github.com/polis-os/polis/supervisor"
	"github.com/polis-os/polis/supervisor/supervisortest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// A runnable that fails is restarted by the harness, and when the test
// (here a subtest) ends, the harness has waited for the whole tree: the
// runnable has returned before the subtest's Run does.
func TestHarness(t *testing.T) {
	exited := make(chan struct{})
	var runs atomic.Int32
	t.Run("inner", func(t *testing.T) {
		started := make(chan struct{})
		supervisortest.Harness(t, func(ctx context.Context) error {
			if runs.Add(1) == 1 {
				return errors.New("restarted quickly by the harness")
			}
			defer close(exited)
			close(started)
			supervisor.Signal(ctx, supervisor.SignalHealthy)
			<-ctx.Done()
			// Slow to return, as a runnable that shuts something down
			// is: a cleanup that only cancelled, without waiting,
			// would let the subtest end before this returns.
			time.Sleep(50 * time.Millisecond)
			return ctx.Err()
		})
		select {
		case <-started:
		case <-time.After(time.Minute):
			t.Fatal("the runnable was not restarted within a minute")
		}
	})
	select {
	case <-exited:
	default:
		t.Error("the harness's cleanup did not wait for the tree")
	}
}

// HarnessTree hands over the supervisor, whose tree a test waits on, and a
// cancel that stops the tree; Wait then returns once the tree is gone.
// Options given to it apply after the harness's own: here the backoff.
func TestHarnessTreeAndCancel(t *testing.T) {
	var returned atomic.Bool
	var runs, ours atomic.Int32
	s, cancel := supervisortest.HarnessTree(t, func(ctx context.Context) error {
		err := supervisor.Run(ctx, "a", func(ctx context.Context) error {
			if runs.Add(1) == 1 {
				return errors.New("fail once, for the backoff")
			}
			defer returned.Store(true)
			supervisor.Signal(ctx, supervisor.SignalHealthy)
			<-ctx.Done()
			return ctx.Err()
		})
		if err != nil {
			return err
		}
		supervisor.Signal(ctx, supervisor.SignalDone)
		return nil
	}, supervisor.WithBackoff(func() backoff.BackOff {
		ours.Add(1)
		return &backoff.ZeroBackOff{}
	}))
	ctx, stop := context.WithTimeout(context.Background(), time.Minute)
	defer stop()
	if _, err := event.Get(ctx, s.Tree(), event.Filter(func(ts supervisor.TreeState) bool {
		n, ok := ts.Node("root.a")
		return ok && n.State == supervisor.StateHealthy
	})); err != nil {
		t.Fatalf("waiting for root.a to be healthy: %v", err)
	}
	if ours.Load() == 0 {
		t.Error("the test's backoff was not used: the harness's own options came after it")
	}
	cancel()
	s.Wait()
	if !returned.Load() {
		t.Error("runnable still running after cancel and Wait")
	}
}
