package testutil

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"
)

// Polling. Tests wait on events where one exists; for a condition no
// event value reports (a record in another process's store, a file
// another member rewrote, a command's output) they poll with a deadline,
// here, and a failure says what was awaited and why it still did not hold
// (the condition's last error), never just "timed out".

// maxPollInterval is the longest pause between two tries of Eventually:
// the first tries come quickly (most conditions hold soon), later ones
// every maxPollInterval, so that a condition that runs a process (polisctl)
// does not load a busy machine.
const maxPollInterval = 100 * time.Millisecond

// Poll calls cond every interval until it returns nil, and returns nil;
// or, once ctx ends, returns ctx's error with cond's last error. cond runs
// at least once.
func Poll(ctx context.Context, interval time.Duration, cond func() error) error {
	return poll(ctx, interval, interval, cond)
}

// Eventually polls cond until it returns nil, failing tb with what and
// cond's last error if it still fails after timeout.
func Eventually(tb testing.TB, timeout time.Duration, what string, cond func() error) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if err := poll(ctx, 5*time.Millisecond, maxPollInterval, cond); err != nil {
		tb.Fatalf("%s: still failing after %v: %v", what, timeout, err)
	}
}

// poll is Poll with a pause that doubles from first up to most.
func poll(ctx context.Context, first, most time.Duration, cond func() error) error {
	pause := first
	for {
		err := cond()
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return fmt.Errorf("%w; last: %w", ctx.Err(), err)
		}
		select {
		case <-ctx.Done(): // one more try, which may hold or say why not
		case <-time.After(pause): // polling interval, not synchronisation
		}
		pause = min(2*pause, most)
	}
}

// ErrNotYet is what a condition that only knows true or false returns
// while it does not hold: see Holds.
var ErrNotYet = errors.New("the condition does not hold yet")

// Holds makes a condition of Eventually or Poll from cond, which only
// knows whether it holds.
func Holds(cond func() bool) func() error {
	return func() error {
		if !cond() {
			return ErrNotYet
		}
		return nil
	}
}
