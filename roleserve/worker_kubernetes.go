package roleserve

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"time"
	"unicode/utf8"

	"go.uber.org/zap"

	cpb "github.com/polis-os/polis/api/curator/v1"
	"github.com/polis-os/polis/consensus"
	"github.com/polis-os/polis/event"
	"github.com/polis-os/polis/kube/controlplane"
	"github.com/polis-os/polis/kube/etcdproxy"
	"github.com/polis-os/polis/kube/pki"
	"github.com/polis-os/polis/supervisor"
)

// KubernetesConfig is what the kubernetes worker needs to know about the
// node, fixed for the node agent's lifetime.
type KubernetesConfig struct {
	// Bundle is the absolute path of the Kubernetes bundle (polis-kube,
	// kube/bundle). Empty: this node agent cannot run Kubernetes, and its
	// status says so while the node holds KubernetesController.
	Bundle string
	// Dir is where the worker keeps the control plane's files (certificates
	// and keys, 0600) and the confined etcd socket: an absolute path under
	// the node's ephemeral storage, private to the node agent. Required with
	// Bundle.
	Dir string
	// APIServerPort is the apiserver's port at the node's address;
	// controlplane.DefaultPort if 0.
	APIServerPort uint16
}

func (c *KubernetesConfig) validate() error {
	if c.Bundle == "" {
		return nil
	}
	if !filepath.IsAbs(c.Bundle) {
		return fmt.Errorf("Kubernetes.Bundle %q is not an absolute path", c.Bundle)
	}
	if !filepath.IsAbs(c.Dir) {
		return fmt.Errorf("Kubernetes.Dir %q is not an absolute path (it is required with a bundle)", c.Dir)
	}
	if sock := c.etcdSocket(); len(sock) > maxSocketPath {
		return fmt.Errorf("Kubernetes.Dir %q: the etcd socket %s would be longer than %d bytes, the limit for unix sockets", c.Dir, sock, maxSocketPath)
	}
	return nil
}

// maxSocketPath is the longest path of a unix socket (sun_path less its
// terminating NUL).
const maxSocketPath = 107

// etcdSocket is where the confined etcd proxy serves.
func (c *KubernetesConfig) etcdSocket() string { return filepath.Join(c.Dir, "etcd.sock") }

func (c *KubernetesConfig) apiserverPort() uint16 {
	if c.APIServerPort == 0 {
		return controlplane.DefaultPort
	}
	return c.APIServerPort
}

// The Kubernetes control plane's place in the cluster's etcd and the name
// its PKI is created with.
const (
	// kubernetesUser is the consensus namespace the apiserver is confined
	// to: its keys are /namespace/kubernetes/registry/...
	kubernetesUser = "kubernetes"
	// pkiUser is the namespace that keeps the Kubernetes PKI
	// (pki.StoreKey): the curator's, which the apiserver cannot reach.
	pkiUser = "curator"
	// kubernetesClusterName names the cluster in its Kubernetes CA; the
	// controller-manager's --cluster-name is the same.
	kubernetesClusterName = "polis"
	// kubernetesStopGrace is how long a component may take to stop before
	// it is killed. With etcd there, the apiserver stops in about a second;
	// when the whole node stops, etcd stops alongside and the apiserver's
	// clean shutdown waits on it until killed. Killing it loses nothing:
	// its state is in etcd.
	kubernetesStopGrace = 5 * time.Second
	// pkiTimeout bounds reading (or creating) the PKI in etcd.
	pkiTimeout = 30 * time.Second
	// maxNoteLen bounds each note of the status, which the node reports to
	// the curator (a status is at most 1 KiB).
	maxNoteLen = 200
)

// Why a role is not run, as the status says it.
const (
	noteNoBundle     = "not available: this node agent was started without a Kubernetes bundle (polis-node --kubernetes-bundle)"
	noteNoConsensus  = "starting: waiting for this node's consensus member"
	noteNotReady     = "starting: the apiserver does not answer /readyz yet"
	noteStopped      = "stopped"
	noteWorkerNotRun = "not available on this kind of node: Polis runs no kubelet, since the node agent provides no container runtime and no cgroup v2 control yet"
)

