package launch

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"

	"golang.org/x/sync/errgroup"

	cpb "github.com/polis-os/polis/api/curator/v1"
	nodev1 "github.com/polis-os/polis/api/node/v1"
)

// NewNodes describes nodes to add to a running cluster (AddNodes).
type NewNodes struct {
	// Count is how many; 0 means one per address of Addresses, or one.
	Count int
	// Addresses are the new nodes' addresses, one each; empty means the
	// addresses after the highest of the cluster's nodes (in the VM
	// network, for a VM cluster).
	Addresses []netip.Addr
	// ConsensusMembers makes each new node a consensus member once it is
	// UP, running a curator.
	ConsensusMembers bool
}

// AddNodes adds nodes to the running cluster as an operator adds
// machines: each starts on fresh storage (a process, or a VM with blank
// disks, like the cluster's others) with the register ticket the cluster
// gives now, and is registered, approved, UP and healthy and, with
// NewNodes.ConsensusMembers, made a consensus member running a curator.
// The nodes start at once and each goes through its steps on its own, as
// in Launch. They are appended to Nodes and returned, also on error (the
// ones started, for Close to stop). It must not run concurrently with
// itself.
func (c *Cluster) AddNodes(ctx context.Context, nn NewNodes) ([]*Node, error) {
	addrs, err := c.newAddresses(nn)
	if err != nil {
		return nil, err
	}
	mgmt := cpb.NewManagementServiceClient(c.Conn())
	params, err := c.registerParameters(ctx)
	if err != nil {
		return nil, err
	}
	var added []*Node
	for _, a := range addrs {
		n, err := c.newNode(a)
		if err != nil {
			return added, err
		}
		c.Nodes = append(c.Nodes, n)
		c.opts.Addresses = append(c.opts.Addresses, a)
		added = append(added, n)
		if err := writeParameters(n, params); err != nil {
			return added, err
		}
		if err := c.StartNode(n); err != nil {
			return added, err
		}
	}
	g, gctx := errgroup.WithContext(ctx)
	for _, n := range added {
		g.Go(func() error { return c.admit(gctx, mgmt, n, nn.ConsensusMembers) })
	}
	if err := g.Wait(); err != nil {
		return added, err
	}
	if nn.ConsensusMembers {
		return added, c.refreshCurators(ctx)
	}
	return added, nil
}

// registerParameters are the parameters of a node that registers with
// the register ticket the cluster gives now, through the curators its
// directory names then. The directory lists curators once the first node
// has reported its running curator: until then the ticket is of no use,
// and it is asked again.
func (c *Cluster) registerParameters(ctx context.Context) (*nodev1.NodeParameters, error) {
	mgmt := cpb.NewManagementServiceClient(c.Conn())
	var ticket *cpb.GetRegisterTicketResponse
	err := c.poll(ctx, "a register ticket naming a curator", func(ctx context.Context) (bool, error) {
		t, err := mgmt.GetRegisterTicket(ctx, &cpb.GetRegisterTicketRequest{})
		if err != nil || len(t.ClusterDirectory.GetCurators()) == 0 {
			return false, nil
		}
		ticket = t
		return true, nil
	})
	if err != nil {
		return nil, err
	}
	return &nodev1.NodeParameters{Cluster: &nodev1.NodeParameters_ClusterRegister{
		ClusterRegister: &nodev1.ClusterRegister{RegisterTicket: ticket.RegisterTicket, ClusterDirectory: ticket.ClusterDirectory},
	}}, nil
}

// startRegistering starts nodes, made already, with registerParameters.
func (c *Cluster) startRegistering(ctx context.Context, nodes []*Node) error {
	if len(nodes) == 0 {
		return nil
	}
	params, err := c.registerParameters(ctx)
	if err != nil {
		return err
	}
	for _, n := range nodes {
		if err := writeParameters(n, params); err != nil {
			return err
		}
		if err := c.StartNode(n); err != nil {
			return err
		}
	}
	return nil
}

// newAddresses are the addresses AddNodes puts its nodes at, checked.
func (c *Cluster) newAddresses(nn NewNodes) ([]netip.Addr, error) {
	count := nn.Count
	if count == 0 {
		count = max(len(nn.Addresses), 1)
	}
	addrs := nn.Addresses
	if len(addrs) == 0 {
		var last netip.Addr
		for _, n := range c.Nodes {
			if !last.IsValid() || last.Less(n.Address) {
				last = n.Address
			}
		}
		for a := last.Next(); len(addrs) < count; a = a.Next() {
			addrs = append(addrs, a)
		}
	}
	if len(addrs) != count {
		return nil, fmt.Errorf("launch: %d addresses for %d new nodes", len(addrs), count)
	}
	for i, a := range addrs {
		if !a.IsValid() || a.IsUnspecified() {
			return nil, fmt.Errorf("launch: address %v: want one a node can be reached on", a)
		}
		if slices.Contains(addrs[:i], a) || slices.ContainsFunc(c.Nodes, func(n *Node) bool { return n.Address == a }) {
			return nil, fmt.Errorf("launch: address %v is taken: every node needs its own", a)
		}
	}
	if err := c.platform.checkAddresses(addrs); err != nil {
		return nil, err
	}
	return addrs, nil
}

// newNode makes the handle of a new node at a, numbered after the last.
func (c *Cluster) newNode(a netip.Addr) (*Node, error) {
	i := len(c.Nodes) + 1
	n := &Node{Index: i, Address: a, Dir: filepath.Join(c.BaseDir, fmt.Sprintf("node%d", i)), report: c.progress}
	if _, err := os.Stat(n.Dir); err == nil {
		return nil, fmt.Errorf("launch: %s exists already: a new node needs fresh storage", n.Dir)
	}
	if err := os.MkdirAll(n.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("launch: %w", err)
	}
	n.m, n.Log = c.platform.newMachine(n)
	return n, nil
}

// admit takes a started new node through its steps: registered, approved,
// UP and healthy, its parameters forgotten, and, if member, made a
// consensus member.
func (c *Cluster) admit(ctx context.Context, mgmt cpb.ManagementServiceClient, n *Node, member bool) error {
	// Nodes are matched to records by the address they report, among
	// the nodes waiting for approval: a restored or recovered cluster
	// keeps the records of its old nodes, which may have had the same
	// addresses.
	err := c.poll(ctx, n.String()+": registered", func(ctx context.Context) (bool, error) {
		rec, err := c.nodeByAddress(ctx, n.Address)
		if err != nil || rec == nil || rec.State != cpb.NodeState_NODE_STATE_NEW {
			return false, nil
		}
		n.setID(rec.Id)
		return true, nil
	})
	if err != nil {
		return err
	}
	c.progress("%v: registered as %s; approving it", n, n.ID())
	if _, err := mgmt.ApproveNode(ctx, &cpb.ApproveNodeRequest{NodeId: n.ID()}); err != nil {
		return fmt.Errorf("launch: approving %v: %w", n, err)
	}
	if err := c.WaitHealthy(ctx, n); err != nil {
		return err
	}
	c.progress("%v: UP and healthy", n)
	if err := forgetParameters(n); err != nil {
		return err
	}
	if !member {
		return nil
	}
	return c.makeConsensusMember(ctx, n)
}
