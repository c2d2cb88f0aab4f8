package kubelet

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/polis-os/polis/event"
	"github.com/polis-os/polis/event/memory"
	"github.com/polis-os/polis/internal/cgroupdir"
	"github.com/polis-os/polis/kube/apiproxy"
	"github.com/polis-os/polis/kube/process"
	"github.com/polis-os/polis/supervisor"
)

// StatusName is the name of a Runner's status value (event.Info), by which
// the role server's graph knows it.
const StatusName = "kube.kubelet.status"

// Timeouts of the start.
const (
	// containerdStartTimeout bounds waiting for containerd to answer.
	containerdStartTimeout = 2 * time.Minute
	// importTimeout bounds importing the pause image.
	importTimeout = 2 * time.Minute
	// killTimeout bounds waiting for killed cgroups to empty.
	killTimeout = 30 * time.Second
)

// Status is what runs and whether the Node is Ready. Values are immutable
// once published.
type Status struct {
	// ContainerdRunning and KubeletRunning are true while their processes
	// run.
	ContainerdRunning bool
	KubeletRunning    bool
	// ContainerdPID and KubeletPID are their pids then (0 otherwise).
	ContainerdPID, KubeletPID int
	// KubeletStarts counts the kubelet processes started since Run began.
	KubeletStarts int
	// NodeReady is true while the apiserver says the Node is Ready;
	// NodeNote says why not.
	NodeReady bool
	NodeNote  string
	// NoAPIServer is set while the local proxy finds none of the
	// apiservers it was given answering: the list may be stale (see
	// Renew).
	NoAPIServer bool
	// Note says what the runner is doing when something does not run
	// (starting containerd, importing the pause image, ...), or how it
	// last failed; empty while both run.
	Note string
}

// Runner runs one node's containerd and kubelet; see the package doc.
type Runner struct {
	cfg    Config
	proxy  apiproxy.Relay
	status memory.Value[*Status]
	// labels are the Node's labels as SetLabels last said.
	labels memory.Value[map[string]string]

	// filesLock is held while the credentials the files hold are chosen
	// and written (prepare, Renew), so that the files last written hold
	// the credentials last chosen: without it a Run that read the old
	// ones could write them over a Renew's, and start the kubelet on them
	// (no SIGTERM: it did not run yet). A channel of one, not a
	// sync.Mutex, so that a test (testing/synctest) sees a Renew that
	// waits for it as blocked.
	filesLock chan struct{}
	// prepared, if set, is called by prepare with the files lock held,
	// once the credentials are chosen and before they are written: a test
	// seam.
	prepared func()

	mu    sync.Mutex
	cur   Status
	creds Credentials
	// hc is the runner's own client of the apiservers (apiClient), made
	// for the client certificate hcCert.
	hc     *http.Client
	hcCert []byte
}

// New validates cfg and returns a Runner ready to Run.
func New(cfg Config) (*Runner, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	r := &Runner{cfg: cfg, creds: cfg.Credentials, filesLock: make(chan struct{}, 1)}
	r.status.Name = StatusName
	r.labels.Set(maps.Clone(cfg.Labels))
	r.proxy.SetServers(cfg.APIServers)
	r.proxy.Reached = func(ctx context.Context, err error) {
		ok := err == nil
		r.mu.Lock()
		defer r.mu.Unlock()
		if r.cur.NoAPIServer == !ok {
			return
		}
		// Said when it changes: while the apiservers start, the kubelet
		// and the runner's probes try several times a second.
		if ok {
			supervisor.Logger(ctx).Info("an apiserver answers again")
		} else {
			supervisor.Logger(ctx).Warn("no apiserver answers; dropping connections until one does", zap.Error(err))
		}
		r.cur.NoAPIServer = !ok
		r.publishLocked()
	}
	r.cur.Note = "not started"
	r.cur.NodeNote = "the kubelet does not run"
	r.publishLocked()
	return r, nil
}

// Status is the runner's status as a value.
func (r *Runner) Status() event.ValueWatch[*Status] { return &r.status }

