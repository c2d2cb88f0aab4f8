// Package vm_test runs Polis clusters of qemu VMs booting the node image,
// through the same launch API as the process suites. It is a package of
// its own because the launcher sets HTTPS_PROXY for its gRPC clients, which
// Go reads once per process.
package vm_test

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	cpb "github.com/polis-os/polis/api/curator/v1"
	"github.com/polis-os/polis/launch"
	"github.com/polis-os/polis/launch/image"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// needQEMU skips where qemu is missing, except in CI (CI=true), where
// scripts/test installs it and a missing qemu is a failure.
func needQEMU(t *testing.T) {
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

// TestVMCluster: three VMs form a cluster, all UP and healthy with three
// consensus members; a node rebooted (power button, then booted again
// from its disks) comes back UP and healthy with the same identity; the
// leader's node cut off from the switch, another curator leads, and
// reconnected the cluster is whole again.
func TestVMCluster(t *testing.T) {
	needQEMU(t)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	start := time.Now()
	img, err := image.Build(ctx, image.Config{SourceDir: "../..", Progress: testLog{t}})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("phase: image ready in %v", time.Since(start).Round(10*time.Millisecond))

	start = time.Now()
	c, err := launch.Launch(ctx, launch.Options{
		Nodes:            3,
		ConsensusMembers: true,
		VM:               &launch.VMOptions{Image: img},
		Progress:         testLog{t},
		Keep:             os.Getenv("POLIS_KEEP") != "",
	})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := c.Close(); err != nil {
			t.Errorf("closing the cluster: %v", err)
		}
	}()
	t.Logf("phase: 3 VMs from the first qemu start to all UP and healthy, consensus members included: %v", time.Since(start).Round(10*time.Millisecond))
	nodes, err := c.ListNodes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(nodes) != 3 {
		t.Fatalf("the curator lists %d nodes, want 3", len(nodes))
	}
	for _, n := range nodes {
		if n.State != cpb.NodeState_NODE_STATE_UP || n.Health != cpb.NodeHealth_NODE_HEALTH_HEALTHY || n.Roles.GetConsensusMember() == nil {
			t.Errorf("node %s: %v %v, consensus member %v; want UP, healthy, a member", n.Id, n.State, n.Health, n.Roles.GetConsensusMember() != nil)
		}
	}

	n := c.Nodes[1]
	id := n.ID()
	bootID := ""
	for _, rec := range nodes {
		if rec.Id == id {
			bootID = rec.Status.GetBootId()
		}
	}
	start = time.Now()
	if err := n.Stop(2 * time.Minute); err != nil {
		t.Fatal(err)
	}
	t.Logf("phase: %v powered off in %v", n, time.Since(start).Round(10*time.Millisecond))
	start = time.Now()
	if err := c.StartNode(n); err != nil {
		t.Fatal(err)
	}
	// Healthy is not enough: the curator still lists the node as it was
	// before the power-off until its heartbeats lapse. A new boot ID in
	// a healthy UP record is the rebooted node talking.
	for {
		rec := nodeRecord(ctx, t, c, id)
		if rec != nil && rec.Status.GetBootId() != bootID && rec.State == cpb.NodeState_NODE_STATE_UP && rec.Health == cpb.NodeHealth_NODE_HEALTH_HEALTHY {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%v did not come back UP and healthy with a new boot ID: %v", n, ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
	t.Logf("phase: %v booted again → UP and healthy (new boot ID) in %v", n, time.Since(start).Round(10*time.Millisecond))
	if n.ID() != id {
		t.Errorf("the rebooted node is %s, was %s", n.ID(), id)
	}

	// Partition: the curator leader's node is cut off from the switch;
	// another curator must lead; reconnected, the node is UP and healthy
	// again beside the others.
	leader := waitLeader(ctx, t, c, nil)
	start = time.Now()
	if err := c.Cut(leader); err != nil {
		t.Fatal(err)
	}
	next := waitLeader(ctx, t, c, leader)
	t.Logf("phase: %v (the leader) cut off → %v leads: %v", leader, next, time.Since(start).Round(10*time.Millisecond))
	start = time.Now()
	if err := c.Reconnect(leader); err != nil {
		t.Fatal(err)
	}
	for _, n := range c.Nodes {
		if err := c.WaitHealthy(ctx, n); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("phase: %v reconnected → all UP and healthy: %v", leader, time.Since(start).Round(10*time.Millisecond))
}

// waitLeader polls until a curator names a leader other than not.
func waitLeader(ctx context.Context, t *testing.T, c *launch.Cluster, not *launch.Node) *launch.Node {
	t.Helper()
	for {
		l, err := c.Leader(ctx)
		if err == nil && l != not {
			return l
		}
		select {
		case <-ctx.Done():
			t.Fatalf("waiting for a curator leader other than %v: %v (last answer %v, %v)", not, ctx.Err(), l, err)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// nodeRecord is the curator's record of the node id, nil while it cannot
// be read (the curators may be changing leaders).
func nodeRecord(ctx context.Context, t *testing.T, c *launch.Cluster, id string) *cpb.Node {
	t.Helper()
	nodes, err := c.ListNodes(ctx)
	if err != nil {
		return nil
	}
	for _, n := range nodes {
		if n.Id == id {
			return n
		}
	}
	return nil
}
