package roleserve

import (
	"context"
	"fmt"

	"go.uber.org/zap"
	"google.golang.org/protobuf/proto"

	cpb "github.com/polis-os/polis/api/curator/v1"
	"github.com/polis-os/polis/event"
	"github.com/polis-os/polis/localstorage"
	"github.com/polis-os/polis/supervisor"
)

// workerClusterDirectory keeps the list of the cluster's curators current,
// for the membership's connection, and saves it with the cluster CA for the
// next boot, when it is the only way back to the cluster. The curator says
// who is a curator (WatchClusterDirectory): UP nodes that hold
// ConsensusMember and report a running curator at a valid address.
//
// It reads the membership and writes the directory the membership reads:
// the loop is broken at start, where the saved directory (or, on a node that
// has none, an empty one) is published before any curator is asked.
type workerClusterDirectory struct {
	*Worker
	membership event.ValueWatch[*ClusterMembership] // reads
	directory  event.Value[[]*cpb.CuratorEndpoint]  // writes

	saved *Saved[*cpb.ClusterDirectory]
}

func newWorkerClusterDirectory(g *Graph, v *Values, file localstorage.File) *workerClusterDirectory {
	h := g.Worker("clusterdirectory")
	return &workerClusterDirectory{
		Worker:     h,
		membership: Reads[*ClusterMembership](h, &v.Membership),
		directory:  Writes[[]*cpb.CuratorEndpoint](h, &v.Directory),
		saved:      SavedDirectory(file),
	}
}

func (w *workerClusterDirectory) run(ctx context.Context) error {
	log := supervisor.Logger(ctx)
	saved := w.saved.Load(log)
	// Empty means "no curator known": a freshly bootstrapped node finds its
	// own curator through LocalControlPlane instead.
	log.Info("publishing the saved cluster directory", zap.Int("curators", len(saved.GetCurators())))
	w.directory.Set(saved.GetCurators())

	in := w.Inputs()
	defer in.Close()
	m := Input(in, w.membership, hasCurator)
	why, err := in.Wait(ctx)
	if err != nil {
		return err
	}
	log.Info("watching the cluster's curators", zap.Stringer("because", why))
	supervisor.Signal(ctx, supervisor.SignalHealthy)
	ca := m.Latest().Credentials.CACertificate.Raw
	// The curator sends a directory only when its curators change, so a
	// role change of another node costs this node nothing. A new
	// membership closes the connection this stream runs on; the restart
	// that follows watches through the new one.
	stream, err := cpb.NewCuratorServiceClient(m.Latest().Curator).WatchClusterDirectory(ctx, &cpb.WatchClusterDirectoryRequest{})
	if err != nil {
		return fmt.Errorf("watching the cluster directory: %w", err)
	}
	for {
		msg, err := stream.Recv()
		if err != nil {
			return fmt.Errorf("watching the cluster directory: %w", err)
		}
		curators := msg.GetDirectory().GetCurators()
		if len(curators) == 0 {
			// A curator is answering, so the cluster has one: an empty
			// list only means no curator has reported its status yet.
			// Saving it would leave the next boot with no way back.
			continue
		}
		dir := &cpb.ClusterDirectory{Curators: curators, CaCertificate: ca}
		if proto.Equal(dir, saved) {
			continue
		}
		if err := w.saved.Save(dir); err != nil {
			// Unlike roles, a directory is only where to look first: a
			// node whose ESP no longer takes writes (the kernel made it
			// read-only after finding it damaged) keeps following its
			// curators, and after a restart starts from the last
			// directory it did save, or from its own curator.
			log.Error("could not save the new cluster directory: acting on it all the same", zap.Error(err))
		}
		log.Info("new cluster directory", zap.Stringer("directory", dir))
		w.directory.Set(curators)
		saved = dir
	}
}
