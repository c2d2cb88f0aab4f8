package controlplane

import (
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/polis-os/polis/kube/pki"
	"github.com/polis-os/polis/supervisor"
)

// TestProcessSupervision checks the runner's process handling without the
// bundle: a script stands in for polis-kube, printing a klog-style warning
// and then sleeping, with SIGTERM ignored by the scheduler so that the
// SIGKILL after StopGrace is exercised. The apiserver tests with the real
// bundle (TestControlPlane) check the same with the real components.
func TestProcessSupervision(t *testing.T) {
	dir := t.TempDir()
	script := filepath.Join(dir, "polis-kube")
	if err := os.WriteFile(script, []byte(`#!/bin/sh
echo "W1124 08:00:00.000000 $$ main.go:1] $1 pretending"
if [ "$1" = scheduler ]; then trap '' TERM; fi
exec sleep 600
`), 0o755); err != nil {
		t.Fatal(err)
	}
	c, err := pki.NewCluster("test", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	files, err := c.ControlPlaneFiles([]netip.Addr{netip.MustParseAddr("127.0.0.1")}, netip.MustParseAddr("10.96.0.1"), "https://127.0.0.1:1", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	r, err := New(Config{
		Bundle: script, Dir: filepath.Join(dir, "kube"), Files: files,
		// Port 1 on loopback: nothing answers, so the probe reports not ready.
		Address: netip.MustParseAddr("127.0.0.1"), Port: 1,
		EtcdEndpoint: "unix://" + filepath.Join(dir, "etcd.sock"),
		StopGrace:    time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	core, logs := observer.New(zap.InfoLevel)
	_, cancel := supervisor.TestHarnessTree(t, r.Run, supervisor.WithLogger(zap.New(core)))

	running := waitStatus(t, r, "running", func(s *Status) bool { return s.Running() })
	if running.Ready || running.NotReady == "" {
		t.Errorf("nothing answers /readyz, yet status says ready=%v (%q)", running.Ready, running.NotReady)
	}
	// The files are there, secrets private.
	for name := range files {
		fi, err := os.Stat(filepath.Join(dir, "kube", name))
		if err != nil {
			t.Fatal(err)
		}
		if want := map[bool]os.FileMode{true: 0o600, false: 0o644}[pki.Secret(name)]; fi.Mode().Perm() != want {
			t.Errorf("%s has mode %v, want %v", name, fi.Mode().Perm(), want)
		}
	}

	// The output reaches the log, on the component's logger, at its level.
	waitLog(t, logs, "root.scheduler", "scheduler pretending", zap.WarnLevel)

	// A killed component is restarted, alone.
	cm, _ := running.Component(ControllerManager)
	if err := syscall.Kill(cm.PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	after := waitStatus(t, r, "controller-manager restarted", func(s *Status) bool {
		c, _ := s.Component(ControllerManager)
		return c.Starts == 2 && c.Running
	})
	for _, name := range []string{APIServer, Scheduler} {
		if c, _ := after.Component(name); c.Starts != 1 {
			t.Errorf("%s started %d times when the controller-manager died", name, c.Starts)
		}
	}
	if c, _ := after.Component(ControllerManager); !strings.Contains(c.LastExit, "killed") {
		t.Errorf("controller-manager's last exit %q does not say it was killed", c.LastExit)
	}

	// Stopping leaves no process, even the one that ignores SIGTERM.
	cancel()
	waitStatus(t, r, "stopped", func(s *Status) bool {
		for _, c := range s.Components {
			if c.Running {
				return false
			}
		}
		return true
	})
	for _, c := range after.Components {
		if err := syscall.Kill(c.PID, 0); !errors.Is(err, syscall.ESRCH) {
			t.Errorf("%s (pid %d) is still there after the runner stopped: %v", c.Name, c.PID, err)
		}
	}
}

// waitLog waits for a log entry of logger name containing text at level.
func waitLog(t *testing.T, logs *observer.ObservedLogs, name, text string, level zapcore.Level) {
	t.Helper()
	deadline := time.Now().Add(readyTimeout)
	for time.Now().Before(deadline) {
		for _, e := range logs.All() {
			if e.LoggerName == name && strings.Contains(e.Message, text) && e.Level == level {
				return
			}
		}
		time.Sleep(20 * time.Millisecond) // polling interval of a deadline-bounded wait
	}
	t.Fatalf("no %v log line %q from %s", level, text, name)
}
