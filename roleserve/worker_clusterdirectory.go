package roleserve

import (
	"context"
	"net/netip"
	"slices"
	"strings"

	"go.uber.org/zap"
	"google.golang.org/protobuf/proto"

	cpb "github.com/polis-os/polis/api/curator/v1"
	"github.com/polis-os/polis/event"
	"github.com/polis-os/polis/localstorage"
	"github.com/polis-os/polis/supervisor"
)

// workerClusterDirectory keeps the list of the cluster's curators current,
// for the membership's connection, and saves it with the cluster CA for the
// next boot, when it is the only way back to the cluster.
//
// It reads the membership and writes the directory the membership reads:
// the loop is broken at start, where the saved directory (or, on a node that
// has none, an empty one) is published before any curator is asked.
type workerClusterDirectory struct {
	g          *Graph
	membership event.ValueWatch[*ClusterMembership] // reads
	directory  event.Value[[]*cpb.CuratorEndpoint]  // writes

	saved *Saved[*cpb.ClusterDirectory]
}

func newWorkerClusterDirectory(g *Graph, v *Values, file localstorage.File) *workerClusterDirectory {
	const name = "clusterdirectory"
	return &workerClusterDirectory{
		g:          g,
		membership: Reads[*ClusterMembership](g, name, &v.Membership),
		directory:  Writes[[]*cpb.CuratorEndpoint](g, name, &v.Directory),
		saved:      SavedDirectory(file),
	}
}

func (w *workerClusterDirectory) run(ctx context.Context) error {
	log := supervisor.Logger(ctx)
	saved, err := w.saved.Load(log)
	if err != nil {
		log.Warn("ignoring the saved cluster directory", zap.Error(err))
	}
	// Empty means "no curator known": a freshly bootstrapped node finds its
	// own curator through LocalControlPlane instead.
	log.Info("publishing the saved cluster directory", zap.Int("curators", len(saved.GetCurators())))
	w.directory.Set(saved.GetCurators())

	in := w.g.Inputs("clusterdirectory")
	defer in.Close()
	m := Input(in, w.membership, hasCurator)
	why, err := in.Wait(ctx)
	if err != nil {
		return err
	}
	log.Info("watching the cluster's curators", zap.Stringer("because", why))
	supervisor.Signal(ctx, supervisor.SignalHealthy)
	ca := m.Latest().Credentials.CACertificate.Raw
	// A new membership closes the connection this stream runs on; the
	// restart that follows watches through the new one.
	req := &cpb.WatchRequest{Target: &cpb.WatchRequest_AllNodes{AllNodes: &cpb.AllNodes{}}}
	return watchNodes(ctx, m.Latest().Curator, req, func(nodes map[string]*cpb.Node) error {
		curators := curatorsOf(nodes)
		if len(curators) == 0 {
			// A curator is answering, so the cluster has one: an empty
			// list only means no curator has reported its status yet.
			// Saving it would leave the next boot with no way back.
			return nil
		}
		dir := &cpb.ClusterDirectory{Curators: curators, CaCertificate: ca}
		if proto.Equal(dir, saved) {
			return nil
		}
		if err := w.saved.Save(dir); err != nil {
			return err
		}
		log.Info("new cluster directory", zap.Stringer("directory", dir))
		w.directory.Set(curators)
		saved = dir
		return nil
	})
}

// curatorsOf lists the curators among nodes, in the order of the
// ClusterDirectory message: UP nodes that hold ConsensusMember (given by
// the curator, never self-reported) and report a running curator at a
// valid address, by node ID.
func curatorsOf(nodes map[string]*cpb.Node) []*cpb.CuratorEndpoint {
	var eps []*cpb.CuratorEndpoint
	for _, n := range nodes {
		st := n.GetStatus()
		if n.GetState() != cpb.NodeState_NODE_STATE_UP || n.GetRoles().GetConsensusMember() == nil || st.GetRunningCurator() == nil {
			continue
		}
		addr, err := netip.ParseAddr(st.GetExternalAddress())
		if err != nil || st.GetRunningCurator().GetPort() == 0 {
			continue
		}
		eps = append(eps, &cpb.CuratorEndpoint{NodeId: n.GetId(), Address: addr.String(), Port: st.GetRunningCurator().GetPort()})
	}
	slices.SortFunc(eps, func(a, b *cpb.CuratorEndpoint) int { return strings.Compare(a.GetNodeId(), b.GetNodeId()) })
	return eps
}
