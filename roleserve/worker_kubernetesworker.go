package roleserve

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"time"

	"go.uber.org/zap"

	cpb "github.com/polis-os/polis/api/curator/v1"
	"github.com/polis-os/polis/clusternet"
	"github.com/polis-os/polis/event"
	"github.com/polis-os/polis/kube/dns"
	"github.com/polis-os/polis/kube/kubelet"
	"github.com/polis-os/polis/kube/nodeservice"
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
		// A failure to be retried, not "not available" (which says the
		// node cannot run the role at all: polisctl tells them apart).
		w.status.Set(&KubernetesWorkerStatus{Held: true, Note: truncateNote("failed: setting up the Kubernetes node: " + err.Error())})
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
		w.status.Set(&KubernetesWorkerStatus{Held: true, Note: truncateNote("failed: setting up kube-proxy and the DNS server: " + err.Error())})
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
