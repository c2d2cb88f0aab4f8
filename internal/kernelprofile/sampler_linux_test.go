package kernelprofile

import (
	"errors"
	"os"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestSampler profiles this machine while the test spins in user space:
// the profile must have samples, some of them the spinning's.
func TestSampler(t *testing.T) {
	s, err := Start(250)
	if errors.Is(err, unix.EACCES) || errors.Is(err, unix.EPERM) || errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOSYS) || errors.Is(err, os.ErrPermission) {
		// A container or an unprivileged user: the profiler's own
		// error says what it needs.
		t.Skipf("no profile of the whole machine here: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(300 * time.Millisecond); time.Now().Before(deadline); {
	}
	p, err := s.Stop()
	if err != nil {
		t.Fatal(err)
	}
	if p.Samples == 0 || p.Functions[User] == 0 {
		t.Fatalf("profile of 300 ms of spinning: %d samples, %d in user space; want some of each", p.Samples, p.Functions[User])
	}
	t.Logf("%d samples, %d lost; busiest: %v", p.Samples, p.Lost, p.Top(5))
}

func TestStartRate(t *testing.T) {
	if _, err := Start(0); err == nil {
		t.Error("Start(0) succeeded, want an error naming the rate")
	}
}
