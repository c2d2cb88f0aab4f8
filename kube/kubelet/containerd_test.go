package kubelet

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/polis-os/polis/internal/testutil"
	"github.com/polis-os/polis/kube/kubetest"
	"github.com/polis-os/polis/kube/process"
)

// linkSocket makes link name socket, as a stand-in containerd does for
// its socket in the run directory.
func linkSocket(t *testing.T, socket, link string) {
	t.Helper()
	if err := os.Symlink(socket, link); err != nil {
		t.Fatal(err)
	}
}

// standIn starts a real process that runs until the test ends or stop is
// called, standing in for containerd's process.
func standIn(t *testing.T) *process.Process {
	t.Helper()
	p, err := process.Start(zaptest.NewLogger(t), process.Command{Path: "/bin/sh", Args: []string{"-c", "sleep 600 & wait"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Stop(time.Second) })
	return p
}

// askedTimes waits until the stand-in has answered n questions, and checks
// that the wait has not ended meanwhile.
func askedTimes(t *testing.T, asked *atomic.Int64, n int64, done <-chan error) {
	t.Helper()
	testutil.Eventually(t, waitTimeout, fmt.Sprintf("%d questions to the stand-in", n), func() error {
		if got := asked.Load(); got < n {
			return fmt.Errorf("%d asked", got)
		}
		return nil
	})
	select {
	case err := <-done:
		t.Fatalf("the wait ended before containerd served: %v", err)
	default:
	}
}

// waitResult runs waitContainerd in the background and returns its
// result's channel.
func waitResult(t *testing.T, ctx context.Context, socket string, p *process.Process, timeout time.Duration) <-chan error {
	t.Helper()
	done, returned := make(chan error, 1), make(chan struct{})
	go func() {
		defer close(returned)
		done <- waitContainerd(ctx, socket, p, timeout)
	}()
	t.Cleanup(func() {
		select {
		case <-returned:
		case <-time.After(waitTimeout):
			t.Error("waitContainerd did not return")
		}
	})
	return done
}

// A containerd that answers SERVING ends the wait, once its socket is
// there; one that is NOT_SERVING, or has no socket, is waited for.
func TestWaitContainerdServing(t *testing.T) {
	dir := t.TempDir()
	target, h, asked := kubetest.ContainerdHealth(t, dir)
	h.SetServingStatus("", healthpb.HealthCheckResponse_NOT_SERVING)
	socket := filepath.Join(dir, "containerd.sock")
	done := waitResult(t, context.Background(), socket, standIn(t), waitTimeout)

	// No socket: nothing is asked. Once the socket is there, NOT_SERVING
	// keeps the wait going, asked again every poll.
	if got := asked.Load(); got != 0 {
		t.Errorf("asked %d times without a socket", got)
	}
	linkSocket(t, target, socket)
	askedTimes(t, asked, 3, done)
	h.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("wait: %v", err)
		}
	case <-time.After(waitTimeout):
		t.Fatal("the wait did not end once containerd served")
	}
}

// A containerd that never answers fails the wait at its deadline, naming
// the socket and the last failure: NOT_SERVING, or a socket nothing
// listens on.
func TestWaitContainerdDeadline(t *testing.T) {
	for _, tc := range []struct {
		name string
		give func(t *testing.T, socket string)
		want string
	}{
		{"not serving", func(t *testing.T, socket string) {
			target, h, _ := kubetest.ContainerdHealth(t, t.TempDir())
			h.SetServingStatus("", healthpb.HealthCheckResponse_NOT_SERVING)
			linkSocket(t, target, socket)
		}, "containerd's health is NOT_SERVING"},
		{"no server", func(t *testing.T, socket string) {
			l, err := net.Listen("unix", socket)
			if err != nil {
				t.Fatal(err)
			}
			// Closing the listener leaves its file: a socket that refuses.
			l.(*net.UnixListener).SetUnlinkOnClose(false)
			l.Close()
		}, "connection refused"},
		{"no socket", func(*testing.T, string) {}, "no socket yet"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			socket := filepath.Join(t.TempDir(), "containerd.sock")
			tc.give(t, socket)
			err := <-waitResult(t, context.Background(), socket, standIn(t), time.Second)
			if err == nil || !strings.Contains(err.Error(), "containerd does not answer on "+socket) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("wait: %v; want no answer on %s, with %q", err, socket, tc.want)
			}
		})
	}
}

