// Package vm_test runs Polis clusters of qemu VMs booting the node image,
// through the same launch API as the process suites.
//
// One cluster of three VMs, all consensus members, is shared by the
// suites, which run in order, each starting from a whole cluster (all
// UP, healthy, running curators) and leaving one: core (formation), HA
// (every node rebooted in turn under a writer), partition (the leader's
// node cut off from the others), cold start (every node powered off at
// once and started again); then recovery (recovery_test.go), which
// destroys two members for good and brings the cluster back on the
// third, and so runs last. Booting VMs under TCG is what takes time;
// sharing the cluster keeps the package to a few minutes. Every phase
// prints how long it took ("phase: ..."). HA and cold start are
// internal/clustertest's scenarios, which test/e2e runs on processes too
// (vmMode says what is done differently to VMs).
package vm_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc/status"

	cpb "github.com/polis-os/polis/api/curator/v1"
	"github.com/polis-os/polis/internal/clustertest"
	"github.com/polis-os/polis/internal/testutil"
	"github.com/polis-os/polis/launch"
	"github.com/polis-os/polis/launch/image"
	"github.com/polis-os/polis/node/pid1"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// needQEMU skips where qemu is missing, except in CI (CI=true), where
// scripts/test installs it and a missing qemu is a failure.
func needQEMU(t testing.TB) {
	t.Helper()
	if _, err := exec.LookPath("qemu-system-x86_64"); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("qemu-system-x86_64 is missing; scripts/test installs it: %v", err)
		}
		t.Skip("qemu-system-x86_64 is not installed (apt-get install qemu-system-x86)")
	}
}

type testLog struct{ t *testing.T }

func (l testLog) Write(b []byte) (int, error) {
	l.t.Log(strings.TrimRight(string(b), "\n"))
	return len(b), nil
}

// The curator's lease and the nodes' heartbeat interval, given to every
// VM on its kernel command line (launch.Options): a shorter heartbeat
// than the default makes a stale record lapse sooner.
const (
	leaseTTL          = 5 * time.Second
	heartbeatInterval = 2 * time.Second
)

// vmMode is how the scenarios of internal/clustertest, written once for
// processes and VMs, treat VMs: a reboot halts the VM (the launcher boots
// it again); a VM powered off leaves its disk images to search; a cluster
// that does not come whole shows the end of each console.
var vmMode = clustertest.Mode{Reboot: reboot, WhileOff: searchDisks, Stuck: logConsoleTails, LeaseTTL: leaseTTL}

func TestVMCluster(t *testing.T) {
	needQEMU(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	start := time.Now()
	img, err := image.Build(ctx, image.Config{
		SourceDir: "../..", Progress: testLog{t},
		// Every VM attaches the same read-only system disk, made from a
		// small tree here; its own output directory, so that another
		// package's build (launch/vm) does not replace the disk between
		// this build and the VMs opening it.
		SystemDir: systemTree(t),
		OutDir:    filepath.Join(cacheDir(t), "polis", "image", "out-test-vm"),
	})
	if err != nil {
		t.Fatal(err)
	}
	clustertest.Phase(t, start, "image ready (reused: %v)", img.Reused)

	start = time.Now()
	c, err := launch.Launch(ctx, launch.Options{
		Nodes:             3,
		ConsensusMembers:  true,
		LeaseTTL:          leaseTTL,
		HeartbeatInterval: heartbeatInterval,
		VM:                &launch.VMOptions{Image: img},
		// A first boot formats the encrypted data disk: every write
		// through AES, emulated under TCG, two VMs at once on a loaded
		// machine (docs/benchmarks.md); the default 2 minutes a step
		// was too short at load 27.
		StepTimeout: 4 * time.Minute,
		Progress:    testLog{t},
		Keep:        os.Getenv("POLIS_KEEP") != "",
	})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := c.Close(); err != nil {
			t.Errorf("closing the cluster: %v", err)
		}
	}()
	clustertest.Phase(t, start, "3 VMs from the first qemu start to all UP and healthy, consensus members included")

	if !t.Run("core", func(t *testing.T) { testCore(ctx, t, c); testPrepared(t, c, img) }) {
		t.FailNow()
	}
	// Each suite leaves a whole cluster behind, or the next cannot start.
	for _, s := range []struct {
		name string
		f    func(context.Context, *testing.T, *launch.Cluster)
	}{{"HA", vmMode.HA}, {"partition", testPartition}, {"cold-start", vmMode.ColdStart}, {"recovery", func(ctx context.Context, t *testing.T, c *launch.Cluster) {
		testRecovery(ctx, t, c, img)
	}}} {
		if !t.Run(s.name, func(t *testing.T) { s.f(ctx, t, c) }) {
			t.FailNow()
		}
	}
}

