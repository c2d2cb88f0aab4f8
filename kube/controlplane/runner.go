package controlplane

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/polis-os/polis/event"
	"github.com/polis-os/polis/event/memory"
	"github.com/polis-os/polis/kube/pki"
	"github.com/polis-os/polis/kube/process"
	"github.com/polis-os/polis/supervisor"
)

// Component names, in the order Status lists them; each is also the
// bundle's subcommand and the name of its runnable.
const (
	APIServer         = "apiserver"
	ControllerManager = "controller-manager"
	Scheduler         = "scheduler"
)

// StatusName is the name of a Runner's status value (event.Info), by which
// the role server's graph knows it.
const StatusName = "kube.controlplane.status"

// probeEvery is how often the apiserver's /readyz is asked until it
// answers ok, probeEveryReady how often after that; probeTimeout bounds
// one ask. What waits for readiness (the controller-manager, the
// scheduler, the RBAC objects, the launcher) waits at most probeEvery
// for it. Once ready, the ask is only there to notice a loss of
// readiness while the process runs (etcd unreachable, say), which
// nothing acts on at once; an apiserver that exits is not ready from that
// moment (setExited) and its successor is asked at once. Asking twice a
// second for ever cost an idle controller noticeably under TCG: each
// /readyz runs every readiness check, etcd's read among them.
const (
	probeEvery      = 500 * time.Millisecond
	probeEveryReady = 5 * time.Second
	probeTimeout    = 5 * time.Second
)

// Status is what runs and whether the apiserver is ready. Values are
// immutable once published.
type Status struct {
	// Server is the apiserver's URL.
	Server string
	// Components are the apiserver, controller-manager and scheduler, in
	// that order.
	Components []ComponentStatus
	// Ready is true while the apiserver's /readyz answers ok.
	Ready bool
	// NotReady says why Ready is false (the probe's last error).
	NotReady string
	// ReadyPID is the pid of the apiserver process that last answered
	// /readyz ok (0 while Ready is false), so that a reader can tell a
	// restarted apiserver's readiness from its predecessor's.
	ReadyPID int
}

// ComponentStatus is one component's process.
type ComponentStatus struct {
	Name string
	// Running is true while its process runs; PID is its pid then.
	Running bool
	PID     int
	// Starts counts the processes started since Run began.
	Starts int
	// LastExit is how the last process ended ("" before any did).
	LastExit string
}

// Running reports whether every component's process runs.
func (s *Status) Running() bool {
	for _, c := range s.Components {
		if !c.Running {
			return false
		}
	}
	return len(s.Components) > 0
}

// Component returns the status of the named component.
func (s *Status) Component(name string) (ComponentStatus, bool) {
	i := slices.IndexFunc(s.Components, func(c ComponentStatus) bool { return c.Name == name })
	if i < 0 {
		return ComponentStatus{}, false
	}
	return s.Components[i], true
}

// Runner runs one node's control plane; see the package doc.
type Runner struct {
	cfg    Config
	status memory.Value[*Status]

	mu  sync.Mutex
	cur Status

	// apiserverChanged wakes the probe when the apiserver's process
	// starts or exits, so that a new process is asked at once.
	apiserverChanged chan struct{}

	// cgroupWarned logs once that the components' cgroups are not fully
	// accounted (openComponentCgroup): it would be the same at every start.
	cgroupWarned sync.Once
}

// New validates cfg and returns a Runner ready to Run.
func New(cfg Config) (*Runner, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	r := &Runner{cfg: cfg, apiserverChanged: make(chan struct{}, 1)}
	r.status.Name = StatusName
	r.cur.Server = cfg.Server()
	r.cur.NotReady = "not started"
	for _, n := range []string{APIServer, ControllerManager, Scheduler} {
		r.cur.Components = append(r.cur.Components, ComponentStatus{Name: n})
	}
	r.publishLocked()
	return r, nil
}

// Status is the runner's status as a value.
func (r *Runner) Status() event.ValueWatch[*Status] { return &r.status }

