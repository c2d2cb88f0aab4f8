package roletest

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"
	"google.golang.org/protobuf/proto"

	cpb "github.com/polis-os/polis/api/curator/v1"
	"github.com/polis-os/polis/consensus"
	"github.com/polis-os/polis/event"
	"github.com/polis-os/polis/internal/testutil"
	"github.com/polis-os/polis/kube/controlplane"
	"github.com/polis-os/polis/kube/kubetest"
	"github.com/polis-os/polis/kube/pki"
	"github.com/polis-os/polis/logring"
	"github.com/polis-os/polis/node/nodetest"
	"github.com/polis-os/polis/roleserve"
)

// TestMain fails the package if a goroutine outlives the tests.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, testutil.EtcdLeakOptions()...)
}

// subnets gives each test its own 127.87.N.0/24.
var subnets = testutil.Subnets{Octet: 87}

// waitTimeout bounds a wait for the control plane to change: seconds on
// an idle machine, much more on two cores busy compiling.
const waitTimeout = 5 * time.Minute

// components is every control-plane component, in the status' order.
var components = []string{controlplane.APIServer, controlplane.ControllerManager, controlplane.Scheduler}

// controller is one node agent bootstrapped with the bundle, then given
// KubernetesController (a new cluster's first node holds ConsensusMember
// only).
type controller struct {
	node   *nodetest.Node
	id     string
	bundle string
	mgmt   cpb.ManagementServiceClient
}

func startController(t testing.TB) *controller {
	t.Helper()
	bundle := kubetest.Bundle(t)
	c := nodetest.FormClusterWith(t, 1, &subnets, withBundle(t, bundle))
	ctl := &controller{node: c.Node(0), id: c.IDs[0], bundle: bundle, mgmt: c.Management}
	ctl.setRole(t, true)
	return ctl
}

// withBundle gives a node the bundle and a free apiserver port at its
// address.
func withBundle(t testing.TB, bundle string) func(*nodetest.Node) {
	return func(n *nodetest.Node) {
		n.KubernetesBundle = bundle
		n.KubernetesAPIServerPort = testutil.FreePort(t, n.Addr).Port()
	}
}

// waitKube waits until the node's Kubernetes status satisfies pred.
func (c *controller) waitKube(t testing.TB, what string, pred func(*roleserve.KubernetesStatus) bool) *roleserve.KubernetesStatus {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	st, err := event.Get(ctx, &c.node.Agent.Values().Kubernetes, event.Filter(pred))
	if err != nil {
		last, _ := event.Get(context.Background(), &c.node.Agent.Values().Kubernetes)
		t.Fatalf("waiting for Kubernetes to be %s: %v; last status: %v", what, err, last)
	}
	return st
}

// ready holds when every component runs and the apiserver is ready.
func ready(s *roleserve.KubernetesStatus) bool {
	return s != nil && s.Controller && s.Ready && slices.Equal(s.Running, components) && s.ControllerNote == ""
}

// stopped holds when the node no longer holds the role, which the worker
// publishes only once its components have stopped.
func stopped(s *roleserve.KubernetesStatus) bool { return s != nil && !s.Controller }

func (c *controller) setRole(t testing.TB, give bool) {
	t.Helper()
	if _, err := c.mgmt.UpdateNodeRoles(nodetest.Context(t), &cpb.UpdateNodeRolesRequest{NodeId: c.id, KubernetesController: proto.Bool(give)}); err != nil {
		t.Fatalf("UpdateNodeRoles(kubernetes_controller=%v): %v", give, err)
	}
}

// TestKubernetesController follows the role on one node: the bootstrapped
// node runs a ready control plane whose keys all sit in the Kubernetes
// namespace, reports it to the curator, restarts a killed apiserver, stops
// every process when the role goes, starts again when it comes back, and
// leaves no process when the node agent stops.
func TestKubernetesController(t *testing.T) {
	c := startController(t)
	st := c.waitKube(t, "ready", ready)
	t.Logf("running: %v", st)

	t.Run("keys", func(t *testing.T) { checkKeys(t, c) })
	t.Run("files", func(t *testing.T) { checkFiles(t, c) })
	t.Run("authorization", func(t *testing.T) { checkAuthorization(t, c, st) })

	// The component's lines reach the node's log under its name.
	for _, name := range components {
		logger := "root.roleserve.kubernetes.controlplane." + name
		if len(c.node.Logs.Backlog(logring.Filter{Runnable: logger})) == 0 {
			t.Errorf("no log line from %s", logger)
		}
	}

	// The curator knows, so polisctl node describe shows it.
	nodetest.Eventually(t, "the curator shows the running control plane", func() error {
		k := nodetest.ListNodes(t, c.mgmt)[c.id].GetStatus().GetKubernetes()
		if !k.GetApiserverReady() || !slices.Equal(k.GetRunning(), components) || k.GetApiserverPort() != uint32(c.node.KubernetesAPIServerPort) {
			return errors.New("status " + k.String())
		}
		return nil
	})

	// A killed apiserver is restarted by the worker and is ready again.
	pids := c.processes(t)
	old := pids[controlplane.APIServer]
	if len(old) != 1 {
		t.Fatalf("apiserver processes %v, want one", old)
	}
	if err := syscall.Kill(old[0], syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	c.waitKube(t, "without the killed apiserver", func(s *roleserve.KubernetesStatus) bool { return !s.Ready })
	c.waitKube(t, "ready again", ready)
	if now := c.processes(t)[controlplane.APIServer]; len(now) != 1 || now[0] == old[0] {
		t.Errorf("apiserver processes %v after pid %d was killed, want one new one", now, old[0])
	}

	// The role taken away: once the status says so, no process is left.
	running := c.processes(t)
	c.setRole(t, false)
	st = c.waitKube(t, "stopped", stopped)
	if left := c.processes(t); len(left) != 0 {
		t.Errorf("processes left after the role was taken away: %v", left)
	}
	for name, ps := range running {
		for _, pid := range ps {
			if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
				t.Errorf("%s (pid %d) is still there: %v", name, pid, err)
			}
		}
	}
	if len(st.Running) != 0 || st.Ready {
		t.Errorf("status %v after the role was taken away", st)
	}
	if _, err := os.Stat(filepath.Join(c.node.Dir, "storage", "ephemeral", "kubernetes", "etcd.sock")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the confined etcd socket outlived the role: %v", err)
	}

	// The role given back: ready again.
	start := time.Now()
	c.setRole(t, true)
	c.waitKube(t, "ready after the role came back", ready)
	t.Logf("role added → apiserver ready: %v", time.Since(start).Round(time.Millisecond))

	// The node agent stopped (its etcd stops with it): no process is left;
	// started again, it runs the control plane again from its saved roles.
	c.node.Stop()
	if left := c.processes(t); len(left) != 0 {
		t.Errorf("processes left after the node agent stopped: %v", left)
	}
	c.node.Start(t)
	c.waitKube(t, "ready after the node agent restarted", ready)
}

