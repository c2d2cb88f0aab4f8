package roleserve

import (
	"cmp"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"

	cpb "github.com/polis-os/polis/api/curator/v1"
	"github.com/polis-os/polis/clusternet"
	"github.com/polis-os/polis/event"
	"github.com/polis-os/polis/event/memory"
	"github.com/polis-os/polis/internal/cgroupdir"
	"github.com/polis-os/polis/kube/dns"
	"github.com/polis-os/polis/kube/kubelet"
	"github.com/polis-os/polis/kube/nodeservice"
	"github.com/polis-os/polis/kube/pki"
	"github.com/polis-os/polis/kube/proxy"
	"github.com/polis-os/polis/supervisor"
)

// KubernetesRuntime is the container runtime a node agent can run a
// kubelet with: where its binaries are and where it keeps its state. A VM
// node gets it from the system disk (node/pid1's System* paths); a node
// agent without one (process mode) runs no kubelet.
type KubernetesRuntime struct {
	// BinDir holds containerd, containerd-shim-runc-v2, runc, ctr, mount
	// and umount, nft (for kube-proxy) and polis-coredns (the node's DNS
	// server).
	BinDir string
	// CNIBinDir holds the CNI plugins.
	CNIBinDir string
	// PauseImage is the sandbox image's OCI archive, imported at start;
	// PauseImageRef its reference (kubelet.DefaultPauseImage if empty).
	PauseImage    string
	PauseImageRef string
	// StateDir keeps containerd's and the kubelet's state across reboots:
	// on the data disk.
	StateDir string
	// RunDir keeps sockets and generated files: ephemeral storage, a short
	// path (unix sockets).
	RunDir string
	// Cgroup is the cgroup v2 directory the runtime, the kubelet and the
	// pods run below (kubelet.Config.Cgroup); empty only in tests.
	Cgroup string
	// ServicesCgroup is the cgroup v2 directory the node services
	// (kube-proxy, the DNS server) run below, each in a cgroup of its
	// own: a sibling of Cgroup, given a low CPU weight
	// (nodeservice.CPUWeight) so that the kubelet and containerd come
	// first when the CPU is short. Empty: they run in the node agent's
	// cgroup (tests, process clusters).
	ServicesCgroup string
	// CgroupMount is where cgroup v2 is expected; kubelet.CgroupMount if
	// empty. The worker runs only if it holds cgroup.controllers.
	CgroupMount string
	// Registries maps registry hosts to endpoints (kubelet.Config).
	Registries map[string]string
	// ProxyPort is the local apiserver proxy's port on 127.0.0.1
	// (kubelet.DefaultProxyPort if 0).
	ProxyPort uint16
}

func (r *KubernetesRuntime) validate() error {
	for name, p := range map[string]string{"BinDir": r.BinDir, "CNIBinDir": r.CNIBinDir, "PauseImage": r.PauseImage, "StateDir": r.StateDir, "RunDir": r.RunDir} {
		if !filepath.IsAbs(p) {
			return fmt.Errorf("kubernetes runtime: %s %q is not an absolute path", name, p)
		}
	}
	return nil
}

func (r *KubernetesRuntime) cgroupMount() string {
	if r.CgroupMount == "" {
		return kubelet.CgroupMount
	}
	return r.CgroupMount
}

// Why KubernetesWorker is not run, as the status says it.
const (
	noteNoRuntime   = "not available: this node agent was given no container runtime (only VM nodes have one; polis-node --kubernetes-runtime)"
	noteNoCgroupV2  = "not available: this machine has no cgroup v2 (no cgroup.controllers in %s), which kubelet needs"
	noteNoKubelet   = "not available: this node agent was started without a Kubernetes bundle, which holds the kubelet"
	noteNoCurator   = "starting: waiting for a curator to issue the kubelet's credentials"
	noteNoLabels    = "starting: waiting for the node's labels from the curator"
	notePodRange    = "starting: waiting for the node's pod range from the curator"
	noteCredentials = "starting: asking the curator for the kubelet's credentials: "
	noteStarting    = "starting"
	noteNoKey       = "blocked: the node's WireGuard key cannot be used, and the pod network needs it: "
	// Once the role is gone.
	noteRemoving = "stopped; removing what the role left on the machine"
	// A controller's routes to Pods (runRoutes), without a range.
	noteNoRoutesRange = "no pod range from the curator (yet): this controller's apiserver reaches no Pod"
	noteLeftovers     = "removing what the role left on the machine failed, trying again in %v: %v"
)

// Credentials renewal: at half their life, and a failed renewal is tried
// again after renewRetry (the old ones still work until they expire); the
// same renewal refreshes the apiservers early when none answers.
const renewRetry = time.Minute

// A failed removal of what the role left is tried again after
// leftoversRetry, doubled at each failure up to leftoversRetryMax.
const (
	leftoversRetry    = 5 * time.Second
	leftoversRetryMax = 5 * time.Minute
)

