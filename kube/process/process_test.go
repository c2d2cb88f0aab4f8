package process

import (
	"errors"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/polis-os/polis/internal/testutil"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// A process' lines reach the log at klog's level, and Stop ends its whole
// group, a child that ignores SIGTERM included, and returns only once the
// process is gone.
func TestStartStop(t *testing.T) {
	core, logs := observer.New(zap.InfoLevel)
	p, err := Start(zap.New(core), Command{Path: "/bin/sh", Args: []string{"-c", `
trap '' TERM
sh -c 'trap "" TERM; echo "E0101 child"; exec sleep 600' &
echo "W0101 parent"
wait`}})
	if err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 30*time.Second, "the child's and the parent's lines logged", func() error {
		if len(logs.FilterMessage("E0101 child").All()) == 0 || len(logs.FilterMessage("W0101 parent").All()) == 0 {
			return fmt.Errorf("logged: %v", logs.All())
		}
		return nil
	})
	if e := logs.FilterMessage("E0101 child").All()[0]; e.Level != zap.ErrorLevel {
		t.Errorf("an E line logged at %v", e.Level)
	}
	err = p.Stop(200 * time.Millisecond)
	if err == nil || !strings.Contains(err.Error(), "killed") {
		t.Errorf("Stop: %v, want it killed", err)
	}
	select {
	case <-p.Exited():
	default:
		t.Error("Stop returned before the process exited")
	}
	// The killed child is reaped by whoever adopted it: wait for that.
	testutil.Eventually(t, 30*time.Second, "the process group gone", func() error {
		if err := syscall.Kill(-p.PID(), 0); !errors.Is(err, syscall.ESRCH) {
			return fmt.Errorf("still there (kill 0: %v)", err)
		}
		return nil
	})
}

// A child's lines are logged at klog's level, and its errors carry no
// stack trace of the agent's, whatever the logger adds to errors.
func TestLogLinesLevels(t *testing.T) {
	core, logs := observer.New(zap.InfoLevel)
	LogLines(zap.New(core, zap.AddStacktrace(zap.ErrorLevel)), strings.NewReader("I0101 fine\nW0101 careful\nE0101 broken\nplain\n"))
	want := []zapcore.Level{zap.InfoLevel, zap.WarnLevel, zap.ErrorLevel, zap.InfoLevel}
	got := logs.All()
	if len(got) != len(want) {
		t.Fatalf("%d entries, want %d: %v", len(got), len(want), got)
	}
	for i, e := range got {
		if e.Level != want[i] || e.Stack != "" {
			t.Errorf("%q: level %v, stack %q; want %v and no stack", e.Message, e.Level, e.Stack, want[i])
		}
	}
}
