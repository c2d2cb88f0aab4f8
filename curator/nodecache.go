package curator

import (
	"cmp"
	"context"
	"errors"
	"maps"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

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
	// revision is the etcd revision the snapshot is current at: it holds
	// every node record as etcd held them at that revision.
	revision int64
	// keys is how many node keys etcd held at revision, corrupt records
	// (which nodes leaves out) included.
	keys int
	// changed lists, sorted, the IDs whose records differ from the
	// previous snapshot's (new, changed or gone); in the first snapshot
	// of a run, every ID.
	changed []string
	// curators is the cluster directory's curators in nodes. It is
	// shared with the previous snapshot (the same pointer) unless a
	// curator or its endpoint changed, so a directory watcher learns
	// whether to send anything with one comparison.
	curators *curatorSet
	// entries are the range's entries the snapshot was made from, keyed
	// by etcd key: each record's mod revision (revisionOf), for writes
	// planned from the cache that compare it.
	entries map[string]event.Entry[*cpb.Node]
	// next is the snapshot published after this one, nil until then. A
	// watcher holding this one follows next to the newest and learns what
	// changed from their changed lists: work in proportion to the change,
	// not to the cluster. Only snapshots some watcher still holds stay in
	// memory (the chain points forward only).
	next atomic.Pointer[nodeSnapshot]
}

// detached is s outside the chain of snapshots (no changed list, no
// next): what a call's context keeps. A context lives as long as its call,
// a Watch stream's for as long as the node watches; one that held s itself
// would keep, through next, every snapshot published after it alive (at
// 5,000 nodes, registering them all left a curator with 2 GiB of
// snapshots held by the streams opened before).
func (s *nodeSnapshot) detached() *nodeSnapshot {
	return &nodeSnapshot{nodes: s.nodes, complete: s.complete, revision: s.revision, keys: s.keys, curators: s.curators, entries: s.entries}
}

// revisionOf is the mod revision of node id's record in s; 0 if s holds
// none.
func (s *nodeSnapshot) revisionOf(id string) int64 {
	return int64(s.entries[nodeKey(id)].Version)
}

// changedSince returns, sorted, the IDs whose records may differ between
// from and s, from the changed lists of the snapshots published after from
// up to s; false if s does not follow from in one run of the cache, or if
// the changes are more than limit (comparing every record is cheaper
// then).
func (s *nodeSnapshot) changedSince(from *nodeSnapshot, limit int) ([]string, bool) {
	var ids []string
	for at := from; at != s; {
		at = at.next.Load()
		if at == nil || len(ids)+len(at.changed) > limit {
			return nil, false
		}
		ids = append(ids, at.changed...)
	}
	slices.Sort(ids)
	return slices.Compact(ids), true
}

// curatorSet is the curators of one snapshot (curatorsIn), never
// modified once published.
type curatorSet struct{ endpoints []*cpb.CuratorEndpoint }

// curatorEndpoint is where n serves as a curator of the cluster directory,
// nil if it is not one: an UP node that holds ConsensusMember, a role only
// the curator gives, and reports a running curator at a valid address. A
// node's own report never makes it a curator; it only says where the
// curator of a node the cluster made one serves (and clients check that it
// serves there with a curator certificate, which only a consensus member
// gets).
func curatorEndpoint(n *cpb.Node) *cpb.CuratorEndpoint {
	rc := n.GetStatus().GetRunningCurator()
	if n.GetState() != cpb.NodeState_NODE_STATE_UP || n.GetRoles().GetConsensusMember() == nil || rc == nil || rc.GetPort() == 0 {
		return nil
	}
	addr, err := netip.ParseAddr(n.GetStatus().GetExternalAddress())
	if err != nil {
		return nil
	}
	return &cpb.CuratorEndpoint{NodeId: n.GetId(), Address: addr.String(), Port: rc.GetPort()}
}

// curatorsIn is the curators among nodes, by node ID.
func curatorsIn(nodes map[string]*cpb.Node) *curatorSet {
	set := &curatorSet{}
	for _, n := range nodes {
		if ep := curatorEndpoint(n); ep != nil {
			set.endpoints = append(set.endpoints, ep)
		}
	}
	slices.SortFunc(set.endpoints, func(a, b *cpb.CuratorEndpoint) int { return cmp.Compare(a.NodeId, b.NodeId) })
	return set
}

