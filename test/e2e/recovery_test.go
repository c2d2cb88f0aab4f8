package e2e

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	cpb "github.com/polis-os/polis/api/curator/v1"
	"github.com/polis-os/polis/internal/clustertest"
	"github.com/polis-os/polis/internal/testutil"
	"github.com/polis-os/polis/launch"
)

// TestBackupAndRecovery is the README's "When things go wrong" with the
// real binaries: a cluster of three consensus members and a worker, a
// label on every node, a backup taken and inspected with polisctl; the
// survivor's recovery refused while the others run (polis-node exits
// saying why); two members' storage destroyed; polis-node
// --recover-single-member on the survivor brings back every node and
// label, the lost members dropped, the worker reconnected, and cluster
// info showing the recovery; then two new members join as usual.
func TestBackupAndRecovery(t *testing.T) {
	c := launchCluster(t, 4, false, testLeaseTTL, testHeartbeat, nil)
	cfg := c.ConfigDir
	ctx := context.Background()
	testutil.Eventually(t, time.Minute, "four nodes UP and healthy", func() error {
		return allNodes(cfg, 4, clustertest.HealthyUp)
	})
	for _, n := range c.Nodes[1:3] {
		if err := c.MakeConsensusMember(ctx, n); err != nil {
			t.Fatal(err)
		}
	}
	for _, n := range c.Nodes {
		if _, err := polisctl(cfg, "node", "label", n.ID(), fmt.Sprintf("index=%d", n.Index)); err != nil {
			t.Fatal(err)
		}
	}

	backup := filepath.Join(tempDir(t), "cluster.backup")
	if _, err := polisctl(cfg, "cluster", "backup", backup); err != nil {
		t.Fatal(err)
	}
	out, err := polisctl(cfg, "cluster", "backup", "--inspect", backup)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(out), "Nodes:         4\n") {
		t.Errorf("inspect printed %s; want 4 nodes", out)
	}

	survivor := c.Nodes[0]
	recoverArgs := []string{
		"--storage", filepath.Join(survivor.Dir, "storage"),
		"--address", survivor.Address.String(),
		"--lease-ttl", testLeaseTTL.String(),
		"--heartbeat-interval", testHeartbeat.String(),
		"--recover-single-member",
	}
	if err := survivor.Stop(20 * time.Second); err != nil {
		t.Fatal(err)
	}
	// The two other members still answer: refused, and polis-node says
	// why and exits.
	rctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	refused, err := exec.CommandContext(rctx, bin.node, recoverArgs...).CombinedOutput()
	if err == nil || !strings.Contains(string(refused), "recovering this member alone would fork it") {
		t.Fatalf("polis-node --recover-single-member with live members: %v; want a refusal saying why, got:\n%s", err, tail(refused))
	}

	// Two members' storage destroyed for good.
	for _, n := range c.Nodes[1:3] {
		if err := n.Kill(); err != nil {
			t.Fatal(err)
		}
		if err := os.RemoveAll(n.Dir); err != nil {
			t.Fatal(err)
		}
	}
	recovered := startNode(t, "recovered", recoverArgs...)

	lost := map[string]bool{c.Nodes[1].ID(): true, c.Nodes[2].ID(): true}
	testutil.Eventually(t, 2*time.Minute, "the recovered cluster shown in cluster info", func() error {
		out, err := polisctl(cfg, "cluster", "info", "-o", "json")
		if err != nil {
			return err
		}
		var info cpb.GetClusterInfoResponse
		if err := clustertest.UnmarshalJSON(out, &info); err != nil {
			return err
		}
		rec := info.GetLastRecovery()
		if rec.GetNodeId() != survivor.ID() || len(rec.GetLostNodeIds()) != 2 || !lost[rec.GetLostNodeIds()[0]] || !lost[rec.GetLostNodeIds()[1]] {
			return fmt.Errorf("last recovery %v", rec)
		}
		return nil
	})
	testutil.Eventually(t, 2*time.Minute, "every node and label back, the lost members dropped, the worker healthy", func() error {
		nodes, err := recoveredNodes(cfg, c.Nodes, survivor)
		if err != nil {
			return err
		}
		if err := clustertest.HealthyUp(nodes[c.Nodes[3].ID()]); err != nil {
			return fmt.Errorf("the worker: %w", err)
		}
		return clustertest.CuratorServing(nodes[survivor.ID()])
	})
	recovered.checkRunning(t)

	// Two new members join as usual, on the lost members' addresses with
	// fresh storage: registered with a ticket, approved, made consensus
	// members. The lost nodes' records keep their addresses meanwhile.
	params := filepath.Join(tempDir(t), "parameters.pb")
	if _, err := polisctl(cfg, "ticket", "--parameters", params); err != nil {
		t.Fatal(err)
	}
	for _, old := range c.Nodes[1:3] {
		n := startNode(t, "new-"+old.Address.String(),
			"--storage", filepath.Join(tempDir(t), "storage"),
			"--address", old.Address.String(),
			"--parameters", params,
			"--lease-ttl", testLeaseTTL.String(),
			"--heartbeat-interval", testHeartbeat.String())
		id := waitRegistered(t, cfg, old.Address.String())
		if _, err := polisctl(cfg, "node", "approve", id); err != nil {
			t.Fatal(err)
		}
		testutil.Eventually(t, 2*time.Minute, "the new member added", func() error {
			_, err := polisctl(cfg, "node", "add-role", id, "consensus-member")
			return err
		})
		testutil.Eventually(t, 2*time.Minute, "the new member serving", func() error {
			nodes, err := listNodes(cfg)
			if err != nil {
				return err
			}
			return clustertest.CuratorServing(nodes[id])
		})
		n.checkRunning(t)
		t.Logf("%s joined as a consensus member at %s", id, old.Address)
	}
	nodes, err := listNodes(cfg)
	if err != nil {
		t.Fatal(err)
	}
	members := 0
	for _, n := range nodes {
		if n.GetRoles().GetConsensusMember() != nil {
			members++
		}
	}
	if members != 3 {
		t.Errorf("%d consensus members after two joined the recovered cluster; want 3", members)
	}
	recovered.checkRunning(t)
}

