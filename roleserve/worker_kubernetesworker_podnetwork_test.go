package roleserve

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	cpb "github.com/polis-os/polis/api/curator/v1"
	"github.com/polis-os/polis/clusternet"
	"github.com/polis-os/polis/internal/testutil"
	"github.com/polis-os/polis/kube/kubelet"
	"github.com/polis-os/polis/kube/nodeservice"
	"github.com/polis-os/polis/supervisor/supervisortest"
)

// The role's status says what the pod network did, after what the
// runners say: a process down or the Node not Ready comes first, then the
// pod network's failure; the proto carries the count of peers.
func TestWorkerStatusPodNetwork(t *testing.T) {
	up := &kubelet.Status{ContainerdRunning: true, KubeletRunning: true, NodeReady: true}
	running := &nodeservice.Status{Running: true}
	peers := []clusternet.Peer{{NodeID: "node-c"}, {NodeID: "node-b"}}
	for _, tc := range []struct {
		name     string
		kubelet  *kubelet.Status
		net      *clusternet.Status
		peers    []string
		inSync   bool
		wantNote string
	}{
		{"in sync", up, &clusternet.Status{InSync: true, Peers: peers}, []string{"node-b", "node-c"}, true, ""},
		{"not started", up, nil, nil, false, "the pod network has not configured the kernel yet"},
		{"failed", up, &clusternet.Status{Peers: peers, LastError: "setting route: injected"}, []string{"node-b", "node-c"}, false, "the pod network is not in line with the peers: setting route: injected"},
		{"Node not Ready first", &kubelet.Status{ContainerdRunning: true, KubeletRunning: true, NodeNote: "not Ready"}, &clusternet.Status{LastError: "x"}, []string{}, false, "not Ready"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := workerStatus(tc.kubelet, running, running, tc.net)
			if !slices.Equal(st.NetworkPeers, tc.peers) || st.NetworkInSync != tc.inSync || st.Note != tc.wantNote {
				t.Errorf("status %+v; want peers %v, in sync %v, note %q", st, tc.peers, tc.inSync, tc.wantNote)
			}
			p := kubernetesProto(nil, st)
			if p.GetNetworkPeers() != uint32(len(tc.peers)) || p.GetNetworkInSync() != tc.inSync {
				t.Errorf("proto %v; want %d peers, in sync %v", p, len(tc.peers), tc.inSync)
			}
			if s := st.String(); len(tc.peers) > 0 && !strings.Contains(s, strings.Join(tc.peers, ", ")) {
				t.Errorf("String() %q does not name the peers %v", s, tc.peers)
			}
		})
	}
}

// The pod network's MTU is the cluster link's less WireGuard's overhead;
// with no link found for the node's address (a node whose address moved,
// a test machine), clusternet's default, and a warning that says why.
func TestPodMTUFromClusterLink(t *testing.T) {
	w := &workerKubernetesWorker{address: kubeAddr}
	w.linkMTU = func(netip.Addr) (int, error) { return 1500, nil }
	if got := w.podMTU(zap.NewNop()); got != 1420 {
		t.Errorf("a 1500-byte link gives the pod network %d, want 1420", got)
	}
	core, logs := observer.New(zap.WarnLevel)
	w.linkMTU = func(a netip.Addr) (int, error) { return 0, fmt.Errorf("no link holds address %v", a) }
	if got := w.podMTU(zap.New(core)); got != clusternet.DefaultMTU {
		t.Errorf("with no link found, the pod network gets %d, want the default %d", got, clusternet.DefaultMTU)
	}
	if logs.FilterMessageSnippet("MTU is unknown").Len() != 1 {
		t.Errorf("no warning says the link's MTU is unknown: %v", logs.All())
	}
}