// workerKubernetesWorker runs the Kubernetes node (kube/kubelet:
// containerd, then kubelet) and its node services beside it (kube/proxy:
// kube-proxy; kube/dns: the node's DNS server, which the kubelet names as
// Pods' nameserver at the node's address) and the pod network (clusternet:
// routes over WireGuard to the other workers' Pods) while the node holds
// KubernetesWorker, has a container runtime and cgroup v2. Their
// credentials come from the curator (IssueKubeletCredentials) for keys
// made here, which never leave the node; they are renewed at half their
// life, which restarts the kubelet and the services alone; while no
// apiserver answers the worker asks again early, for the apiservers'
// list, which goes to the kubelet's proxy alone (nothing restarts). The
// node's WireGuard key is loaded before anything starts: without a usable
// one nothing runs and the status says why. The node's Polis labels are
// the Node's (kubelet.NodeLabels): given at registration, and handed to
// the runner whenever they change, which patches the Node.
//
// When the role goes, the run ends and the supervisor stops the runner's
// subtree: the kubelet, every container, containerd, kube-proxy and the
// DNS server; the status says "stopped" only then. What running the node
// leaves on the machine (leftoverSteps: the pod network's WireGuard device
// and routes, kube-proxy's and portmap's nftables tables, the Pods'
// bridge, CNI's state) outlives a run that ends with the role held (a
// changed pod range, a failure), so that a node that runs again finds it.
// Whenever the worker finds the role not held, however the last run ended
// (or at its start: an agent before it may have left them), it removes
// them, once the kernel says nothing of the node runs; a step that fails
// is named in the status and tried again with a doubling wait, and the
// status is clean only once all are gone.
//
// A node that holds KubernetesController without KubernetesWorker routes
// to the workers' Pods all the same (runRoutes: the pod network alone,
// from its own pod range), so that its apiserver reaches webhooks,
// aggregated APIs and the proxies to Pods and Services; the leftovers of
// an earlier worker role are removed first, but for the pod network,
// which it takes over as it is, as runNode does when the node becomes a
// worker. A controller that holds KubernetesWorker too, blocked (no
// labels or curator yet, no cgroup v2, no bundle), routes nothing until
// the worker runs: the device it had stays as it was, unreconciled.
type workerKubernetesWorker struct {
	*Worker
	cfg     KubernetesConfig
	address netip.Addr
	// cgroupV2 says whether the machine has cgroup v2 at mount; a test
	// seam.
	cgroupV2 func(mount string) bool
	// retry is renewRetry; tests shorten it.
	retry   time.Duration
	started bool
	// keyFile keeps the node's WireGuard private key (the clusternet
	// worker made it and published its public half).
	keyFile string
	// runPodNetwork connects this node's Pods to the peers' (clusternet.Run):
	// a test seam, since the real one programs the machine's network.
	runPodNetwork func(ctx context.Context, c clusternet.Config) error
	// leftovers are what running the role leaves on the machine, and how
	// to remove each, in order (leftoverSteps); a test seam, since the
	// real ones change the machine's network.
	leftovers []cleanupStep
	// dirty says that the machine may hold leftovers: from the worker's
	// start (an earlier run, or an agent before this one, may have left
	// them) and whenever runNode started the node. left are those still
	// to remove, taken from leftovers when a removal begins, and dropped
	// one by one as each is removed.
	dirty bool
	left  []cleanupStep
	// leftoversRetry is leftoversRetry; tests shorten it.
	leftoversRetry time.Duration
	// linkMTU is clusternet.LinkMTU, a test seam.
	linkMTU func(netip.Addr) (int, error)
	// runningPodRange is the pod range the running node was started
	// with (runNode); a change ends the run. runningClusterPodRange is
	// the cluster's, as the curator said at that start (the zero Prefix
	// if it did not: no egress rule).
	runningPodRange        netip.Prefix
	runningClusterPodRange netip.Prefix

	localRoles      event.ValueWatch[*cpb.Roles]         // reads
	membership      event.ValueWatch[*ClusterMembership] // reads (the curator, the node's ID)
	localLabels     event.ValueWatch[map[string]string]  // reads (the Node's labels, kept by the runner)
	podRange        event.ValueWatch[netip.Prefix]       // reads (the CNI range)
	clusterPodRange event.ValueWatch[netip.Prefix]       // reads (the egress rule's, kube-proxy's)
	peers           event.ValueWatch[[]clusternet.Peer]  // reads (by clusternet.Run)
	status          event.Value[*KubernetesWorkerStatus] // writes
}

func newWorkerKubernetesWorker(g *Graph, v *Values, cfg KubernetesConfig, address netip.Addr, keyFile string) *workerKubernetesWorker {
	h := g.Worker("kubernetesworker")
	h.Produces(kubelet.StatusName)
	h.Produces(nodeservice.StatusName(proxy.Name))
	h.Produces(nodeservice.StatusName(dns.Name))
	h.Produces(clusternet.StatusName)
	return &workerKubernetesWorker{
		Worker:          h,
		cfg:             cfg,
		address:         address,
		cgroupV2:        hasCgroupV2,
		retry:           renewRetry,
		keyFile:         keyFile,
		runPodNetwork:   clusternet.Run,
		leftovers:       leftoverSteps(cfg.Runtime),
		dirty:           true,
		leftoversRetry:  leftoversRetry,
		linkMTU:         clusternet.LinkMTU,
		peers:           Reads[[]clusternet.Peer](h, &v.NetworkPeers),
		localRoles:      Reads[*cpb.Roles](h, &v.LocalRoles),
		membership:      Reads[*ClusterMembership](h, &v.Membership),
		localLabels:     Reads[map[string]string](h, &v.LocalLabels),
		podRange:        Reads[netip.Prefix](h, &v.LocalPodRange),
		clusterPodRange: Reads[netip.Prefix](h, &v.ClusterPodRange),
		status:          Writes[*KubernetesWorkerStatus](h, &v.KubernetesWorker),
	}
}