// workerKubernetes runs the Kubernetes control plane while the node holds
// KubernetesController (which the curator gives only with ConsensusMember,
// so the cluster's etcd runs here): kube-apiserver, kube-controller-manager
// and kube-scheduler from the bundle, as supervised child processes
// (kube/controlplane), with the apiserver confined to the consensus
// namespace "kubernetes" through an etcd proxy on a private socket
// (kube/etcdproxy). The PKI is the cluster's, kept in etcd (kube/pki):
// every controller node serves with the same CA and service-account key.
//
// When the role goes, or the local control plane it relies on stops, the
// run returns and the supervisor stops its children: every component
// process is gone before the status says "stopped" and the worker starts
// over. A component that fails is restarted alone, with backoff, by the
// runner. KubernetesWorker is not run: no kubelet, and the status says why.
type workerKubernetes struct {
	g       *Graph
	cfg     KubernetesConfig
	address netip.Addr
	// started is set once the worker has published its first status.
	started           bool
	localRoles        event.ValueWatch[*cpb.Roles]         // reads
	localControlPlane event.ValueWatch[*LocalControlPlane] // reads (its consensus member)
	kubernetes        event.Value[*KubernetesStatus]       // writes
}

func newWorkerKubernetes(g *Graph, v *Values, cfg KubernetesConfig, address netip.Addr) *workerKubernetes {
	const name = "kubernetes"
	// It waits on the local consensus member's status, which the
	// controlplane worker's runnables produce, and produces the control
	// plane runner's.
	ReadsProduced(g, name, consensusStatusName)
	Produces(g, name, controlplane.StatusName)
	return &workerKubernetes{
		g:                 g,
		cfg:               cfg,
		address:           address,
		localRoles:        Reads[*cpb.Roles](g, name, &v.LocalRoles),
		localControlPlane: Reads[*LocalControlPlane](g, name, &v.LocalControlPlane),
		kubernetes:        Writes[*KubernetesStatus](g, name, &v.Kubernetes),
	}
}

// errKubernetesStop ends a run that ran the control plane: the supervisor
// then stops every component (the run's children) and starts the worker
// afresh, which follows the roles again.
var errKubernetesStop = errors.New("stopping the Kubernetes control plane")

func kubernetesController(r *cpb.Roles) bool { return r.GetKubernetesController() != nil }

func (w *workerKubernetes) run(ctx context.Context) error {
	log := supervisor.Logger(ctx)
	if !w.started {
		// Nil until the roles are known: readers (statuspush) need not
		// wait for them.
		w.kubernetes.Set(nil)
		w.started = true
	}
	in := w.g.Inputs("kubernetes")
	defer in.Close()
	roles := Input(in, w.localRoles, notNil)
	local := Input(in, w.localControlPlane, nil)
	for {
		why, err := in.Wait(ctx)
		if err != nil {
			return err
		}
		r, lcp := roles.Latest(), local.Latest()
		status := w.baseStatus(r)
		switch {
		case !status.Controller:
		case w.cfg.Bundle == "":
			status.ControllerNote = noteNoBundle
		case !bundleUsable(w.cfg.Bundle, &status.ControllerNote):
		case lcp == nil:
			status.ControllerNote = noteNoConsensus
		default:
			log.Info("running the Kubernetes control plane", zap.Stringer("because", why))
			return w.runControlPlane(ctx, r, lcp)
		}
		log.Info("not running the Kubernetes control plane", zap.Stringer("because", why),
			zap.Bool("controller", status.Controller), zap.Bool("worker", status.Worker), zap.String("controller_note", status.ControllerNote))
		w.kubernetes.Set(status)
		supervisor.Signal(ctx, supervisor.SignalHealthy)
	}
}

// baseStatus is the status for roles r before anything runs.
func (w *workerKubernetes) baseStatus(r *cpb.Roles) *KubernetesStatus {
	s := &KubernetesStatus{Controller: kubernetesController(r), Worker: r.GetKubernetesWorker() != nil}
	if s.Worker {
		s.WorkerNote = noteWorkerNotRun
	}
	return s
}

