package supervisor

import (
	"context"
	"sync"
	"time"

	"github.com/polis-os/polis/event"
	"github.com/polis-os/polis/event/memory"
)

// Runnable is a unit of work run and restarted by the supervisor. It must
// return soon after ctx is cancelled. See the package documentation for what
// its return value means.
type Runnable func(ctx context.Context) error

// Supervisor is the handle of a running tree, returned by New so that the
// program can observe the tree and wait for its end.
type Supervisor struct {
	cfg config
	// live counts the root's keeper; Wait waits on it.
	live tracker
	tree memory.Value[TreeState]

	// mu guards the tree structure and every node's mutable fields. It is
	// never held while a runnable or a logger is called.
	mu   sync.Mutex
	root *node
}

// New starts root, named "root", under a new supervisor and returns at once.
// The tree lives until ctx is cancelled; then every runnable is cancelled and
// Wait returns once all have exited. New panics if root is nil, a
// programming error that no caller could handle.
func New(ctx context.Context, root Runnable, opts ...Option) *Supervisor {
	if root == nil {
		panic("supervisor: New called with a nil root runnable")
	}
	s := &Supervisor{
		cfg:  newConfig(opts),
		tree: memory.Value[TreeState]{Name: "supervisor_tree"},
	}
	n := &node{
		sup:      s,
		name:     "root",
		path:     "root",
		runnable: root,
		logger:   s.cfg.logger.Named("root"),
		state:    StateNew,
		since:    time.Now(),
	}
	s.root = n
	s.mu.Lock()
	s.markDirty(n)
	s.publishLocked()
	s.mu.Unlock()
	s.live.add()
	g := &group{sup: s, members: []*node{n}}
	go g.keep(ctx, &s.live)
	return s
}

// Wait blocks until every runnable of the tree has exited. That happens after
// the context given to New is cancelled, or earlier if every runnable is done.
func (s *Supervisor) Wait() {
	<-s.live.idleChan()
}

// Tree returns the state of the whole tree as an event value. It is set
// before New returns, so a watcher's first Get never blocks, and updated on
// every state change of any node.
func (s *Supervisor) Tree() event.ValueWatch[TreeState] {
	return treeWatch{&s.tree}
}

// TreeOf returns the Tree of the supervisor that runs the runnable owning
// ctx, so that a runnable can show the tree it is part of (the node API
// does), or false for a context that belongs to no runnable.
func TreeOf(ctx context.Context) (event.ValueWatch[TreeState], bool) {
	r := runFrom(ctx)
	if r == nil {
		return nil, false
	}
	return r.node.sup.Tree(), true
}

// treeWatch hides the Set of the underlying value: only the supervisor
// may write the tree.
type treeWatch struct{ v *memory.Value[TreeState] }

func (t treeWatch) Watch() event.Watcher[TreeState] { return t.v.Watch() }

// Info reports the bookkeeping of the tree value (version, watchers).
func (t treeWatch) Info() event.Info { return t.v.Info() }

// markDirty flags n and its ancestors for the next publishLocked.
func (s *Supervisor) markDirty(n *node) {
	for ; n != nil && !n.dirty; n = n.parent {
		n.dirty = true
	}
}

// publishLocked sets the tree value if anything changed since the last call,
// rebuilding only the dirty paths. Setting under mu keeps versions in the
// order of the changes.
func (s *Supervisor) publishLocked() {
	if !s.root.dirty {
		return
	}
	s.tree.Set(TreeState{root: s.root.rebuild()})
}

// rebuild returns n's snapshot, making new snapshot nodes only along dirty
// paths and reusing every chunk of children that did not change.
func (n *node) rebuild() *snapNode {
	if !n.dirty {
		return n.snap
	}
	n.dirty = false
	prev := n.snap
	sn := &snapNode{
		name:      n.path,
		state:     n.state,
		restarts:  n.restarts,
		lastError: n.lastErr,
		since:     n.since,
	}
	if n.state == StateBackoff {
		sn.until = n.backoffUntil
	}
	if len(n.kids) > 0 {
		sn.children = make([][]*snapNode, (len(n.kids)+chunkSize-1)/chunkSize)
		for ci := range sn.children {
			kids := n.kids[ci*chunkSize : min(len(n.kids), (ci+1)*chunkSize)]
			if prev != nil && ci < len(prev.children) && unchanged(kids, prev.children[ci]) {
				sn.children[ci] = prev.children[ci]
				continue
			}
			chunk := make([]*snapNode, len(kids))
			for i, k := range kids {
				chunk[i] = k.rebuild()
			}
			sn.children[ci] = chunk
		}
	}
	n.snap = sn
	return sn
}

// unchanged reports whether a published chunk still shows exactly kids.
// Comparing the snapshot pointers also catches insertions and removals,
// which shift kids from one chunk to the next.
func unchanged(kids []*node, chunk []*snapNode) bool {
	if len(kids) != len(chunk) {
		return false
	}
	for i, k := range kids {
		if k.dirty || k.snap != chunk[i] {
			return false
		}
	}
	return true
}
