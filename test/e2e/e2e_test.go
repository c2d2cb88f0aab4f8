// Package e2e drives the real binaries as an operator would: polis-launch
// (or package launch, with the real polis-node processes, where a test must
// kill and restart one node) to start clusters, and polisctl with -o json to
// look at them and change them.
//
// TestMain builds polis-node, polisctl and polis-launch with "go build"
// into a temporary directory once; they are built without the race
// detector (this test binary may run under it), which keeps the build
// short and the nodes as fast as a user's. Every cluster gets its own
// loopback addresses, 127.78.<n>.1–3, used by nothing else in the
// repository, so clusters never meet each other or a developer's
// polis-launch (127.77.0.x).
package e2e

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	cpb "github.com/polis-os/polis/api/curator/v1"
	"github.com/polis-os/polis/internal/clustertest"
	"github.com/polis-os/polis/internal/testutil"
	"github.com/polis-os/polis/launch"
)

// bin holds the paths of the binaries TestMain built.
var bin struct{ node, ctl, launch string }

func TestMain(m *testing.M) {
	os.Exit(testMain(m))
}

func testMain(m *testing.M) int {
	dir, err := os.MkdirTemp("", "polis-e2e-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	start := time.Now()
	// The test's working directory is inside the module, so the packages
	// resolve to this checkout.
	cmd := exec.Command("go", "build", "-o", dir+string(filepath.Separator),
		"github.com/polis-os/polis/cmd/polis-node",
		"github.com/polis-os/polis/cmd/polisctl",
		"github.com/polis-os/polis/cmd/polis-launch")
	if out, err := cmd.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "building the binaries: %v\n%s", err, out)
		return 1
	}
	fmt.Fprintf(os.Stderr, "e2e: built polis-node, polisctl and polis-launch in %v\n", time.Since(start).Round(time.Millisecond))
	bin.node = filepath.Join(dir, "polis-node")
	bin.ctl = filepath.Join(dir, "polisctl")
	bin.launch = filepath.Join(dir, "polis-launch")
	code := m.Run()
	// The nodes are other processes; only this process's goroutines (the
	// launcher's process watchers, gRPC clients) can leak here.
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: %v\n", err)
			code = 1
		}
	}
	return code
}

// Every test cluster uses the addresses 127.78.<n>.1, .2, ...
var subnets = testutil.Subnets{Octet: 78}

// Short timings, so that failover and health take seconds: the lease is
// what a dead leader costs, heartbeats how soon a node counts as healthy.
const (
	testLeaseTTL  = 2 * time.Second
	testHeartbeat = 500 * time.Millisecond
)

// tempDir is a short temporary directory (etcd's client socket lives deep
// inside a node's storage, and Unix socket paths are limited to about 100
// bytes), removed when the test ends unless POLIS_KEEP is set.
func tempDir(tb testing.TB) string {
	tb.Helper()
	d, err := os.MkdirTemp("", "e2e-")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		// POLIS_KEEP=1 keeps the nodes' logs and data, as test/vm keeps
		// its consoles.
		if os.Getenv("POLIS_KEEP") != "" {
			tb.Logf("POLIS_KEEP: keeping %s", d)
			return
		}
		os.RemoveAll(d)
	})
	return d
}

// logNodeTails logs the end of each node's log in dir (a launcher's
// BaseDir), leaving out debug lines: what a launch that failed on CI's
// machine, whose directories are gone with it, leaves to go on.
func logNodeTails(tb testing.TB, dir string) {
	tb.Helper()
	logs, _ := filepath.Glob(filepath.Join(dir, "node*.log"))
	for _, l := range logs {
		b, err := os.ReadFile(l)
		if err != nil {
			continue
		}
		var kept []string
		for line := range strings.Lines(string(b)) {
			if !strings.Contains(line, "\tDEBUG\t") {
				kept = append(kept, strings.TrimRight(line, "\n"))
			}
		}
		kept = kept[max(0, len(kept)-40):]
		tb.Logf("the end of %s:\n%s", l, strings.Join(kept, "\n"))
	}
}

// logWriter sends progress lines to the test log.
type logWriter struct{ tb testing.TB }

