package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	cpb "github.com/polis-os/polis/api/curator/v1"
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

	eventually(t, time.Minute, "three nodes UP and healthy", func() error {
		return allNodes(cfg, 3, healthyUp)
	})

	// Consensus members, one at a time: the curator admits one joining
	// member at a time and refuses a second with FAILED_PRECONDITION,
	// which an operator retries.
	for _, n := range c.Nodes[1:] {
		eventually(t, time.Minute, "polisctl node add-role consensus-member "+n.ID(), func() error {
			_, err := polisctl(cfg, "node", "add-role", n.ID(), "consensus-member")
			return err
		})
		eventually(t, time.Minute, n.String()+" serving as a consensus member", func() error {
			nodes, err := listNodes(cfg)
			if err != nil {
				return err
			}
			return consensusMemberServing(nodes[n.ID()])
		})
	}
	eventually(t, time.Minute, "three consensus members serving", func() error {
		return allNodes(cfg, 3, consensusMemberServing)
	})
	// polisctl saved only the first curator when it took ownership; it
	// must know the others to survive the first node's death, and cluster
	// info saves the curators the cluster lists.
	eventually(t, time.Minute, "polisctl cluster info saving three curators", func() error {
		if _, err := polisctl(cfg, "cluster", "info"); err != nil {
			return err
		}
		b, err := os.ReadFile(filepath.Join(cfg, "cluster.json"))
		if err != nil {
			return err
		}
		var d cpb.ClusterDirectory
		if err := unmarshalJSON(b, &d); err != nil {
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
	w := &writer{cfg: cfg, node: survivor.ID(), max: 40}
	w.start()
	w.waitAcked(t, 3)
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
	eventually(t, time.Minute, "another curator serving a change", func() error {
		_, err := polisctl(cfg, "--timeout", "3s", "node", "label", survivor.ID(), "failover=served")
		failover = time.Since(killedAt)
		return err
	})
	t.Logf("polisctl served a change again %v after the kill (lease %v)", failover.Round(time.Millisecond), deadLeaderLease)
	if now, err := c.Leader(ctx); err != nil || now == leader {
		t.Errorf("the leader after the kill is %v (%v); want another node", now, err)
	}

	acked, ackedAt := w.wait()
	var afterKill int
	for _, at := range ackedAt {
		if at.After(killedAt) {
			afterKill++
		}
	}
	// Writes acknowledged by the new leader are what shows that writes
	// went on across the failure.
	if afterKill == 0 {
		t.Errorf("all %d acknowledged writes were before the kill", len(acked))
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
		labels := nodes[survivor.ID()].GetLabels()
		for _, k := range acked {
			if _, ok := labels[k]; !ok {
				t.Errorf("acknowledged label %s on %v is lost", k, survivor)
			}
		}
	}
	checkLabels()
	t.Logf("%d writes acknowledged, %d of them after the kill; none lost", len(acked), afterKill)

	// The killed node comes back from its storage alone: same ID, a new
	// boot, healthy, a consensus member with a running curator again.
	if err := c.StartNode(leader); err != nil {
		t.Fatal(err)
	}
	eventually(t, 2*time.Minute, leader.String()+" back as a healthy consensus member", func() error {
		nodes, err := listNodes(cfg)
		if err != nil {
			return err
		}
		n := nodes[leader.ID()]
		if err := consensusMemberServing(n); err != nil {
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
	eventually(t, time.Minute, victim.String()+" DECOMMISSIONED", func() error {
		n := mustNode(t, cfg, victim.ID())
		if n.State != cpb.NodeState_NODE_STATE_DECOMMISSIONED {
			return fmt.Errorf("%s is %v", n.Id, n.State)
		}
		if n.Roles.GetConsensusMember() != nil {
			return fmt.Errorf("%s still has the consensus member role", n.Id)
		}
		return nil
	})
	eventually(t, time.Minute, "the other two nodes healthy consensus members", func() error {
		nodes, err := listNodes(cfg)
		if err != nil {
			return err
		}
		for _, n := range c.Nodes {
			if n != victim {
				if err := consensusMemberServing(nodes[n.ID()]); err != nil {
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
	if err := unmarshalJSON(out, &n); err != nil {
		t.Fatal(err)
	}
	return &n
}

// writer labels one node again and again through polisctl, recording the
// labels polisctl acknowledged.
type writer struct {
	cfg, node string
	max       int

	mu      sync.Mutex
	acked   []string
	ackedAt []time.Time
	wg      sync.WaitGroup
}

func (w *writer) start() {
	w.wg.Go(func() {
		for i := range w.max {
			k := fmt.Sprintf("w%d", i)
			if _, err := polisctl(w.cfg, "--timeout", "20s", "node", "label", w.node, k+"=x"); err == nil {
				w.mu.Lock()
				w.acked = append(w.acked, k)
				w.ackedAt = append(w.ackedAt, time.Now())
				w.mu.Unlock()
			}
		}
	})
}

func (w *writer) waitAcked(t *testing.T, n int) {
	t.Helper()
	eventually(t, time.Minute, fmt.Sprintf("%d writes acknowledged", n), func() error {
		w.mu.Lock()
		defer w.mu.Unlock()
		if len(w.acked) < n {
			return fmt.Errorf("%d acknowledged: %s", len(w.acked), strings.Join(w.acked, ","))
		}
		return nil
	})
}

func (w *writer) wait() ([]string, []time.Time) {
	w.wg.Wait()
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.acked, w.ackedAt
}
