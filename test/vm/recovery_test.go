package vm_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	cpb "github.com/polis-os/polis/api/curator/v1"
	"github.com/polis-os/polis/internal/clustertest"
	"github.com/polis-os/polis/internal/testutil"
	"github.com/polis-os/polis/launch"
	"github.com/polis-os/polis/launch/image"
)

// testRecovery: the cluster loses the quorum of its consensus members for
// good and is brought back on the survivor's own data (issue 22). It
// breaks the shared cluster's three members for good, so it runs last.
//
// A worker joins first (AddNodes), its data disk bound to the cluster;
// every node gets a label, and a backup is taken and inspected. The
// survivor booted in recovery mode while the other members run is
// refused: its console says why, and it rejoins as usual. Then the other
// two members' VMs are killed and their disks and TPM state destroyed:
// the cluster is down. The survivor booted once in recovery mode
// (launch's RecoverSingleMember: polis.recover-single-member=true on its
// kernel command line) brings back every node and label, the lost
// members dropped (cluster info); the worker, which ran throughout,
// reconnects by itself (a heartbeat after the recovery), and rebooted,
// its bound disk unlocks with the cluster part the recovered cluster
// kept; two new members join; the lost nodes are decommissioned and
// deleted.
//
// Last, the backup is restored onto a fresh VM (launch with
// RestoreBackup: the launcher decrypts it with the owner key on the host
// and gives the machine the snapshot alone): the shared cluster is
// stopped first, and the restored cluster, on a switch of its own, holds
// the backup's nodes and labels and says it was restored from a backup.
func testRecovery(ctx context.Context, t *testing.T, c *launch.Cluster, img *image.Image) {
	vmMode.WaitWhole(ctx, t, c, nil)
	members := slices.Clone(c.Nodes)
	survivor, lost := members[0], members[1:]

	start := time.Now()
	added, err := c.AddNodes(ctx, launch.NewNodes{})
	if err != nil {
		logConsoleTails(t, c)
		t.Fatal(err)
	}
	worker := added[0]
	recs := waitUp(ctx, t, c, nil, func(id string, r *cpb.Node) error {
		if id == worker.ID() && !r.Status.GetDataClusterBound() {
			return fmt.Errorf("data disk not bound yet")
		}
		return nil
	})
	clustertest.Phase(t, start, "a worker added (%v) → UP and healthy, its data disk bound to the cluster", worker)

	// The owner's connection is asked for at each use: the launcher
	// replaces it when the curators change (a recovery, new members).
	mgmt := func() cpb.ManagementServiceClient { return cpb.NewManagementServiceClient(c.Conn()) }
	for _, n := range c.Nodes {
		if _, err := mgmt().UpdateNodeLabels(ctx, &cpb.UpdateNodeLabelsRequest{NodeId: n.ID(), Set: map[string]string{"index": fmt.Sprint(n.Index)}}); err != nil {
			t.Fatal(err)
		}
	}
	before := waitRecords(ctx, t, c, func(recs map[string]*cpb.Node) error {
		for _, r := range recs {
			if r.Labels["index"] == "" {
				return fmt.Errorf("%s: no index label yet", r.Id)
			}
		}
		return nil
	})
	backup := filepath.Join(t.TempDir(), "cluster.backup")
	if _, err := runPolisctl(ctx, c, "cluster", "backup", backup); err != nil {
		t.Fatal(err)
	}
	if out, err := runPolisctl(ctx, c, "cluster", "backup", "--inspect", backup); err != nil || !strings.Contains(out, "Nodes:         4\n") {
		t.Errorf("the backup's inspection (%v) does not say it holds 4 nodes:\n%s", err, out)
	}

	// Refused while the other members run; the survivor rejoins as usual.
	start = time.Now()
	err = c.RecoverSingleMember(ctx, survivor)
	if err == nil || !strings.Contains(err.Error(), "recovering this member alone would fork it") {
		t.Fatalf("RecoverSingleMember with the other members running: %v; want a refusal saying why", err)
	}
	clustertest.Phase(t, start, "%v booted in recovery mode while the other members run → refused: %v", survivor, err)
	oldBoot := recs[survivor.ID()].Status.GetBootId()
	recs = waitUp(ctx, t, c, map[string]string{survivor.ID(): oldBoot}, func(id string, r *cpb.Node) error {
		if id == survivor.ID() && r.Status.GetRunningCurator() == nil {
			return fmt.Errorf("no curator running yet")
		}
		return nil
	})
	clustertest.Phase(t, start, "%v booted in recovery mode → refused, UP, healthy and serving again as usual", survivor)

	// Two members destroyed: their machines killed, their disks and TPM
	// state gone for good.
	for _, n := range lost {
		if err := n.Kill(); err != nil {
			t.Fatal(err)
		}
		if err := os.RemoveAll(n.Dir); err != nil {
			t.Fatal(err)
		}
	}
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	_, err = mgmt().UpdateNodeLabels(wctx, &cpb.UpdateNodeLabelsRequest{NodeId: survivor.ID(), Set: map[string]string{"down": "yes"}})
	cancel()
	if err == nil {
		t.Fatal("a write was acknowledged with two of three consensus members destroyed")
	}
	t.Logf("with two of three members destroyed, a write fails: %v", err)

	start = time.Now()
	if err := c.RecoverSingleMember(ctx, survivor); err != nil {
		logConsoleTails(t, c)
		t.Fatal(err)
	}
	recovered := time.Now()
	clustertest.Phase(t, start, "RecoverSingleMember: %v powered off, booted in recovery mode → cluster info shows the recovery, its curator serving", survivor)
	info, err := mgmt().GetClusterInfo(ctx, &cpb.GetClusterInfoRequest{})
	if err != nil {
		t.Fatal(err)
	}
	r := info.GetLastRecovery()
	lostIDs := []string{lost[0].ID(), lost[1].ID()}
	slices.Sort(lostIDs)
	if r.GetNodeId() != survivor.ID() || r.GetFrom() != "member-data" || !slices.Equal(r.GetLostNodeIds(), lostIDs) {
		t.Errorf("cluster info's last recovery: %v; want one on %s from its member data, %v lost", r, survivor.ID(), lostIDs)
	}

	// Every node and label back, the lost members no longer members; the
	// worker heard from after the recovery.
	waitRecords(ctx, t, c, func(recs map[string]*cpb.Node) error {
		return checkRecovered(recs, c.Nodes, survivor, worker, recovered)
	})
	clustertest.Phase(t, start, "RecoverSingleMember → every node and label back, the worker reconnected by itself")

	// The lost nodes taken out, as an operator would.
	for _, n := range lost {
		if _, err := mgmt().DecommissionNode(ctx, &cpb.DecommissionNodeRequest{NodeId: n.ID()}); err != nil {
			t.Fatal(err)
		}
		if _, err := mgmt().DeleteNode(ctx, &cpb.DeleteNodeRequest{NodeId: n.ID()}); err != nil {
			t.Fatal(err)
		}
	}

	// The worker rebooted: its bound disk unlocks with the cluster part
	// the recovered cluster kept. Two new members join meanwhile.
	start = time.Now()
	reboot(ctx, t, c, worker)
	joined, err := c.AddNodes(ctx, launch.NewNodes{Count: 2, ConsensusMembers: true})
	if err != nil {
		logConsoleTails(t, c)
		t.Fatal(err)
	}
	clustertest.Phase(t, start, "two new members (%v, %v) from their first boot → consensus members, curators serving", joined[0], joined[1])
	oldBoot = recs[worker.ID()].Status.GetBootId()
	waitRecords(ctx, t, c, func(recs map[string]*cpb.Node) error {
		var missing []string
		if len(recs) != 4 {
			missing = append(missing, fmt.Sprintf("%d nodes listed, want 4", len(recs)))
		}
		for _, n := range append([]*launch.Node{survivor, worker}, joined...) {
			r := recs[n.ID()]
			switch {
			case r == nil:
				missing = append(missing, fmt.Sprintf("%v: not listed", n))
			case r.State != cpb.NodeState_NODE_STATE_UP || r.Health != cpb.NodeHealth_NODE_HEALTH_HEALTHY:
				missing = append(missing, fmt.Sprintf("%v: %v %v", n, r.State, r.Health))
			case n == worker && r.Status.GetBootId() == oldBoot:
				missing = append(missing, fmt.Sprintf("%v: the old boot", n))
			case n != worker && (r.Roles.GetConsensusMember() == nil || r.Status.GetRunningCurator() == nil):
				missing = append(missing, fmt.Sprintf("%v: consensus member %v, curator %v", n, r.Roles.GetConsensusMember() != nil, r.Status.GetRunningCurator() != nil))
			}
		}
		return lacking(missing)
	})
	clustertest.Phase(t, start, "the worker rebooted → UP and healthy (its bound disk unlocked); three members serving, the lost nodes deleted")
	unlocks(t, worker, 1)

	testRestore(ctx, t, c, img, backup, before)
}

