package roleserve

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"
	"google.golang.org/grpc"

	cpb "github.com/polis-os/polis/api/curator/v1"
	"github.com/polis-os/polis/curator"
	"github.com/polis-os/polis/event"
	"github.com/polis-os/polis/supervisor"
)

// Predicates the workers wait on.

func notNil[T any](p *T) bool { return p != nil }

// hasCurator holds once the node can call a curator.
func hasCurator(m *ClusterMembership) bool { return m != nil && m.Curator != nil }

// waitUntil is Inputs.Wait that also returns, with ok false, once deadline
// has passed: the way a worker with periodic work waits for "the next
// period, or an input changes first".
func waitUntil(ctx context.Context, in *Inputs, deadline time.Time) (why event.Why, ok bool, err error) {
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

// stopIfDecommissioned ends a worker's retries when err is the curator's
// refusal of a decommissioned node: every later call is refused the same
// way, so the worker says why once and waits for the agent to stop instead
// of failing, being restarted and failing again for good. Any other err is
// returned as it is.
func stopIfDecommissioned(ctx context.Context, err error) error {
	if !curator.IsNodeDecommissioned(err) {
		return err
	}
	supervisor.Logger(ctx).Warn("this node was decommissioned: the cluster refuses its calls for good, so this worker stops asking", zap.Error(err))
	supervisor.Signal(ctx, supervisor.SignalHealthy)
	<-ctx.Done()
	return ctx.Err()
}
