package roleserve

import (
	"context"
	"fmt"
	"time"

	"go.uber.org/zap"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	cpb "github.com/polis-os/polis/api/curator/v1"
	"github.com/polis-os/polis/event"
	"github.com/polis-os/polis/supervisor"
)

// workerStatusPush reports this node's status to the curator whenever it
// changes: its address, version and boot, the curator it runs, which is
// how the other nodes find that curator (see workerClusterDirectory), and
// what it runs of Kubernetes, the consensus snapshots it keeps and
// whether its data disk is bound to the cluster (what polisctl node
// describe shows).
type workerStatusPush struct {
	*Worker
	membership   event.ValueWatch[*ClusterMembership]       // reads
	localCurator event.ValueWatch[*cpb.CuratorEndpoint]     // reads
	kubernetes   event.ValueWatch[*KubernetesStatus]        // reads
	kubeWorker   event.ValueWatch[*KubernetesWorkerStatus]  // reads
	snapshots    event.ValueWatch[[]*cpb.ConsensusSnapshot] // reads
	dataBound    event.ValueWatch[bool]                     // reads

	node NodeInfo
	// consensusPort is where a consensus member on this node listens for
	// its peers (see ControlPlaneConfig), reported in advance so that the
	// curator can add the member when it gives the node ConsensusMember.
	consensusPort uint16
}

func newWorkerStatusPush(g *Graph, v *Values, node NodeInfo, consensusPort uint16) *workerStatusPush {
	h := g.Worker("statuspush")
	return &workerStatusPush{
		Worker:        h,
		membership:    Reads[*ClusterMembership](h, &v.Membership),
		localCurator:  Reads[*cpb.CuratorEndpoint](h, &v.LocalCurator),
		kubernetes:    Reads[*KubernetesStatus](h, &v.Kubernetes),
		kubeWorker:    Reads[*KubernetesWorkerStatus](h, &v.KubernetesWorker),
		snapshots:     Reads[[]*cpb.ConsensusSnapshot](h, &v.ConsensusSnapshots),
		dataBound:     Reads[bool](h, &v.DataClusterBound),
		node:          node,
		consensusPort: consensusPort,
	}
}

// rpcTimeout bounds each unary call to the curator: the client cannot tell
// a silently partitioned leader from a slow one, so every call needs a
// deadline (see curator/client).
const rpcTimeout = 15 * time.Second

func (w *workerStatusPush) run(ctx context.Context) error {
	log := supervisor.Logger(ctx)
	in := w.Inputs()
	defer in.Close()
	m := Input(in, w.membership, hasCurator)
	local := Input(in, w.localCurator, nil)
	kube := Input(in, w.kubernetes, nil)
	kubeWorker := Input(in, w.kubeWorker, nil)
	snapshots := Input(in, w.snapshots, nil)
	dataBound := Input(in, w.dataBound, nil)

	// sent is what this run reported; a restart reports again, since a
	// failed call may or may not have reached the curator.
	var sent *cpb.NodeStatus
	for {
		why, err := in.Wait(ctx)
		if err != nil {
			return err
		}
		status := w.status(local.Latest(), kube.Latest(), kubeWorker.Latest())
		status.ConsensusSnapshots = snapshots.Latest()
		status.DataClusterBound = dataBound.Latest()
		// A new membership may be another cluster's view of this node
		// (new credentials), so it is told even an unchanged status.
		if proto.Equal(status, sent) && !m.Changed() {
			log.Debug("status unchanged", zap.Stringer("because", why))
			continue
		}
		if err := w.push(ctx, m.Latest(), status); err != nil {
			return stopIfDecommissioned(ctx, err)
		}
		log.Info("status reported", zap.Stringer("because", why), zap.Stringer("status", status))
		sent = status
		supervisor.Signal(ctx, supervisor.SignalHealthy)
	}
}

// status is the node's status with the local curator serving at local (nil:
// none) and Kubernetes as kube says, without a timestamp, so that two
// statuses compare equal when nothing in them changed.
func (w *workerStatusPush) status(local *cpb.CuratorEndpoint, kube *KubernetesStatus, kubeWorker *KubernetesWorkerStatus) *cpb.NodeStatus {
	s := &cpb.NodeStatus{
		ExternalAddress:   w.node.ExternalAddress.String(),
		Version:           w.node.Version,
		BootId:            w.node.BootID,
		ConsensusPeerPort: uint32(w.consensusPort),
		Kubernetes:        kubernetesProto(kube, kubeWorker),
		DataSealing:       w.node.DataSealing,
	}
	if local != nil {
		s.RunningCurator = &cpb.RunningCurator{Port: local.GetPort()}
	}
	return s
}

func (w *workerStatusPush) push(ctx context.Context, m *ClusterMembership, status *cpb.NodeStatus) error {
	ctx, cancel := context.WithTimeout(ctx, rpcTimeout)
	defer cancel()
	req := &cpb.UpdateNodeStatusRequest{Status: proto.CloneOf(status)}
	req.Status.Timestamp = timestamppb.Now()
	if _, err := cpb.NewCuratorServiceClient(m.Curator).UpdateNodeStatus(ctx, req); err != nil {
		return fmt.Errorf("reporting the node status: %w", err)
	}
	return nil
}