// Run writes the component files and runs the components and the probe
// until ctx ends; see the package doc. It is a supervisor.Runnable.
func (r *Runner) Run(ctx context.Context) error {
	if err := r.writeFiles(); err != nil {
		return err
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(r.cfg.Files[pki.FileCA]) {
		return errors.New("controlplane: the CA file holds no certificate")
	}
	for _, c := range []component{
		{name: APIServer, args: r.cfg.apiserverArgs()},
		{name: ControllerManager, args: r.cfg.controllerManagerArgs(), afterReady: true},
		{name: Scheduler, args: r.cfg.schedulerArgs(), afterReady: true},
	} {
		if err := supervisor.Run(ctx, c.name, r.runComponent(c)); err != nil {
			return err
		}
	}
	if err := supervisor.Run(ctx, "readyz", r.probe(roots)); err != nil {
		return err
	}
	if err := supervisor.Run(ctx, "rbac", r.applyRBAC(roots)); err != nil {
		return err
	}
	supervisor.Signal(ctx, supervisor.SignalHealthy)
	<-ctx.Done()
	r.setReady(false, "stopped", 0)
	return ctx.Err()
}

// writeFiles writes the component files into the private directory, each
// to a temporary name first and renamed, so a component never reads half a
// file; keys and kubeconfigs are 0600.
func (r *Runner) writeFiles() error {
	if err := os.MkdirAll(r.cfg.Dir, 0o700); err != nil {
		return fmt.Errorf("controlplane: creating %s: %w", r.cfg.Dir, err)
	}
	if err := os.Chmod(r.cfg.Dir, 0o700); err != nil {
		return fmt.Errorf("controlplane: making %s private: %w", r.cfg.Dir, err)
	}
	for name, data := range r.cfg.Files {
		mode := os.FileMode(0o644)
		if pki.Secret(name) {
			mode = 0o600
		}
		path := filepath.Join(r.cfg.Dir, name)
		tmp := path + ".tmp"
		if err := os.WriteFile(tmp, data, mode); err != nil {
			return fmt.Errorf("controlplane: writing %s: %w", name, err)
		}
		if err := os.Chmod(tmp, mode); err != nil {
			return fmt.Errorf("controlplane: writing %s: %w", name, err)
		}
		if err := os.Rename(tmp, path); err != nil {
			return fmt.Errorf("controlplane: writing %s: %w", name, err)
		}
	}
	return nil
}

// probe is the runnable that asks the apiserver's /readyz and publishes the
// answer. It runs until ctx ends.
func (r *Runner) probe(roots *x509.CertPool) supervisor.Runnable {
	return func(ctx context.Context) error {
		hc, err := r.probeClient(roots)
		if err != nil {
			return err
		}
		defer hc.CloseIdleConnections()
		url := r.cfg.Server() + "/readyz"
		supervisor.Signal(ctx, supervisor.SignalHealthy)
		next := time.NewTimer(0)
		defer next.Stop()
		wasReady := false
		for {
			pid := r.pid(APIServer)
			err := get(ctx, hc, url)
			if pid != r.pid(APIServer) {
				err = errors.New("the apiserver restarted while being asked")
			}
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if ready := err == nil; ready != wasReady {
				wasReady = ready
				if ready {
					supervisor.Logger(ctx).Info("apiserver ready", zap.String("server", r.cfg.Server()))
				} else {
					supervisor.Logger(ctx).Warn("apiserver not ready", zap.Error(err))
				}
			}
			why := ""
			if err != nil {
				why = err.Error()
			}
			r.setReady(err == nil, why, pid)
			if err == nil {
				next.Reset(probeEveryReady)
			} else {
				next.Reset(probeEvery)
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-next.C:
			case <-r.apiserverChanged:
			}
		}
	}
}

// probeClient is the /readyz probe's client: HTTP/2, so that an ask that
// times out resets its stream, not the connection, and a slow apiserver
// is not also given a new TLS handshake at the next ask; and with a
// client certificate (pki.ReadyzProbeUser), as the apiserver ends the
// connection of an unauthenticated client after each request (its
// defence against HTTP/2 floods): asked anonymously, every probe was a
// new connection and TLS handshake, two a second on both sides, a
// noticeable part of an idle controller's CPU under TCG.
func (r *Runner) probeClient(roots *x509.CertPool) (*http.Client, error) {
	pair, err := tls.X509KeyPair(r.cfg.Files[pki.FileReadyzProbeCert], r.cfg.Files[pki.FileReadyzProbeKey])
	if err != nil {
		return nil, fmt.Errorf("controlplane: the readyz probe's client certificate: %w", err)
	}
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots, Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12}, ForceAttemptHTTP2: true}
	return &http.Client{Transport: tr, Timeout: probeTimeout}, nil
}

// get succeeds when url answers 200.
func get(ctx context.Context, hc *http.Client, url string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("/readyz: %s: %s", resp.Status, body)
	}
	return nil
}

func (r *Runner) setRunning(name string, pid int) {
	r.update(name, func(c *ComponentStatus) {
		c.Running, c.PID = true, pid
		c.Starts++
	})
}

func (r *Runner) setExited(name string, err error) {
	r.update(name, func(c *ComponentStatus) {
		c.Running, c.PID = false, 0
		c.LastExit = process.ExitString(err)
		if name == APIServer && r.cur.Ready {
			r.cur.Ready, r.cur.NotReady, r.cur.ReadyPID = false, "the apiserver exited: "+c.LastExit, 0
		}
	})
}

func (r *Runner) update(name string, f func(*ComponentStatus)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for i := range r.cur.Components {
		if r.cur.Components[i].Name == name {
			f(&r.cur.Components[i])
		}
	}
	r.publishLocked()
	if name == APIServer {
		select {
		case r.apiserverChanged <- struct{}{}:
		default: // the probe has yet to see an earlier change
		}
	}
}

func (r *Runner) setReady(ready bool, why string, pid int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if ready && (pid == 0 || pid != r.pidLocked(APIServer)) {
		// The process asked has exited since (setExited said so), or
		// none ran: whoever answered, it is not ready.
		ready, why = false, "the apiserver exited while being asked"
	}
	if !ready {
		pid = 0
	}
	if r.cur.Ready == ready && r.cur.NotReady == why && r.cur.ReadyPID == pid {
		return
	}
	r.cur.Ready, r.cur.NotReady, r.cur.ReadyPID = ready, why, pid
	r.publishLocked()
}

// pid is the pid of the named component's running process, 0 if none.
func (r *Runner) pid(name string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.pidLocked(name)
}

func (r *Runner) pidLocked(name string) int {
	for _, c := range r.cur.Components {
		if c.Name == name {
			return c.PID
		}
	}
	return 0
}

// publishLocked publishes a copy of cur, which later updates do not touch.
func (r *Runner) publishLocked() {
	s := r.cur
	s.Components = slices.Clone(r.cur.Components)
	r.status.Set(&s)
}
