package e2e

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	cpb "github.com/polis-os/polis/api/curator/v1"
	"github.com/polis-os/polis/internal/clustertest"
	"github.com/polis-os/polis/internal/testutil"
	"github.com/polis-os/polis/launch"
)

// TestLaunchRecovery: package launch's recovery of a cluster that lost
// its quorum, on processes, as test/vm runs it on VMs: three consensus
// members and a worker added with AddNodes, a label on every node;
// RecoverSingleMember refused while the other members run (the node
// exits saying why); two members' storage destroyed; RecoverSingleMember
// on the survivor brings back every node and label, the worker
// reconnects by itself (a heartbeat after the recovery), and two new
// members join with AddNodes.
func TestLaunchRecovery(t *testing.T) {
	c := launchCluster(t, 3, true, testLeaseTTL, testHeartbeat, nil)
	cfg := c.ConfigDir
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	added, err := c.AddNodes(ctx, launch.NewNodes{})
	if err != nil {
		t.Fatal(err)
	}
	worker := added[0]
	if want := fmt.Sprintf("%v", c.Nodes[2].Address.Next()); worker.Address.String() != want || worker.Index != 4 {
		t.Errorf("the added node is %v, want node 4 at %s", worker, want)
	}
	for _, n := range c.Nodes {
		if _, err := polisctl(cfg, "node", "label", n.ID(), fmt.Sprintf("index=%d", n.Index)); err != nil {
			t.Fatal(err)
		}
	}
	survivor := c.Nodes[0]
	before, err := listNodes(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.RecoverSingleMember(ctx, survivor); err == nil || !strings.Contains(err.Error(), "recovering this member alone would fork it") {
		t.Fatalf("RecoverSingleMember with the other members running: %v; want a refusal saying why", err)
	}
	// Refused, the process exited; started as usual, it rejoins.
	if err := c.StartNode(survivor); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 2*time.Minute, "the survivor back as usual", func() error {
		nodes, err := listNodes(cfg)
		if err != nil {
			return err
		}
		if boot := nodes[survivor.ID()].GetStatus().GetBootId(); boot == before[survivor.ID()].GetStatus().GetBootId() {
			return fmt.Errorf("%v: still the boot of before (%.8s)", survivor, boot)
		}
		return clustertest.CuratorServing(nodes[survivor.ID()])
	})

	lost := c.Nodes[1:3]
	for _, n := range lost {
		if err := n.Kill(); err != nil {
			t.Fatal(err)
		}
		if err := os.RemoveAll(n.Dir); err != nil {
			t.Fatal(err)
		}
	}
	start := time.Now()
	if err := c.RecoverSingleMember(ctx, survivor); err != nil {
		t.Fatal(err)
	}
	recovered := time.Now()
	t.Logf("phase: RecoverSingleMember on the survivor → its curator serving the recovered cluster: %v", recovered.Sub(start).Round(10*time.Millisecond))
	testutil.Eventually(t, 2*time.Minute, "every node and label back, the lost members dropped, the worker reconnected", func() error {
		nodes, err := recoveredNodes(cfg, c.Nodes, survivor)
		if err != nil {
			return err
		}
		return heardSince(nodes[worker.ID()], recovered)
	})

	joined, err := c.AddNodes(ctx, launch.NewNodes{Count: 2, ConsensusMembers: true})
	if err != nil {
		t.Fatal(err)
	}
	nodes, err := listNodes(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range append([]*launch.Node{survivor}, joined...) {
		if err := clustertest.CuratorServing(nodes[n.ID()]); err != nil {
			t.Errorf("%v: %v", n, err)
		}
	}
	if len(nodes) != 6 {
		t.Errorf("%d nodes listed after two joined, want 6 (the lost ones' records stay until deleted)", len(nodes))
	}
}

// heardSince checks that the curator received a heartbeat of the node
// after t: the node is connected to the cluster as it is since then.
func heardSince(n *cpb.Node, t time.Time) error {
	if err := clustertest.HealthyUp(n); err != nil {
		return err
	}
	at := time.Now().Add(-n.GetTimeSinceHeartbeat().AsDuration())
	if !at.After(t) {
		return fmt.Errorf("%s: its last heartbeat came %v ago, before %v", n.Id, n.GetTimeSinceHeartbeat().AsDuration(), t.Format(time.TimeOnly))
	}
	return nil
}