// A node holding KubernetesController without KubernetesWorker routes to
// the workers' Pods: it removes what an earlier worker role left but for
// the pod network, which it runs alone from its own range (no egress
// rule: no Pods here), reports the peers, and once the controller role
// goes the pod network stops and is removed too.
func TestKubernetesWorkerRoutesForController(t *testing.T) {
	w, v := leftoversWorker(t, "")
	var log stepLog
	network := log.step("pod network", false, nil)
	network.podNetwork = true
	w.leftovers = []cleanupStep{log.step("stopped", true, nil), network, log.step("tables", false, nil)}
	netCfgs := make(chan clusternet.Config, 1)
	var netStopped atomic.Int32
	w.runPodNetwork = func(ctx context.Context, c clusternet.Config) error {
		netCfgs <- c
		<-ctx.Done()
		netStopped.Add(1)
		return ctx.Err()
	}
	supervisortest.Harness(t, w.run)
	v.Membership.Set(nil)
	v.LocalLabels.Set(nil)
	v.LocalPodRange.Set(testPodRange)
	v.LocalRoles.Set(controllerRoles)

	var c clusternet.Config
	select {
	case c = <-netCfgs:
	case <-time.After(time.Minute):
		t.Fatal("the pod network did not start for a controller")
	}
	if c.PodCIDR != testPodRange || c.Address != kubeAddr || c.PrivateKey.IsZero() || c.ClusterPodRange.IsValid() || c.Peers == nil {
		t.Errorf("pod network config: range %v, address %v, key set %v, cluster range %v, peers %v; want %v, %v, a key, none (no egress rule), the peers' value",
			c.PodCIDR, c.Address, !c.PrivateKey.IsZero(), c.ClusterPodRange, c.Peers != nil, testPodRange, kubeAddr)
	}
	if got, want := log.get(), []string{"stopped", "tables"}; !slices.Equal(got, want) {
		t.Errorf("leftover steps before routing %v, want %v (the pod network kept)", got, want)
	}
	st := waitFor(t, &v.KubernetesWorker, "routing, not in sync yet", func(s *KubernetesWorkerStatus) bool { return s != nil && s.PodRoutes })
	if st.Held || !strings.Contains(st.Note, "has not configured the kernel yet") {
		t.Errorf("status %+v, want not held and the pod network not yet configured", st)
	}
	c.Status.Set(&clusternet.Status{InSync: true, Peers: []clusternet.Peer{{NodeID: "worker-b"}, {NodeID: "worker-a"}}})
	st = waitFor(t, &v.KubernetesWorker, "routing in sync", func(s *KubernetesWorkerStatus) bool { return s != nil && s.PodRoutes && s.NetworkInSync })
	if !slices.Equal(st.NetworkPeers, []string{"worker-a", "worker-b"}) || st.Note != "" {
		t.Errorf("status %+v, want both workers as peers and no note", st)
	}
	if s := st.String(); !strings.Contains(s, "routing to Pods for KubernetesController") || !strings.Contains(s, "worker-a, worker-b") {
		t.Errorf("String() %q does not say it routes, and to whom", s)
	}
	if p := kubernetesProto(nil, st); p.GetNetworkPeers() != 2 || !p.GetNetworkInSync() || p.GetKubeletRunning() {
		t.Errorf("reported %v, want two peers in sync", p)
	}

	// The controller role gone: the pod network stops, and is removed.
	v.LocalRoles.Set(noRoles)
	waitFor(t, &v.KubernetesWorker, "no role, nothing left", func(s *KubernetesWorkerStatus) bool { return s != nil && !s.Held && !s.PodRoutes && s.Note == "" })
	if netStopped.Load() != 1 {
		t.Errorf("pod network stopped %d times, want once", netStopped.Load())
	}
	if got := log.get(); !slices.Contains(got[2:], "pod network") {
		t.Errorf("leftover steps %v: the pod network was not removed after the role went", got)
	}
}

