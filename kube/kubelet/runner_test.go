package kubelet

import (
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/goleak"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/polis-os/polis/event"
	"github.com/polis-os/polis/internal/testutil"
	"github.com/polis-os/polis/kube/kubetest"
	"github.com/polis-os/polis/kube/pki"
	"github.com/polis-os/polis/supervisor"
	"github.com/polis-os/polis/supervisor/supervisortest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const waitTimeout = time.Minute

var now = time.Now()

// readyNode is a fake apiserver's Node whose Ready condition a test sets
// (Store); every change gives it a new resourceVersion and wakes its
// watches.
type readyNode struct {
	mu      sync.Mutex
	ready   bool
	rv      int
	changed chan struct{} // closed, and replaced, at every change
	// heartbeat is when the condition was last posted (its
	// lastHeartbeatTime).
	heartbeat time.Time
}

// Store sets whether the Node is Ready, posted now.
func (n *readyNode) Store(ready bool) { n.StoreAt(ready, time.Now()) }

// StoreAt sets whether the Node is Ready, posted at heartbeat.
func (n *readyNode) StoreAt(ready bool, heartbeat time.Time) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.ready = ready
	n.heartbeat = heartbeat
	n.rv++
	if n.changed != nil {
		close(n.changed)
	}
	n.changed = make(chan struct{})
}

func (n *readyNode) state() (object string, rv int, changed <-chan struct{}) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.changed == nil {
		n.changed = make(chan struct{})
	}
	status := "False"
	if n.ready {
		status = "True"
	}
	return fmt.Sprintf(`{"metadata":{"name":"node","resourceVersion":"%d"},"status":{"conditions":[{"type":"Ready","status":"%s","reason":"KubeletNotReady","message":"testing","lastHeartbeatTime":"%s"}]}}`,
		n.rv, status, n.heartbeat.UTC().Format(time.RFC3339)), n.rv, n.changed
}

// fakeAPIServer serves the Node named name to the node whose certificate
// calls only, over mTLS with the cluster's CA, as the apiserver does to
// the runner: its list and its watch selected by its name, with Ready
// as node says.
func fakeAPIServer(t *testing.T, c *pki.Cluster, name string, node *readyNode) netip.AddrPort {
	t.Helper()
	done := make(chan struct{})
	addr := serveAPI(t, c, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/readyz" {
			_, _ = w.Write([]byte("ok"))
			return
		}
		q := r.URL.Query()
		if cn := r.TLS.PeerCertificates[0].Subject.CommonName; cn != pki.NodeUserPrefix+name || r.URL.Path != "/api/v1/nodes" || q.Get("fieldSelector") != "metadata.name="+name {
			http.Error(w, "forbidden", http.StatusForbidden)
			return
		}
		object, rv, changed := node.state()
		if q.Get("watch") != "1" {
			fmt.Fprintf(w, `{"metadata":{"resourceVersion":"%d"},"items":[%s]}`, rv, object)
			return
		}
		from, err := strconv.Atoi(q.Get("resourceVersion"))
		if err != nil {
			http.Error(w, "resourceVersion", http.StatusBadRequest)
			return
		}
		w.WriteHeader(http.StatusOK)
		w.(http.Flusher).Flush()
		for {
			if rv > from {
				fmt.Fprintf(w, `{"type":"MODIFIED","object":%s}`+"\n", object)
				w.(http.Flusher).Flush()
				from = rv
			}
			select {
			case <-changed:
			case <-r.Context().Done():
				return
			case <-done:
				return
			}
			object, rv, changed = node.state()
		}
	}))
	// Before the server's Close (cleanups run last first), which waits
	// for its handlers.
	t.Cleanup(func() { close(done) })
	return addr
}

// asNodeOne makes cfg node-1's, at 192.0.2.7, with credentials from c,
// talking to apiServer, its kube-proxy serving on a free port, and given
// 2 s to stop.
func asNodeOne(t *testing.T, cfg *Config, c *pki.Cluster, apiServer netip.AddrPort) {
	t.Helper()
	cfg.NodeName, cfg.NodeIP = "node-1", netip.MustParseAddr("192.0.2.7")
	cfg.Credentials = credentials(t, c, "node-1")
	cfg.APIServers = []netip.AddrPort{apiServer}
	cfg.ProxyPort = testutil.FreePort(t, netip.MustParseAddr("127.0.0.1")).Port()
	cfg.StopGrace = 2 * time.Second
}

