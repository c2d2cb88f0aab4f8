package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	cpb "github.com/polis-os/polis/api/curator/v1"
	"github.com/polis-os/polis/internal/clustertest"
	"github.com/polis-os/polis/internal/testutil"
	"github.com/polis-os/polis/launch"
)

// deadLeaderLease is TestClusterLifecycle's election lease: far longer
// than the test waits for a new leader, so that a new leader proves the
// dead one was deposed (curator/deadleader.go), not that its lease ran out.
const deadLeaderLease = 10 * time.Minute

// A cluster's life as an operator sees it, through polisctl: three nodes
// UP and healthy; all made consensus members; labels written; the curator
// leader's node killed with SIGKILL while writes go on, another curator
// serving a change long before the lease would expire, and every
// acknowledged write still there; the
// killed node restarted and back as a healthy consensus member; one node
// decommissioned.
//
// The cluster is started with package launch (not the polis-launch
// binary, which TestLaunchCommand covers) because this test must kill one
// node's process and start it again from its storage, which needs the
// process handles the launcher keeps.
func TestClusterLifecycle(t *testing.T) {
	c := launchCluster(t, 3, false, deadLeaderLease, testHeartbeat, nil)
	cfg := c.ConfigDir
	ctx := context.Background()

	testutil.Eventually(t, time.Minute, "three nodes UP and healthy", func() error {
		return allNodes(cfg, 3, clustertest.HealthyUp)
	})

	// Consensus members, one at a time: the curator admits one joining
	// member at a time and refuses a second with FAILED_PRECONDITION,
	// which an operator retries.
	for _, n := range c.Nodes[1:] {
		testutil.Eventually(t, time.Minute, "polisctl node add-role consensus-member "+n.ID(), func() error {
			_, err := polisctl(cfg, "node", "add-role", n.ID(), "consensus-member")
			return err
		})
		testutil.Eventually(t, time.Minute, n.String()+" serving as a consensus member", func() error {
			nodes, err := listNodes(cfg)
			if err != nil {
				return err
			}
			return clustertest.CuratorServing(nodes[n.ID()])
		})
	}
	testutil.Eventually(t, time.Minute, "three consensus members serving", func() error {
		return allNodes(cfg, 3, clustertest.CuratorServing)
	})
	// polisctl saved only the first curator when it took ownership; it
	// must know the others to survive the first node's death, and cluster
	// info saves the curators the cluster lists.
	testutil.Eventually(t, time.Minute, "polisctl cluster info saving three curators", func() error {
		if _, err := polisctl(cfg, "cluster", "info"); err != nil {
			return err
		}
		b, err := os.ReadFile(filepath.Join(cfg, "cluster.json"))
		if err != nil {
			return err
		}
		var d cpb.ClusterDirectory
		if err := clustertest.UnmarshalJSON(b, &d); err != nil {
			return err
		}
		if len(d.Curators) != 3 {
			return fmt.Errorf("cluster.json lists %d curators", len(d.Curators))
		}
		return nil
	})

	// Acknowledged writes before the failure: a label on every node.
	for _, n := range c.Nodes {
		if _, err := polisctl(cfg, "node", "label", n.ID(), "before=node"+fmt.Sprint(n.Index)); err != nil {
			t.Fatal(err)
		}
	}

	leader, err := c.Leader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var survivor *launch.Node
	for _, n := range c.Nodes {
		if n != leader {
			survivor = n
			break
		}
	}
	t.Logf("the curator leader is %v; writing to %v while it dies", leader, survivor)

	// Writes that straddle the failure: the writer labels the survivor
	// with w0, w1, ... one polisctl call after the other and records the
	// ones polisctl reported as done. Calls made while no curator leads
	// wait (polisctl retries UNAVAILABLE within its timeout) or fail; a
	// failed one may or may not have been applied, and is not checked.
	w := &clustertest.Writer{Prefix: "w", Max: 40, Write: func(ctx context.Context, key, value string) error {
		_, err := clustertest.Polisctl{ConfigDir: cfg, Binary: bin.ctl}.Run(ctx, "--timeout", "20s", "node", "label", survivor.ID(), key+"="+value)
		return err
	}}
	w.Start(ctx)
	defer w.Stop()
	w.WaitAcked(t, 3, time.Minute)
	killedBoot := mustNode(t, cfg, leader.ID()).Status.GetBootId()
	killedAt := time.Now()
	if err := leader.Kill(); err != nil {
		t.Fatal(err)
	}
	t.Logf("killed %v (SIGKILL)", leader)

	// Reads go on at the followers.
	if _, err := polisctl(cfg, "--timeout", "10s", "node", "list", "-o", "json"); err != nil {
		t.Errorf("a read right after the leader died: %v; want it served by a follower", err)
	}
	// Another curator leads and serves a change (which only the leader
	// serves) long before the dead leader's lease could run out: the
	// followers saw its process gone and revoked the lease.
	var failover time.Duration
	testutil.Eventually(t, time.Minute, "another curator serving a change", func() error {
		_, err := polisctl(cfg, "--timeout", "3s", "node", "label", survivor.ID(), "failover=served")
		failover = time.Since(killedAt)
		return err
	})
	t.Logf("polisctl served a change again %v after the kill (lease %v)", failover.Round(time.Millisecond), deadLeaderLease)
	if now, err := c.Leader(ctx); err != nil || now == leader {
		t.Errorf("the leader after the kill is %v (%v); want another node", now, err)
	}

	w.Wait()
	afterKill := w.AcksBetween(killedAt, time.Now())
	// Writes acknowledged by the new leader are what shows that writes
	// went on across the failure.
	if afterKill == 0 {
		t.Errorf("all %d acknowledged writes were before the kill", w.Acked())
	}
	checkLabels := func() {
		t.Helper()
		nodes, err := listNodes(cfg)
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range c.Nodes {
			if got, want := nodes[n.ID()].GetLabels()["before"], "node"+fmt.Sprint(n.Index); got != want {
				t.Errorf("%v: label before=%q, want %q", n, got, want)
			}
		}
		if err := w.Lost(nodes[survivor.ID()].GetLabels()); err != nil {
			t.Errorf("the labels of %v: %v", survivor, err)
		}
	}
	checkLabels()
	t.Logf("writer: %v; %d acknowledged after the kill; none lost", w, afterKill)

	// The killed node comes back from its storage alone: same ID, a new
	// boot, healthy, a consensus member with a running curator again.
	if err := c.StartNode(leader); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 2*time.Minute, leader.String()+" back as a healthy consensus member", func() error {
		nodes, err := listNodes(cfg)
		if err != nil {
			return err
		}
		n := nodes[leader.ID()]
		if err := clustertest.CuratorServing(n); err != nil {
			return err
		}
		if n.Status.GetBootId() == killedBoot {
			return fmt.Errorf("%s still reports the boot before the kill", n.Id)
		}
		return nil
	})

	// Decommission a node that does not run the leading curator (the
	// curator refuses that one).
	now, err := c.Leader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var victim *launch.Node
	for _, n := range c.Nodes {
		if n != now {
			victim = n
		}
	}
	if _, err := polisctl(cfg, "node", "decommission", victim.ID()); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, time.Minute, victim.String()+" DECOMMISSIONED", func() error {
		n := mustNode(t, cfg, victim.ID())
		if n.State != cpb.NodeState_NODE_STATE_DECOMMISSIONED {
			return fmt.Errorf("%s is %v", n.Id, n.State)
		}
		if n.Roles.GetConsensusMember() != nil {
			return fmt.Errorf("%s still has the consensus member role", n.Id)
		}
		return nil
	})
	testutil.Eventually(t, time.Minute, "the other two nodes healthy consensus members", func() error {
		nodes, err := listNodes(cfg)
		if err != nil {
			return err
		}
		for _, n := range c.Nodes {
			if n != victim {
				if err := clustertest.CuratorServing(nodes[n.ID()]); err != nil {
					return err
				}
			}
		}
		return nil
	})
	checkLabels()
}

func mustNode(t *testing.T, cfg, id string) *cpb.Node {
	t.Helper()
	out, err := polisctl(cfg, "node", "describe", id, "-o", "json")
	if err != nil {
		t.Fatal(err)
	}
	var n cpb.Node
	if err := clustertest.UnmarshalJSON(out, &n); err != nil {
		t.Fatal(err)
	}
	return &n
}