// Routing for a controller needs the role without KubernetesWorker's (which
// routes itself), a runtime (a machine whose network is the node's) and a
// pod range.
func TestRoutesWanted(t *testing.T) {
	rt := &KubernetesRuntime{BinDir: "/b"}
	both := &cpb.Roles{KubernetesController: &cpb.KubernetesControllerRole{}, KubernetesWorker: &cpb.KubernetesWorkerRole{}}
	for _, tc := range []struct {
		name  string
		roles *cpb.Roles
		rt    *KubernetesRuntime
		r     netip.Prefix
		want  bool
	}{
		{"controller", controllerRoles, rt, testPodRange, true},
		{"controller and worker", both, rt, testPodRange, false},
		{"worker", workerRoles, rt, testPodRange, false},
		{"neither", noRoles, rt, testPodRange, false},
		{"no runtime", controllerRoles, nil, testPodRange, false},
		{"no range", controllerRoles, rt, netip.Prefix{}, false},
	} {
		w := newWorkerKubernetesWorker(&Graph{}, NewValues(), KubernetesConfig{Runtime: tc.rt}, kubeAddr, "")
		if got := w.routesWanted(tc.roles, tc.r); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}

// At an agent's start on a controller, before the curator has said the
// node's range, the pod network the last agent left is kept (its routes
// outlive the restart) while the rest is removed; a step that fails holds
// the routes back, and if the role goes meanwhile, the pod network is
// removed with the rest.
func TestKubernetesWorkerControllerKeepsRoutesAcrossStart(t *testing.T) {
	w, v := leftoversWorker(t, "")
	var log stepLog
	var fixed atomic.Bool
	network := log.step("pod network", false, nil)
	network.podNetwork = true
	w.leftovers = []cleanupStep{log.step("stopped", true, nil), network, log.step("tables", false, failUntil(&fixed))}
	var netRuns atomic.Int32
	w.runPodNetwork = func(ctx context.Context, c clusternet.Config) error {
		netRuns.Add(1)
		<-ctx.Done()
		return ctx.Err()
	}
	supervisortest.Harness(t, w.run)
	v.Membership.Set(nil)
	v.LocalLabels.Set(nil)
	v.LocalPodRange.Set(netip.Prefix{})
	v.LocalRoles.Set(controllerRoles)

	waitFor(t, &v.KubernetesWorker, "the failed step in the status", func(s *KubernetesWorkerStatus) bool { return s != nil && strings.Contains(s.Note, "tables: injected") })
	// The range arrives while a step still fails: no routes yet.
	v.LocalPodRange.Set(testPodRange)
	testutil.Eventually(t, time.Minute, "the failed step tried again with the range known", func() error {
		if n := strings.Count(strings.Join(log.get(), ","), "tables"); n < 3 {
			return fmt.Errorf("tried %d times", n)
		}
		return nil
	})
	if n := netRuns.Load(); n != 0 {
		t.Errorf("the pod network ran %d times while a leftover step failed", n)
	}
	if slices.Contains(log.get(), "pod network") {
		t.Errorf("steps %v: the pod network was removed on a controller", log.get())
	}
	// The role goes before the routes ever ran: the pod network goes too.
	v.LocalRoles.Set(noRoles)
	fixed.Store(true)
	waitFor(t, &v.KubernetesWorker, "a clean status without the role", func(s *KubernetesWorkerStatus) bool { return s != nil && !s.PodRoutes && s.Note == "" })
	if !slices.Contains(log.get(), "pod network") {
		t.Errorf("steps %v: the pod network was not removed once the controller role went", log.get())
	}
}

// A controller whose key cannot be used routes nothing and says why; when
// the role goes, the pod network is removed all the same.
func TestKubernetesWorkerControllerBadKey(t *testing.T) {
	keyFile := filepath.Join(t.TempDir(), "wireguard.key")
	if err := os.WriteFile(keyFile, []byte("too short"), 0o600); err != nil {
		t.Fatal(err)
	}
	w, v := leftoversWorker(t, keyFile)
	var log stepLog
	network := log.step("pod network", false, nil)
	network.podNetwork = true
	w.leftovers = []cleanupStep{log.step("stopped", true, nil), network}
	w.runPodNetwork = func(ctx context.Context, c clusternet.Config) error {
		t.Error("the pod network ran without a usable key")
		return nil
	}
	supervisortest.Harness(t, w.run)
	v.Membership.Set(nil)
	v.LocalLabels.Set(nil)
	v.LocalPodRange.Set(testPodRange)
	v.LocalRoles.Set(controllerRoles)
	st := waitFor(t, &v.KubernetesWorker, "the key's failure in the status", func(s *KubernetesWorkerStatus) bool {
		return s != nil && s.PodRoutes && strings.HasPrefix(s.Note, noteNoKey)
	})
	if !strings.Contains(st.Note, keyFile) {
		t.Errorf("note %q does not name the key file", st.Note)
	}
	v.LocalRoles.Set(noRoles)
	waitFor(t, &v.KubernetesWorker, "a clean status without the role", func(s *KubernetesWorkerStatus) bool { return s != nil && !s.PodRoutes && s.Note == "" })
	if !slices.Contains(log.get(), "pod network") {
		t.Errorf("steps %v: the pod network was not removed once the controller role went", log.get())
	}
}
