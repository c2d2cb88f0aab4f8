package clustertest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	cpb "github.com/polis-os/polis/api/curator/v1"
	"github.com/polis-os/polis/launch"
)

// Scenarios. The reboot, HA and cold-start scenarios are written once,
// here, against a launched cluster of consensus members (every node runs
// a curator), and run by test/e2e on processes and by test/vm on VMs.
// What differs between the two is in a Mode. Each scenario starts from a
// whole cluster and leaves one; each logs its phases ("phase: ...") with
// how long they took.

// Mode is what a scenario needs of the suite that runs it: what is done
// differently to processes and to VMs.
type Mode struct {
	// Reboot asks n to reboot through its node API and returns once n is
	// down (its agent gone), with the time it went down. The launcher
	// brings a VM back; a process executes itself again.
	Reboot func(ctx context.Context, t *testing.T, c *launch.Cluster, n *launch.Node) time.Time
	// WhileOff, if set, checks the nodes while every node is powered off,
	// given a label value unique to the run that the cluster stores (VMs:
	// that their disk images hold neither it nor keys in clear).
	WhileOff func(t *testing.T, c *launch.Cluster, marker string)
	// Stuck, if set, shows what the nodes were doing when the cluster did
	// not come whole in time (VMs: the end of each console); it is called
	// before the test fails.
	Stuck func(t *testing.T, c *launch.Cluster)
	// LeaseTTL is the curator's lease the cluster was launched with, for
	// the log.
	LeaseTTL time.Duration
}

// Phase logs how long a phase took since start.
func Phase(t testing.TB, start time.Time, format string, args ...any) {
	t.Helper()
	t.Logf("phase: %s: %v", fmt.Sprintf(format, args...), time.Since(start).Round(10*time.Millisecond))
}

// Nodes lists c's nodes, by node ID: the Lister of a launched cluster.
func Nodes(c *launch.Cluster) Lister {
	return func(ctx context.Context) (map[string]*cpb.Node, error) {
		nodes, err := c.ListNodes(ctx)
		return ByID(nodes), err
	}
}

// WholeTimeout bounds one wait for a whole cluster. A VM that reboots
// under TCG on a loaded two-core machine is UP again in about a minute,
// and a cold start of three in a few; a cluster not whole after ten is
// stuck, and saying so then, with the consoles, leaves the rest of CI's
// time to the other suites rather than spend it all waiting.
const WholeTimeout = 10 * time.Minute

// WaitWhole waits until c is whole: every node UP and healthy, a
// consensus member running a curator, and (for the nodes in boots) a boot
// ID other than the one given, which tells the record of a node that came
// back from the stale one of before. It returns the records; once ctx
// ends, or WholeTimeout has passed, it fails the test, after m.Stuck.
func (m Mode) WaitWhole(ctx context.Context, t *testing.T, c *launch.Cluster, boots map[string]string) map[string]*cpb.Node {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, WholeTimeout)
	defer cancel()
	recs, err := Await(ctx, t, Nodes(c), func(recs map[string]*cpb.Node) error {
		return Whole(recs, len(c.Nodes), CuratorServing, NewBoot(boots))
	})
	if err != nil {
		if m.Stuck != nil {
			m.Stuck(t, c)
		}
		t.Fatalf("waiting for the cluster to be whole: %v", err)
	}
	for _, n := range c.Nodes {
		if recs[n.ID()] == nil {
			t.Fatalf("%v (%s) is not in the node list", n, n.ID())
		}
	}
	return recs
}

