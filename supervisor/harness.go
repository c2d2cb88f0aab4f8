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
	_, cancel = TestHarnessTree(t, r)
	return cancel
}

// TestHarnessTree is TestHarness for tests that also need the supervisor,
// typically to wait on Tree until a runnable is healthy. opts apply after
// the harness's own, so a test can replace the logger or the backoff.
func TestHarnessTree(t testing.TB, r Runnable, opts ...Option) (*Supervisor, context.CancelFunc) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	base := []Option{WithLogger(zaptest.NewLogger(t)), WithBackoff(testBackoff)}
	s := New(ctx, r, append(base, opts...)...)
	t.Cleanup(func() {
		cancel()
		s.Wait()
	})
	return s, cancel
}

func testBackoff() backoff.BackOff {
	return &backoff.ExponentialBackOff{
		InitialInterval:     time.Millisecond,
		RandomizationFactor: 0,
		Multiplier:          2,
		MaxInterval:         100 * time.Millisecond,
	}
}
