package controlplane

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptrace"
	"net/netip"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/polis-os/polis/event"
	"github.com/polis-os/polis/internal/testutil"
	"github.com/polis-os/polis/kube/etcdproxy"
	"github.com/polis-os/polis/kube/kubetest"
	"github.com/polis-os/polis/kube/pki"
	"github.com/polis-os/polis/supervisor"
	"github.com/polis-os/polis/supervisor/supervisortest"
)

// TestMain fails the package if a goroutine outlives the tests.
func TestMain(m *testing.M) {
	testutil.VerifyTestMainWithin(m, 15*time.Second)
}

// subnets gives each test its own 127.81.N.0/24.
var subnets = testutil.Subnets{Octet: 81}

// readyTimeout bounds the wait for an apiserver to be ready: a few seconds
// on an idle machine, much more on two cores busy compiling.
const readyTimeout = 5 * time.Minute

const prefix = "/kubernetes/"

func TestControlPlane(t *testing.T) {
	bundlePath := kubetest.Bundle(t)
	addrs := subnets.Addrs(1)
	raw := kubetest.StartEtcd(t, testutil.FreePort(t, addrs[0]))
	port := int(testutil.FreePort(t, addrs[0]).Port())

	cluster, err := pki.NewCluster("test", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	server := "https://" + netip.AddrPortFrom(addrs[0], uint16(port)).String()
	files, err := cluster.ControlPlaneFiles(addrs, netip.MustParseAddr("10.96.0.1"), server, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	proxy, err := etcdproxy.New(etcdproxy.Config{Client: raw, Prefix: prefix, Socket: filepath.Join(dir, "etcd.sock")})
	if err != nil {
		t.Fatal(err)
	}
	runner, err := New(Config{
		Bundle:       bundlePath,
		Dir:          filepath.Join(dir, "kube"),
		Files:        files,
		Address:      addrs[0],
		Port:         port,
		EtcdEndpoint: proxy.Endpoint(),
	})
	if err != nil {
		t.Fatalf("New: %v", err)
	}

	start := time.Now()
	_, cancel := supervisortest.HarnessTree(t, func(ctx context.Context) error {
		if err := supervisor.Run(ctx, "etcdproxy", proxy.Run); err != nil {
			return err
		}
		if err := supervisor.Run(ctx, "kubernetes", runner.Run); err != nil {
			return err
		}
		supervisor.Signal(ctx, supervisor.SignalHealthy)
		<-ctx.Done()
		return ctx.Err()
	}, supervisor.WithLogger(zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel))))

	st := waitStatus(t, runner, "ready", func(s *Status) bool { return s.Ready && s.Running() })
	if api, _ := st.Component(APIServer); st.ReadyPID != api.PID {
		t.Errorf("ready pid %d, apiserver pid %d", st.ReadyPID, api.PID)
	}
	t.Logf("runner start → apiserver ready: %v", time.Since(start))
	if st.Server != server {
		t.Errorf("status names server %q, want %q", st.Server, server)
	}

	// The node DNS server's user may list and watch what it serves from,
	// and nothing else, once the runner has applied its RBAC.
	checkDNSRBAC(t, files, server)

	// Everything the apiserver stored sits under the confined prefix.
	var k8sKeys int
	for _, k := range kubetest.AllKeys(t, raw) {
		if !strings.HasPrefix(k, prefix+"/registry/") {
			t.Errorf("key %q outside %s/registry/", k, prefix)
		}
		k8sKeys++
	}
	if k8sKeys == 0 {
		t.Error("the apiserver stored nothing")
	}

	// The probe's asks share one connection (one TLS handshake), which
	// the apiserver would close after each ask of an anonymous client.
	checkProbeKeepsConnection(t, runner, server)

	// A killed apiserver is restarted, and is ready again.
	api, _ := st.Component(APIServer)
	if err := syscall.Kill(api.PID, syscall.SIGKILL); err != nil {
		t.Fatalf("killing the apiserver: %v", err)
	}
	restarted := waitStatus(t, runner, "apiserver restarted and ready", func(s *Status) bool {
		c, _ := s.Component(APIServer)
		return c.Starts >= 2 && c.Running && s.Ready && s.ReadyPID == c.PID
	})
	if restarted.ReadyPID == api.PID {
		t.Errorf("readiness of the killed apiserver (pid %d) reported for its successor", api.PID)
	}

	// Stopping leaves no process.
	running := waitStatus(t, runner, "running", func(s *Status) bool { return s.Running() })
	cancel()
	st = waitStatus(t, runner, "stopped", func(s *Status) bool {
		for _, c := range s.Components {
			if c.Running {
				return false
			}
		}
		return true
	})
	for _, c := range st.Components {
		if c.Starts == 0 {
			t.Errorf("%s never started", c.Name)
		}
	}
	for _, c := range running.Components {
		if err := syscall.Kill(c.PID, 0); !errors.Is(err, syscall.ESRCH) {
			t.Errorf("%s (pid %d) is still there after the runner stopped: %v", c.Name, c.PID, err)
		}
	}
}

func waitStatus(t testing.TB, r *Runner, what string, pred func(*Status) bool) *Status {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), readyTimeout)
	defer cancel()
	st, err := event.Get(ctx, r.Status(), event.Filter(pred))
	if err != nil {
		last, _ := event.Get(context.Background(), r.Status())
		t.Fatalf("waiting for the control plane to be %s: %v; last status %+v", what, err, last)
	}
	return st
}

