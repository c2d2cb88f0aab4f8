package launch

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"time"

	"google.golang.org/grpc"

	cpb "github.com/polis-os/polis/api/curator/v1"
	"github.com/polis-os/polis/ownerdir"
)

// WaitHealthy waits until the curator lists n as UP and healthy.
func (c *Cluster) WaitHealthy(ctx context.Context, n *Node) error {
	return c.poll(ctx, n.String()+": UP and healthy", func(ctx context.Context) (bool, error) {
		rec, err := c.node(ctx, n.ID())
		return err == nil && rec != nil && healthyUp(rec), nil
	})
}

// Conn is the owner's connection to the curator leader, through the
// curators polisctl's configuration listed when the launcher last dialled
// (after the last consensus member it added).
func (c *Cluster) Conn() *grpc.ClientConn {
	c.connMu.Lock()
	defer c.connMu.Unlock()
	return c.conn
}

// ListNodes lists the cluster's nodes as the owner sees them.
func (c *Cluster) ListNodes(ctx context.Context) ([]*cpb.Node, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	stream, err := cpb.NewManagementServiceClient(c.Conn()).ListNodes(ctx, &cpb.ListNodesRequest{})
	if err != nil {
		return nil, err
	}
	var res []*cpb.Node
	for {
		resp, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return res, nil
		}
		if err != nil {
			return nil, err
		}
		res = append(res, resp.Nodes...)
	}
}

func (c *Cluster) node(ctx context.Context, id string) (*cpb.Node, error) {
	nodes, err := c.ListNodes(ctx)
	for _, n := range nodes {
		if n.Id == id {
			return n, nil
		}
	}
	return nil, err
}

// nodeByAddress returns the record of the node at address a; among
// several (a restored cluster keeps its old nodes' records), one waiting
// for approval, else one that holds ConsensusMember.
func (c *Cluster) nodeByAddress(ctx context.Context, a netip.Addr) (*cpb.Node, error) {
	nodes, err := c.ListNodes(ctx)
	var found *cpb.Node
	for _, n := range nodes {
		if n.Status.GetExternalAddress() != a.String() {
			continue
		}
		if found == nil || n.State == cpb.NodeState_NODE_STATE_NEW || (found.State != cpb.NodeState_NODE_STATE_NEW && n.Roles.GetConsensusMember() != nil) {
			found = n
		}
	}
	return found, err
}

// Leader returns the node whose curator leads, as the curators say. It
// reaches them through the curators saved in polisctl's configuration at
// the time of the call, so it follows what polisctl cluster info saved.
func (c *Cluster) Leader(ctx context.Context) (*Node, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	conn, err := ownerdir.Dial(c.ConfigDir)
	if err != nil {
		return nil, fmt.Errorf("launch: %w", err)
	}
	defer conn.Close()
	resp, err := cpb.NewCuratorServiceClient(conn).GetLeader(ctx, &cpb.GetLeaderRequest{})
	if err != nil {
		return nil, fmt.Errorf("launch: asking who leads: %w", err)
	}
	for _, n := range c.Nodes {
		if n.ID() == resp.Leader.GetNodeId() {
			return n, nil
		}
	}
	return nil, fmt.Errorf("launch: the leader is %s, which this cluster does not know", resp.Leader.GetNodeId())
}

func healthyUp(n *cpb.Node) bool {
	return n.State == cpb.NodeState_NODE_STATE_UP && n.Health == cpb.NodeHealth_NODE_HEALTH_HEALTHY
}
