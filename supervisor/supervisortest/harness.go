// Package supervisortest runs a supervisor tree for the length of one test.
//
// A test of a runnable wants what a program gets from supervisor.New, with
// three differences: the tree's logs go to the test's log (so that they
// show with the test that failed, and only then), failures are restarted
// after a millisecond rather than the production backoff's half second (so
// that tests of restart behaviour stay fast), and the tree is cancelled and
// waited for when the test ends, so that no goroutine outlives the test and
// nothing logs through a test that has already returned.
//
// It is a package of its own, not part of supervisor, because it imports
// testing and zaptest: a program that links the supervisor must not link
// the test framework with it. Only tests and other test kits import it
// (internal/archcheck enforces that).
package supervisortest

import (
	"context"
	"testing"
	"time"

	"github.com/cenkalti/backoff/v5"
	"go.uber.org/zap/zaptest"

	"github.com/polis-os/polis/supervisor"
)

// Harness runs r as the root of a supervisor for the duration of test t.
// Runnables log through t (go.uber.org/zap/zaptest), and failures are
// restarted after a short backoff (1ms doubling up to 100ms). The returned
// cancel stops the tree without waiting; t.Cleanup cancels it and waits
// for every runnable to return.
func Harness(t testing.TB, r supervisor.Runnable) (cancel func()) {
	t.Helper()
	_, cancel = HarnessTree(t, r)
	return cancel
}

// HarnessTree is Harness for tests that also need the supervisor,
// typically to wait on its Tree until a runnable is healthy. opts apply
// after the harness's own, so a test can replace the logger or the
// backoff.
func HarnessTree(t testing.TB, r supervisor.Runnable, opts ...supervisor.Option) (*supervisor.Supervisor, context.CancelFunc) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	base := []supervisor.Option{supervisor.WithLogger(zaptest.NewLogger(t)), supervisor.WithBackoff(testBackoff)}
	s := supervisor.New(ctx, r, append(base, opts...)...)
	t.Cleanup(func() {
		cancel()
		s.Wait()
	})
	return s, cancel
}

// testBackoff restarts quickly and without randomisation, so that a
// test's restarts take milliseconds, not the production backoff's seconds.
func testBackoff() backoff.BackOff {
	return &backoff.ExponentialBackOff{
		InitialInterval:     time.Millisecond,
		RandomizationFactor: 0,
		Multiplier:          2,
		MaxInterval:         100 * time.Millisecond,
	}
}
