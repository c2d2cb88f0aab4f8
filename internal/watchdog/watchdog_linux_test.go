package watchdog_test

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/polis-os/polis/internal/watchdog"
)

// asInit, when set, is what the test binary does as a machine's PID 1
// (vm_linux_test.go) instead of running as a test process.
var asInit func()

func TestMain(m *testing.M) {
	if asInit != nil && os.Getpid() == 1 {
		asInit()
	}
	goleak.VerifyTestMain(m)
}

// TestOpenRefuses: a machine without the device is told apart from
// other failures (PID 1 then boots without a watchdog, saying so), and a
// timeout under a second is refused before anything is armed.
func TestOpenRefuses(t *testing.T) {
	_, err := watchdog.Open(filepath.Join(t.TempDir(), "watchdog0"), time.Minute)
	if !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a missing device: got %v, want an error wrapping fs.ErrNotExist", err)
	}
	// Not a watchdog: neither the timeout's ioctl nor the disarming
	// works, so Open says so and hands the device over, as it would a
	// nowayout watchdog that runs on: it is the caller's to feed.
	d, err := watchdog.Open(os.DevNull, time.Minute)
	if err == nil || !strings.Contains(err.Error(), "setting its timeout") || !strings.Contains(err.Error(), "stays armed") {
		t.Errorf("%s: got %v, want an error about setting the timeout and disarming", os.DevNull, err)
	}
	if d == nil {
		t.Errorf("%s: no device handed over with a watchdog that would not disarm", os.DevNull)
	}
	_, err = watchdog.Open(os.DevNull, 0)
	if err == nil || !strings.Contains(err.Error(), "at least 1s") {
		t.Errorf("a zero timeout: got %v, want it refused", err)
	}
}
