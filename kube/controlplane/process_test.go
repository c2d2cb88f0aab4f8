package controlplane

import (
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/polis-os/polis/internal/testutil"
	"github.com/polis-os/polis/kube/pki"
	"github.com/polis-os/polis/supervisor"
	"github.com/polis-os/polis/supervisor/supervisortest"
)

// TestProcessSupervision checks the runner's process handling without the
// bundle: a script stands in for polis-kube, printing a klog-style warning
// and then sleeping, with SIGTERM ignored by the scheduler so that the
// SIGKILL after StopGrace is exercised, and a TLS server stands in for
// the apiserver's /readyz, answering 503 until the test makes it ready.
// The apiserver tests with the real bundle (TestControlPlane) check the
// same with the real components.
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
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	server := "https://" + l.Addr().String()
	c, err := pki.NewCluster("test", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	files, err := c.ControlPlaneFiles([]netip.Addr{netip.MustParseAddr("127.0.0.1")}, netip.MustParseAddr("10.96.0.1"), server, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	readyz := serveReadyz(t, l, files)
	r, err := New(Config{
		Bundle: script, Dir: filepath.Join(dir, "kube"), Files: files,
		Address: netip.MustParseAddr("127.0.0.1"), Port: port,
		EtcdEndpoint: "unix://" + filepath.Join(dir, "etcd.sock"),
		StopGrace:    time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	core, logs := observer.New(zap.InfoLevel)
	_, cancel := supervisortest.HarnessTree(t, r.Run, supervisor.WithLogger(zap.New(core)))

	// Until /readyz answers ok, the apiserver runs alone.
	notReady := waitStatus(t, r, "probed while not ready", func(s *Status) bool {
		a, _ := s.Component(APIServer)
		return a.Running && strings.Contains(s.NotReady, "503")
	})
	if notReady.Ready {
		t.Errorf("/readyz answers 503, yet status says ready")
	}
	for _, name := range []string{ControllerManager, Scheduler} {
		if c, _ := notReady.Component(name); c.Starts != 0 {
			t.Errorf("%s started %d times before the apiserver was ready", name, c.Starts)
		}
	}
	readyz.Store(true)
	running := waitStatus(t, r, "running", func(s *Status) bool { return s.Running() && s.Ready })

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

	// A killed apiserver is not ready from its exit: the exit is
	// published not ready, and its successor is asked at once, not at the
	// ready probe's slow pace. The runner's own record of the exit:
	a, _ := after.Component(APIServer)
	if err := syscall.Kill(a.PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	exited := waitStatus(t, r, "apiserver exited or restarted", func(s *Status) bool {
		c, _ := s.Component(APIServer)
		return c.PID != a.PID
	})
	if exited.Ready && exited.ReadyPID == a.PID {
		t.Errorf("the killed apiserver (pid %d) is still counted ready: %+v", a.PID, exited)
	}
	again := waitStatus(t, r, "restarted apiserver ready", func(s *Status) bool {
		c, _ := s.Component(APIServer)
		return c.Starts == 2 && c.Running && s.Ready && s.ReadyPID == c.PID
	})
	if c, _ := again.Component(APIServer); !strings.Contains(c.LastExit, "killed") {
		t.Errorf("apiserver's last exit %q does not say it was killed", c.LastExit)
	}
	after = again

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

// serveReadyz serves /readyz on l with the apiserver's serving
// certificate from files: 503 until the returned flag is set, then ok.
// Everything else (the RBAC the runner applies once ready) is 404, which
// the runner retries.
func serveReadyz(t *testing.T, l net.Listener, files pki.Files) *atomic.Bool {
	t.Helper()
	ready := new(atomic.Bool)
	serveAPIServer(t, l, files, http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		switch {
		case req.URL.Path != "/readyz":
			http.NotFound(w, req)
		case ready.Load():
			io.WriteString(w, "ok")
		default:
			http.Error(w, "not yet", http.StatusServiceUnavailable)
		}
	}))
	return ready
}

// serveAPIServer serves h on l over TLS with the apiserver's serving
// certificate from files, a stand-in apiserver, until the test ends.
func serveAPIServer(t *testing.T, l net.Listener, files pki.Files, h http.Handler) {
	t.Helper()
	cert, err := tls.X509KeyPair(files[pki.FileServingCert], files[pki.FileServingKey])
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{
		Handler:   h,
		TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12},
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		srv.ServeTLS(l, "", "")
	}()
	t.Cleanup(func() {
		srv.Close()
		<-done
	})
}

// waitLog waits for a log entry of logger name containing text at level.
func waitLog(t *testing.T, logs *observer.ObservedLogs, name, text string, level zapcore.Level) {
	t.Helper()
	testutil.Eventually(t, readyTimeout, fmt.Sprintf("a %v log line %q from %s", level, text, name), testutil.Holds(func() bool {
		for _, e := range logs.All() {
			if e.LoggerName == name && strings.Contains(e.Message, text) && e.Level == level {
				return true
			}
		}
		return false
	}))
}
