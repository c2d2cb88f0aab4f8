package e2e

import (
	"bytes"
	"context"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	cpb "github.com/polis-os/polis/api/curator/v1"
	"github.com/polis-os/polis/identity"
	"github.com/polis-os/polis/internal/clustertest"
	"github.com/polis-os/polis/internal/testutil"
	"github.com/polis-os/polis/launch"
)

// TestRestoreFromBackup: a cluster of three consensus members and a
// worker, with a label on every node, is backed up and stopped for good.
// A damaged backup, one cut short and one for another owner key are
// refused by polis-node with an error saying so, and leave the fresh
// storage without a node; a restore onto storage that holds a node is
// refused and changes nothing. Then polis-launch's restore (package
// launch, as polis-launch --restore-backup runs it) starts a new cluster
// of three from the backup, on fresh storage at the old members'
// addresses: every node record and label of the backup is there, the old
// members dropped, the recovery shown in cluster info, and the three new
// nodes consensus members serving. The old worker, started again on its
// own storage, reconnects by itself to the restored cluster, whose
// curators its saved directory names by the old members' node IDs.
func TestRestoreFromBackup(t *testing.T) {
	old := launchCluster(t, 3, true, testLeaseTTL, testHeartbeat, nil)
	cfg := old.ConfigDir
	added, err := old.AddNodes(context.Background(), launch.NewNodes{})
	if err != nil {
		t.Fatal(err)
	}
	worker := added[0]
	for _, n := range old.Nodes {
		if _, err := polisctl(cfg, "node", "label", n.ID(), fmt.Sprintf("index=%d", n.Index), "restore=kept"); err != nil {
			t.Fatal(err)
		}
	}
	backup := filepath.Join(tempDir(t), "cluster.backup")
	if _, err := polisctl(cfg, "cluster", "backup", backup); err != nil {
		t.Fatal(err)
	}
	if err := old.Close(); err != nil {
		t.Fatal(err)
	}
	ownerKey := filepath.Join(cfg, "key.der")

	// Refused, changing nothing.
	whole, err := os.ReadFile(backup)
	if err != nil {
		t.Fatal(err)
	}
	flipped := bytes.Clone(whole)
	flipped[len(flipped)/2] ^= 0x01
	otherKey, err := identity.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	otherDER, err := identity.MarshalPrivateKey(otherKey)
	if err != nil {
		t.Fatal(err)
	}
	addr := subnets.Addrs(1)[0].String()
	for _, bad := range []struct {
		name     string
		contents []byte
		key      []byte
		want     string
	}{
		{"truncated", whole[:len(whole)*2/3], nil, "the backup is damaged or incomplete"},
		{"damaged", flipped, nil, "the backup is damaged or incomplete"},
		{"another-owner", whole, otherDER, "the backup was not encrypted to this owner key"},
	} {
		dir := tempDir(t)
		file := filepath.Join(dir, bad.name+".backup")
		if err := os.WriteFile(file, bad.contents, 0o600); err != nil {
			t.Fatal(err)
		}
		key := ownerKey
		if bad.key != nil {
			key = filepath.Join(dir, "other.der")
			if err := os.WriteFile(key, bad.key, 0o600); err != nil {
				t.Fatal(err)
			}
		}
		storage := filepath.Join(dir, "storage")
		out, err := runNode(t, "--storage", storage, "--address", addr, "--restore-backup", file, "--owner-key", key)
		if err == nil || !strings.Contains(string(out), bad.want) {
			t.Errorf("restoring a %s backup: %v; want a refusal saying %q, got:\n%s", bad.name, err, bad.want, tail(out))
		} else {
			t.Logf("%s backup refused: %s", bad.name, lastLine(out))
		}
		for _, p := range []string{"esp/sealed-configuration", "data/node/key.der", "data/etcd/identity.json", "data/restore.db"} {
			if _, err := os.Stat(filepath.Join(storage, p)); err == nil {
				t.Errorf("a refused restore (%s) left %s", bad.name, p)
			}
		}
	}
	used := filepath.Join(old.Nodes[0].Dir, "storage")
	before, err := os.ReadFile(filepath.Join(used, "esp", "sealed-configuration"))
	if err != nil {
		t.Fatal(err)
	}
	out, err := runNode(t, "--storage", used, "--address", old.Nodes[0].Address.String(), "--restore-backup", backup, "--owner-key", ownerKey)
	if err == nil || !strings.Contains(string(out), "the storage holds a node already") {
		t.Errorf("restoring onto a node's storage: %v; want a refusal, got:\n%s", err, tail(out))
	}
	if after, _ := os.ReadFile(filepath.Join(used, "esp", "sealed-configuration")); !bytes.Equal(before, after) {
		t.Error("a refused restore changed the node's sealed configuration")
	}

	// Restored onto fresh storage, on new addresses.
	start := time.Now()
	restoredBase := tempDir(t)
	restored, err := launch.Launch(context.Background(), launch.Options{
		Nodes:             3,
		ConsensusMembers:  true,
		BaseDir:           restoredBase,
		Keep:              true,
		ConfigDir:         cfg,
		Addresses:         []netip.Addr{old.Nodes[0].Address, old.Nodes[1].Address, old.Nodes[2].Address},
		NodeBinary:        bin.node,
		LeaseTTL:          testLeaseTTL,
		HeartbeatInterval: testHeartbeat,
		StopTimeout:       20 * time.Second,
		Progress:          phaseWriter{t, start},
		RestoreBackup:     backup,
	})
	if err != nil {
		logNodeTails(t, restoredBase)
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := restored.Close(); err != nil {
			t.Errorf("stopping the restored cluster: %v", err)
		}
	})
	t.Logf("phase: restored cluster of three ready %v after the launch", time.Since(start).Round(time.Millisecond))

	ready := time.Now()

	nodes, err := listNodes(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if len(nodes) != 7 {
		t.Errorf("%d nodes in the restored cluster; want the backup's 4 and the 3 new ones", len(nodes))
	}
	for _, n := range old.Nodes {
		rec := nodes[n.ID()]
		if rec.GetLabels()["index"] != fmt.Sprint(n.Index) || rec.GetLabels()["restore"] != "kept" {
			t.Errorf("%v: labels %v after the restore", n, rec.GetLabels())
		}
		if rec.GetRoles().GetConsensusMember() != nil {
			t.Errorf("%v: still a consensus member after the restore", n)
		}
	}

	// The old worker, on its own storage, finds the restored curators at
	// the addresses it knew.
	back := startNode(t, "old-worker",
		"--storage", filepath.Join(worker.Dir, "storage"),
		"--address", worker.Address.String(),
		"--lease-ttl", testLeaseTTL.String(),
		"--heartbeat-interval", testHeartbeat.String())
	testutil.Eventually(t, 2*time.Minute, "the old worker reconnected to the restored cluster", func() error {
		nodes, err := listNodes(cfg)
		if err != nil {
			return err
		}
		return heardSince(nodes[worker.ID()], ready)
	})
	back.checkRunning(t)
	for _, n := range restored.Nodes {
		if err := clustertest.CuratorServing(nodes[n.ID()]); err != nil {
			t.Errorf("%v: %v", n, err)
		}
	}
	out, err = polisctl(cfg, "cluster", "info", "-o", "json")
	if err != nil {
		t.Fatal(err)
	}
	var info cpb.GetClusterInfoResponse
	if err := clustertest.UnmarshalJSON(out, &info); err != nil {
		t.Fatal(err)
	}
	rec := info.GetLastRecovery()
	if rec.GetFrom() != "backup" || rec.GetNodeId() != restored.Nodes[0].ID() || len(rec.GetLostNodeIds()) != 3 {
		t.Errorf("cluster info's last recovery: %v; want a restore onto %s from a backup, three members lost", rec, restored.Nodes[0].ID())
	}
}

// runNode runs polis-node to its end (a refusal) and returns its output.
func runNode(t *testing.T, args ...string) ([]byte, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	return exec.CommandContext(ctx, bin.node, args...).CombinedOutput()
}

// lastLine is the last line of a command's output.
func lastLine(b []byte) string {
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	return lines[len(lines)-1]
}

// phaseWriter logs the launcher's steps with the time since start.
type phaseWriter struct {
	tb    testing.TB
	start time.Time
}

func (w phaseWriter) Write(p []byte) (int, error) {
	w.tb.Helper()
	w.tb.Logf("phase %v: %s", time.Since(w.start).Round(time.Millisecond), strings.TrimRight(string(p), "\n"))
	return len(p), nil
}