// bundleUsable checks that the bundle is an executable file; if not, it
// says why in note.
func bundleUsable(path string, note *string) bool {
	fi, err := os.Stat(path)
	switch {
	case err != nil:
		*note = "not available: Kubernetes bundle: " + err.Error()
	case !fi.Mode().IsRegular() || fi.Mode().Perm()&0o100 == 0:
		*note = "not available: Kubernetes bundle " + path + " is not an executable file"
	default:
		return true
	}
	*note = truncateNote(*note)
	return false
}

// runControlPlane runs the control plane over the consensus member of lcp
// until the role goes or that member stops; it then returns
// errKubernetesStop, and the supervisor stops the components.
func (w *workerKubernetes) runControlPlane(ctx context.Context, roles0 *cpb.Roles, lcp *LocalControlPlane) error {
	log := supervisor.Logger(ctx)
	in := w.g.Inputs("kubernetes")
	defer in.Close()
	roles := Input(in, w.localRoles, notNil)
	local := Input(in, w.localControlPlane, nil)
	cons := Input(in, lcp.Consensus.Status(), nil)
	// Once the control plane runs, what the runner says (set by start).
	var runner *event.In[*controlplane.Status]
	// Whatever ends the run, the status says nothing runs once the
	// components have stopped, not before.
	last := roles0
	supervisor.Cleanup(ctx, func() {
		st := w.baseStatus(last)
		if st.Controller {
			st.ControllerNote = noteStopped
		}
		w.kubernetes.Set(st)
	})
	for {
		why, err := in.Wait(ctx)
		if err != nil {
			return err
		}
		r := roles.Latest()
		last = r
		switch {
		case !kubernetesController(r):
			log.Info("KubernetesController removed", zap.Stringer("because", why))
			return errKubernetesStop
		case local.Latest() != lcp:
			log.Info("the local control plane changed", zap.Stringer("because", why))
			return errKubernetesStop
		case runner != nil && !consensus.IsRunning(cons.Latest()):
			log.Info("the local consensus member stopped", zap.Stringer("because", why))
			return errKubernetesStop
		}
		status := w.baseStatus(r)
		switch {
		case runner != nil:
			w.describe(status, runner.Latest())
		case !consensus.IsVoter(cons.Latest()):
			status.ControllerNote = noteNoConsensus
		default:
			cp, err := w.start(ctx, cons.Latest())
			if err != nil {
				return err
			}
			runner = Input(in, cp.Status(), nil)
			supervisor.Signal(ctx, supervisor.SignalHealthy)
			continue
		}
		w.kubernetes.Set(status)
	}
}

// start reads (or creates) the cluster's Kubernetes PKI, issues this node's
// component files, and starts the confined etcd proxy and the runner as
// children of the run.
func (w *workerKubernetes) start(ctx context.Context, st *consensus.Status) (*controlplane.Runner, error) {
	log := supervisor.Logger(ctx)
	cluster, err := w.clusterPKI(ctx, st)
	if err != nil {
		return nil, err
	}
	port := w.cfg.apiserverPort()
	server := "https://" + netip.AddrPortFrom(w.address, port).String()
	now := time.Now()
	files, err := cluster.ControlPlaneFiles([]netip.Addr{w.address}, serviceIP(controlplane.DefaultServiceCIDR), server, now)
	if err != nil {
		return nil, fmt.Errorf("issuing the control plane's certificates: %w", err)
	}
	// The directory holds the socket through which etcd is reached
	// unauthenticated: private to the node agent.
	if err := os.MkdirAll(w.cfg.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("creating %s: %w", w.cfg.Dir, err)
	}
	if err := os.Chmod(w.cfg.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("making %s private: %w", w.cfg.Dir, err)
	}
	conn, err := st.ConnectionFor(kubernetesUser)
	if err != nil {
		return nil, err
	}
	// The proxy, a child, uses the connection until it has stopped.
	supervisor.Cleanup(ctx, func() { conn.Close() })
	proxy, err := etcdproxy.New(etcdproxy.Config{Client: conn.Client, Prefix: conn.Prefix, Socket: w.cfg.etcdSocket()})
	if err != nil {
		return nil, err
	}
	runner, err := controlplane.New(controlplane.Config{
		Bundle:       w.cfg.Bundle,
		Dir:          filepath.Join(w.cfg.Dir, "controlplane"),
		Files:        files,
		Address:      w.address,
		Port:         int(port),
		EtcdEndpoint: proxy.Endpoint(),
		StopGrace:    kubernetesStopGrace,
	})
	if err != nil {
		return nil, err
	}
	if err := supervisor.Run(ctx, "etcdproxy", proxyOutliving(proxy, runner)); err != nil {
		return nil, err
	}
	if err := supervisor.Run(ctx, "controlplane", runner.Run); err != nil {
		return nil, err
	}
	log.Info("Kubernetes control plane started", zap.String("server", server), zap.String("etcd_prefix", conn.Prefix), zap.String("dir", w.cfg.Dir))
	return runner, nil
}

