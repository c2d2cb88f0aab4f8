package supervisor

import (
	"context"
	"testing"
	"time"

	"github.com/cenkalti/backoff/v5"
	"go.uber.org/zap/zaptest"
)

// TestHarness runs r as the root of a supervisor for the duration of test t.
// Runnables log through t (go.uber.org/zap/zaptest), and failures are
// restarted after a short backoff (1ms doubling up to 100ms) so that tests
// of restart behaviour stay fast. The returned cancel stops the tree without
// waiting; t.Cleanup cancels it and waits for every runnable to return, so
// a test using the harness leaves no goroutine behind and nothing logs
// through t after it ended.
func TestHarness(t testing.TB, r Runnable) (cancel func()) {
	t.Helper()
	ctx, cancelCtx := context.WithCancel(context.Background())
	s := New(ctx, r,
		WithLogger(zaptest.NewLogger(t)),
		WithBackoff(testBackoff),
	)
	t.Cleanup(func() {
		cancelCtx()
		s.Wait()
	})
	return cancelCtx
}

func testBackoff() backoff.BackOff {
	return &backoff.ExponentialBackOff{
		InitialInterval:     time.Millisecond,
		RandomizationFactor: 0,
		Multiplier:          2,
		MaxInterval:         100 * time.Millisecond,
	}
}
