package curator

import (
	"context"
	"errors"
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
	source := etcdvalue.NewPrefix(c.client, nodePrefix, func(key, value []byte) (nodeChange, error) {
		// A corrupt record is not a watch error: it becomes a change that
		// removes the node from the cache, so that it is refused
		// everywhere rather than served stale.
		id, _ := nodeIDFromKey(string(key))
		n, err := decodeNode(key, value)
		return nodeChange{id: id, node: n, err: err}, nil
	})
	w := source.Watch()
	defer w.Close()
	nodes := map[string]*cpb.Node{}
	// The backlog first: the snapshot is published complete only once it
	// holds every record that existed.
	for {
		ch, err := w.Get(ctx, event.BacklogOnly[nodeChange]())
		if errors.Is(err, event.ErrBacklogDone) {
			break
		}
		if err != nil {
			return err
		}
		ch.apply(ctx, nodes)
	}
	c.value.Set(&nodeSnapshot{nodes: nodes, complete: true})
	supervisor.Signal(ctx, supervisor.SignalHealthy)
	for {
		ch, err := w.Get(ctx)
		if err != nil {
			return err
		}
		nodes = maps.Clone(nodes)
		ch.apply(ctx, nodes)
		c.value.Set(&nodeSnapshot{nodes: nodes, complete: true})
	}
}

// nodeChange is one record as decoded from etcd; node is nil for a deleted
// or corrupt record.
type nodeChange struct {
	id   string
	node *cpb.Node
	err  error
}

func (ch nodeChange) apply(ctx context.Context, nodes map[string]*cpb.Node) {
	if ch.err != nil {
		supervisor.Logger(ctx).Error("ignoring a corrupt node record", zap.String("node", ch.id), zap.Error(ch.err))
	}
	if ch.node == nil {
		delete(nodes, ch.id)
	} else {
		nodes[ch.id] = ch.node
	}
}
