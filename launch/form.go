package launch

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"net/netip"
	"time"

	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	cpb "github.com/polis-os/polis/api/curator/v1"
	nodev1 "github.com/polis-os/polis/api/node/v1"
	"github.com/polis-os/polis/curator"
	"github.com/polis-os/polis/identity"
	"github.com/polis-os/polis/ownerdir"
)

// form starts every node at once, bootstraps the cluster on the first
// and adds the others. A cluster restored from a backup is formed in
// turns instead: its register ticket is the backup's, which the launcher
// learns only once the restored node serves, so the others start then.
func (c *Cluster) form(ctx context.Context) error {
	if c.opts.RestoreBackup != "" {
		if err := c.restore(ctx); err != nil {
			return err
		}
		if err := c.startRegistering(ctx, c.Nodes[1:]); err != nil {
			return err
		}
	} else {
		if err := c.startAll(); err != nil {
			return err
		}
		if err := c.bootstrap(ctx); err != nil {
			return err
		}
	}
	if err := c.addNodes(ctx); err != nil {
		return err
	}
	if c.opts.ConsensusMembers && len(c.Nodes) > 1 {
		if err := c.refreshCurators(ctx); err != nil {
			return err
		}
	}
	if c.opts.Kubernetes {
		if err := c.startKubernetes(ctx); err != nil {
			return err
		}
	}
	c.progress("cluster ready: %d nodes, all UP and healthy", len(c.Nodes))
	return nil
}

// startAll writes every node's parameters and starts them all at once, so
// that their boots overlap (a VM's kernel takes seconds): the first
// bootstraps the cluster with a register ticket the launcher chose, and
// the others register with that ticket through the first node's curator,
// waiting for it to serve. Their parameters cannot carry the cluster's CA
// certificate, which the first node makes as it bootstraps: a joining
// node learns it from the first node's curator, which proves it knows the
// ticket (node: enrolment.learnCA). The ticket is made as the curator
// makes its own (curator.NewRegisterTicket), kept in the parameters files
// (secret) until each node is UP, and the owner may rotate it as any
// other.
func (c *Cluster) startAll() error {
	ownerKey, err := identity.GenerateKey()
	if err != nil {
		return err
	}
	c.ownerKey = ownerKey
	ticket, err := curator.NewRegisterTicket()
	if err != nil {
		return fmt.Errorf("launch: %w", err)
	}
	first := c.Nodes[0]
	if err := writeParameters(first, &nodev1.NodeParameters{Cluster: &nodev1.NodeParameters_ClusterBootstrap{
		ClusterBootstrap: &nodev1.ClusterBootstrap{
			OwnerPublicKey:              ownerKey.Public().(ed25519.PublicKey),
			InitialClusterConfiguration: &nodev1.ClusterConfiguration{PodNetwork: c.opts.podNetwork()},
			RegisterTicket:              ticket,
		},
	}}); err != nil {
		return err
	}
	register := &nodev1.NodeParameters{Cluster: &nodev1.NodeParameters_ClusterRegister{ClusterRegister: &nodev1.ClusterRegister{
		RegisterTicket: ticket,
		ClusterDirectory: &cpb.ClusterDirectory{Curators: []*cpb.CuratorEndpoint{
			{Address: first.Address.String(), Port: uint32(c.opts.CuratorPort)},
		}},
	}}}
	for _, n := range c.Nodes[1:] {
		if err := writeParameters(n, register); err != nil {
			return err
		}
	}
	for _, n := range c.Nodes {
		if err := c.StartNode(n); err != nil {
			return err
		}
	}
	return nil
}

// bootstrap waits for the first node to make the cluster and takes
// ownership of it.
func (c *Cluster) bootstrap(ctx context.Context) error {
	first, ownerKey := c.Nodes[0], c.ownerKey
	cur := netip.AddrPortFrom(first.Address, c.opts.CuratorPort)
	// The curator's port opens once the node has bootstrapped; taking
	// ownership is retried until then, and every attempt is bounded so a
	// node that never answers is reported, not waited for forever.
	err := c.poll(ctx, first.String()+": curator serving", func(ctx context.Context) (bool, error) {
		actx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		return ownershipTaken(ownerdir.TakeOwnership(actx, c.ConfigDir, []netip.AddrPort{cur}, ownerKey, func(fp string) bool {
			// We made this cluster a moment ago, on an address we just
			// found free: the CA it presents is its own.
			c.progress("owner: the cluster CA's SHA-256 fingerprint is %s", fp)
			return true
		}))
	})
	if err != nil {
		return err
	}
	c.progress("%v: curator serving", first)
	c.progress("owner: took ownership; polisctl configuration in %s", c.ConfigDir)
	if c.conn, err = ownerdir.Dial(c.ConfigDir); err != nil {
		return fmt.Errorf("launch: connecting as the owner: %w", err)
	}
	// The others may have registered already: the first node is the one
	// at its address.
	err = c.poll(ctx, first.String()+": UP and healthy", func(ctx context.Context) (bool, error) {
		rec, err := c.nodeByAddress(ctx, first.Address)
		if err != nil || rec == nil {
			return false, nil
		}
		first.setID(rec.Id)
		return healthyUp(rec), nil
	})
	if err != nil {
		return err
	}
	return forgetParameters(first)
}

