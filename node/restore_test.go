package node_test

import (
	"bytes"
	"crypto/ed25519"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"testing"

	"go.uber.org/zap/zaptest"

	cpb "github.com/polis-os/polis/api/curator/v1"
	"github.com/polis-os/polis/curator/backup"
	"github.com/polis-os/polis/localstorage"
	"github.com/polis-os/polis/node"
	"github.com/polis-os/polis/node/nodetest"
)

// TestRestoreFromBackup: a backup of a cluster of two, restored onto a
// new node's fresh storage after the cluster is gone, makes the new node
// the single consensus member of the restored cluster with every node and
// label; a restore that was interrupted while it was being prepared
// starts over; a node started again with the same restore is an ordinary
// start; a restore onto storage that holds a node is refused.
func TestRestoreFromBackup(t *testing.T) {
	c := nodetest.FormCluster(t, 2, &subnets)
	mgmt, ids := c.Management, c.IDs
	for i, id := range ids {
		if _, err := mgmt.UpdateNodeLabels(nodetest.Context(t), &cpb.UpdateNodeLabelsRequest{NodeId: id, Set: map[string]string{"index": fmt.Sprint(i)}}); err != nil {
			t.Fatal(err)
		}
	}
	file := takeBackup(t, mgmt, c.OwnerKey.Public().(ed25519.PublicKey))
	for _, n := range c.Nodes {
		n.Stop()
	}

	// Storage that holds a node is refused, before anything starts.
	old, err := node.New(node.Config{StorageRoot: filepath.Join(c.Node(0).Dir, "storage"), Address: c.Node(0).Addr, Restore: &node.RestoreSource{Backup: file, OwnerKey: c.OwnerKey}})
	if err != nil {
		t.Fatal(err)
	}
	if err := old.PrepareRestore(nodetest.Context(t), zaptest.NewLogger(t)); !errors.Is(err, node.ErrStorageInUse) {
		t.Errorf("restoring onto a node's storage: %v; want ErrStorageInUse", err)
	}

	// A restore interrupted while it was prepared: a mark and a stray
	// consensus directory, which the next start clears.
	n := nodetest.NewNode(t, subnets.Addrs(1)[0])
	root, err := localstorage.New(filepath.Join(n.Dir, "storage"))
	if err != nil {
		t.Fatal(err)
	}
	if err := root.Create(); err != nil {
		t.Fatal(err)
	}
	mark := localstorage.File{Path: filepath.Join(root.Data.Node.Path, "restore.json"), Secret: true}
	if err := mark.Write([]byte(`{"state":"preparing","from":"an earlier try"}`)); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(root.Data.Etcd.Path, "pki"), 0o700); err != nil {
		t.Fatal(err)
	}

	n.Restore = &node.RestoreSource{Backup: file, OwnerKey: c.OwnerKey}
	n.Start(t)
	n.Voter(t)
	id := n.Credentials(t).NodeID
	owner := nodetest.Owner(t, c.OwnerKey, c.CA, []*cpb.CuratorEndpoint{{NodeId: id, Address: n.Addr.String(), Port: uint32(n.Curator().Port())}})
	check := func() error {
		nodes := nodetest.ListNodes(t, owner)
		if len(nodes) != 3 {
			return fmt.Errorf("%d nodes, want the backup's two and the new one", len(nodes))
		}
		for i, old := range ids {
			if nodes[old].GetLabels()["index"] != fmt.Sprint(i) {
				return fmt.Errorf("node %s has labels %v", old, nodes[old].GetLabels())
			}
			if nodes[old].GetRoles().GetConsensusMember() != nil {
				return fmt.Errorf("node %s, lost, is still a consensus member", old)
			}
		}
		if nodes[id].GetRoles().GetConsensusMember() == nil || nodes[id].State != cpb.NodeState_NODE_STATE_UP {
			return fmt.Errorf("the restored node: %v", nodes[id])
		}
		info, err := owner.GetClusterInfo(nodetest.Context(t), &cpb.GetClusterInfoRequest{})
		if err != nil {
			return err
		}
		if r := info.GetLastRecovery(); r.GetFrom() != "backup" || r.GetNodeId() != id || len(r.GetLostNodeIds()) != 1 || r.GetLostNodeIds()[0] != ids[0] {
			return fmt.Errorf("last recovery %v", r)
		}
		return nil
	}
	nodetest.Eventually(t, "the restored cluster with every node and label, the old member dropped", check)

	// Started again with the same restore: an ordinary start.
	n.Stop()
	n.Start(t)
	n.Voter(t)
	if got := n.Credentials(t).NodeID; got != id {
		t.Errorf("the restored node came back as %s, want %s", got, id)
	}
	nodetest.Eventually(t, "the restored cluster after a restart", check)
}

// takeBackup takes a backup through mgmt, encrypted to owner, into a file.
func takeBackup(t *testing.T, mgmt cpb.ManagementServiceClient, owner ed25519.PublicKey) string {
	t.Helper()
	stream, err := mgmt.BackupCluster(nodetest.Context(t), &cpb.BackupClusterRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var snap bytes.Buffer
	var info *cpb.BackupInfo
	for {
		msg, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if msg.Info != nil {
			info = msg.Info
		}
		snap.Write(msg.Chunk)
	}
	var out bytes.Buffer
	if err := backup.Write(&out, owner, backup.Info{TakenAt: info.TakenAt.AsTime(), NodeID: info.NodeId, Revision: info.Revision}, &snap); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "cluster.backup")
	if err := os.WriteFile(file, out.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	return file
}