// nextCurators is the curator set after the records of changed moved from
// prev to next: prevSet itself unless a curator, before or after, is among
// them and the endpoints differ. A change to an ordinary node costs a look
// at its two records, not a walk over the cluster.
func nextCurators(prevSet *curatorSet, prev, next map[string]*cpb.Node, changed []string) *curatorSet {
	if prevSet == nil {
		return curatorsIn(next)
	}
	touched := false
	for _, id := range changed {
		if curatorEndpoint(prev[id]) != nil || curatorEndpoint(next[id]) != nil {
			touched = true
			break
		}
	}
	if !touched {
		return prevSet
	}
	set := curatorsIn(next)
	if slices.EqualFunc(set.endpoints, prevSet.endpoints, func(a, b *cpb.CuratorEndpoint) bool { return proto.Equal(a, b) }) {
		return prevSet
	}
	return set
}

// nodeCache is the curator's one view of all node records: one etcd watch,
// however many RPCs watch nodes, check callers or list nodes.
type nodeCache struct {
	client *clientv3.Client
	value  memory.Value[*nodeSnapshot]
	// source is the node records in etcd, which run follows.
	source *etcdvalue.Range[*cpb.Node]
	// fences shares the quorum reads of concurrent fences; listings,
	// their reads of the node keys when etcd withholds progress.
	fences, listings fenceBatch
	// watching is the watcher run follows source with, while it runs: a
	// fence asks it for its progress.
	watchMu  sync.Mutex
	watching etcdvalue.Progresser
	// beforePublish, set by tests only, is called with each snapshot run
	// makes before it is published, and may block: how a test holds the
	// cache behind etcd on purpose (authz_standing_test.go). A field of
	// the cache rather than a failpoint (internal/failpoint), whose one
	// hook is global to the process and would hold every curator's cache
	// in a test that runs several; nil in production, where it costs one
	// atomic load per watch event.
	beforePublish atomic.Pointer[func(ctx context.Context, next *nodeSnapshot)]
}

func newNodeCache(cli *clientv3.Client) *nodeCache {
	c := &nodeCache{client: cli, source: etcdvalue.NewPrefix(cli, nodePrefix, decodeNode), listings: fenceBatch{listing: true}}
	c.value.Name = "curator-nodes"
	return c
}

// watchHealth is the health of the cache's etcd watch: Connected while the
// cache follows etcd, for streams that must end when it stops.
func (c *nodeCache) watchHealth() event.ValueWatch[etcdvalue.Health] { return c.source.Health() }

// fenceTimeout bounds how long a call waits for the node cache to reach
// the revision it fenced on. The cache trails etcd by one watch event
// when it works; a cache that cannot catch up in this long has lost etcd,
// and the caller is better served by another curator.
const fenceTimeout = 10 * time.Second