// A containerd that ends before it answers ends the wait at once, saying
// so.
func TestWaitContainerdExited(t *testing.T) {
	target, h, asked := kubetest.ContainerdHealth(t, t.TempDir())
	h.SetServingStatus("", healthpb.HealthCheckResponse_NOT_SERVING)
	socket := filepath.Join(t.TempDir(), "containerd.sock")
	linkSocket(t, target, socket)
	p := standIn(t)
	done := waitResult(t, context.Background(), socket, p, waitTimeout)
	askedTimes(t, asked, 2, done)
	_ = p.Stop(time.Second)
	if err := <-done; err == nil || !strings.Contains(err.Error(), "ended before it answered") {
		t.Errorf("wait: %v; want containerd ended before it answered", err)
	}
}

// The wait ends with its context.
func TestWaitContainerdCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	done := waitResult(t, ctx, filepath.Join(t.TempDir(), "containerd.sock"), standIn(t), waitTimeout)
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("wait: %v; want context.Canceled", err)
	}
}

// systemBinDir is the bin directory of the node's system tree as the
// tests build it (launch/systembuild.OutDirForTests, which this floor may
// not import): $POLIS_SYSTEM_DIR, or polis/system-tree in the user's
// cache directory.
func systemBinDir() string {
	if d := os.Getenv("POLIS_SYSTEM_DIR"); d != "" {
		return filepath.Join(d, "bin")
	}
	d, err := os.UserCacheDir()
	if err != nil {
		d = os.TempDir()
	}
	return filepath.Join(d, "polis", "system-tree", "bin")
}

// The real containerd of the system tree, with the configuration the
// runner writes, answers the health question the wait asks: the wait
// ends, and it ends no later than ctr version says containerd answers.
// Skipped without root or without the system tree (scripts/test builds
// it; so does go run ./cmd/polis-system-build).
func TestWaitContainerdReal(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the real containerd; not with -short")
	}
	if os.Geteuid() != 0 {
		t.Skip("containerd needs root")
	}
	bin := systemBinDir()
	if _, err := os.Stat(filepath.Join(bin, "containerd")); err != nil {
		t.Skipf("SKIP: no system tree with containerd: %v", err)
	}
	dir := t.TempDir()
	cfg := Config{BinDir: bin, CNIBinDir: filepath.Join(dir, "cni"), PauseImageRef: DefaultPauseImage, StateDir: filepath.Join(dir, "state"), RunDir: filepath.Join(dir, "run")}
	for _, d := range []string{cfg.StateDir, cfg.RunDir} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(cfg.file(fileContainerdConfig), cfg.containerdConfig(), 0o600); err != nil {
		t.Fatal(err)
	}
	log := zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel))
	p, err := process.Start(log, process.Command{Path: cfg.bin("containerd"), Args: []string{"--config", cfg.file(fileContainerdConfig)}, Env: cfg.env(), Dir: cfg.RunDir})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := p.Stop(DefaultStopGrace); err != nil {
			t.Errorf("containerd's stop: %s", process.ExitString(err))
		}
	}()
	start := time.Now()
	if err := waitContainerd(context.Background(), cfg.containerdSocket(), p, containerdStartTimeout); err != nil {
		t.Fatal(err)
	}
	t.Logf("containerd answered the health check %v after its start", time.Since(start))

	// What the wait replaced, for comparison: containerd answering, ctr
	// agrees; and the question's cost beside ctr version's.
	start = time.Now()
	if err := containerdServing(context.Background(), cfg.containerdSocket()); err != nil {
		t.Fatalf("asking again: %v", err)
	}
	asked := time.Since(start)
	start = time.Now()
	r := &Runner{cfg: cfg}
	if err := r.ctr(context.Background(), log, time.Minute, "version"); err != nil {
		t.Fatalf("ctr version after the health check said containerd serves: %v", err)
	}
	t.Logf("one health check %v; one ctr version %v", asked, time.Since(start))
}
