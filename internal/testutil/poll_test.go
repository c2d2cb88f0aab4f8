package testutil

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"
)

// Poll returns as soon as the condition holds, and otherwise reports the
// context's end together with the condition's last error.
func TestPoll(t *testing.T) {
	n := 0
	if err := Poll(context.Background(), time.Millisecond, func() error {
		n++
		if n < 3 {
			return errors.New("not yet")
		}
		return nil
	}); err != nil || n != 3 {
		t.Fatalf("Poll: %v after %d tries, want nil after 3", err, n)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	last := errors.New("the last reason")
	err := Poll(ctx, time.Millisecond, func() error { return last })
	if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, last) {
		t.Fatalf("Poll of a condition that never holds: %v; want the deadline and the last reason", err)
	}

	if err := Poll(ctx, time.Millisecond, Holds(func() bool { return false })); !errors.Is(err, ErrNotYet) {
		t.Fatalf("Poll of Holds(false): %v; want ErrNotYet", err)
	}
}

// Eventually fails the test with the condition's last error.
func TestEventuallyFails(t *testing.T) {
	ft := &fatalT{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		Eventually(ft, 20*time.Millisecond, "the impossible", func() error { return errors.New("because") })
	}()
	<-done
	if ft.msg == "" {
		t.Fatal("Eventually of a condition that never holds did not fail the test")
	}
	for _, want := range []string{"the impossible", "because"} {
		if !strings.Contains(ft.msg, want) {
			t.Errorf("Eventually's failure %q lacks %q", ft.msg, want)
		}
	}
}

// fatalT records Fatalf and ends the goroutine, as testing.T does.
type fatalT struct {
	testing.TB
	msg string
}

func (f *fatalT) Helper() {}

func (f *fatalT) Fatalf(format string, args ...any) {
	f.msg = fmt.Sprintf(format, args...)
	runtime.Goexit()
}
