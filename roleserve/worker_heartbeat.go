package roleserve

import (
	"context"
	"fmt"
	"time"

	"go.uber.org/zap"

	cpb "github.com/polis-os/polis/api/curator/v1"
	"github.com/polis-os/polis/event"
	"github.com/polis-os/polis/supervisor"
)

// workerHeartbeat keeps this node's liveness in the curator: it sends a
// heartbeat at once and then at the interval each answer names, since the
// curator, which judges health, sets the pace.
type workerHeartbeat struct {
	*Worker
	membership event.ValueWatch[*ClusterMembership] // reads
}

func newWorkerHeartbeat(g *Graph, v *Values) *workerHeartbeat {
	h := g.Worker("heartbeat")
	return &workerHeartbeat{Worker: h, membership: Reads[*ClusterMembership](h, &v.Membership)}
}

// defaultHeartbeatInterval is used when the curator names no interval, so
// that a malformed answer cannot make the node beat in a tight loop.
const defaultHeartbeatInterval = 5 * time.Second

func (w *workerHeartbeat) run(ctx context.Context) error {
	log := supervisor.Logger(ctx)
	in := w.Inputs()
	defer in.Close()
	m := Input(in, w.membership, hasCurator)
	why, err := in.Wait(ctx)
	if err != nil {
		return err
	}
	log.Info("heartbeating", zap.Stringer("because", why))
	supervisor.Signal(ctx, supervisor.SignalHealthy)
	for {
		interval, err := w.beat(ctx, m.Latest())
		if err != nil {
			return stopIfDecommissioned(ctx, err)
		}
		// Until the next beat is due; a new membership beats at once,
		// on its new connection.
		why, changed, err := waitUntil(ctx, in, time.Now().Add(interval))
		if err != nil {
			return err
		}
		if changed {
			log.Info("new membership, heartbeating at once", zap.Stringer("because", why))
		}
	}
}

// beat sends one heartbeat and returns when the next is due.
func (w *workerHeartbeat) beat(ctx context.Context, m *ClusterMembership) (time.Duration, error) {
	ctx, cancel := context.WithTimeout(ctx, rpcTimeout)
	defer cancel()
	res, err := cpb.NewCuratorServiceClient(m.Curator).Heartbeat(ctx, &cpb.HeartbeatRequest{})
	if err != nil {
		return 0, fmt.Errorf("heartbeat: %w", err)
	}
	if d := res.GetInterval().AsDuration(); d > 0 {
		return d, nil
	}
	return defaultHeartbeatInterval, nil
}