// testCore: the cluster formed by Launch is three UP, healthy consensus
// members running curators, which started with the launch options on
// their kernel command line, and no node keeps its parameters (with the
// register ticket) beside its disks once it is UP.
func testCore(ctx context.Context, t *testing.T, c *launch.Cluster) {
	vmMode.WaitWhole(ctx, t, c, nil)
	// polisctl reaches the nodes through the launcher's proxy, saved in
	// its configuration (HTTP CONNECT) or given with --proxy (SOCKS5 on
	// the same port here).
	for _, args := range [][]string{{"node", "list"}, {"--proxy", c.SOCKS5ProxyURL(), "node", "list"}} {
		out, err := runPolisctl(ctx, c, args...)
		if err != nil {
			t.Fatal(err)
		}
		if n := strings.Count(out, "UP"); n != len(c.Nodes) {
			t.Errorf("polisctl %s lists %d UP nodes, want %d:\n%s", strings.Join(args, " "), n, len(c.Nodes), out)
		}
	}
	for _, n := range c.Nodes {
		if _, err := os.Stat(filepath.Join(n.Dir, "parameters.pb")); !os.IsNotExist(err) {
			t.Errorf("%v: its parameters file is still there once it is UP (%v): its next boot would get the register ticket again", n, err)
		}
		b, err := os.ReadFile(n.Log)
		if err != nil {
			t.Fatal(err)
		}
		want := fmt.Sprintf(`"--lease-ttl=%v" "--heartbeat-interval=%v"`, leaseTTL, heartbeatInterval)
		if !bytes.Contains(b, []byte(want)) {
			t.Errorf("%v: its console shows no agent flags %s: the launch options did not reach the VM", n, want)
		}
	}
}