// testRestore powers the cluster c off for good and restores the backup
// taken of it, when it held the records before, onto a fresh VM, with
// a copy of the owner's polisctl configuration.
func testRestore(ctx context.Context, t *testing.T, c *launch.Cluster, img *image.Image, backup string, before map[string]*cpb.Node) {
	cfg := t.TempDir()
	if err := copyDir(c.ConfigDir, cfg); err != nil {
		t.Fatal(err)
	}
	// Every machine powered off (the power button, at once); the
	// cluster's switch stays until its Close, and the restored cluster
	// gets one of its own.
	clustertest.StopAll(t, c)
	start := time.Now()
	r, err := launch.Launch(ctx, launch.Options{
		Nodes:             1,
		LeaseTTL:          leaseTTL,
		HeartbeatInterval: heartbeatInterval,
		VM:                &launch.VMOptions{Image: img},
		StepTimeout:       4 * time.Minute,
		Progress:          testLog{t},
		ConfigDir:         cfg,
		RestoreBackup:     backup,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := r.Close(); err != nil {
			t.Errorf("closing the restored cluster: %v", err)
		}
	}()
	clustertest.Phase(t, start, "a VM booted to restore the backup (decrypted on the host) → its curator serving the restored cluster, UP and healthy")
	n := r.Nodes[0]
	if _, err := os.Stat(filepath.Join(n.Dir, "restore-snapshot.db")); !os.IsNotExist(err) {
		t.Errorf("the decrypted snapshot is still on the host beside the VM's disks (%v)", err)
	}
	// The restore's record is written by the restored cluster's leader
	// once it is elected, which may come after the node is UP: asked
	// until it is there or the minute is out.
	var info *cpb.GetClusterInfoResponse
	testutil.Eventually(t, time.Minute, "the restored cluster's info names its last recovery", func() error {
		var err error
		info, err = cpb.NewManagementServiceClient(r.Conn()).GetClusterInfo(ctx, &cpb.GetClusterInfoRequest{})
		if err == nil && info.GetLastRecovery() == nil {
			err = errors.New("no last recovery yet")
		}
		return err
	})
	if rec := info.GetLastRecovery(); rec.GetFrom() != "backup" || rec.GetNodeId() != n.ID() || len(rec.GetLostNodeIds()) != 3 {
		t.Errorf("cluster info's last recovery: %v; want a restore onto %s from a backup, three members lost", rec, n.ID())
	}
	nodes, err := r.ListNodes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	restored := map[string]*cpb.Node{}
	for _, rec := range nodes {
		restored[rec.Id] = rec
	}
	for id, b := range before {
		if got := restored[id].GetLabels()["index"]; got != b.Labels["index"] {
			t.Errorf("node %s: label index %q after the restore, %q in the backup", id, got, b.Labels["index"])
		}
	}
	if len(nodes) != len(before)+1 {
		t.Errorf("%d nodes in the restored cluster, want the backup's %d and the new one", len(nodes), len(before))
	}
}

// copyDir copies the files of a directory (polisctl's configuration).
func copyDir(src, dst string) error {
	ents, err := os.ReadDir(src)
	if err != nil {
		return err
	}
	for _, e := range ents {
		if !e.Type().IsRegular() {
			continue
		}
		b, err := os.ReadFile(filepath.Join(src, e.Name()))
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dst, e.Name()), b, 0o600); err != nil {
			return err
		}
	}
	return nil
}