// hasCgroupV2 reports whether a cgroup v2 hierarchy is mounted at mount.
func hasCgroupV2(mount string) bool {
	_, err := os.Stat(filepath.Join(mount, "cgroup.controllers"))
	return err == nil
}

// errKubernetesWorkerStop ends a run that ran the Kubernetes node, so that
// the supervisor stops it and the worker starts afresh.
var errKubernetesWorkerStop = errors.New("stopping the Kubernetes node")

func (w *workerKubernetesWorker) run(ctx context.Context) error {
	log := supervisor.Logger(ctx)
	if !w.started {
		// Nil until the roles are known.
		w.status.Set(nil)
		w.started = true
	}
	in := w.Inputs()
	defer in.Close()
	roles := Input(in, w.localRoles, notNil)
	m := Input(in, w.membership, nil)
	labels := Input(in, w.localLabels, nil)
	podRange := Input(in, w.podRange, nil)
	// Set before the node's own range (workerClusterNet), so known by
	// the time a run starts; it never changes in a cluster's life.
	clusterPodRange := Input(in, w.clusterPodRange, nil)
	// A failed removal of the leftovers is tried again at retryAt (zero:
	// none failed), after a wait that doubles; leftNote says why it
	// failed until it succeeds.
	var (
		retry    time.Duration
		retryAt  time.Time
		leftNote string
	)
	for {
		var why event.Why
		var err error
		if retryAt.IsZero() {
			why, err = in.Wait(ctx)
		} else {
			why, _, err = waitUntil(ctx, in, retryAt)
		}
		if err != nil {
			return err
		}
		st := &KubernetesWorkerStatus{Held: roles.Latest().GetKubernetesWorker() != nil}
		if st.Note = w.blocked(st.Held, m.Latest(), labels.Latest(), podRange.Latest()); st.Held && st.Note == "" {
			log.Info("running the Kubernetes node", zap.Stringer("because", why), zap.Stringer("podRange", podRange.Latest()))
			w.runningClusterPodRange = clusterPodRange.Latest()
			return w.runNode(ctx, m.Latest(), labels.Latest(), podRange.Latest())
		}
		// A node that routes to Pods for KubernetesController keeps
		// the pod network as it is, even before its range is known (at
		// an agent's start), so that its routes outlive a restart.
		keepNetwork := w.routesHeld(roles.Latest())
		switch {
		case st.Held:
			// Held, so the node will run: what it left stays (the role
			// is only blocked), and runNode marks the machine dirty.
			retry, retryAt, leftNote = 0, time.Time{}, ""
		case (w.dirty || w.leftToRemove(keepNetwork)) && !time.Now().Before(retryAt):
			// Whenever the role is not held, however the last run ended
			// (or in an agent before this one): the runs' subtrees have
			// stopped, so nothing of the node runs any more.
			if err := w.removeLeftovers(ctx, keepNetwork); err != nil {
				retry = min(max(2*retry, w.leftoversRetry), leftoversRetryMax)
				retryAt, leftNote = time.Now().Add(retry), truncateNote(fmt.Sprintf(noteLeftovers, retry, err))
			} else {
				retry, retryAt, leftNote = 0, time.Time{}, ""
			}
		}
		if w.routesWanted(roles.Latest(), podRange.Latest()) && !w.dirty && !w.leftToRemove(true) {
			log.Info("routing to the workers' Pods for KubernetesController", zap.Stringer("because", why), zap.Stringer("podRange", podRange.Latest()))
			return w.runRoutes(ctx, podRange.Latest())
		}
		if !st.Held {
			st.Note = leftNote
			if st.Note == "" && keepNetwork && !podRange.Latest().IsValid() {
				st.Note = noteNoRoutesRange
			}
		}
		log.Info("not running the Kubernetes node", zap.Stringer("because", why), zap.Bool("held", st.Held), zap.String("note", st.Note))
		w.status.Set(st)
		supervisor.Signal(ctx, supervisor.SignalHealthy)
	}
}

// cleanupStep is one thing running the role leaves on the machine, and
// how to remove it: idempotent, finding nothing to remove is no error.
type cleanupStep struct {
	name string
	// gate: the steps after it wait until it succeeds.
	gate bool
	// podNetwork marks the pod network's step: a node that routes to
	// Pods for KubernetesController alone (runRoutes) keeps it.
	podNetwork bool
	run        func(ctx context.Context) error
}

// leftoverSteps are what running the role on rt leaves on the machine once
// the node has stopped, in the order they are removed: none without a
// runtime (a process-mode node runs no Pods, and the machine's network is
// not its own). The node's cgroup must be empty first: the rest would pull
// the network from under Pods that still ran. The pod network's device
// and routes (kept across an agent's restart), kube-proxy's nftables
// tables (which would go on sending ClusterIPs to Pods long gone) and
// portmap's, the Pods' bridge with its gateway address and route, and
// CNI's state (host-local's reservations, cached results): Pods are
// killed through their cgroup, so CNI DEL never ran for them.
func leftoverSteps(rt *KubernetesRuntime) []cleanupStep {
	if rt == nil {
		return nil
	}
	return []cleanupStep{
		{name: "the Kubernetes node's processes", gate: true, run: func(context.Context) error { return nodeStopped(rt.Cgroup) }},
		{name: "the pod network's WireGuard device and routes", podNetwork: true, run: func(context.Context) error { return clusternet.Clear(clusternet.Config{}) }},
		{name: "the nftables tables of kube-proxy and host ports", run: func(ctx context.Context) error {
			return proxy.DeleteTables(ctx, rt.BinDir, append(proxy.Tables(), kubelet.HostPortTable))
		}},
		{name: "the Pods' bridge " + kubelet.Bridge, run: func(context.Context) error { return kubelet.DeleteBridge() }},
		{name: "the Pods' CNI state", run: func(context.Context) error { return kubelet.RemoveCNIState(kubelet.CNIStateDir) }},
	}
}