// Run writes the configuration, starts containerd, imports the pause
// image and runs the kubelet, the apiserver proxy and the Node probe
// until ctx ends; see the package doc for what a stop does. It is a
// supervisor.Runnable.
func (r *Runner) Run(ctx context.Context) (err error) {
	log := supervisor.Logger(ctx)
	// Only a Ready posted since is this run's kubelet's (readiness).
	began := time.Now()
	// The status says why a run failed until the next one gets further.
	defer func() {
		if err != nil && ctx.Err() == nil {
			r.note("failed, restarting: " + err.Error())
		}
	}()
	if err := r.prepare(); err != nil {
		return err
	}
	cmd := process.Command{Path: r.cfg.bin("containerd"), Args: []string{"--config", r.cfg.file(fileContainerdConfig)}, Env: r.cfg.env(), Dir: r.cfg.RunDir}
	var runtimeCgroup, kubeletCgroup *os.File
	if r.cfg.Cgroup != "" {
		if runtimeCgroup, err = cgroupdir.Open(r.cfg.cgroup(cgroupRuntime)); err != nil {
			return fmt.Errorf("kubelet: %w", err)
		}
		defer runtimeCgroup.Close()
		if kubeletCgroup, err = cgroupdir.Open(r.cfg.cgroup(cgroupKubelet)); err != nil {
			return fmt.Errorf("kubelet: %w", err)
		}
		// The kubelet's runnable starts processes until the run's subtree
		// has stopped.
		supervisor.Cleanup(ctx, func() { kubeletCgroup.Close() })
		cmd.CgroupFD = int(runtimeCgroup.Fd())
	}
	// A socket left by a containerd before would look like this one's.
	if err := os.Remove(r.cfg.containerdSocket()); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("kubelet: removing containerd's old socket: %w", err)
	}
	r.note("starting containerd")
	containerd, err := process.Start(log.Named("containerd"), cmd)
	if err != nil {
		return err
	}
	r.update(func(s *Status) { s.ContainerdRunning, s.ContainerdPID = true, containerd.PID() })
	// Once the kubelet (a child) has stopped: every container, then
	// containerd, then its shims.
	supervisor.Cleanup(ctx, func() { r.stopRuntime(log, containerd) })

	if err := waitContainerd(ctx, r.cfg.containerdSocket(), containerd, containerdStartTimeout); err != nil {
		return err
	}
	if pauseImported(r.cfg.PauseImage, r.cfg.containerdRoot()) {
		log.Info("the pause image is in containerd already", zap.String("image", r.cfg.PauseImageRef))
	} else {
		r.note("importing the pause image " + r.cfg.PauseImageRef)
		if err := r.ctr(ctx, log, importTimeout, "images", "import", r.cfg.PauseImage); err != nil {
			return fmt.Errorf("importing the pause image %s: %w", r.cfg.PauseImage, err)
		}
	}

	kubelet := process.Command{Path: r.cfg.Bundle, Args: r.cfg.kubeletArgs(), Env: r.cfg.env(), Dir: r.cfg.RunDir}
	if kubeletCgroup != nil {
		kubelet.CgroupFD = int(kubeletCgroup.Fd())
	}
	proxyAddr := netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), r.cfg.ProxyPort)
	if err := supervisor.Run(ctx, "apiproxy", runProxy(&r.proxy, proxyAddr)); err != nil {
		return err
	}
	if err := r.waitAPIServer(ctx, containerd); err != nil {
		return err
	}
	if err := supervisor.Run(ctx, "kubelet", process.Runnable(kubelet, r.cfg.StopGrace, process.StatusHooks(r.update,
		func(s *Status, pid int) { s.KubeletRunning, s.KubeletPID, s.Note = true, pid, ""; s.KubeletStarts++ },
		func(s *Status, how string) { s.KubeletRunning, s.KubeletPID, s.Note = false, 0, "kubelet ended: "+how },
	))); err != nil {
		return err
	}
	if err := supervisor.Run(ctx, "nodeready", r.probe(began)); err != nil {
		return err
	}
	if err := supervisor.Run(ctx, "nodelabels", r.labeller()); err != nil {
		return err
	}
	r.note("")
	supervisor.Signal(ctx, supervisor.SignalHealthy)
	select {
	case <-containerd.Exited():
		return fmt.Errorf("containerd (pid %d) ended: %s", containerd.PID(), process.ExitString(containerd.Err()))
	case <-ctx.Done():
		return ctx.Err()
	}
}

// prepare writes the configuration files and makes the directories and
// cgroups.
func (r *Runner) prepare() error {
	for _, dir := range []string{r.cfg.RunDir, r.cfg.StateDir} {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return fmt.Errorf("kubelet: creating %s: %w", dir, err)
		}
		if err := os.Chmod(dir, 0o700); err != nil {
			return fmt.Errorf("kubelet: making %s private: %w", dir, err)
		}
	}
	if err := r.writeFiles(); err != nil {
		return err
	}
	if r.cfg.Cgroup != "" {
		return r.cfg.makeCgroups()
	}
	return nil
}

// writeFiles writes the files with the credentials the runner holds now,
// under the files lock.
func (r *Runner) writeFiles() error {
	r.lockFiles()
	defer r.unlockFiles()
	fs, err := r.cfg.withCredentials(r.credentials()).files()
	if err != nil {
		return err
	}
	if r.prepared != nil {
		r.prepared()
	}
	return write(fs)
}