// waitRecords polls the node list until ready, given the records by node
// ID, returns nil, and returns them; it fails the test, with the end of
// every console, once ctx ends.
func waitRecords(ctx context.Context, t *testing.T, c *launch.Cluster, ready func(map[string]*cpb.Node) error) map[string]*cpb.Node {
	t.Helper()
	list := func(ctx context.Context) (map[string]*cpb.Node, error) {
		nodes, err := c.ListNodes(ctx)
		return clustertest.ByID(nodes), err
	}
	recs, err := clustertest.Await(ctx, t, list, ready)
	if err != nil {
		logConsoleTails(t, c)
		t.Fatalf("waiting for the nodes: %v", err)
	}
	return recs
}

// checkRecovered says what the recovered cluster still lacks, nil for
// nothing: every node listed with its index label, the survivor the only
// consensus member and serving, the worker UP, healthy and heard from
// after since.
func checkRecovered(recs map[string]*cpb.Node, nodes []*launch.Node, survivor, worker *launch.Node, since time.Time) error {
	var missing []string
	for _, n := range nodes {
		r := recs[n.ID()]
		switch {
		case r == nil:
			missing = append(missing, fmt.Sprintf("%v: not listed", n))
		case r.Labels["index"] != fmt.Sprint(n.Index):
			missing = append(missing, fmt.Sprintf("%v: labels %v", n, r.Labels))
		case (r.Roles.GetConsensusMember() != nil) != (n == survivor):
			missing = append(missing, fmt.Sprintf("%v: consensus member %v", n, r.Roles.GetConsensusMember() != nil))
		case n == survivor && r.Status.GetRunningCurator() == nil:
			missing = append(missing, fmt.Sprintf("%v: no curator running", n))
		case n == worker && (r.State != cpb.NodeState_NODE_STATE_UP || r.Health != cpb.NodeHealth_NODE_HEALTH_HEALTHY):
			missing = append(missing, fmt.Sprintf("%v: %v %v", n, r.State, r.Health))
		case n == worker && !time.Now().Add(-r.GetTimeSinceHeartbeat().AsDuration()).After(since):
			missing = append(missing, fmt.Sprintf("%v: no heartbeat since the recovery", n))
		}
	}
	return lacking(missing)
}

// lacking is the error that lists what a cluster still lacks, nil for
// nothing.
func lacking(missing []string) error {
	if len(missing) == 0 {
		return nil
	}
	return errors.New(strings.Join(missing, "; "))
}
