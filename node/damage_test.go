package node_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	cpb "github.com/polis-os/polis/api/curator/v1"
	"github.com/polis-os/polis/localstorage"
	"github.com/polis-os/polis/node"
	"github.com/polis-os/polis/node/nodetest"
)

// flipLastByte damages a file the way a bad sector would: one bit of its
// content, the length unchanged.
func flipLastByte(t *testing.T, path string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)-1] ^= 0x01
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// A lone control-plane node whose saved roles are damaged still starts its
// control plane (they are rebuilt from its consensus data), and a worker
// whose saved cluster directory is damaged still finds the curators (the
// directory is rebuilt from its parameters, which it kept without the
// ticket). Before, the first never started etcd and the second logged "no
// curator endpoints are known" forever.
func TestDamagedSavedStateRebuilt(t *testing.T) {
	c := nodetest.FormCluster(t, 2, &subnets)
	ticket := nodetest.RegisterTicket(t, c.Management)
	cp, worker := c.Node(0), c.Node(1)
	settled(t, cp)
	settled(t, worker)
	noTicketOnDisk(t, worker, ticket.RegisterTicket)
	cp.Stop()
	worker.Stop()
	for _, n := range []*nodetest.Node{cp, worker} {
		if err := os.Remove(n.ParametersFile()); err != nil {
			t.Fatal(err)
		}
	}
	flipLastByte(t, storage(t, cp).Data.Roles.Path)
	flipLastByte(t, storage(t, worker).ESP.ClusterDirectory.Path)
	// The worker's saved roles go too: seeing them saved again proves it
	// reached a curator.
	if err := storage(t, worker).Data.Roles.Remove(); err != nil {
		t.Fatal(err)
	}

	cp.Start(t)
	cp.Voter(t)
	if id := settled(t, cp); id != c.IDs[0] {
		t.Fatalf("the control-plane node came back as %s, want %s", id, c.IDs[0])
	}
	worker.Start(t)
	if id := settled(t, worker); id != c.IDs[1] {
		t.Fatalf("the worker came back as %s, want %s", id, c.IDs[1])
	}
}

// A damaged sealed configuration stops the node with an error that names
// the file and says what to do; it never panics and never makes the node
// another node.
func TestDamagedSealedConfiguration(t *testing.T) {
	c := nodetest.FormCluster(t, 1, &subnets)
	n := c.Node(0)
	settled(t, n)
	n.Stop()
	root := storage(t, n)
	flipLastByte(t, root.ESP.SealedConfiguration.Path)
	a, err := node.New(node.Config{StorageRoot: root.Dir, Address: n.Addr})
	if err != nil {
		t.Fatal(err)
	}
	err = a.Run(nodetest.Context(t))
	if !errors.Is(err, localstorage.ErrCorrupt) || !strings.Contains(err.Error(), root.ESP.SealedConfiguration.Path) || !strings.Contains(err.Error(), "register it again") {
		t.Fatalf("Run over a damaged sealed configuration = %v, want a CorruptError naming the file and what to do", err)
	}
	if _, err := os.Stat(filepath.Join(root.Data.Etcd.Path, "identity.json")); err != nil {
		t.Fatalf("the consensus data is gone: %v", err)
	}
	var roles cpb.Roles
	if err := root.Data.Roles.ReadProto(&roles); err != nil {
		t.Fatalf("the saved roles are gone: %v", err)
	}
}
