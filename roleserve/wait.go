package roleserve

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"time"

	"google.golang.org/grpc"

	cpb "github.com/polis-os/polis/api/curator/v1"
	"github.com/polis-os/polis/curator"
	"github.com/polis-os/polis/event"
)

// Predicates the workers wait on.

func notNil[T any](p *T) bool { return p != nil }

// hasCurator holds once the node can call a curator.
func hasCurator(m *ClusterMembership) bool { return m != nil && m.Curator != nil }

// localCuratorWait bounds the wait for the local curator's status. Its
// writer publishes a LocalControlPlane once the curator serves, so the wait
// normally ends at once; a curator that never serves makes the waiting
// worker fail, and its restart looks at the newest LocalControlPlane.
const localCuratorWait = 30 * time.Second

// localCuratorEndpoint returns where the curator of lcp serves, or nil when
// no curator runs on this node.
func localCuratorEndpoint(ctx context.Context, lcp *LocalControlPlane) (*cpb.CuratorEndpoint, error) {
	if lcp == nil || lcp.Curator == nil {
		return nil, nil
	}
	ctx, cancel := context.WithTimeout(ctx, localCuratorWait)
	defer cancel()
	st, err := event.Get(ctx, lcp.Curator.Status(), event.Filter(notNil[curator.Status]))
	if err != nil {
		return nil, fmt.Errorf("waiting for the local curator to serve: %w", err)
	}
	addr := st.Address.Addr()
	if addr.IsUnspecified() {
		// A curator listening on every address is reached locally through
		// loopback; its certificate is checked by node ID, not address.
		addr = netip.IPv6Loopback()
		if st.Address.Addr().Is4() {
			addr = netip.AddrFrom4([4]byte{127, 0, 0, 1})
		}
	}
	return &cpb.CuratorEndpoint{NodeId: st.NodeID, Address: addr.String(), Port: uint32(st.Address.Port())}, nil
}

// waitUntil is Inputs.Wait that also returns, with ok false, once deadline
// has passed: the way a worker with periodic work waits for "the next
// period, or an input changes first".
func waitUntil(ctx context.Context, in *event.Inputs, deadline time.Time) (why event.Why, ok bool, err error) {
	wctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	why, err = in.Wait(wctx)
	if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
		return event.Why{}, false, nil
	}
	return why, err == nil, err
}

// watchNodes watches the nodes req selects and calls apply with the whole
// watched state (by node ID) once the initial state is complete and after
// every later message. It returns apply's error, or the stream's: a Watch
// ends only with an error (the curator stepped down, the connection was
// closed), and the caller's restart watches again and gets the full state
// anew.
func watchNodes(ctx context.Context, conn grpc.ClientConnInterface, req *cpb.WatchRequest, apply func(map[string]*cpb.Node) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := cpb.NewCuratorServiceClient(conn).Watch(ctx, req)
	if err != nil {
		return fmt.Errorf("watching nodes: %w", err)
	}
	nodes := map[string]*cpb.Node{}
	complete := false
	for {
		msg, err := stream.Recv()
		if err != nil {
			return fmt.Errorf("watching nodes: %w", err)
		}
		for _, n := range msg.GetNodes() {
			nodes[n.GetId()] = n
		}
		for _, t := range msg.GetNodeTombstones() {
			delete(nodes, t.GetNodeId())
		}
		complete = complete || msg.GetInitialStateComplete()
		if !complete {
			continue
		}
		if err := apply(nodes); err != nil {
			return err
		}
	}
}
