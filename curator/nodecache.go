package curator

import (
	"context"
	"maps"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	cpb "github.com/polis-os/polis/api/curator/v1"
	"github.com/polis-os/polis/event"
	etcdvalue "github.com/polis-os/polis/event/etcd"
	"github.com/polis-os/polis/event/memory"
	"github.com/polis-os/polis/supervisor"
)

// nodeSnapshot is every node record at one moment. Snapshots are immutable:
// a change makes a new map that shares the unchanged records, so a consumer
// can diff two snapshots by comparing record pointers.
type nodeSnapshot struct {
	nodes map[string]*cpb.Node
	// complete is false until the initial listing has been read.
	complete bool
}

// nodeCache is the curator's one view of all node records: one etcd watch,
// however many RPCs watch nodes, check callers or list nodes.
type nodeCache struct {
	client *clientv3.Client
	value  memory.Value[*nodeSnapshot]
}

func newNodeCache(cli *clientv3.Client) *nodeCache {
	c := &nodeCache{client: cli}
	c.value.Name = "curator-nodes"
	return c
}

// Snapshots is the cache as an event value; it is unset until the initial
// listing has been read.
func (c *nodeCache) Snapshots() event.ValueWatch[*nodeSnapshot] { return &c.value }

// current returns the newest complete snapshot, waiting for the first.
func (c *nodeCache) current(ctx context.Context) (*nodeSnapshot, error) {
	return event.Get(ctx, c.Snapshots(), event.Filter(func(s *nodeSnapshot) bool { return s.complete }))
}

// run keeps the cache in step with etcd. A corrupt record is logged and
// left out of the cache (so the node is refused everywhere), not served.
func (c *nodeCache) run(ctx context.Context) error {
	// A corrupt record is an entry with an error in the range's
	// snapshots, not a watch error: the other records keep flowing.
	source := etcdvalue.NewPrefix(c.client, nodePrefix, decodeNode)
	w := source.Watch()
	defer w.Close()
	var nodes map[string]*cpb.Node
	for {
		// The first snapshot holds every record that existed: the cache
		// is published complete from the start.
		snap, err := w.Get(ctx)
		if err != nil {
			return err
		}
		first := nodes == nil
		if first {
			nodes = map[string]*cpb.Node{}
		} else {
			nodes = maps.Clone(nodes)
		}
		for _, key := range snap.Changed {
			apply(ctx, nodes, key, snap.Entries)
		}
		c.value.Set(&nodeSnapshot{nodes: nodes, complete: true})
		if first {
			supervisor.Signal(ctx, supervisor.SignalHealthy)
		}
	}
}

// apply brings nodes in line with the range's entry for key.
func apply(ctx context.Context, nodes map[string]*cpb.Node, key string, entries map[string]event.Entry[*cpb.Node]) {
	id, _ := nodeIDFromKey(key)
	e, ok := entries[key]
	switch {
	case !ok:
		delete(nodes, id)
	case e.Err != nil:
		supervisor.Logger(ctx).Error("ignoring a corrupt node record", zap.String("node", id), zap.Error(e.Err))
		delete(nodes, id)
	default:
		nodes[id] = e.Data
	}
}