// nodeStopped fails while processes are left in the Kubernetes node's
// cgroup (kubelet.Config.Cgroup; none in tests): the runner's stop killed
// them all, and the kernel's word for it is checked, not assumed.
func nodeStopped(cgroup string) error {
	if cgroup == "" {
		return nil
	}
	populated, err := cgroupdir.Populated(cgroup)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil
	case err != nil:
		return err
	case populated:
		return fmt.Errorf("processes are left in %s", cgroup)
	}
	return nil
}

// removeLeftovers removes what the role left (w.left, taken from
// w.leftovers when the machine is dirty), each step in turn, and keeps
// those that failed (and the ones after a failed gate) for the next try;
// it returns the failures, each with its step's name. With keepNetwork
// (the node routes to Pods for KubernetesController, and takes the pod
// network over as it is) the pod network's step is kept, not run, for
// when the node no longer routes.
func (w *workerKubernetesWorker) removeLeftovers(ctx context.Context, keepNetwork bool) error {
	log := supervisor.Logger(ctx)
	if w.dirty {
		w.left, w.dirty = slices.Clone(w.leftovers), false
	}
	var failed []cleanupStep
	var errs []error
	for i, s := range w.left {
		if keepNetwork && s.podNetwork {
			failed = append(failed, s)
			continue
		}
		err := s.run(ctx)
		if err == nil {
			log.Info("removed what the KubernetesWorker role left", zap.String("what", s.name))
			continue
		}
		log.Warn("removing what the KubernetesWorker role left", zap.String("what", s.name), zap.Error(err))
		failed = append(failed, s)
		errs = append(errs, fmt.Errorf("%s: %w", s.name, err))
		if s.gate {
			failed = append(failed, w.left[i+1:]...)
			break
		}
	}
	w.left = failed
	return errors.Join(errs...)
}

// blocked says why a held KubernetesWorker cannot run now; "" if it can
// (or is not held).
func (w *workerKubernetesWorker) blocked(held bool, m *ClusterMembership, labels map[string]string, podRange netip.Prefix) string {
	rt := w.cfg.Runtime
	switch {
	case !held:
		return ""
	case rt == nil:
		return noteNoRuntime
	case !w.cgroupV2(rt.cgroupMount()):
		return truncateNote(fmt.Sprintf(noteNoCgroupV2, rt.cgroupMount()))
	case w.cfg.Bundle == "":
		return noteNoKubelet
	case !hasCurator(m):
		return noteNoCurator
	case labels == nil:
		return noteNoLabels
	case !podRange.IsValid():
		// The curator gives it with the role; Pods need it before the
		// kubelet starts.
		return notePodRange
	}
	return ""
}

// leftToRemove says whether steps are left to remove (w.left), not
// counting the pod network's with keepNetwork.
func (w *workerKubernetesWorker) leftToRemove(keepNetwork bool) bool {
	return slices.ContainsFunc(w.left, func(s cleanupStep) bool { return !keepNetwork || !s.podNetwork })
}

// routesHeld says whether the node holds what routing to Pods for
// KubernetesController needs but for a pod range (routesWanted): it then
// keeps the pod network it has, and waits for its range.
func (w *workerKubernetesWorker) routesHeld(roles *cpb.Roles) bool {
	return roles.GetKubernetesWorker() == nil && roles.GetKubernetesController() != nil && w.cfg.Runtime != nil
}

// routesWanted says whether the node, not holding KubernetesWorker, routes
// to the workers' Pods all the same (runRoutes): it holds
// KubernetesController, whose apiserver calls webhooks, aggregated APIs
// and pods' and services' proxies served by Pods, has a container runtime
// (which is to say the machine's network is the node's own: a VM node),
// and has a pod range from the curator, whose first address is its end
// of the tunnel (clusternet's tunnelAddress).
func (w *workerKubernetesWorker) routesWanted(roles *cpb.Roles, podRange netip.Prefix) bool {
	return w.routesHeld(roles) && podRange.IsValid()
}

