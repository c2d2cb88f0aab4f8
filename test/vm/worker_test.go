package vm_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	cpb "github.com/polis-os/polis/api/curator/v1"
	"github.com/polis-os/polis/internal/clustertest"
	"github.com/polis-os/polis/internal/testutil"
	"github.com/polis-os/polis/launch"
	"github.com/polis-os/polis/launch/image"
	"github.com/polis-os/polis/node/diskseal"
	"github.com/polis-os/polis/node/pid1"
)

// TestVMWorkerDataDisk: a node that runs no consensus member binds its
// data disk to the cluster once it is UP (its status says so, and so
// does its disk's header once it is off), and its disk then unlocks only
// with the cluster part a curator hands it: after a reboot, and after a
// cold start, where it waits for the consensus member's curator. Once the
// node is decommissioned and deleted, its disks booted again are refused
// the cluster part: the console says so and what to do, and the data
// disk is not changed.
func TestVMWorkerDataDisk(t *testing.T) {
	needQEMU(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	start := time.Now()
	img, err := image.Build(ctx, image.Config{
		SourceDir: "../..", Progress: testLog{t},
		SystemDir: systemTree(t),
		OutDir:    filepath.Join(cacheDir(t), "polis", "image", "out-test-vm"),
	})
	if err != nil {
		t.Fatal(err)
	}
	clustertest.Phase(t, start, "image ready (reused: %v)", img.Reused)

	start = time.Now()
	c, err := launch.Launch(ctx, launch.Options{
		Nodes:             2,
		ConsensusMembers:  false, // node 1 alone runs the control plane; node 2 is a worker
		LeaseTTL:          leaseTTL,
		HeartbeatInterval: heartbeatInterval,
		VM:                &launch.VMOptions{Image: img},
		StepTimeout:       4 * time.Minute,
		Progress:          testLog{t},
		Keep:              os.Getenv("POLIS_KEEP") != "",
	})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := c.Close(); err != nil {
			t.Errorf("closing the cluster: %v", err)
		}
	}()
	clustertest.Phase(t, start, "2 VMs (a consensus member and a worker) from the first qemu start to all UP and healthy")
	member, worker := c.Nodes[0], c.Nodes[1]

	start = time.Now()
	recs := waitUp(ctx, t, c, nil, func(id string, r *cpb.Node) error {
		if want := id == worker.ID(); r.Status.GetDataClusterBound() != want {
			return fmt.Errorf("data disk bound %v, want %v", r.Status.GetDataClusterBound(), want)
		}
		return nil
	})
	clustertest.Phase(t, start, "the worker's data disk bound to the cluster (its status says so), the member's not")
	if out, err := runPolisctl(ctx, c, "node", "describe", worker.ID()); err != nil || !regexp.MustCompile(`(?m)^Data disk bound: +yes`).MatchString(out) {
		t.Errorf("polisctl node describe of the worker does not say its disk is bound (%v):\n%s", err, out)
	}

	// A reboot: the worker's disk unlocks with the cluster part.
	start = time.Now()
	reboot(ctx, t, c, worker)
	recs = waitUp(ctx, t, c, map[string]string{worker.ID(): recs[worker.ID()].Status.GetBootId()}, nil)
	clustertest.Phase(t, start, "the worker rebooted → UP and healthy again (new boot ID)")
	unlocks(t, worker, 1)

	// A cold start: both powered off, both started at once; the worker
	// waits for the member's curator.
	start = time.Now()
	clustertest.StopAll(t, c)
	clustertest.Phase(t, start, "both powered off")
	if !header(t, worker).ClusterBound || header(t, member).ClusterBound {
		t.Errorf("on disk: the worker's header bound %v (want true), the member's %v (want false)", header(t, worker).ClusterBound, header(t, member).ClusterBound)
	}
	start = time.Now()
	for _, n := range c.Nodes {
		if err := c.StartNode(n); err != nil {
			t.Fatal(err)
		}
	}
	waitUp(ctx, t, c, clustertest.BootIDs(recs), nil)
	clustertest.Phase(t, start, "both started again → UP and healthy (new boot IDs)")
	unlocks(t, worker, 2)

	// Deleted: its disks booted again are refused the cluster part.
	if err := worker.Stop(2 * time.Minute); err != nil {
		t.Fatal(err)
	}
	mgmt := cpb.NewManagementServiceClient(c.Conn())
	if _, err := mgmt.DecommissionNode(ctx, &cpb.DecommissionNodeRequest{NodeId: worker.ID()}); err != nil {
		t.Fatal(err)
	}
	if _, err := mgmt.DeleteNode(ctx, &cpb.DeleteNodeRequest{NodeId: worker.ID()}); err != nil {
		t.Fatal(err)
	}
	before := fileSum(t, filepath.Join(worker.Dir, "data.img"))
	start = time.Now()
	if err := c.StartNode(worker); err != nil {
		t.Fatal(err)
	}
	line := waitConsole(ctx, t, worker, pid1.ClusterPartRefusedMessage)
	clustertest.Phase(t, start, "the deleted worker booted again → refused its cluster part")
	for _, want := range []string{"was decommissioned", "give the machine new disks"} {
		if !strings.Contains(line, want) {
			t.Errorf("the refusal on the console does not say %q:\n%s", want, line)
		}
	}
	// The power button still works while PID 1 waits.
	if err := worker.Stop(2 * time.Minute); err != nil {
		t.Fatal(err)
	}
	if before != fileSum(t, filepath.Join(worker.Dir, "data.img")) {
		t.Error("refused its cluster part, the node changed its data disk")
	}
}