func (r *Runner) lockFiles()   { r.filesLock <- struct{}{} }
func (r *Runner) unlockFiles() { <-r.filesLock }

// waitContainerd waits, until timeout, for containerd to answer on socket,
// or fails if it exits first. containerd is asked only once the socket is
// there, over gRPC in this process (containerdServing): the ctr version
// this replaced started a 23 MB binary at each ask, 0.6-2.4 s of the
// single vCPU under TCG on the way to the Node being Ready.
func waitContainerd(ctx context.Context, socket string, containerd *process.Process, timeout time.Duration) error {
	start := time.Now()
	deadline := start.Add(timeout)
	for {
		err := errors.New("no socket yet")
		if _, serr := os.Stat(socket); serr == nil {
			if err = containerdServing(ctx, socket); err == nil {
				supervisor.Logger(ctx).Info("containerd answers", zap.String("socket", socket), zap.Duration("after", time.Since(start)))
				return nil
			}
		}
		select {
		case <-containerd.Exited():
			return fmt.Errorf("containerd (pid %d) ended before it answered: %s", containerd.PID(), process.ExitString(containerd.Err()))
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond): // polling interval of a deadline-bounded wait
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("containerd does not answer on %s after %v: %w", socket, timeout, err)
		}
	}
}

// askTimeout bounds one question to containerd: a containerd that has
// its socket answers at once, and one that does not yet is asked again.
const askTimeout = 5 * time.Second

// containerdServing asks containerd on socket whether it serves: the
// standard gRPC health service (grpc.health.v1.Health/Check), which
// containerd registers (its healthcheck plugin) and reports SERVING from
// the moment its gRPC socket listens, as its own client's IsServing asks.
// Each question has a connection of its own, closed before it returns.
func containerdServing(ctx context.Context, socket string) error {
	ctx, cancel := context.WithTimeout(ctx, askTimeout)
	defer cancel()
	conn, err := grpc.NewClient("unix://"+socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return fmt.Errorf("connecting to %s: %w", socket, err)
	}
	defer conn.Close()
	resp, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		return fmt.Errorf("asking containerd's health: %w", err)
	}
	if st := resp.GetStatus(); st != healthpb.HealthCheckResponse_SERVING {
		return fmt.Errorf("containerd's health is %v", st)
	}
	return nil
}

// ctr runs ctr against containerd in the k8s.io namespace (the CRI's), its
// output logged.
func (r *Runner) ctr(ctx context.Context, log *zap.Logger, timeout time.Duration, args ...string) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, r.cfg.bin("ctr"), append([]string{"--address", r.cfg.containerdSocket(), "--namespace", "k8s.io"}, args...)...)
	cmd.Env = r.cfg.env()
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("ctr %v: %w: %s", args, err, truncate(out))
	}
	if len(out) > 0 {
		log.Named("ctr").Info(string(truncate(out)))
	}
	return nil
}

// stopRuntime runs once the kubelet has stopped: it kills every container
// (the pods' cgroup), stops containerd, and kills whatever is left in the
// runtime's cgroup (the shims); once the kernel says nothing is left, it
// empties the runtime's state (cleanRuntimeState).
func (r *Runner) stopRuntime(log *zap.Logger, containerd *process.Process) {
	if r.cfg.Cgroup != "" {
		if err := cgroupdir.Kill(r.cfg.cgroup(cgroupPods), killTimeout); err != nil {
			log.Error("killing the containers", zap.Error(err))
		}
	}
	err := containerd.Stop(r.cfg.StopGrace)
	r.update(func(s *Status) {
		s.ContainerdRunning, s.ContainerdPID = false, 0
		s.NodeReady, s.NodeNote = false, "the kubelet does not run"
		if !strings.HasPrefix(s.Note, "failed") {
			s.Note = "stopped (containerd: " + process.ExitString(err) + ")"
		}
	})
	if r.cfg.Cgroup != "" {
		if err := cgroupdir.Kill(r.cfg.cgroup(cgroupRuntime), killTimeout); err != nil {
			log.Error("killing the shims", zap.Error(err))
		}
		// The kernel's word for it (and the VM test's check): nothing
		// Kubernetes started is left, kubelet, containers or shims.
		switch populated, err := cgroupdir.Populated(r.cfg.Cgroup); {
		case err != nil:
			log.Error("checking what is left of the Kubernetes node", zap.Error(err))
		case populated:
			log.Error("processes are left in the Kubernetes node's cgroup after its stop", zap.String("cgroup", r.cfg.Cgroup))
		default:
			log.Info(StoppedMessage, zap.String("cgroup", r.cfg.Cgroup))
			r.cleanRuntimeState(log)
		}
	}
}