// addNodes takes every node but the first (started with the first, see
// startAll) through its steps as soon as it is ready for them,
// independently of the others: registered, approved, UP and healthy, and
// (with ConsensusMembers) given the consensus member role and running a
// curator. The curator refuses a joining member while too many others
// are still learners, so a node's role is retried meanwhile; the nodes
// still booting lose no time.
func (c *Cluster) addNodes(ctx context.Context) error {
	if len(c.Nodes) == 1 {
		return nil
	}
	mgmt := cpb.NewManagementServiceClient(c.Conn())
	g, gctx := errgroup.WithContext(ctx)
	for _, n := range c.Nodes[1:] {
		g.Go(func() error { return c.addNode(gctx, mgmt, n) })
	}
	return g.Wait()
}

// addNode takes a started node through addNodes' steps (admit,
// addnodes.go).
func (c *Cluster) addNode(ctx context.Context, mgmt cpb.ManagementServiceClient, n *Node) error {
	return c.admit(ctx, mgmt, n, c.opts.ConsensusMembers)
}

// MakeConsensusMember gives n the ConsensusMember role and waits until it
// runs a curator and is healthy. The curator admits one joining member at
// a time, so a refusal because another is still catching up is retried.
func (c *Cluster) MakeConsensusMember(ctx context.Context, n *Node) error {
	if err := c.makeConsensusMember(ctx, n); err != nil {
		return err
	}
	return c.refreshCurators(ctx)
}

// makeConsensusMember is MakeConsensusMember but for refreshing the
// curators polisctl knows, which the caller does once it has added all
// the members it adds.
func (c *Cluster) makeConsensusMember(ctx context.Context, n *Node) error {
	mgmt := cpb.NewManagementServiceClient(c.Conn())
	yes := true
	err := c.poll(ctx, n.String()+": given the consensus member role", func(ctx context.Context) (bool, error) {
		_, err := mgmt.UpdateNodeRoles(ctx, &cpb.UpdateNodeRolesRequest{NodeId: n.ID(), ConsensusMember: &yes})
		switch status.Code(err) {
		case codes.OK:
			return true, nil
		case codes.FailedPrecondition, codes.Unavailable, codes.DeadlineExceeded:
			return false, nil
		default:
			return false, fmt.Errorf("launch: giving %v the consensus member role: %w", n, err)
		}
	})
	if err != nil {
		return err
	}
	err = c.poll(ctx, n.String()+": curator serving", func(ctx context.Context) (bool, error) {
		rec, err := c.node(ctx, n.ID())
		if err != nil || rec == nil {
			return false, nil
		}
		return healthyUp(rec) && rec.Status.GetRunningCurator() != nil, nil
	})
	if err != nil {
		return err
	}
	c.progress("%v: consensus member, curator serving", n)
	return nil
}

// ownershipTaken is the verdict on one attempt of TakeOwnership for poll:
// a curator that does not answer yet is worth asking again, but a CA other
// than the one polisctl's configuration pins (a stale configuration against
// a new cluster) will not change by waiting, and is reported at once.
func ownershipTaken(err error) (bool, error) {
	var mismatch *ownerdir.CAMismatchError
	if errors.As(err, &mismatch) {
		return false, fmt.Errorf("launch: taking ownership: %w", err)
	}
	if err != nil {
		return false, notYet{err}
	}
	return true, nil
}

// refreshCurators takes ownership again, which rewrites the curators in
// polisctl's configuration with those the cluster lists now (as polisctl
// cluster info does): the owner must still reach the cluster when the
// first node is down.
func (c *Cluster) refreshCurators(ctx context.Context) error {
	var curators []netip.AddrPort
	for _, n := range c.Nodes {
		if n.Running() {
			curators = append(curators, netip.AddrPortFrom(n.Address, c.opts.CuratorPort))
		}
	}
	err := c.poll(ctx, "refreshing the curators polisctl knows", func(ctx context.Context) (bool, error) {
		actx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		// The CA is pinned by now: trust is never asked.
		return ownershipTaken(ownerdir.TakeOwnership(actx, c.ConfigDir, curators, c.ownerKey, nil))
	})
	if err != nil {
		return err
	}
	// The launcher's own connection knows the curators it was dialled
	// with; give it the new list too.
	conn, err := ownerdir.Dial(c.ConfigDir)
	if err != nil {
		return fmt.Errorf("launch: connecting as the owner: %w", err)
	}
	c.connMu.Lock()
	old := c.conn
	c.conn = conn
	c.connMu.Unlock()
	return old.Close()
}