// nodeProcess is a polis-node started by a test outside the launcher.
type nodeProcess struct {
	log    string
	exited chan error
}

// startNode starts polis-node with args, its output in a log named after
// name, and stops it (SIGTERM, then SIGKILL) when the test ends.
func startNode(t *testing.T, name string, args ...string) *nodeProcess {
	t.Helper()
	log, err := os.Create(filepath.Join(tempDir(t), name+".log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin.node, args...)
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &nodeProcess{log: log.Name(), exited: make(chan error, 1)}
	done := make(chan struct{})
	go func() {
		err := cmd.Wait()
		log.Close()
		p.exited <- err
		close(done)
	}()
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			cmd.Process.Kill()
			<-done
		}
	})
	return p
}

// checkRunning fails the test if the node's process has exited.
func (p *nodeProcess) checkRunning(t *testing.T) {
	t.Helper()
	select {
	case err := <-p.exited:
		p.exited <- err
		t.Fatalf("the node exited: %v", errors.Join(err, errors.New("see "+p.log)))
	default:
	}
}

// waitRegistered waits for a node at address to register (NEW) and
// returns its ID.
func waitRegistered(t *testing.T, cfg, address string) string {
	t.Helper()
	var id string
	testutil.Eventually(t, 2*time.Minute, "a new node registered at "+address, func() error {
		nodes, err := listNodes(cfg)
		if err != nil {
			return err
		}
		for _, n := range nodes {
			if n.State == cpb.NodeState_NODE_STATE_NEW && n.Status.GetExternalAddress() == address {
				id = n.Id
				return nil
			}
		}
		return errors.New("not registered yet")
	})
	return id
}

// tail is the end of a command's output, for a failure message.
func tail(b []byte) string {
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > 10 {
		lines = lines[len(lines)-10:]
	}
	return strings.Join(lines, "\n")
}

// recoveredNodes lists the nodes of a cluster recovered onto survivor
// (through the polisctl configuration in cfg) and checks that the listing
// is nodes and no more, each with its index label, and that the survivor
// alone is a consensus member. It returns the listing.
func recoveredNodes(cfg string, nodes []*launch.Node, survivor *launch.Node) (map[string]*cpb.Node, error) {
	listed, err := listNodes(cfg)
	if err != nil {
		return nil, err
	}
	if len(listed) != len(nodes) {
		return nil, fmt.Errorf("%d nodes listed, want %d", len(listed), len(nodes))
	}
	for _, n := range nodes {
		rec := listed[n.ID()]
		if rec.GetLabels()["index"] != fmt.Sprint(n.Index) {
			return nil, fmt.Errorf("%v: labels %v", n, rec.GetLabels())
		}
		if member := rec.GetRoles().GetConsensusMember() != nil; member != (n == survivor) {
			return nil, fmt.Errorf("%v: consensus member %v", n, member)
		}
	}
	return listed, nil
}

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
