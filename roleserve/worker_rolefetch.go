package roleserve

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"maps"

	"go.uber.org/zap"
	"google.golang.org/protobuf/proto"

	cpb "github.com/polis-os/polis/api/curator/v1"
	"github.com/polis-os/polis/event"
	"github.com/polis-os/polis/localstorage"
	"github.com/polis-os/polis/supervisor"
)

// workerRoleFetch publishes the roles the curator gives this node, and keeps
// a copy on disk: a lone control-plane node that reboots must start its
// control plane before there is any curator to ask, and only these saved
// roles tell it to.
type workerRoleFetch struct {
	g          *Graph
	membership event.ValueWatch[*ClusterMembership] // reads
	localRoles event.Value[*cpb.Roles]              // writes
	// localLabels are published as the curator has them, never saved:
	// only Kubernetes' registration uses them, which needs a curator
	// anyway.
	localLabels event.Value[map[string]string] // writes

	file localstorage.File
}

func newWorkerRoleFetch(g *Graph, v *Values, file localstorage.File) *workerRoleFetch {
	const name = "rolefetch"
	return &workerRoleFetch{
		g:           g,
		membership:  Reads[*ClusterMembership](g, name, &v.Membership),
		localRoles:  Writes[*cpb.Roles](g, name, &v.LocalRoles),
		localLabels: Writes[map[string]string](g, name, &v.LocalLabels),
		file:        file,
	}
}

func (w *workerRoleFetch) run(ctx context.Context) error {
	log := supervisor.Logger(ctx)
	// The saved roles were published when they were saved (see save), so
	// publishing them again is at worst a no-op; before the first fetch of
	// this boot, it is what lets the control plane start.
	saved, err := w.load()
	if err != nil {
		// A damaged file must not keep the node from asking the curator.
		log.Warn("ignoring the saved roles", zap.Error(err))
	}
	if saved != nil {
		log.Info("publishing the saved roles until the curator answers", zap.Stringer("roles", saved))
		w.localRoles.Set(saved)
	}

	in := w.g.Inputs("rolefetch")
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
	return watchNodes(ctx, m.Latest().Curator, req, func(nodes map[string]*cpb.Node) error {
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
		if err := w.save(roles); err != nil {
			return err
		}
		log.Info("new roles", zap.Stringer("roles", roles))
		w.localRoles.Set(roles)
		saved = roles
		return nil
	})
}

// load returns the saved roles, nil if there are none.
func (w *workerRoleFetch) load() (*cpb.Roles, error) {
	roles := &cpb.Roles{}
	if err := w.file.ReadProto(roles); errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	} else if err != nil {
		return nil, err
	}
	return roles, nil
}

// save writes roles to disk before they are published: what the node acts
// on is never newer than what it finds after a restart, so a restart never
// goes back to roles older than those it acted on.
func (w *workerRoleFetch) save(roles *cpb.Roles) error {
	if err := w.file.WriteProto(roles); err != nil {
		return fmt.Errorf("saving the roles: %w", err)
	}
	return nil
}