// systemTree is a small tree for the system disk: a marker file.
func systemTree(t *testing.T) string {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "marker"), []byte("test/vm\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

func cacheDir(t testing.TB) string {
	d, err := os.UserCacheDir()
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// testPrepared: every node's PID 1 prepared its machine (its summary
// line, pid1.PreparedMessage): a tmpfs root, not rootfs; the one system
// disk file all three VMs attach, mounted read-only at /system (the ID
// is read from the disk through the mount); cgroup2 with the controllers
// delegated and the agent out of the root cgroup; every module loaded.
func testPrepared(t *testing.T, c *launch.Cluster, img *image.Image) {
	wants := []string{
		"root tmpfs (not rootfs; pivot_root tried: works)",
		fmt.Sprintf("(squashfs, ro, ID %.12s) on %s", img.SystemID, pid1.SystemRoot),
		"cgroup2 controllers cpu cpuset io memory pids hugetlb delegated, the agent in /polis/agent",
		fmt.Sprintf("; %d modules", len(img.Modules)),
		// every machine has an i6300esb (launch/vm), which PID 1 arms
		fmt.Sprintf("; watchdog %q armed (timeout %v)", "i6300ESB timer", pid1.WatchdogTimeout),
	}
	for _, n := range c.Nodes {
		b, err := os.ReadFile(n.Log)
		if err != nil {
			t.Fatal(err)
		}
		var line string
		for l := range strings.SplitSeq(string(b), "\n") {
			if strings.Contains(l, pid1.PreparedMessage) {
				line = l // the last boot's
			}
		}
		if line == "" {
			t.Errorf("%v: no %q line on its console", n, pid1.PreparedMessage)
			continue
		}
		for _, w := range wants {
			if !strings.Contains(line, w) {
				t.Errorf("%v: PID 1's summary lacks %q:\n%s", n, w, line)
			}
		}
	}
}

// runPolisctl runs polisctl, in this process, with the cluster's
// configuration, and returns what it printed.
func runPolisctl(ctx context.Context, c *launch.Cluster, args ...string) (string, error) {
	out, err := clustertest.Polisctl{ConfigDir: c.ConfigDir}.Run(ctx, args...)
	return string(out), err
}

// reboot asks n's node API to reboot it, as polisctl node reboot does,
// and returns once its VM has halted (the launcher boots it again at
// once), with the time it halted. A refusal is asked again, as an
// operator would, until the VM halts: under TCG on a loaded machine the
// node API's own question to the curator (is this owner key current?)
// can outlast its deadline. Once a request is accepted, the VM has
// rebootHaltTimeout to halt: the agent's stop is bounded (30 s) and the
// halt after it is a sync and an unmount, so a VM still running then is
// stuck, and its console says where.
func reboot(ctx context.Context, t *testing.T, c *launch.Cluster, n *launch.Node) time.Time {
	t.Helper()
	pid := n.PID()
	var accepted time.Time // the first request the node API accepted
	// halted waits at most wait for n's VM to halt.
	halted := func(wait time.Duration) bool {
		deadline := time.After(wait)
		for n.PID() == pid {
			select {
			case <-ctx.Done():
				logConsoleTail(t, n)
				t.Fatalf("%v did not reboot: %v", n, ctx.Err())
			case <-deadline:
				return false
			case <-time.After(50 * time.Millisecond):
			}
		}
		return true
	}
	for attempt := 1; ; attempt++ {
		if !accepted.IsZero() && time.Since(accepted) > rebootHaltTimeout {
			logConsoleTail(t, n)
			t.Fatalf("%v accepted a reboot %v ago and its VM has not halted", n, time.Since(accepted).Round(time.Second))
		}
		_, err := runPolisctl(ctx, c, "node", "reboot", n.ID())
		wait := time.Minute // accepted: the agent stops, then the VM halts
		if err != nil {
			t.Logf("asking %v to reboot, attempt %d: %v", n, attempt, err)
			wait = time.Second
		} else if accepted.IsZero() {
			accepted = time.Now()
		}
		if halted(wait) {
			return time.Now()
		}
	}
}

// rebootHaltTimeout bounds how long a VM that accepted a reboot may take
// to halt: the agent's stop (at most 30 s) and PID 1's sync and unmount,
// under TCG on a loaded machine.
const rebootHaltTimeout = 3 * time.Minute

// testPartition: the curator leader's node is cut off from the other
// nodes (the launcher, an operator on its side, still reaches it). A
// write sent through it alone fails: its curator does not accept what it
// cannot commit. The other two elect a leader and serve writes, within
// the lease. Reconnected, the node rejoins: all UP and healthy, every
// node a consensus member running a curator, one leader, and the write
// the cut-off node was sent is nowhere.
func testPartition(ctx context.Context, t *testing.T, c *launch.Cluster) {
	vmMode.WaitWhole(ctx, t, c, nil)
	leader := waitLeader(ctx, t, c, nil)
	var other *launch.Node
	for _, n := range c.Nodes {
		if n != leader {
			other = n
			break
		}
	}
	mgmt := cpb.NewManagementServiceClient(c.Conn())
	through, closeThrough, err := c.DialThrough(leader)
	if err != nil {
		t.Fatal(err)
	}
	defer closeThrough()

	start := time.Now()
	if err := c.Isolate(leader); err != nil {
		t.Fatal(err)
	}
	// The cut-off side's write, while its curator may still think it
	// leads: it must fail, not be acknowledged.
	isolated := make(chan error, 1)
	go func() {
		cctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		_, err := cpb.NewManagementServiceClient(through).UpdateNodeLabels(cctx, &cpb.UpdateNodeLabelsRequest{NodeId: other.ID(), Set: map[string]string{"partition": "cut-off-side"}})
		isolated <- err
	}()
	// The majority's side: the first write acknowledged there.
	for {
		cctx, cancel := context.WithTimeout(ctx, 15*time.Second)
		_, err := mgmt.UpdateNodeLabels(cctx, &cpb.UpdateNodeLabelsRequest{NodeId: other.ID(), Set: map[string]string{"majority": "served"}})
		cancel()
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("the majority never served a write: %v", err)
		}
	}
	clustertest.Phase(t, start, "%v (the leader) cut off from the other nodes → a write acknowledged by the others (the lease: %v)", leader, leaseTTL)
	next := waitLeader(ctx, t, c, leader)
	clustertest.Phase(t, start, "%v cut off → %v leads", leader, next)
	if err := <-isolated; err == nil {
		t.Errorf("a write through the cut-off %v alone was acknowledged: its curator accepted what its side could not commit", leader)
	} else {
		t.Logf("a write through the cut-off %v alone failed, as it must: %v", leader, status.Code(err))
	}
	clustertest.Phase(t, start, "%v cut off → the write through it alone failed", leader)

	start = time.Now()
	if err := c.Reconnect(leader); err != nil {
		t.Fatal(err)
	}
	recs := vmMode.WaitWhole(ctx, t, c, nil)
	clustertest.Phase(t, start, "%v reconnected → all UP, healthy, curators serving", leader)
	labels := recs[other.ID()].Labels
	if labels["majority"] != "served" {
		t.Errorf("the majority's acknowledged write is gone: labels %v", labels)
	}
	if _, ok := labels["partition"]; ok {
		t.Errorf("the write sent to the cut-off side was applied after all: labels %v", labels)
	}
	// One leader: only the leader's own curator serves a call that
	// reaches it alone; the others send it to the leader, which such a
	// connection cannot reach.
	l := waitLeader(ctx, t, c, nil)
	leads := make([]bool, len(c.Nodes))
	var wg sync.WaitGroup
	for i, n := range c.Nodes {
		conn, closeConn, err := c.DialThrough(n)
		if err != nil {
			t.Error(err)
			continue
		}
		wg.Go(func() {
			defer closeConn()
			// The deadline is what the others' calls take to fail.
			cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			resp, err := cpb.NewCuratorServiceClient(conn).GetLeader(cctx, &cpb.GetLeaderRequest{})
			leads[i] = err == nil && resp.Responder.GetNodeId() == n.ID() && resp.Leader.GetNodeId() == n.ID()
		})
	}
	wg.Wait()
	serving := 0
	for i, n := range c.Nodes {
		if leads[i] {
			serving++
			if n != l {
				t.Errorf("%v serves as the leader, but the cluster says %v leads", n, l)
			}
		}
	}
	if serving != 1 {
		t.Errorf("%d curators serve as the leader after the partition healed, want 1", serving)
	}
}

// searchDisks checks, while every VM is powered off, that none of their
// disk images holds in clear the label marker, a PEM (the certificates
// and keys etcd and the node keep on the data disk) or an unsealed
// configuration: the data disks are encrypted, the keys sealed by each
// VM's TPM.
func searchDisks(t *testing.T, c *launch.Cluster, marker string) {
	t.Helper()
	start := time.Now()
	for _, n := range c.Nodes {
		for _, disk := range []string{"esp.img", "data.img"} {
			for _, found := range testutil.FileContains(t, filepath.Join(n.Dir, disk), marker, "-----BEGIN", "PRIVATE KEY", "POLIS-UNSEALED") {
				t.Errorf("%s's %s holds %q in clear", n, disk, found)
			}
		}
	}
	clustertest.Phase(t, start, "all %d nodes' disk images searched for the marker, PEM and unsealed data", len(c.Nodes))
}

// waitLeader polls until a curator names a leader other than not.
func waitLeader(ctx context.Context, t *testing.T, c *launch.Cluster, not *launch.Node) *launch.Node {
	t.Helper()
	var l *launch.Node
	err := testutil.Poll(ctx, 200*time.Millisecond, func() error {
		var err error
		if l, err = c.Leader(ctx); err == nil && l == not {
			err = fmt.Errorf("%v still leads", l)
		}
		return err
	})
	if err != nil {
		t.Fatalf("waiting for a curator leader other than %v: %v", not, err)
	}
	return l
}

// consoleTailLines is how much of each console a failed wait shows.
const consoleTailLines = 40

// logConsoleTails logs the end of each node's console log: what a VM was
// doing when the cluster did not come whole (a console kept with
// POLIS_KEEP is gone with CI's machine).
func logConsoleTails(t *testing.T, c *launch.Cluster) {
	t.Helper()
	for _, n := range c.Nodes {
		logConsoleTail(t, n)
	}
}

// logConsoleTail logs the end of n's console log.
func logConsoleTail(t *testing.T, n *launch.Node) {
	t.Helper()
	b, err := os.ReadFile(n.Log)
	if err != nil {
		t.Logf("%v: its console: %v", n, err)
		return
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > consoleTailLines {
		lines = lines[len(lines)-consoleTailLines:]
	}
	t.Logf("%v: the last %d lines of its console (%s):\n%s", n, len(lines), n.Log, strings.Join(lines, "\n"))
}