// runRoutes runs the pod network alone (clusternet.Run as a child,
// "podnetwork"), for a node that holds KubernetesController without
// KubernetesWorker (routesWanted): routes to every worker's pod range,
// over WireGuard from the first address of the node's own range, so that
// the apiserver here reaches Pods and Pods' answers come back to it; the
// workers route the node's range to it in turn. No Pod runs here, so no
// egress rule is written. It reports the pod network in the status
// (Held false, PodRoutes set) until routesWanted no longer holds or the
// pod range changes; it then returns errKubernetesWorkerStop, and what it
// set up stays for runNode to take over, or for the next run to remove.
func (w *workerKubernetesWorker) runRoutes(ctx context.Context, podRange netip.Prefix) error {
	w.runningPodRange = podRange
	// Whatever happens from here, the pod network may be the node's to
	// remove once it no longer routes.
	w.dirty = true
	log := supervisor.Logger(ctx)
	key, err := w.loadKey(&KubernetesWorkerStatus{PodRoutes: true})
	if err != nil {
		return err
	}
	// Until the next run says otherwise: the routes' child has stopped.
	supervisor.Cleanup(ctx, func() { w.status.Set(&KubernetesWorkerStatus{PodRoutes: true, Note: noteStopped}) })
	// No Pods here: no egress rule (ClusterPodRange unset).
	netStatus, err := w.startPodNetwork(ctx, clusternet.Config{PrivateKey: key, PodCIDR: podRange, MTU: w.podMTU(log)})
	if err != nil {
		return err
	}
	supervisor.Signal(ctx, supervisor.SignalHealthy)
	in := w.Inputs()
	defer in.Close()
	roles := Input(in, w.localRoles, notNil)
	podRanges := Input(in, w.podRange, nil)
	podNetwork := Input(in, event.ValueWatch[*clusternet.Status](netStatus), nil)
	for {
		why, err := in.Wait(ctx)
		if err != nil {
			return err
		}
		if r := podRanges.Latest(); !w.routesWanted(roles.Latest(), r) || r != podRange {
			log.Info("no longer routing to Pods for KubernetesController alone", zap.Stringer("because", why), zap.Stringer("podRange", r))
			return errKubernetesWorkerStop
		}
		w.status.Set(routesStatus(podNetwork.Latest()))
	}
}

// routesStatus is the status of a node that routes to Pods for
// KubernetesController alone (runRoutes), from what the pod network says
// (nil until its first attempt).
func routesStatus(net *clusternet.Status) *KubernetesWorkerStatus {
	return &KubernetesWorkerStatus{PodRoutes: true, NetworkPeers: net.PeerIDs(), NetworkInSync: net != nil && net.InSync, Note: truncateNote(podNetworkNote(net))}
}

// podNetworkNote says why the pod network (nil until its first attempt)
// is not in line with the peers; "" when it is.
func podNetworkNote(net *clusternet.Status) string {
	switch {
	case net == nil:
		return "the pod network has not configured the kernel yet"
	case net.LastError != "":
		return "the pod network is not in line with the peers: " + net.LastError
	}
	return ""
}

// podMTU is the MTU of the WireGuard device and of every Pod on this node:
// the cluster link's less WireGuard's overhead, so that a Pod's packet to
// another node crosses the tunnel whole, and a larger link (jumbo frames)
// carries larger packets. clusternet's default (a 1500-byte link's) when
// the link is not found.
func (w *workerKubernetesWorker) podMTU(log *zap.Logger) int {
	link, err := w.linkMTU(w.address)
	if err != nil {
		log.Warn("the cluster link's MTU is unknown: the pod network takes the default", zap.Int("mtu", clusternet.DefaultMTU), zap.Error(err))
		return clusternet.DefaultMTU
	}
	mtu := clusternet.TunnelMTU(link)
	log.Info("pod network MTU", zap.Int("mtu", mtu), zap.Int("clusterLinkMTU", link))
	return mtu
}

// startPodNetwork runs the pod network (w.runPodNetwork) as the child
// "podnetwork" with c, given the node's address, the peers and a status
// value of its own, which it returns: nil until the pod network's first
// attempt.
func (w *workerKubernetesWorker) startPodNetwork(ctx context.Context, c clusternet.Config) (*memory.Value[*clusternet.Status], error) {
	netStatus := &memory.Value[*clusternet.Status]{Name: clusternet.StatusName}
	netStatus.Set(nil)
	c.Address, c.Peers, c.Status = w.address, w.peers, netStatus
	if err := supervisor.Run(ctx, "podnetwork", func(ctx context.Context) error { return w.runPodNetwork(ctx, c) }); err != nil {
		return nil, err
	}
	return netStatus, nil
}

// loadKey loads the pod network's WireGuard key (made if there is none);
// when it cannot be used, the status becomes st with a note naming the
// key file and what is wrong, and the error says so too.
func (w *workerKubernetesWorker) loadKey(st *KubernetesWorkerStatus) (clusternet.Key, error) {
	key, err := clusternet.LoadOrCreateKey(w.keyFile)
	if err != nil {
		note := err.Error()
		if !strings.Contains(note, w.keyFile) {
			note = w.keyFile + ": " + note
		}
		st.Note = truncateNote(noteNoKey + note)
		w.status.Set(st)
		return key, fmt.Errorf("the pod network's WireGuard key: %w", err)
	}
	return key, nil
}