// HA: every node is rebooted in turn while a writer keeps writing
// labels. Each node comes back with its identity, roles and labels; no
// acknowledged write is lost; and writes are acknowledged while each node
// is down, leader included: the cluster serves throughout, but for the
// time a new leader takes (at most the curator's lease after the old one
// stopped renewing it), which it logs.
func (m Mode) HA(ctx context.Context, t *testing.T, c *launch.Cluster) {
	recs := m.WaitWhole(ctx, t, c, nil)
	// The writer keeps writing labels of the first node, one at a time,
	// through the owner's leader-following connection, as a client of
	// the cluster would.
	nodeID := c.Nodes[0].ID()
	w := &Writer{Prefix: "ha-", Keys: 8, Write: LabelWrites(c.Conn(), nodeID, 15*time.Second)}
	begin := time.Now()
	w.Start(ctx)
	defer w.Stop()

	for _, n := range c.Nodes {
		leader, _ := c.Leader(ctx)
		boots := BootIDs(recs)
		start := time.Now()
		down := m.Reboot(ctx, t, c, n)
		Phase(t, start, "%v (leader: %v) asked to reboot → down", n, n == leader)
		recs = m.WaitWhole(ctx, t, c, map[string]string{n.ID(): boots[n.ID()]})
		up := time.Now()
		Phase(t, down, "%v: down → UP, healthy, curator serving (new boot ID)", n)
		// Served while the node was away: the node's own agent was gone
		// from when it went down until it rejoined.
		if got := w.AcksBetween(down, up); got == 0 {
			t.Errorf("no write was acknowledged while %v was down (%v to %v); the writer: %s", n, down.Format(time.TimeOnly), up.Format(time.TimeOnly), w.Doing())
		}
	}
	w.Stop()
	recs = m.WaitWhole(ctx, t, c, nil)
	if err := w.Lost(recs[nodeID].Labels); err != nil {
		t.Error(err)
	}
	t.Logf("writer: %v", w)
	t.Logf("phase: the longest time without an acknowledged write, over %d reboots: %v (the curator's lease: %v)", len(c.Nodes), w.LongestGap(begin).Round(10*time.Millisecond), m.LeaseTTL)
}

// ColdStart: every node is powered off at once (m.WhileOff checks them
// then) and all are started again: the cluster comes back with the same
// node IDs, roles, addresses and labels, a label written with a unique
// marker before the power-off included.
func (m Mode) ColdStart(ctx context.Context, t *testing.T, c *launch.Cluster) {
	marker := fmt.Sprintf("sealedmarker%x", time.Now().UnixNano())
	mgmt := cpb.NewManagementServiceClient(c.Conn())
	if _, err := mgmt.UpdateNodeLabels(ctx, &cpb.UpdateNodeLabelsRequest{NodeId: c.Nodes[0].ID(), Set: map[string]string{"sealed-marker": marker}}); err != nil {
		t.Fatal(err)
	}
	before := m.WaitWhole(ctx, t, c, nil)
	if before[c.Nodes[0].ID()].GetLabels()["sealed-marker"] != marker {
		t.Fatalf("the marker label is not on node %s: %v", c.Nodes[0].ID(), before[c.Nodes[0].ID()].GetLabels())
	}
	start := time.Now()
	StopAll(t, c)
	Phase(t, start, "all %d nodes powered off (at once)", len(c.Nodes))
	if m.WhileOff != nil {
		m.WhileOff(t, c, marker)
	}
	start = time.Now()
	for _, n := range c.Nodes {
		if err := c.StartNode(n); err != nil {
			t.Fatal(err)
		}
	}
	after := m.WaitWhole(ctx, t, c, BootIDs(before))
	Phase(t, start, "all %d started again → all UP, healthy, curators serving (new boot IDs)", len(c.Nodes))
	for id, b := range before {
		a := after[id]
		if a == nil {
			t.Errorf("node %s is gone after the cold start", id)
			continue
		}
		if fmt.Sprint(a.Labels) != fmt.Sprint(b.Labels) {
			t.Errorf("node %s: labels %v after the cold start, %v before", id, a.Labels, b.Labels)
		}
		if a.Roles.GetConsensusMember() == nil || a.Status.GetExternalAddress() != b.Status.GetExternalAddress() {
			t.Errorf("node %s: roles %v at %s after the cold start; before: %v at %s", id, a.Roles, a.Status.GetExternalAddress(), b.Roles, b.Status.GetExternalAddress())
		}
	}
	if len(after) != len(before) {
		t.Errorf("%d nodes after the cold start, %d before", len(after), len(before))
	}
}

// StopAll powers every node of c off at once (SIGTERM to a process, the
// power button of a VM), as a power cut that the nodes see coming would,
// and returns once all are down.
func StopAll(t *testing.T, c *launch.Cluster) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make([]error, len(c.Nodes))
	for i, n := range c.Nodes {
		wg.Go(func() { errs[i] = n.Stop(2 * time.Minute) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatalf("stopping every node: %v", err)
	}
}