// checkKeys lists every key of the cluster's etcd: the apiserver's are all
// under /namespace/kubernetes//registry/, the PKI in the curator's
// namespace, and nothing outside the namespaces Polis uses.
func checkKeys(t *testing.T, c *controller) {
	l, err := event.Get(nodetest.Context(t), &c.node.Agent.Values().LocalControlPlane, event.Filter(func(l *roleserve.LocalControlPlane) bool { return l != nil }))
	if err != nil {
		t.Fatal(err)
	}
	st, err := event.Get(nodetest.Context(t), l.Consensus.Status(), event.Filter(consensus.IsVoter))
	if err != nil {
		t.Fatal(err)
	}
	// An unconfined client: the test looks at the whole key space.
	conn, err := st.ConnectionFor("test")
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	resp, err := conn.Client.Get(nodetest.Context(t), "\x00", clientv3.WithFromKey(), clientv3.WithKeysOnly())
	if err != nil {
		t.Fatal(err)
	}
	const kube = "/namespace/kubernetes/"
	var kubeKeys int
	var pkiStored bool
	for _, kv := range resp.Kvs {
		k := string(kv.Key)
		switch {
		case strings.HasPrefix(k, kube):
			kubeKeys++
			// The apiserver's own prefix (/registry) inside the namespace.
			if !strings.HasPrefix(k, kube+"/registry/") {
				t.Errorf("key %q in the Kubernetes namespace but outside the apiserver's prefix", k)
			}
		case strings.Contains(k, "registry"):
			t.Errorf("Kubernetes key %q outside the Kubernetes namespace", k)
		case k == "/namespace/curator/"+pki.StoreKey:
			pkiStored = true
		case strings.HasPrefix(k, "/consensus/"), strings.HasPrefix(k, "/namespace/curator/"):
		default:
			t.Errorf("key %q outside the namespaces Polis uses", k)
		}
	}
	if kubeKeys == 0 {
		t.Error("the apiserver stored nothing in the Kubernetes namespace")
	}
	if !pkiStored {
		t.Errorf("no Kubernetes PKI at /namespace/curator/%s", pki.StoreKey)
	}
	t.Logf("%d keys, %d of them the apiserver's", len(resp.Kvs), kubeKeys)
}

// checkFiles checks that the worker's directory is private and its
// secrets 0600.
func checkFiles(t *testing.T, c *controller) {
	dir := filepath.Join(c.node.Dir, "storage", "ephemeral", "kubernetes")
	err := filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		mode := fi.Mode()
		switch {
		case d.IsDir():
			if mode.Perm() != 0o700 {
				t.Errorf("%s has mode %v, want 0700", path, mode.Perm())
			}
		case pki.Secret(d.Name()) || mode.Type() == os.ModeSocket:
			if mode.Perm() != 0o600 {
				t.Errorf("%s has mode %v, want 0600", path, mode.Perm())
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// processes finds the bundle's processes that are children of this test
// process (the node agent runs in it), by component.
func (c *controller) processes(t testing.TB) map[string][]int {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	self := os.Getpid()
	found := map[string][]int{}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue // gone meanwhile
		}
		// The fields after the command's closing parenthesis: state, ppid.
		rest := string(stat[strings.LastIndexByte(string(stat), ')')+1:])
		f := strings.Fields(rest)
		if len(f) < 2 || f[1] != strconv.Itoa(self) {
			continue
		}
		cmdline, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err != nil {
			continue
		}
		args := strings.Split(string(cmdline), "\x00")
		if len(args) < 2 || args[0] != c.bundle {
			continue
		}
		found[args[1]] = append(found[args[1]], pid)
	}
	return found
}