// runNode asks the curator for credentials, runs the Kubernetes node as a
// child ("node") and reports its status until the role goes; it then
// returns errKubernetesWorkerStop.
func (w *workerKubernetesWorker) runNode(ctx context.Context, m0 *ClusterMembership, labels map[string]string, podRange netip.Prefix) error {
	w.runningPodRange = podRange
	log := supervisor.Logger(ctx)
	// The pod network's key, before anything starts: a key that cannot be
	// used would end the run once containerd and the kubelet run, and
	// every retry would kill every container. Nothing runs until it can
	// be (a file an operator must mend: the supervisor's backoff retries).
	key, err := w.loadKey(&KubernetesWorkerStatus{Held: true})
	if err != nil {
		return err
	}
	w.status.Set(&KubernetesWorkerStatus{Held: true, Note: noteStarting})
	keys, err := newKubeletKeys()
	if err != nil {
		return err
	}
	issued, err := w.issue(ctx, m0, keys)
	if err != nil {
		w.status.Set(&KubernetesWorkerStatus{Held: true, Note: truncateNote(noteCredentials + err.Error())})
		return err
	}
	rt := w.cfg.Runtime
	podMTU := w.podMTU(log)
	runner, err := kubelet.New(kubelet.Config{
		Bundle:        w.cfg.Bundle,
		BinDir:        rt.BinDir,
		CNIBinDir:     rt.CNIBinDir,
		PauseImage:    rt.PauseImage,
		PauseImageRef: rt.PauseImageRef,
		StateDir:      rt.StateDir,
		RunDir:        rt.RunDir,
		Cgroup:        rt.Cgroup,
		NodeName:      issued.nodeName,
		NodeIP:        w.address,
		PodCIDR:       podRange,
		PodMTU:        podMTU,
		Labels:        kubelet.NodeLabels(labels),
		ClusterDNS:    []netip.Addr{w.address},
		Credentials:   issued.creds,
		APIServers:    issued.servers,
		ProxyPort:     rt.ProxyPort,
		Registries:    rt.Registries,
	})
	if err != nil {
		w.status.Set(&KubernetesWorkerStatus{Held: true, Note: truncateNote("not available: " + err.Error())})
		return err
	}
	// Whatever ends the run from here, the status says so once the
	// runner's subtree (kubelet, containers, containerd) has stopped; a
	// start that failed before keeps the note that says why. What the
	// node leaves on the machine (the pod network, nftables tables, the
	// bridge, CNI's state) stays while the role is held; the next run
	// that finds it gone removes it (removeLeftovers).
	held := true
	supervisor.Cleanup(ctx, func() {
		st := &KubernetesWorkerStatus{Held: held, Note: noteStopped}
		if !held {
			st.Note = noteRemoving
		}
		w.status.Set(st)
	})
	w.dirty = true
	if err := supervisor.Run(ctx, "node", runner.Run); err != nil {
		return err
	}
	// The routes to the other workers' Pods, over WireGuard: beside the
	// kubelet, for as long as it runs, with the node's own range (a
	// changed range ends this run below).
	netStatus, err := w.startPodNetwork(ctx, clusternet.Config{PrivateKey: key, PodCIDR: podRange, ClusterPodRange: w.runningClusterPodRange, MTU: podMTU})
	if err != nil {
		return err
	}
	services, err := w.nodeServices(issued)
	if err != nil {
		w.status.Set(&KubernetesWorkerStatus{Held: true, Note: truncateNote("not available: " + err.Error())})
		return err
	}
	for _, sv := range []*nodeService{services.proxy, services.dns} {
		if err := supervisor.Run(ctx, sv.spec.Name, sv.runner.Run); err != nil {
			return err
		}
	}
	supervisor.Signal(ctx, supervisor.SignalHealthy)

	in := w.Inputs()
	defer in.Close()
	roles := Input(in, w.localRoles, notNil)
	m := Input(in, w.membership, nil)
	nodeLabels := Input(in, w.localLabels, nil)
	runnerStatus := Input(in, runner.Status(), nil)
	podRanges := Input(in, w.podRange, nil)
	proxyStatus := Input(in, services.proxy.runner.Status(), nil)
	dnsStatus := Input(in, services.dns.runner.Status(), nil)
	podNetwork := Input(in, event.ValueWatch[*clusternet.Status](netStatus), nil)
	renewAt, lastAsked := issued.renewAt, time.Now()
	for {
		// With no apiserver answering, the list may be stale (controller
		// nodes replaced): ask the curator again, at most every
		// renewRetry.
		next := renewAt
		if early, s := lastAsked.Add(w.retry), runnerStatus.Latest(); s != nil && s.NoAPIServer && early.Before(next) {
			next = early
		}
		why, ok, err := waitUntil(ctx, in, next)
		if err != nil {
			return err
		}
		if !ok {
			renewAt, lastAsked = w.renew(ctx, m.Latest(), keys, runner, services, renewAt), time.Now()
			continue
		}
		if roles.Latest().GetKubernetesWorker() == nil {
			held = false
			log.Info("KubernetesWorker removed", zap.Stringer("because", why))
			return errKubernetesWorkerStop
		}
		if podRanges.Latest() != podRange {
			// Only a record deleted and made again changes it; the
			// Pods' addresses and the CNI configuration must follow.
			log.Info("the pod range changed", zap.Stringer("from", podRange), zap.Stringer("to", podRanges.Latest()))
			return errKubernetesWorkerStop
		}
		// Nil: not known for now (the curator unreachable); the Node
		// keeps the labels it has.
		if nodeLabels.Changed() && nodeLabels.Latest() != nil {
			runner.SetLabels(kubelet.NodeLabels(nodeLabels.Latest()))
		}
		w.status.Set(workerStatus(runnerStatus.Latest(), proxyStatus.Latest(), dnsStatus.Latest(), podNetwork.Latest()))
	}
}