// clusterPKI returns the cluster's Kubernetes PKI from the curator's
// namespace, creating it if this is the first controller node to need it
// (pki.Ensure: one transaction, so racing nodes end up with the same).
func (w *workerKubernetes) clusterPKI(ctx context.Context, st *consensus.Status) (*pki.Cluster, error) {
	cli, err := st.ClientFor(pkiUser)
	if err != nil {
		return nil, err
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(ctx, pkiTimeout)
	defer cancel()
	cluster, created, err := pki.Ensure(ctx, cli, kubernetesClusterName, time.Now())
	if err != nil {
		return nil, err
	}
	if created {
		supervisor.Logger(ctx).Info("created the cluster's Kubernetes PKI")
	}
	return cluster, nil
}

// describe fills s from what the runner says.
func (w *workerKubernetes) describe(s *KubernetesStatus, st *controlplane.Status) {
	s.APIServer = netip.AddrPortFrom(w.address, w.cfg.apiserverPort())
	// Ready only for the apiserver that runs now: between a killed
	// apiserver and the probe's next answer, the runner's Ready is still
	// its predecessor's.
	api, _ := st.Component(controlplane.APIServer)
	s.Ready = st.Ready && api.Running && st.ReadyPID == api.PID
	var down []string
	for _, c := range st.Components {
		if c.Running {
			s.Running = append(s.Running, c.Name)
			continue
		}
		d := c.Name + " not running"
		if c.LastExit != "" {
			d += " (last exit: " + c.LastExit + ")"
		}
		down = append(down, d)
	}
	switch {
	case len(down) > 0:
		s.ControllerNote = truncateNote(strings.Join(down, "; "))
	case !s.Ready:
		s.ControllerNote = noteNotReady
	}
}

// serviceIP is the kubernetes service's address: the first of the range.
func serviceIP(cidr netip.Prefix) netip.Addr { return cidr.Masked().Addr().Next() }

// truncateNote cuts s to at most maxNoteLen bytes, at a rune boundary (a
// protobuf string must stay valid UTF-8).
func truncateNote(s string) string {
	if len(s) <= maxNoteLen {
		return s
	}
	cut := maxNoteLen - len("...")
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "..."
}

// proxyStopBound bounds how long the confined etcd proxy keeps serving,
// once stopped, for components that have not stopped yet: longer than the
// runner's grace before it kills them.
const proxyStopBound = kubernetesStopGrace + 5*time.Second

// proxyOutliving runs the proxy so that it outlives the components: when
// the run is cancelled, every runnable of it is cancelled at once, and an
// apiserver told to stop while its etcd is already gone hangs in its
// shutdown until it is killed. The proxy therefore stops serving only once
// no component runs any more (or after proxyStopBound).
func proxyOutliving(proxy *etcdproxy.Proxy, runner *controlplane.Runner) supervisor.Runnable {
	return func(ctx context.Context) error {
		// Its values (logger, place in the tree) without its cancellation.
		serveCtx, stop := context.WithCancel(context.WithoutCancel(ctx))
		defer stop()
		go func() {
			<-ctx.Done()
			wait, cancel := context.WithTimeout(serveCtx, proxyStopBound)
			defer cancel()
			_, _ = event.Get(wait, runner.Status(), event.Filter(noComponentRuns))
			stop()
		}()
		err := proxy.Run(serveCtx)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return err
	}
}

// noComponentRuns holds once every component's process has ended.
func noComponentRuns(s *controlplane.Status) bool {
	for _, c := range s.Components {
		if c.Running {
			return false
		}
	}
	return true
}