func TestConfigValidation(t *testing.T) {
	c, err := pki.NewCluster("test", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	files, err := c.ControlPlaneFiles([]netip.Addr{netip.MustParseAddr("10.0.0.1")}, netip.MustParseAddr("10.96.0.1"), "https://10.0.0.1:6443", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	good := Config{Bundle: "/bin/polis-kube", Dir: "/run/kube", Files: files, Address: netip.MustParseAddr("10.0.0.1"), EtcdEndpoint: "unix:///run/etcd.sock"}
	if _, err := New(good); err != nil {
		t.Fatalf("a good config: %v", err)
	}
	missing := pki.Files{}
	for k, v := range files {
		if k != pki.FileSchedulerKubeconfig {
			missing[k] = v
		}
	}
	for name, tc := range map[string]struct {
		mod  func(*Config)
		want string
	}{
		"relative bundle":   {func(c *Config) { c.Bundle = "polis-kube" }, "bundle"},
		"relative dir":      {func(c *Config) { c.Dir = "kube" }, "directory"},
		"no address":        {func(c *Config) { c.Address = netip.Addr{} }, "address"},
		"unspecified":       {func(c *Config) { c.Address = netip.IPv4Unspecified() }, "address"},
		"bad port":          {func(c *Config) { c.Port = 70000 }, "port"},
		"etcd over tcp":     {func(c *Config) { c.EtcdEndpoint = "http://127.0.0.1:2379" }, "confined"},
		"missing kubeconfg": {func(c *Config) { c.Files = missing }, pki.FileSchedulerKubeconfig},
	} {
		cfg := good
		tc.mod(&cfg)
		if _, err := New(cfg); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want an error naming %q", name, err, tc.want)
		}
	}
	r, _ := New(good)
	args := strings.Join(r.cfg.apiserverArgs(), " ")
	for _, want := range []string{"--etcd-servers=unix:///run/etcd.sock", "--etcd-compaction-interval=0", "--bind-address=10.0.0.1", "--secure-port=6443"} {
		if !strings.Contains(args, want) {
			t.Errorf("apiserver flags %q lack %q", args, want)
		}
	}
	if strings.Contains(args, "endpoint-reconciler") {
		t.Errorf("a non-loopback address got the endpoint reconciler turned off: %s", args)
	}
}

// checkDNSRBAC asks the apiserver, as the system:masters client of the
// control plane's files, what pki.DNSUser may do (SubjectAccessReview),
// until the runner's RBAC is there.
func checkDNSRBAC(t *testing.T, files pki.Files, server string) {
	t.Helper()
	pair, err := tls.X509KeyPair(files[pki.FileKubeletClientCert], files[pki.FileKubeletClientKey])
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(files[pki.FileCA])
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots, Certificates: []tls.Certificate{pair}}}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr, Timeout: 30 * time.Second}
	allowed := func(group, resource, verb string) (bool, error) {
		review := fmt.Sprintf(`{"apiVersion":"authorization.k8s.io/v1","kind":"SubjectAccessReview","spec":{"user":%q,"resourceAttributes":{"group":%q,"resource":%q,"verb":%q}}}`, pki.DNSUser, group, resource, verb)
		resp, err := hc.Post(server+"/apis/authorization.k8s.io/v1/subjectaccessreviews", "application/json", strings.NewReader(review))
		if err != nil {
			return false, err
		}
		defer resp.Body.Close()
		var out struct {
			Status struct{ Allowed bool } `json:"status"`
		}
		if resp.StatusCode != http.StatusCreated {
			return false, fmt.Errorf("SubjectAccessReview: %s", resp.Status)
		}
		err = json.NewDecoder(resp.Body).Decode(&out)
		return out.Status.Allowed, err
	}
	testutil.Eventually(t, readyTimeout, pki.DNSUser+" allowed to watch services once the apiserver is ready", func() error {
		ok, err := allowed("", "services", "watch")
		if err == nil && !ok {
			err = errors.New("not allowed")
		}
		return err
	})
	for _, c := range []struct {
		group, resource, verb string
		want                  bool
	}{
		{"", "services", "list", true},
		{"", "namespaces", "watch", true},
		{"discovery.k8s.io", "endpointslices", "list", true},
		{"", "services", "get", false},
		{"", "services", "update", false},
		{"", "secrets", "list", false},
		{"", "pods", "list", false},
		{"", "endpoints", "list", false},
	} {
		got, err := allowed(c.group, c.resource, c.verb)
		if err != nil {
			t.Fatal(err)
		}
		if got != c.want {
			t.Errorf("%s may %s %s/%s: %v, want %v", pki.DNSUser, c.verb, c.group, c.resource, got, c.want)
		}
	}
}

// checkProbeKeepsConnection asks /readyz three times with the probe's
// client and fails unless the second and third asks reuse the first's
// connection.
func checkProbeKeepsConnection(t *testing.T, r *Runner, server string) {
	t.Helper()
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(r.cfg.Files[pki.FileCA])
	hc, err := r.probeClient(roots)
	if err != nil {
		t.Fatal(err)
	}
	defer hc.CloseIdleConnections()
	var conns []string
	for range 3 {
		ctx := httptrace.WithClientTrace(context.Background(), &httptrace.ClientTrace{GotConn: func(ci httptrace.GotConnInfo) {
			conns = append(conns, ci.Conn.LocalAddr().String())
		}})
		if err := get(ctx, hc, server+"/readyz"); err != nil {
			t.Fatalf("the probe's client asking /readyz: %v", err)
		}
	}
	if len(conns) != 3 || conns[1] != conns[0] || conns[2] != conns[0] {
		t.Errorf("the probe's three asks went out from %v: want one connection for all", conns)
	}
}