// renew asks the curator for credentials and the apiservers' list; it
// returns when to renew next. When the credentials are due (renewAt has
// passed), the fresh ones go to the runner and the node services, which
// restarts them. Before that (an early ask, for the list while no
// apiserver answers) only the list goes to the runner's proxy: the
// kubelet, kube-proxy and the DNS server keep running on credentials good
// past renewAt, which is unchanged, since a restarted kubelet has no Pod
// specs until an apiserver answers (it would stop restarting crashed
// containers and running probes for as long as none does).
func (w *workerKubernetesWorker) renew(ctx context.Context, m *ClusterMembership, keys *kubeletKeys, runner *kubelet.Runner, services *nodeServices, renewAt time.Time) time.Time {
	log := supervisor.Logger(ctx)
	due := !time.Now().Before(renewAt)
	// A failed renewal is tried again after retry; a failed early ask
	// leaves renewAt as it was (the next early ask is lastAsked's).
	failed := renewAt
	if due {
		failed = time.Now().Add(w.retry)
	}
	if !hasCurator(m) {
		log.Warn("cannot ask the curator for the kubelet's credentials: no curator", zap.Bool("due", due))
		return failed
	}
	issued, err := w.issue(ctx, m, keys)
	switch {
	case err != nil:
	case !due:
		err = runner.SetAPIServers(issued.servers)
	default:
		err = runner.Renew(issued.creds, issued.servers)
		if err == nil {
			err = services.renew(w, issued)
		}
	}
	if err != nil {
		log.Warn("asking the curator for the kubelet's credentials", zap.Bool("due", due), zap.Error(err))
		return failed
	}
	if !due {
		log.Info("followed the curator's list of apiservers; the credentials are not due yet", zap.Stringers("apiservers", issued.servers), zap.Time("renewAt", renewAt))
		return renewAt
	}
	log.Info("renewed the kubelet's credentials", zap.Time("next", issued.renewAt))
	return issued.renewAt
}

// workerStatus is the role's status from what the runners and the pod
// network (nil until its first attempt) say.
func workerStatus(s *kubelet.Status, proxy, dns *nodeservice.Status, net *clusternet.Status) *KubernetesWorkerStatus {
	st := &KubernetesWorkerStatus{Held: true, ContainerdRunning: s.ContainerdRunning, KubeletRunning: s.KubeletRunning, NodeReady: s.NodeReady,
		ProxyRunning: proxy != nil && proxy.Running, DNSRunning: dns != nil && dns.Running,
		NetworkPeers: net.PeerIDs(), NetworkInSync: net != nil && net.InSync}
	switch {
	case s.Note != "":
		st.Note = s.Note
	case !st.ProxyRunning:
		st.Note = "kube-proxy does not run: " + proxy.Note
	case !st.DNSRunning:
		st.Note = "the DNS server does not run: " + dns.Note
	case !s.NodeReady:
		st.Note = s.NodeNote
	default:
		st.Note = podNetworkNote(net)
	}
	st.Note = truncateNote(st.Note)
	return st
}

// kubeletKeys are the kubelet's private keys, made by the worker and kept
// in memory: the curator signs their public halves.
type kubeletKeys struct {
	client, serving *ecdsa.PrivateKey
	// proxy and dns are kube-proxy's and the DNS server's client keys.
	proxy, dns *ecdsa.PrivateKey
}

func newKubeletKeys() (*kubeletKeys, error) {
	var ks [4]*ecdsa.PrivateKey
	for i := range ks {
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return nil, err
		}
		ks[i] = k
	}
	return &kubeletKeys{client: ks[0], serving: ks[1], proxy: ks[2], dns: ks[3]}, nil
}

// issuedCredentials is the curator's answer, ready for the runner.
type issuedCredentials struct {
	nodeName string
	creds    kubelet.Credentials
	// proxy and dns are kube-proxy's and the DNS server's client
	// certificate and key (PEM).
	proxy, dns pki.Pair
	servers    []netip.AddrPort
	renewAt    time.Time
}

// issue asks the curator for the kubelet's credentials.
func (w *workerKubernetesWorker) issue(ctx context.Context, m *ClusterMembership, keys *kubeletKeys) (*issuedCredentials, error) {
	clientPub, err := x509.MarshalPKIXPublicKey(&keys.client.PublicKey)
	if err != nil {
		return nil, err
	}
	servingPub, err := x509.MarshalPKIXPublicKey(&keys.serving.PublicKey)
	if err != nil {
		return nil, err
	}
	proxyPub, err := x509.MarshalPKIXPublicKey(&keys.proxy.PublicKey)
	if err != nil {
		return nil, err
	}
	dnsPub, err := x509.MarshalPKIXPublicKey(&keys.dns.PublicKey)
	if err != nil {
		return nil, err
	}
	cctx, cancel := context.WithTimeout(ctx, rpcTimeout)
	defer cancel()
	resp, err := cpb.NewCuratorServiceClient(m.Curator).IssueKubeletCredentials(cctx, &cpb.IssueKubeletCredentialsRequest{ClientKeySpki: clientPub, ServingKeySpki: servingPub, ProxyKeySpki: proxyPub, DnsKeySpki: dnsPub})
	if err != nil {
		return nil, fmt.Errorf("IssueKubeletCredentials: %w", err)
	}
	clientKey, err := x509.MarshalECPrivateKey(keys.client)
	if err != nil {
		return nil, err
	}
	servingKey, err := x509.MarshalECPrivateKey(keys.serving)
	if err != nil {
		return nil, err
	}
	client, err := x509.ParseCertificate(resp.ClientCertificate)
	if err != nil {
		return nil, fmt.Errorf("the kubelet's client certificate from the curator: %w", err)
	}
	if len(resp.ProxyCertificate) == 0 || len(resp.DnsCertificate) == 0 {
		return nil, errors.New("the curator issued no certificates for kube-proxy and the DNS server (a curator older than this node?)")
	}
	proxyKey, err := x509.MarshalECPrivateKey(keys.proxy)
	if err != nil {
		return nil, err
	}
	dnsKey, err := x509.MarshalECPrivateKey(keys.dns)
	if err != nil {
		return nil, err
	}
	out := &issuedCredentials{
		nodeName: resp.NodeName,
		creds: kubelet.Credentials{
			CA:          pemBlock("CERTIFICATE", resp.CaCertificate),
			ClientCert:  pemBlock("CERTIFICATE", resp.ClientCertificate),
			ClientKey:   pemBlock("EC PRIVATE KEY", clientKey),
			ServingCert: pemBlock("CERTIFICATE", resp.ServingCertificate),
			ServingKey:  pemBlock("EC PRIVATE KEY", servingKey),
		},
		proxy:   pki.Pair{Cert: pemBlock("CERTIFICATE", resp.ProxyCertificate), Key: pemBlock("EC PRIVATE KEY", proxyKey)},
		dns:     pki.Pair{Cert: pemBlock("CERTIFICATE", resp.DnsCertificate), Key: pemBlock("EC PRIVATE KEY", dnsKey)},
		renewAt: client.NotBefore.Add(client.NotAfter.Sub(client.NotBefore) / 2),
	}
	if out.nodeName != m.Credentials.NodeID {
		return nil, fmt.Errorf("the curator issued kubelet credentials for %q, not for this node (%s)", out.nodeName, m.Credentials.NodeID)
	}
	for _, s := range resp.ApiServers {
		addr, err := netip.ParseAddr(s.Address)
		if err != nil || s.Port == 0 || s.Port > 65535 {
			return nil, fmt.Errorf("the curator named apiserver %s:%d, which is no address and port", s.Address, s.Port)
		}
		out.servers = append(out.servers, netip.AddrPortFrom(addr, uint16(s.Port)))
	}
	return out, nil
}

