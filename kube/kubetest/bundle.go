package kubetest

import (
	"context"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/polis-os/polis/kube/bundle"
)

// bundleTimeout bounds the build of the bundle in a test: a cold build on
// a loaded two-core machine takes up to half an hour.
const bundleTimeout = 40 * time.Minute

// Bundle returns the path of the Kubernetes bundle, building it into
// bundle.OutDirForTests (in seconds when Go's build cache is warm, as after
// scripts/test's build step). Test packages that go test runs in parallel
// take turns with a file lock, so the binary is linked once. If the bundle
// cannot be built (no Go toolchain, no module proxy) the test is skipped,
// saying why; with -short it is skipped too. The kube/bundle tests are the
// ones that fail when the build is broken.
func Bundle(t testing.TB) string {
	t.Helper()
	if testing.Short() {
		t.Skip("needs the Kubernetes bundle; not with -short")
	}
	out := bundle.OutDirForTests()
	if err := os.MkdirAll(out, 0o755); err != nil {
		t.Skipf("SKIP: the Kubernetes bundle cannot be built: %v", err)
	}
	lock, err := os.OpenFile(filepath.Join(out, ".lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		t.Skipf("SKIP: the Kubernetes bundle cannot be built: %v", err)
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		t.Skipf("SKIP: the Kubernetes bundle cannot be built: locking %s: %v", lock.Name(), err)
	}
	defer syscall.Flock(int(lock.Fd()), syscall.LOCK_UN)

	ctx, cancel := context.WithTimeout(context.Background(), bundleTimeout)
	defer cancel()
	path, err := bundle.Builder{Progress: testWriter{t}}.Build(ctx, out)
	if err != nil {
		t.Skipf("SKIP: the Kubernetes bundle cannot be built, so this test cannot run: %v", err)
	}
	return path
}

// testWriter sends the build's progress lines to the test's log.
type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(string(p))
	return len(p), nil
}
