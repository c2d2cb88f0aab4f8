package roleserve

import (
	"context"
	"maps"

	"go.uber.org/zap"
	"google.golang.org/protobuf/proto"

	cpb "github.com/polis-os/polis/api/curator/v1"
	"github.com/polis-os/polis/curator"
	"github.com/polis-os/polis/event"
	"github.com/polis-os/polis/localstorage"
	"github.com/polis-os/polis/supervisor"
)

// workerRoleFetch publishes the roles the curator gives this node, and keeps
// a copy on disk: a lone control-plane node that reboots must start its
// control plane before there is any curator to ask, and only these saved
// roles tell it to.
type workerRoleFetch struct {
	*Worker
	membership event.ValueWatch[*ClusterMembership] // reads
	localRoles event.Value[*cpb.Roles]              // writes
	// localLabels are published as the curator has them, never saved:
	// only Kubernetes' registration uses them, which needs a curator
	// anyway.
	localLabels event.Value[map[string]string] // writes

	saved *Saved[*cpb.Roles]
}

func newWorkerRoleFetch(g *Graph, v *Values, file localstorage.File) *workerRoleFetch {
	h := g.Worker("rolefetch")
	return &workerRoleFetch{
		Worker:      h,
		membership:  Reads[*ClusterMembership](h, &v.Membership),
		localRoles:  Writes[*cpb.Roles](h, &v.LocalRoles),
		localLabels: Writes[map[string]string](h, &v.LocalLabels),
		saved:       SavedRoles(file),
	}
}

func (w *workerRoleFetch) run(ctx context.Context) error {
	log := supervisor.Logger(ctx)
	// The saved roles were published when they were saved (Saved.Save), so
	// publishing them again is at worst a no-op; before the first fetch of
	// this boot, it is what lets the control plane start.
	saved := w.saved.Load(log)
	if saved != nil {
		log.Info("publishing the saved roles until the curator answers", zap.Stringer("roles", saved))
		w.localRoles.Set(saved)
	}

	in := w.Inputs()
	defer in.Close()
	m := Input(in, w.membership, hasCurator)
	why, err := in.Wait(ctx)
	if err != nil {
		return err
	}
	self := m.Latest().Credentials.NodeID
	log.Info("watching this node's roles", zap.Stringer("because", why), zap.String("node", self))
	supervisor.Signal(ctx, supervisor.SignalHealthy)
	// A new membership closes the connection this stream runs on; the
	// restart that follows watches through the new one.
	req := &cpb.WatchRequest{Target: &cpb.WatchRequest_NodeId{NodeId: self}}
	err = watchNodes(ctx, m.Latest().Curator, req, func(nodes map[string]*cpb.Node) error {
		labels := maps.Clone(nodes[self].GetLabels())
		if labels == nil {
			labels = map[string]string{}
		}
		w.localLabels.Set(labels)
		// A node without a record, or without roles in it, holds none.
		roles := nodes[self].GetRoles()
		if roles == nil {
			roles = &cpb.Roles{}
		}
		if proto.Equal(roles, saved) {
			return nil
		}
		if err := w.saved.Save(roles); err != nil {
			return err
		}
		log.Info("new roles", zap.Stringer("roles", roles))
		w.localRoles.Set(roles)
		saved = roles
		return nil
	})
	if !curator.IsNodeDecommissioned(err) {
		return err
	}
	// The curator takes a decommissioned node's roles and cuts it off in
	// one write, so the node never sees the record without roles: the
	// refusal is how it learns that it holds none, for good (a retry
	// would only be refused again).
	log.Warn("this node was decommissioned: it holds no roles any more, so it stops the control plane and every other role; wipe its storage to enrol the machine again", zap.Error(err))
	if !proto.Equal(saved, &cpb.Roles{}) {
		if err := w.saved.Save(&cpb.Roles{}); err != nil {
			return err
		}
		w.localRoles.Set(&cpb.Roles{})
	}
	<-ctx.Done()
	return ctx.Err()
}