// fakeRuntime writes stand-ins for containerd, ctr and polis-kube that
// record what they do in a log file, and returns the config's paths. The
// stand-in containerd's socket is a link to a gRPC health server of the
// test's, which answers SERVING while the test runs: the runner removes
// the link before it starts containerd, and the stand-in makes it anew.
func fakeRuntime(t *testing.T, dir string) (cfg Config, log string) {
	t.Helper()
	health, _, _ := kubetest.ContainerdHealth(t, dir)
	log = filepath.Join(dir, "log")
	bin := filepath.Join(dir, "bin")
	if err := os.MkdirAll(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	run := filepath.Join(dir, "run")
	script := func(path, body string) {
		if err := os.WriteFile(path, []byte("#!/bin/sh\nLOG="+log+"\nRUN="+run+"\n"+body), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// Each stand-in sets its TERM trap before it says it started, so that
	// a test that saw the start line knows a stop will be logged.
	script(filepath.Join(bin, "containerd"), `trap 'echo containerd-stop >>$LOG; exit 0' TERM
echo "containerd $*" >>$LOG
echo "containerd pretending"
ln -sf `+health+` $RUN/containerd.sock
sleep 600 & wait
`)
	script(filepath.Join(bin, "ctr"), `echo "ctr $*" >>$LOG
`)
	script(filepath.Join(bin, "polis-kube"), `trap 'echo kubelet-stop >>$LOG; exit 0' TERM
echo "$*" >>$LOG
sleep 600 & wait
`)
	return Config{
		Bundle:     filepath.Join(bin, "polis-kube"),
		BinDir:     bin,
		CNIBinDir:  filepath.Join(dir, "cni"),
		PauseImage: filepath.Join(dir, "pause.tar"),
		StateDir:   filepath.Join(dir, "state"),
		RunDir:     run,
	}, log
}

func credentials(t *testing.T, c *pki.Cluster, name string) Credentials {
	t.Helper()
	client, err := c.IssueClient(pki.NodeUserPrefix+name, []string{pki.NodesGroup}, now)
	if err != nil {
		t.Fatal(err)
	}
	serving, err := c.IssueServing([]netip.Addr{netip.MustParseAddr("192.0.2.7")}, netip.MustParseAddr("10.96.0.1"), nil, now)
	if err != nil {
		t.Fatal(err)
	}
	return Credentials{CA: c.CACert, ClientCert: client.Cert, ClientKey: client.Key, ServingCert: serving.Cert, ServingKey: serving.Key}
}

func waitStatus(t *testing.T, r *Runner, what string, pred func(*Status) bool) *Status {
	t.Helper()
	ctx, cancel := contextWithTimeout(waitTimeout)
	defer cancel()
	st, err := event.Get(ctx, r.Status(), event.Filter(pred))
	if err != nil {
		cur, _ := event.Get(ctx, r.Status())
		t.Fatalf("waiting for %s: %v; status %+v", what, err, cur)
	}
	return st
}

// kubeletStarted waits until the stand-in kubelet has logged its n-th
// start. The runner's status says the kubelet runs once its process
// started, before the stand-in set its TERM trap; its start line comes
// after the trap, so a signal sent from then on is logged, not fatal.
func kubeletStarted(t *testing.T, path string, n int) {
	t.Helper()
	testutil.Eventually(t, time.Minute, fmt.Sprintf("the stand-in kubelet's start line #%d in the log", n), func() error {
		log := readLog(t, path)
		if got := strings.Count(log, "kubelet --config"); got < n {
			return fmt.Errorf("%d start lines; log:\n%s", got, log)
		}
		return nil
	})
}

func readLog(t *testing.T, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	return string(data)
}

// The runner starts containerd, imports the pause image, then runs the
// kubelet with the configuration Polis writes; the Node's readiness is
// asked of the apiserver through the local proxy with the kubelet's own
// certificate, and the last boot's Ready is not taken for this run's; a killed kubelet comes back alone, renewed credentials
// restart it; a stop ends the kubelet before containerd and leaves no
// process.
func TestRunner(t *testing.T) {
	c, err := pki.NewCluster("test", now)
	if err != nil {
		t.Fatal(err)
	}
	// As after a reboot: the Node still says Ready, posted by the last
	// boot's kubelet, until the node controller marks it Unknown.
	var ready readyNode
	ready.StoreAt(true, time.Now().Add(-time.Hour))
	api := fakeAPIServer(t, c, "node-1", &ready)
	cfg, logPath := fakeRuntime(t, t.TempDir())
	cfg.NodeName = "node-1"
	cfg.NodeIP = netip.MustParseAddr("192.0.2.7")
	cfg.Labels = NodeLabels(map[string]string{"zone": "a", "example.com/rack": "7", "kubernetes.io/role": "x"})
	cfg.Credentials = credentials(t, c, "node-1")
	cfg.APIServers = []netip.AddrPort{netip.MustParseAddrPort("127.0.0.1:1"), api} // the first refuses
	cfg.ProxyPort = testutil.FreePort(t, netip.MustParseAddr("127.0.0.1")).Port()
	cfg.Registries = map[string]string{"demo.local:5000": "http://10.0.0.1:5000"}
	cfg.StopGrace = 2 * time.Second
	r, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	core, logs := observer.New(zap.InfoLevel)
	_, cancel := supervisortest.HarnessTree(t, r.Run, supervisor.WithLogger(zap.New(core)))

	running := waitStatus(t, r, "containerd and kubelet running", func(s *Status) bool { return s.ContainerdRunning && s.KubeletRunning })
	if running.NodeReady {
		t.Error("the Node is Ready by the last boot's word, before this kubelet has posted anything")
	}
	waitStatus(t, r, "the last boot's Ready refused, with the reason", func(s *Status) bool {
		return !s.NodeReady && strings.Contains(s.NodeNote, "before this kubelet's run began")
	})
	ready.Store(false)
	waitStatus(t, r, "the Node not Ready, with the reason", func(s *Status) bool { return strings.Contains(s.NodeNote, "KubeletNotReady") })
	ready.Store(true)
	waitStatus(t, r, "the Node Ready", func(s *Status) bool { return s.NodeReady && s.NodeNote == "" })

	// The status says running once the process started; the stand-in
	// notes its arguments a moment later (and must have, before it is
	// killed below, for its start to be counted).
	kubeletStarted(t, logPath, 1)
	got := readLog(t, logPath)
	iContainerd, iImport, iKubelet := strings.Index(got, "containerd --config"), strings.Index(got, "images import "+cfg.PauseImage), strings.Index(got, "kubelet --config")
	if iContainerd < 0 || iImport < iContainerd || iKubelet < iImport {
		t.Errorf("want containerd, then the pause image imported, then the kubelet; log:\n%s", got)
	}
	for _, flag := range []string{"--hostname-override=node-1", "--node-ip=192.0.2.7", "--node-labels=example.com/rack=7," + LabelPrefix + "zone=a\n"} {
		if !strings.Contains(got, flag) {
			t.Errorf("the kubelet was not started with %s; log:\n%s", flag, got)
		}
	}
	if strings.Contains(got, "kubernetes.io/role") {
		t.Error("a label NodeRestriction refuses was given to the kubelet")
	}
	// The generated files, secrets private.
	for name, want := range map[string]string{
		fileKubeletConfig:                    "mode: Webhook",
		fileContainerdConfig:                 `sandbox = "` + DefaultPauseImage + `"`,
		fileKubeconfig:                       `user: "system:node:node-1"`,
		"certs.d/demo.local:5000/hosts.toml": `server = "http://10.0.0.1:5000"`,
		"cni/" + fileCNIConfig:               DefaultPodCIDR.String(),
	} {
		path := filepath.Join(cfg.RunDir, name)
		data, err := os.ReadFile(path)
		if err != nil || !strings.Contains(string(data), want) {
			t.Errorf("%s does not say %q (%v):\n%s", name, want, err, data)
		}
	}
	for _, name := range []string{fileKubeconfig, fileServingKey} {
		if fi, err := os.Stat(filepath.Join(cfg.RunDir, name)); err != nil || fi.Mode().Perm() != 0o600 {
			t.Errorf("%s: %v, mode %v; want 0600", name, err, fi.Mode().Perm())
		}
	}
	if !strings.Contains(readLogs(logs, "root.containerd"), "containerd pretending") {
		t.Error("containerd's output is not in the node's log under its name")
	}

	// A killed kubelet comes back alone.
	if err := syscall.Kill(running.KubeletPID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	again := waitStatus(t, r, "the kubelet restarted", func(s *Status) bool { return s.KubeletStarts == 2 && s.KubeletRunning })
	if again.ContainerdPID != running.ContainerdPID {
		t.Error("containerd was restarted with the kubelet")
	}
	// Renewed credentials: files rewritten, the kubelet restarted. (Its
	// SIGTERM must find the second kubelet's trap set.)
	kubeletStarted(t, logPath, 2)
	renewed := credentials(t, c, "node-1")
	if err := r.Renew(renewed, []netip.AddrPort{api}); err != nil {
		t.Fatalf("Renew: %v", err)
	}
	waitStatus(t, r, "the kubelet restarted with the renewed credentials", func(s *Status) bool { return s.KubeletStarts == 3 && s.KubeletRunning })
	if data, _ := os.ReadFile(filepath.Join(cfg.RunDir, fileServingCert)); string(data) != string(renewed.ServingCert) {
		t.Error("the renewed serving certificate was not written")
	}

	// Stop: the kubelet first, then containerd; nothing left. The status
	// says running once the process started; its start line says its
	// stand-in's trap is set, so a stop cannot go unlogged.
	last := waitStatus(t, r, "running", func(s *Status) bool { return s.KubeletRunning })
	kubeletStarted(t, logPath, 3)
	cancel()
	waitStatus(t, r, "stopped", func(s *Status) bool { return !s.ContainerdRunning && !s.KubeletRunning && !s.NodeReady })
	got = readLog(t, logPath)
	if k, c := strings.LastIndex(got, "kubelet-stop"), strings.LastIndex(got, "containerd-stop"); k < 0 || c < k {
		t.Errorf("want the kubelet stopped before containerd; log:\n%s", got)
	}
	for _, pid := range []int{last.KubeletPID, last.ContainerdPID} {
		testutil.Eventually(t, waitTimeout, fmt.Sprintf("pid %d gone after the stop", pid), func() error {
			if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
				return fmt.Errorf("still there (kill 0: %v)", err)
			}
			return nil
		})
	}
}

func readLogs(logs *observer.ObservedLogs, name string) string {
	var b strings.Builder
	for _, e := range logs.All() {
		if e.LoggerName == name {
			b.WriteString(e.Message + "\n")
		}
	}
	return b.String()
}

// A run that cannot import the pause image says so in the status, with
// ctr's words, and runs no kubelet.
func TestRunnerImportFails(t *testing.T) {
	c, err := pki.NewCluster("test", now)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	cfg, _ := fakeRuntime(t, dir)
	ctr := "#!/bin/sh\necho 'ctr: no such file: pause.tar' >&2\nexit 1\n"
	if err := os.WriteFile(filepath.Join(cfg.BinDir, "ctr"), []byte(ctr), 0o755); err != nil {
		t.Fatal(err)
	}
	cfg.NodeName, cfg.NodeIP = "node-1", netip.MustParseAddr("192.0.2.7")
	cfg.Credentials = credentials(t, c, "node-1")
	cfg.APIServers = []netip.AddrPort{netip.MustParseAddrPort("127.0.0.1:1")}
	r, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	supervisortest.Harness(t, r.Run)
	st := waitStatus(t, r, "the failure in the status", func(s *Status) bool {
		return strings.Contains(s.Note, "failed, restarting: importing the pause image") && strings.Contains(s.Note, "no such file: pause.tar")
	})
	if st.KubeletRunning || st.KubeletStarts != 0 {
		t.Errorf("a kubelet ran without the pause image: %+v", st)
	}
}

// While no apiserver answers the kubelet is held back, and containerd
// ending meanwhile ends the run.
func TestRunnerWaitsForAnAPIServer(t *testing.T) {
	c, err := pki.NewCluster("test", now)
	if err != nil {
		t.Fatal(err)
	}
	cfg, logPath := fakeRuntime(t, t.TempDir())
	asNodeOne(t, &cfg, c, netip.MustParseAddrPort("127.0.0.1:1"))
	r, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	supervisortest.Harness(t, r.Run)
	st := waitStatus(t, r, "waiting for an apiserver", func(s *Status) bool {
		return s.ContainerdRunning && strings.HasPrefix(s.Note, "waiting for an apiserver")
	})
	if st.KubeletRunning || strings.Contains(readLog(t, logPath), "kubelet --config") {
		t.Fatalf("a kubelet started with no apiserver answering: %+v", st)
	}
	if err := syscall.Kill(st.ContainerdPID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	// The run noticed: it ended and the supervisor started containerd
	// afresh (the note saying why lives only until then).
	waitStatus(t, r, "containerd started again", func(s *Status) bool {
		return s.ContainerdRunning && s.ContainerdPID != st.ContainerdPID
	})
}

// Renewing with the credentials the kubelet has (the worker asks the
// curator again for the apiservers while none answers) and setting the
// apiservers change the proxy's list alone: the kubelet's files are not
// rewritten and the kubelet is not restarted, since a restarted kubelet
// has no Pod specs until an apiserver answers.
func TestRunnerSameCredentialsKeepTheKubelet(t *testing.T) {
	c, err := pki.NewCluster("test", now)
	if err != nil {
		t.Fatal(err)
	}
	var ready readyNode
	api := fakeAPIServer(t, c, "node-1", &ready)
	cfg, logPath := fakeRuntime(t, t.TempDir())
	asNodeOne(t, &cfg, c, api)
	r, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	supervisortest.Harness(t, r.Run)
	running := waitStatus(t, r, "the kubelet running", func(s *Status) bool { return s.KubeletRunning })
	kubeletStarted(t, logPath, 1)
	kubeconfig := filepath.Join(cfg.RunDir, fileKubeconfig)
	before, err := os.Stat(kubeconfig)
	if err != nil {
		t.Fatal(err)
	}

	other := netip.MustParseAddrPort("127.0.0.1:1")
	if err := r.Renew(cfg.Credentials, []netip.AddrPort{other, api}); err != nil {
		t.Fatalf("Renew with the same credentials: %v", err)
	}
	if got := r.proxy.Order(); len(got) != 2 || !slices.Contains(got, other) {
		t.Errorf("the proxy relays to %v after Renew, want %v and %v", got, other, api)
	}
	after, err := os.Stat(kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	// write renames a new file over each one: a rewrite is a new inode.
	if !os.SameFile(before, after) {
		t.Error("Renew with the same credentials rewrote the kubeconfig")
	}
	if err := r.SetAPIServers([]netip.AddrPort{api}); err != nil {
		t.Fatalf("SetAPIServers: %v", err)
	}
	if got := r.proxy.Order(); !slices.Equal(got, []netip.AddrPort{api}) {
		t.Errorf("the proxy relays to %v after SetAPIServers, want %v", got, api)
	}
	if err := r.SetAPIServers(nil); err == nil || !strings.Contains(err.Error(), "APIServers is empty") {
		t.Errorf("SetAPIServers(nil): %v, want the empty list refused", err)
	}
	st := waitStatus(t, r, "the status", func(*Status) bool { return true })
	if st.KubeletPID != running.KubeletPID || st.KubeletStarts != 1 || strings.Contains(readLog(t, logPath), "kubelet-stop") {
		t.Errorf("the kubelet was restarted (pid %d, then %d; %d starts); log:\n%s", running.KubeletPID, st.KubeletPID, st.KubeletStarts, readLog(t, logPath))
	}
}

// A Renew while a Run writes the files (the kubelet not started yet, so
// nothing to restart) is not undone by the Run: the files end up holding
// the renewed credentials, which the kubelet then starts on.
func TestRenewDuringPrepareWins(t *testing.T) {
	c, err := pki.NewCluster("test", now)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	cfg := Config{Bundle: "/k/polis-kube", BinDir: "/k", CNIBinDir: "/c", PauseImage: "/p.tar", StateDir: filepath.Join(dir, "state"), RunDir: filepath.Join(dir, "run")}
	cfg.NodeName, cfg.NodeIP = "node-1", netip.MustParseAddr("192.0.2.7")
	cfg.Credentials = credentials(t, c, "node-1")
	cfg.APIServers = []netip.AddrPort{netip.MustParseAddrPort("127.0.0.1:1")}
	renewed := credentials(t, c, "node-1")
	synctest.Test(t, func(t *testing.T) {
		r, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		r.prepared = func() {
			go func() { done <- r.Renew(renewed, cfg.APIServers) }()
			// The Renew has returned, or waits for the Run's write to end.
			synctest.Wait()
		}
		if err := r.prepare(); err != nil {
			t.Fatalf("prepare: %v", err)
		}
		if err := <-done; err != nil {
			t.Fatalf("Renew: %v", err)
		}
	})
	if data, err := os.ReadFile(filepath.Join(cfg.RunDir, fileServingCert)); err != nil || string(data) != string(renewed.ServingCert) {
		t.Errorf("the serving certificate written is not the renewed one (err %v)", err)
	}
}
