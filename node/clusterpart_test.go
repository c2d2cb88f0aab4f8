package node_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	cpb "github.com/polis-os/polis/api/curator/v1"
	"github.com/polis-os/polis/event"
	"github.com/polis-os/polis/localstorage"
	"github.com/polis-os/polis/logring"
	"github.com/polis-os/polis/node"
	"github.com/polis-os/polis/node/nodetest"
	"github.com/polis-os/polis/node/pid1"
	"github.com/polis-os/polis/roleserve"
)

// memDisk stands for a machine's data disk (pid1.DataDisk) in a process
// node: it keeps only whether it is bound, and to which part.
type memDisk struct {
	mu   sync.Mutex
	part []byte
	// binds and unbinds count the changes.
	binds, unbinds int
}

func (d *memDisk) ClusterBound() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.part != nil
}

func (d *memDisk) Bind(part []byte) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.part != nil {
		if !bytes.Equal(d.part, part) {
			return errors.New("bound to another part")
		}
		return nil
	}
	d.part = bytes.Clone(part)
	d.binds++
	return nil
}

func (d *memDisk) Unbind() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.part != nil {
		d.unbinds++
	}
	d.part = nil
	return nil
}

func (d *memDisk) state() (part []byte, binds, unbinds int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return bytes.Clone(d.part), d.binds, d.unbinds
}

// fetch asks for a node's cluster part as PID 1 does at boot, from its
// storage (the ESP) alone.
func fetch(t *testing.T, tn *nodetest.Node) ([]byte, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(nodetest.Context(t), 20*time.Second)
	defer cancel()
	return node.FetchClusterPart(ctx, filepath.Join(tn.Dir, "storage"), localstorage.Unsealed{})
}

// TestDataDiskBinding: a node that runs no consensus member binds its
// data disk to the cluster once it is UP, with the part the curator keeps
// for it, and says so in its status; PID 1's way of asking (from the ESP
// alone, proving the node key) gets the same part. Made a consensus
// member, the node unbinds its disk before its member starts; without
// the role again, it binds it again, to the same part. Once the node is
// decommissioned and deleted, asking is refused, and the refusal is told
// from a cluster that does not answer.
func TestDataDiskBinding(t *testing.T) {
	disk := &memDisk{}
	i := 0
	c := nodetest.FormClusterWith(t, 2, &subnets, func(n *nodetest.Node) {
		if i == 1 {
			n.DataDisk = disk
		}
		i++
	})
	mgmt, id := c.Management, c.IDs[1]
	worker := c.Node(1)

	reportsBound := func(want bool) func() error {
		return func() error {
			if got := nodetest.ListNodes(t, mgmt)[id].GetStatus().GetDataClusterBound(); got != want {
				return fmt.Errorf("node %s reports data_cluster_bound %v", id, got)
			}
			if disk.ClusterBound() != want {
				return fmt.Errorf("the disk's bound is %v", !want)
			}
			return nil
		}
	}
	nodetest.Eventually(t, "the worker's disk bound to the cluster, and its status says so", reportsBound(true))
	part, _, _ := disk.state()
	got, err := fetch(t, worker)
	if err != nil {
		t.Fatalf("FetchClusterPart from the worker's storage: %v", err)
	}
	if !bytes.Equal(got, part) {
		t.Fatalf("FetchClusterPart = %x; the disk is bound to %x", got, part)
	}
	if status := nodetest.ListNodes(t, mgmt)[c.IDs[0]].GetStatus(); status.GetDataClusterBound() {
		t.Error("the first node, a consensus member without a data disk, reports a bound disk")
	}

	// Made a consensus member: unbound before its member starts.
	yes, no := true, false
	if _, err := mgmt.UpdateNodeRoles(nodetest.Context(t), &cpb.UpdateNodeRolesRequest{NodeId: id, ConsensusMember: &yes}); err != nil {
		t.Fatal(err)
	}
	worker.Voter(t)
	if disk.ClusterBound() {
		t.Fatal("a voter's data disk is bound to the cluster")
	}
	nodetest.Eventually(t, "the control plane unbound the disk before its member started", func() error {
		for _, e := range worker.Logs.Backlog(logring.Filter{}) {
			if strings.Contains(e.Message, "not bound to the cluster while a consensus member runs") {
				return nil
			}
		}
		return errors.New("no log line from the control plane's unbinding")
	})
	nodetest.Eventually(t, "the member's status says its disk is not bound", reportsBound(false))

	// The role taken away: bound again, to the same part.
	if _, err := mgmt.UpdateNodeRoles(nodetest.Context(t), &cpb.UpdateNodeRolesRequest{NodeId: id, ConsensusMember: &no}); err != nil {
		t.Fatal(err)
	}
	if _, err := event.Get(nodetest.Context(t), &worker.Agent.Values().LocalControlPlane, event.Filter(func(l *roleserve.LocalControlPlane) bool { return l == nil })); err != nil {
		t.Fatal(err)
	}
	nodetest.Eventually(t, "bound again once the role is gone", reportsBound(true))
	again, binds, unbinds := disk.state()
	if !bytes.Equal(again, part) || binds != 2 || unbinds != 1 {
		t.Fatalf("bound again to %x (first %x), %d binds, %d unbinds; want the same part, 2 and 1", again, part, binds, unbinds)
	}

	// Decommissioned and deleted: refused, and said so.
	worker.Stop()
	if _, err := mgmt.DecommissionNode(nodetest.Context(t), &cpb.DecommissionNodeRequest{NodeId: id}); err != nil {
		t.Fatal(err)
	}
	if _, err := fetch(t, worker); !errors.Is(err, pid1.ErrClusterPartRefused) || !strings.Contains(err.Error(), "decommissioned") {
		t.Fatalf("FetchClusterPart of a decommissioned node: %v; want a refusal that says it was decommissioned", err)
	}
	if _, err := mgmt.DeleteNode(nodetest.Context(t), &cpb.DeleteNodeRequest{NodeId: id}); err != nil {
		t.Fatal(err)
	}
	if _, err := fetch(t, worker); !errors.Is(err, pid1.ErrClusterPartRefused) {
		t.Fatalf("FetchClusterPart of a deleted node: %v; want a refusal", err)
	}

	// No curator up: not a refusal, and the error says so.
	c.Node(0).Stop()
	if _, err := fetch(t, worker); err == nil || errors.Is(err, pid1.ErrClusterPartRefused) || !strings.Contains(err.Error(), "no curator answers") {
		t.Fatalf("FetchClusterPart with no curator up: %v; want an error saying no curator answers", err)
	}
}