// waitUp waits until every node is UP and healthy, with a boot ID other
// than the one in boots for the nodes there, and check (if set) passes
// for each record; it returns the records.
func waitUp(ctx context.Context, t *testing.T, c *launch.Cluster, boots map[string]string, check func(id string, r *cpb.Node) error) map[string]*cpb.Node {
	t.Helper()
	checks := []clustertest.Check{clustertest.HealthyUp, clustertest.NewBoot(boots)}
	if check != nil {
		checks = append(checks, func(r *cpb.Node) error {
			if err := check(r.Id, r); err != nil {
				return fmt.Errorf("%s: %w", r.Id, err)
			}
			return nil
		})
	}
	return waitRecords(ctx, t, c, func(recs map[string]*cpb.Node) error {
		return clustertest.Whole(recs, len(c.Nodes), checks...)
	})
}

// unlockLine matches PID 1's line for a data disk bound to its cluster.
var unlockLine = regexp.MustCompile(`unlocked the data disk \S+ \(tpm sealing, bound to its cluster: the cluster part came in ([0-9.a-zµ]+)\) as \S+ in ([0-9.a-zµ]+) \(the local part unsealed in ([0-9.a-zµ]+)\)`)

// unlocks checks that n's console shows its data disk unlocked with the
// cluster part on n boots, and logs the times of each.
func unlocks(t *testing.T, n *launch.Node, want int) {
	t.Helper()
	b, err := os.ReadFile(n.Log)
	if err != nil {
		t.Fatal(err)
	}
	ms := unlockLine.FindAllSubmatch(b, -1)
	for i, m := range ms {
		t.Logf("phase: %v's boot %d: the cluster part came in %s; unlock (without that wait) %s, of which the TPM's unseal %s", n, i+2, m[1], m[2], m[3])
	}
	if len(ms) != want {
		t.Errorf("%v's console shows its bound data disk unlocked with the cluster part %d times, want %d", n, len(ms), want)
	}
}

// header reads the data disk header of a powered-off node.
func header(t *testing.T, n *launch.Node) *diskseal.Header {
	t.Helper()
	f, err := os.Open(filepath.Join(n.Dir, "data.img"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	area := make([]byte, diskseal.HeaderArea)
	if _, err := io.ReadFull(f, area); err != nil {
		t.Fatal(err)
	}
	found, err := diskseal.Read(area)
	if err != nil {
		t.Fatalf("%v's data disk header: %v", n, err)
	}
	return found.Header
}

// waitConsole waits until n's console shows a line containing s, and
// returns the line.
func waitConsole(ctx context.Context, t *testing.T, n *launch.Node, s string) string {
	t.Helper()
	var line string
	err := testutil.Poll(ctx, 250*time.Millisecond, func() error {
		b, err := os.ReadFile(n.Log)
		if err != nil {
			t.Fatal(err)
		}
		if i := bytes.LastIndex(b, []byte(s)); i >= 0 {
			if j := bytes.IndexByte(b[i:], '\n'); j >= 0 {
				line = string(b[i : i+j])
				return nil
			}
		}
		return errors.New("not there yet")
	})
	if err != nil {
		t.Fatalf("waiting for %q on %v's console (%s): %v", s, n, n.Log, err)
	}
	return line
}

// fileSum is the SHA-256 of a file, read as a stream.
func fileSum(t *testing.T, p string) [sha256.Size]byte {
	t.Helper()
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		t.Fatal(err)
	}
	return [sha256.Size]byte(h.Sum(nil))
}