func (w logWriter) Write(p []byte) (int, error) {
	w.tb.Helper()
	w.tb.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// launchCluster starts n nodes with package launch and the real polis-node,
// and stops them when the test ends.
func launchCluster(tb testing.TB, n int, consensusMembers bool, lease, heartbeat time.Duration, progress io.Writer) *launch.Cluster {
	tb.Helper()
	if progress == nil {
		progress = logWriter{tb}
	}
	base := tempDir(tb)
	c, err := launch.Launch(context.Background(), launch.Options{
		Nodes:             n,
		ConsensusMembers:  consensusMembers,
		BaseDir:           base,
		Keep:              true, // tempDir removes it, after Close
		Addresses:         subnets.Addrs(n),
		NodeBinary:        bin.node,
		LeaseTTL:          lease,
		HeartbeatInterval: heartbeat,
		StopTimeout:       20 * time.Second,
		Progress:          progress,
	})
	if err != nil {
		logNodeTails(tb, base)
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		if err := c.Close(); err != nil {
			tb.Errorf("stopping the cluster: %v", err)
		}
	})
	return c
}

// polisctl runs the polisctl binary with the configuration dir and returns
// its standard output; the error carries its standard error.
func polisctl(dir string, args ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	return clustertest.Polisctl{ConfigDir: dir, Binary: bin.ctl}.Run(ctx, args...)
}

// listNodes is "polisctl node list -o json", parsed, by node ID.
func listNodes(dir string, extra ...string) (map[string]*cpb.Node, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	return clustertest.Polisctl{ConfigDir: dir, Binary: bin.ctl}.ListNodes(ctx, extra...)
}

// allNodes checks that want nodes are listed, each passing check.
func allNodes(dir string, want int, check clustertest.Check) error {
	nodes, err := listNodes(dir)
	if err != nil {
		return err
	}
	return clustertest.Whole(nodes, want, check)
}

// The README's run command, as a user runs it: polis-launch brings up three
// nodes and says so, polisctl shows them healthy, and Ctrl-C stops every
// node and removes the launcher's directory.
func TestLaunchCommand(t *testing.T) {
	base := filepath.Join(tempDir(t), "cluster")
	cfg := filepath.Join(tempDir(t), "polisctl")
	cmd := exec.Command(bin.launch,
		"--dir", base, "--config", cfg,
		"--first-address", subnets.Addrs(3)[0].String(),
		"--node-binary", bin.node,
		"--lease-ttl", testLeaseTTL.String(), "--heartbeat-interval", testHeartbeat.String())
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	lines := make(chan string, 100)
	var output struct {
		sync.Mutex
		lines []string
	}
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			t.Log("polis-launch: " + sc.Text())
			output.Lock()
			output.lines = append(output.lines, sc.Text())
			output.Unlock()
			select {
			case lines <- sc.Text():
			default:
			}
		}
		close(lines)
		// Wait only once the pipe is drained (os/exec's rule).
		exited <- cmd.Wait()
	}()
	t.Cleanup(func() {
		// On every path: a launcher still running is killed, and takes its
		// nodes with it (Pdeathsig).
		cmd.Process.Kill()
		<-exited
	})

	ready := time.After(3 * time.Minute)
	for waiting := true; waiting; {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("polis-launch ended before the cluster was ready: %s", stderr.String())
			}
			waiting = !strings.HasPrefix(l, "cluster ready")
		case <-ready:
			t.Fatal("polis-launch: no \"cluster ready\" within 3 minutes")
		}
	}
	testutil.Eventually(t, 30*time.Second, "three healthy nodes in polisctl node list", func() error {
		return allNodes(cfg, 3, clustertest.CuratorServing)
	})
	if _, err := polisctl(cfg, "cluster", "info"); err != nil {
		t.Errorf("cluster info: %v", err)
	}

	// What the launcher started, from its progress lines.
	var pids []int
	output.Lock()
	for _, l := range output.lines {
		var node, pid int
		var addr string
		if _, err := fmt.Sscanf(l, "node %d (%s started (pid %d,", &node, &addr, &pid); err == nil {
			pids = append(pids, pid)
		}
	}
	output.Unlock()
	if len(pids) != 3 {
		t.Errorf("the launcher reported %d started nodes, want 3", len(pids))
	}

	// Ctrl-C.
	if err := cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		exited <- err // for the cleanup
		if err != nil {
			t.Fatalf("polis-launch after Ctrl-C: %v: %s", err, stderr.String())
		}
	case <-time.After(90 * time.Second):
		t.Fatal("polis-launch did not end within 90s of Ctrl-C")
	}
	for _, pid := range pids {
		if _, err := os.Stat(fmt.Sprintf("/proc/%d", pid)); err == nil {
			t.Errorf("node process %d is still there after the launcher ended", pid)
		}
	}
	if _, err := os.Stat(base); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the cluster directory %s is still there (%v)", base, err)
	}
}