// fenced returns a snapshot that holds every write to node records etcd
// acknowledged before fenced was called: a linearizable read served from
// the cache. It reads etcd's revision, with one quorum read of a single
// key issued after the call (shared with concurrent calls,
// fencebatch.go), and waits until the cache holds every change up to
// that revision:
//
//   - a cache at that revision or later holds them (it applies etcd's
//     events in order); otherwise
//   - the last writes were to other keys, or the cache is behind: the
//     cache's watch is asked for its progress (etcd's progress
//     notification, etcdvalue.Progresser), which says up to which of its
//     snapshots it holds every change up to the revision, and the call
//     waits for that snapshot.
//
// Neither step reads the node records, so a fence costs the same at
// 5,000 nodes as at 3 (the fence read every node key, sorted by
// revision, until issue 24's last step). But etcd sends no progress
// while any watch on the stream starts at a revision it has not reached
// (a watch resumed just after the last write, until the next write), so
// after progressPatience without it the call falls back to that read:
// how many node keys etcd holds and the newest revision any was written
// at. The cache is as new as that read once its revision reaches the
// newest write's and it holds as many keys: etcd's records changed after
// the cache's revision only by a write (which would carry a later
// revision) or a deletion (which would leave etcd with fewer keys).
func (c *nodeCache) fenced(ctx context.Context) (*nodeSnapshot, error) {
	read, err := c.fences.read(ctx, c.client)
	if err != nil {
		if ctx.Err() != nil {
			return nil, status.FromContextError(ctx.Err()).Err()
		}
		return nil, status.Errorf(codes.Unavailable, "reading etcd's revision for a consistent read: %v", err)
	}
	rev := read.rev
	wctx, cancel := context.WithTimeout(ctx, fenceTimeout)
	defer cancel()
	behind := func(err error) error {
		if ctx.Err() != nil {
			return status.FromContextError(ctx.Err()).Err()
		}
		return status.Errorf(codes.Unavailable, "this curator's view of nodes has not reached etcd's revision %d in %v (%v): ask another curator", rev, fenceTimeout, err)
	}
	snap, err := c.current(wctx)
	if err != nil {
		return nil, behind(err)
	}
	if snap.revision >= rev {
		return snap, nil
	}
	c.watchMu.Lock()
	w := c.watching
	c.watchMu.Unlock()
	if w == nil {
		return nil, behind(errors.New("its watch is not running"))
	}
	pctx, pcancel := context.WithTimeout(wctx, progressPatience)
	version, err := w.Progress(pctx, rev)
	pcancel()
	ready := func(s *nodeSnapshot) bool { return s.complete && s.revision >= int64(version) }
	if err != nil {
		if wctx.Err() != nil {
			return nil, behind(err)
		}
		l, err := c.listings.read(wctx, c.client)
		if err != nil {
			return nil, behind(err)
		}
		ready = func(s *nodeSnapshot) bool {
			return s.complete && (s.revision >= l.rev || (s.revision >= l.newest && s.keys == l.keys))
		}
	}
	snap, err = event.Get(wctx, c.Snapshots(), event.Filter(ready))
	if err != nil {
		return nil, behind(err)
	}
	return snap, nil
}

// progressPatience is how long a fence waits for etcd's progress before
// it reads the node keys instead.
const progressPatience = 500 * time.Millisecond

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
	c.fences.setLifetime(ctx)
	c.listings.setLifetime(ctx)
	// A corrupt record is an entry with an error in the range's
	// snapshots, not a watch error: the other records keep flowing.
	w := c.source.Watch()
	defer w.Close()
	p, _ := w.(etcdvalue.Progresser)
	c.watchMu.Lock()
	c.watching = p
	c.watchMu.Unlock()
	defer func() {
		c.watchMu.Lock()
		c.watching = nil
		c.watchMu.Unlock()
	}()
	var nodes map[string]*cpb.Node
	var prev *nodeSnapshot
	for {
		// The first snapshot holds every record that existed: the cache
		// is published complete from the start.
		snap, err := w.Get(ctx)
		if err != nil {
			return err
		}
		first := nodes == nil
		before := nodes
		if first {
			nodes = map[string]*cpb.Node{}
		} else {
			nodes = maps.Clone(nodes)
		}
		changed := make([]string, 0, len(snap.Changed))
		for _, key := range snap.Changed {
			changed = append(changed, apply(ctx, nodes, key, snap.Entries))
		}
		next := &nodeSnapshot{nodes: nodes, complete: true, revision: int64(snap.Version), keys: len(snap.Entries), changed: changed, entries: snap.Entries}
		var prevCurators *curatorSet
		if prev != nil {
			prevCurators = prev.curators
		}
		next.curators = nextCurators(prevCurators, before, nodes, changed)
		if hook := c.beforePublish.Load(); hook != nil {
			(*hook)(ctx, next)
		}
		if prev != nil {
			prev.next.Store(next)
		}
		prev = next
		c.value.Set(next)
		if first {
			supervisor.Signal(ctx, supervisor.SignalHealthy)
		}
	}
}

// apply brings nodes in line with the range's entry for key, and returns
// the ID key names.
func apply(ctx context.Context, nodes map[string]*cpb.Node, key string, entries map[string]event.Entry[*cpb.Node]) string {
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
	return id
}
