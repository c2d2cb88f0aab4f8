package node_test

import (
	"crypto/ed25519"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	cpb "github.com/polis-os/polis/api/curator/v1"
	nodev1 "github.com/polis-os/polis/api/node/v1"
	"github.com/polis-os/polis/curator"
	"github.com/polis-os/polis/identity"
	"github.com/polis-os/polis/localstorage"
	"github.com/polis-os/polis/logring"
	"github.com/polis-os/polis/node/nodetest"
	"github.com/polis-os/polis/roleserve"
)

// A node can be started before its cluster exists, as polis-launch starts
// every VM at once: the first node bootstraps with a ticket chosen for it,
// and the other's parameters carry that ticket and the first node's
// address but no CA certificate. The joining node waits (and says so)
// until the first node's curator serves, learns the CA from the curator's
// proof that it knows the ticket, registers and enrols into that cluster.
// A node with another ticket never learns the CA, so it never sends its
// ticket to the cluster, and says why. The first node forgets the ticket
// it bootstrapped with once it has.
func TestRegisterBeforeTheClusterExists(t *testing.T) {
	addrs := subnets.Addrs(3)
	ticket, err := curator.NewRegisterTicket()
	if err != nil {
		t.Fatal(err)
	}
	other, err := curator.NewRegisterTicket()
	if err != nil {
		t.Fatal(err)
	}
	toFirst := []*cpb.CuratorEndpoint{{Address: addrs[0].String(), Port: roleserve.DefaultCuratorPort}}
	register := func(ticket []byte) *nodev1.NodeParameters {
		return &nodev1.NodeParameters{Cluster: &nodev1.NodeParameters_ClusterRegister{ClusterRegister: &nodev1.ClusterRegister{
			RegisterTicket:   ticket,
			ClusterDirectory: &cpb.ClusterDirectory{Curators: toFirst},
		}}}
	}
	joining := nodetest.StartNode(t, addrs[1], register(ticket))
	impostor := nodetest.StartNode(t, addrs[2], register(other))
	// The joining node is waiting before the cluster exists.
	waitLog(t, joining, "waiting for a curator to answer")

	ownerKey, err := identity.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	first := nodetest.StartNode(t, addrs[0], &nodev1.NodeParameters{Cluster: &nodev1.NodeParameters_ClusterBootstrap{ClusterBootstrap: &nodev1.ClusterBootstrap{
		OwnerPublicKey: ownerKey.Public().(ed25519.PublicKey),
		RegisterTicket: ticket,
	}}})
	creds := first.Credentials(t)
	mgmt := nodetest.Owner(t, ownerKey, creds.CACertificate, toFirst)

	var id string
	nodetest.Eventually(t, "the joining node registered", func() error {
		for nid, n := range nodetest.ListNodes(t, mgmt) {
			if n.State == cpb.NodeState_NODE_STATE_NEW {
				if n.GetStatus().GetExternalAddress() != addrs[1].String() {
					return fmt.Errorf("node %s at %s registered", nid, n.GetStatus().GetExternalAddress())
				}
				id = nid
				return nil
			}
		}
		return fmt.Errorf("no NEW node")
	})
	if _, err := mgmt.ApproveNode(nodetest.Context(t), &cpb.ApproveNodeRequest{NodeId: id}); err != nil {
		t.Fatal(err)
	}
	jc := joining.Credentials(t)
	if jc.NodeID != id || !jc.CACertificate.Equal(creds.CACertificate) {
		t.Fatalf("the joining node enrolled as %s with CA %q, want %s with the first node's", jc.NodeID, jc.CACertificate.Subject, id)
	}
	waitLog(t, joining, "learned the cluster CA from a curator that proved it knows the register ticket")

	// The impostor's curator answer never checks: it says so, and it
	// never registers (its ticket never left it).
	waitLog(t, impostor, "does not prove that it knows this node's register ticket")
	if n := len(nodetest.ListNodes(t, mgmt)); n != 2 {
		t.Errorf("%d nodes, want 2: the node with the other ticket got in", n)
	}

	// The first node's parameters on its ESP no longer hold the ticket.
	root, err := localstorage.New(filepath.Join(first.Dir, "storage"))
	if err != nil {
		t.Fatal(err)
	}
	var kept nodev1.NodeParameters
	if err := root.ESP.NodeParameters.ReadProto(&kept); err != nil {
		t.Fatal(err)
	}
	if kept.GetClusterBootstrap() == nil || len(kept.GetClusterBootstrap().GetRegisterTicket()) != 0 {
		t.Errorf("the first node's parameters after bootstrap: %v, want bootstrap parameters without the ticket", &kept)
	}
}

// waitLog waits until n has logged a line whose message or fields hold s.
func waitLog(t *testing.T, n *nodetest.Node, s string) {
	t.Helper()
	nodetest.Eventually(t, fmt.Sprintf("node %v logging %q", n.Addr, s), func() error {
		for _, e := range n.Logs.Backlog(logring.Filter{}) {
			if strings.Contains(e.Message, s) || strings.Contains(e.Fields, s) {
				return nil
			}
		}
		return fmt.Errorf("not yet")
	})
}