// cleanRuntimeState empties the runtime's state in RunDir as a reboot
// would (see cleanRuntimeState), once nothing of the runtime runs: the
// next containerd then has no dead shims to clean up.
func (r *Runner) cleanRuntimeState(log *zap.Logger) {
	start := time.Now()
	done, err := cleanRuntimeState("/proc/self/mountinfo", r.cfg.runtimeStateDirs())
	fields := []zap.Field{zap.Int("unmounted", done.Unmounted), zap.Int("removed", done.Removed), zap.Strings("dirs", r.cfg.runtimeStateDirs()), zap.Duration("took", time.Since(start))}
	if err != nil {
		log.Error("cleaning the runtime's state after its stop", append(fields, zap.Error(err))...)
		return
	}
	log.Info("the runtime's state cleaned as a reboot would: no dead shim for the next containerd", fields...)
}

// StoppedMessage is logged once a stopped runner has found its cgroup
// empty: no kubelet, container, shim or containerd left.
const StoppedMessage = "the Kubernetes node stopped: no process left in its cgroup"

// Renew replaces the kubelet's credentials and the apiservers: the proxy
// follows the new list at once and, when the credentials differ from the
// ones the kubelet has, the files are rewritten and the kubelet is
// restarted (SIGTERM; its runnable starts it again) to read them.
// Containers keep running. The same credentials leave the files and the
// kubelet alone: a restarted kubelet has no Pod specs until an apiserver
// answers, so restarting it for nothing while none does would stop it
// restarting crashed containers and running probes.
func (r *Runner) Renew(creds Credentials, servers []netip.AddrPort) error {
	cfg := r.cfg.withCredentials(creds)
	cfg.APIServers = servers
	if _, err := cfg.withDefaults(); err != nil {
		return fmt.Errorf("kubelet: renewing: %w", err)
	}
	fs, err := cfg.files()
	if err != nil {
		return fmt.Errorf("kubelet: renewing: %w", err)
	}
	r.lockFiles()
	defer r.unlockFiles()
	r.mu.Lock()
	same := r.creds.equal(creds)
	r.creds = creds
	pid := r.cur.KubeletPID
	r.mu.Unlock()
	r.proxy.SetServers(servers)
	if same {
		return nil
	}
	if err := write(fs); err != nil {
		return err
	}
	if pid != 0 {
		_ = syscall.Kill(-pid, syscall.SIGTERM)
	}
	return nil
}

// SetAPIServers replaces the apiservers the local proxy relays to, at
// once, and touches nothing else: the kubelet keeps running (its
// kubeconfig names the proxy, not the apiservers).
func (r *Runner) SetAPIServers(servers []netip.AddrPort) error {
	cfg := r.cfg
	cfg.APIServers = servers
	if _, err := cfg.withDefaults(); err != nil {
		return fmt.Errorf("kubelet: setting the apiservers: %w", err)
	}
	r.proxy.SetServers(servers)
	return nil
}

// equal reports whether c and o are the same credentials.
func (c Credentials) equal(o Credentials) bool {
	return bytes.Equal(c.CA, o.CA) && bytes.Equal(c.ClientCert, o.ClientCert) && bytes.Equal(c.ClientKey, o.ClientKey) &&
		bytes.Equal(c.ServingCert, o.ServingCert) && bytes.Equal(c.ServingKey, o.ServingKey)
}

func (c Config) withCredentials(creds Credentials) Config {
	c.Credentials = creds
	return c
}

func (c Config) bin(name string) string { return c.BinDir + "/" + name }

// apiClient is the runner's client of the apiservers, as the kubelet
// (waiting for an apiserver, the Node's readiness and labels): one client
// that keeps its connection while the credentials stay the same. A new
// TLS handshake at every ask cost a starting apiserver under TCG more
// than it could give (docs/benchmarks.md, issue 19).
func (r *Runner) apiClient() (*http.Client, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.hc != nil && bytes.Equal(r.hcCert, r.creds.ClientCert) {
		return r.hc, nil
	}
	hc, err := httpClient(r.creds)
	if err != nil {
		return nil, err
	}
	if r.hc != nil {
		r.hc.CloseIdleConnections()
	}
	r.hc, r.hcCert = hc, r.creds.ClientCert
	return hc, nil
}

func (r *Runner) credentials() Credentials {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.creds
}

func (r *Runner) note(s string) { r.update(func(st *Status) { st.Note = s }) }

func (r *Runner) update(f func(*Status)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	f(&r.cur)
	r.publishLocked()
}

func (r *Runner) publishLocked() {
	s := r.cur
	r.status.Set(&s)
}

func truncate(b []byte) []byte {
	const max = 2000
	if len(b) > max {
		return append(slices.Clone(b[:max]), "..."...)
	}
	return b
}