func pemBlock(typ string, der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})
}

// nodeService is one node service's spec and runner.
type nodeService struct {
	spec   nodeservice.Spec
	runner *nodeservice.Runner
}

// nodeServices are the services every worker node runs beside the
// kubelet, reaching the apiservers through the kubelet's local proxy.
type nodeServices struct {
	proxy, dns *nodeService
}

// nodeServiceSpecs renders the services' specs for issued credentials.
func (w *workerKubernetesWorker) nodeServiceSpecs(issued *issuedCredentials) (proxySpec, dnsSpec nodeservice.Spec, err error) {
	rt := w.cfg.Runtime
	server := "https://localhost:" + strconv.Itoa(int(cmp.Or(rt.ProxyPort, kubelet.DefaultProxyPort)))
	proxySpec, err = proxy.Config{
		Bundle: w.cfg.Bundle, BinDir: rt.BinDir, Dir: filepath.Join(rt.RunDir, proxy.Name),
		// The node's own range as "the cluster's": kube-proxy treats
		// traffic from it as local and does not masquerade it, so a
		// Pod's connection to a Service reaches an endpoint on another
		// node with the Pod's own address, which that node's WireGuard
		// peer entry accepts; the node's address would be dropped there.
		// Traffic from other nodes' Pods never passes this node's
		// Service rules.
		NodeName: issued.nodeName, NodeIP: w.address, ClusterCIDR: w.proxyClusterCIDR(),
		Server: server, CA: issued.creds.CA, Cert: issued.proxy.Cert, Key: issued.proxy.Key,
	}.Spec()
	if err != nil {
		return proxySpec, dnsSpec, err
	}
	dnsSpec, err = dns.Config{
		Binary: filepath.Join(rt.BinDir, "polis-coredns"), Dir: filepath.Join(rt.RunDir, dns.Name), NodeIP: w.address,
		Server: server, CA: issued.creds.CA, Cert: issued.dns.Cert, Key: issued.dns.Key,
	}.Spec()
	if rt.ServicesCgroup != "" {
		proxySpec.Cgroup = filepath.Join(rt.ServicesCgroup, proxySpec.Name)
		dnsSpec.Cgroup = filepath.Join(rt.ServicesCgroup, dnsSpec.Name)
	}
	return proxySpec, dnsSpec, err
}

// nodeServices makes the services' runners.
func (w *workerKubernetesWorker) nodeServices(issued *issuedCredentials) (*nodeServices, error) {
	proxySpec, dnsSpec, err := w.nodeServiceSpecs(issued)
	if err != nil {
		return nil, err
	}
	out := &nodeServices{}
	for _, x := range []struct {
		spec nodeservice.Spec
		to   **nodeService
	}{{proxySpec, &out.proxy}, {dnsSpec, &out.dns}} {
		r, err := nodeservice.New(x.spec)
		if err != nil {
			return nil, err
		}
		*x.to = &nodeService{spec: x.spec, runner: r}
	}
	return out, nil
}

// renew hands the services their new credentials (which restarts them).
func (s *nodeServices) renew(w *workerKubernetesWorker, issued *issuedCredentials) error {
	proxySpec, dnsSpec, err := w.nodeServiceSpecs(issued)
	if err != nil {
		return err
	}
	if err := s.proxy.runner.Renew(proxySpec.Files); err != nil {
		return err
	}
	return s.dns.runner.Renew(dnsSpec.Files)
}

// proxyClusterCIDR is kube-proxy's cluster range (whose sources' traffic
// to a Service it leaves unmasqueraded): the cluster's pod range, or
// this node's alone while the curator has not said the cluster's.
func (w *workerKubernetesWorker) proxyClusterCIDR() netip.Prefix {
	if w.runningClusterPodRange.IsValid() {
		return w.runningClusterPodRange
	}
	return w.runningPodRange
}
