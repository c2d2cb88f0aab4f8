package roleserve

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"strings"
	"unicode/utf8"

	"go.uber.org/zap"

	cpb "github.com/polis-os/polis/api/curator/v1"
	"github.com/polis-os/polis/consensus"
	"github.com/polis-os/polis/curator"
	"github.com/polis-os/polis/event"
	"github.com/polis-os/polis/kube/controller"
	"github.com/polis-os/polis/kube/controlplane"
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
	// Runtime is the container runtime for KubernetesWorker; nil: this
	// node agent runs no kubelet, and its status says so while the node
	// holds KubernetesWorker.
	Runtime *KubernetesRuntime
	// ControlPlaneCgroup is a cgroup v2 directory below which each
	// control-plane component runs in a cgroup of its own
	// (controlplane.Config.Cgroup); empty: they share the agent's.
	ControlPlaneCgroup string
}

func (c *KubernetesConfig) validate() error {
	if c.Runtime != nil {
		if err := c.Runtime.validate(); err != nil {
			return err
		}
	}
	if c.Bundle == "" {
		return nil
	}
	if err := c.controller(netip.IPv6Loopback()).Validate(); err != nil {
		return fmt.Errorf("kubernetes config: %w", err)
	}
	return nil
}

// controller is the control plane's assembly configuration on the node at
// address.
func (c *KubernetesConfig) controller(address netip.Addr) controller.Config {
	return controller.Config{Bundle: c.Bundle, Dir: c.Dir, Address: address, Port: c.APIServerPort,
		PodRanges: controller.PodRangeSource{Prefix: curator.PodRangesPrefix, Range: curator.ParsePodRangeKey},
		Nodes:     controller.NodeRecordSource{Prefix: curator.NodesPrefix},
		Cgroup:    c.ControlPlaneCgroup}
}

const (
	// maxNoteLen bounds each note of the status, which the node reports to
	// the curator (a status is at most 1 KiB).
	maxNoteLen = 200
)

// Why a role is not run, as the status says it.
const (
	noteNoBundle    = "not available: this node agent was started without a Kubernetes bundle (polis-node --kubernetes-bundle)"
	noteNoConsensus = "starting: waiting for this node's consensus member"
	noteNotReady    = "starting: the apiserver does not answer /readyz yet"
	noteStopped     = "stopped"
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
// runner. KubernetesWorker is the kubernetesworker worker's.
type workerKubernetes struct {
	*Worker
	cfg     KubernetesConfig
	address netip.Addr
	// started is set once the worker has published its first status.
	started           bool
	localRoles        event.ValueWatch[*cpb.Roles]         // reads
	localControlPlane event.ValueWatch[*LocalControlPlane] // reads (its consensus member)
	kubernetes        event.Value[*KubernetesStatus]       // writes
}

func newWorkerKubernetes(g *Graph, v *Values, cfg KubernetesConfig, address netip.Addr) *workerKubernetes {
	h := g.Worker("kubernetes")
	// It waits on the local consensus member's status, which the
	// controlplane worker's runnables produce, and produces the control
	// plane runner's.
	h.ReadsProduced(consensus.StatusName)
	h.Produces(controlplane.StatusName)
	return &workerKubernetes{
		Worker:            h,
		cfg:               cfg,
		address:           address,
		localRoles:        Reads[*cpb.Roles](h, &v.LocalRoles),
		localControlPlane: Reads[*LocalControlPlane](h, &v.LocalControlPlane),
		kubernetes:        Writes[*KubernetesStatus](h, &v.Kubernetes),
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
	in := w.Inputs()
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
			zap.Bool("controller", status.Controller), zap.String("controller_note", status.ControllerNote))
		w.kubernetes.Set(status)
		supervisor.Signal(ctx, supervisor.SignalHealthy)
	}
}

// baseStatus is the status for roles r before anything runs.
func (w *workerKubernetes) baseStatus(r *cpb.Roles) *KubernetesStatus {
	return &KubernetesStatus{Controller: kubernetesController(r)}
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
	in := w.Inputs()
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
			cp, err := controller.Start(ctx, w.cfg.controller(w.address), cons.Latest())
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

// describe fills s from what the runner says.
func (w *workerKubernetes) describe(s *KubernetesStatus, st *controlplane.Status) {
	s.APIServer = netip.AddrPortFrom(w.address, w.cfg.controller(w.address).APIServerPort())
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
