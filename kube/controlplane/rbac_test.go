package controlplane

import (
	"crypto/x509"
	"net"
	"net/http"
	"net/netip"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/polis-os/polis/internal/testutil"
	"github.com/polis-os/polis/kube/pki"
	"github.com/polis-os/polis/supervisor"
	"github.com/polis-os/polis/supervisor/supervisortest"
)

// TestRBACRetriedWhileReady: an apply that fails while the apiserver stays
// ready (a write timing out on a starved controller) is tried again until
// it succeeds, with no new status to wake the runnable; then every object
// is applied. Before, the runnable waited for the next status after a
// failure and, with the apiserver ready throughout, never applied: the
// node DNS servers were refused for good.
func TestRBACRetriedWhileReady(t *testing.T) {
	saved := rbacRetry
	rbacRetry = 10 * time.Millisecond
	t.Cleanup(func() { rbacRetry = saved })

	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	server := "https://" + l.Addr().String()
	c, err := pki.NewCluster("test", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	files, err := c.ControlPlaneFiles([]netip.Addr{netip.MustParseAddr("127.0.0.1")}, netip.MustParseAddr("10.96.0.1"), server, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	const failures = 3
	var mu sync.Mutex
	calls := 0
	applied := map[string]bool{}
	serveAPIServer(t, l, files, http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		calls++
		if req.Method != http.MethodPatch || calls <= failures {
			http.Error(w, "etcd request timed out", http.StatusServiceUnavailable)
			return
		}
		applied[req.URL.Path] = true
	}))

	dir := t.TempDir()
	r, err := New(Config{
		Bundle: filepath.Join(dir, "polis-kube"), Dir: filepath.Join(dir, "kube"), Files: files,
		Address: netip.MustParseAddr("127.0.0.1"), Port: l.Addr().(*net.TCPAddr).Port,
		EtcdEndpoint: "unix://" + filepath.Join(dir, "etcd.sock"),
		StopGrace:    time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(files[pki.FileCA]) {
		t.Fatal("the CA file holds no certificate")
	}
	// Ready once, and never again: only retrying can apply.
	r.status.Set(&Status{Ready: true, ReadyPID: 42})
	core, logs := observer.New(zap.InfoLevel)
	supervisortest.HarnessTree(t, r.applyRBAC(roots), supervisor.WithLogger(zap.New(core)))

	want := []string{
		"/apis/rbac.authorization.k8s.io/v1/clusterroles/" + DNSRoleName,
		"/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/" + DNSRoleName,
	}
	testutil.Eventually(t, 30*time.Second, "both RBAC objects applied after failures", testutil.Holds(func() bool {
		mu.Lock()
		defer mu.Unlock()
		for _, p := range want {
			if !applied[p] {
				return false
			}
		}
		return true
	}))
	testutil.Eventually(t, 30*time.Second, "the applied log line", testutil.Holds(func() bool {
		return logs.FilterMessage("applied the RBAC of the node services").Len() == 1
	}))
	if n := logs.FilterMessage("applying the RBAC of the node services; trying again").Len(); n != failures {
		t.Errorf("%d failed applies logged, want %d", n, failures)
	}
}
