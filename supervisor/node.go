package supervisor

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"go.uber.org/zap"
)

// node is one named place in the tree. It outlives the runs of its
// runnable: restarts reuse the node, and it is only dropped when its parent
// runs again (the new run starts its children afresh). All fields after
// logger are guarded by Supervisor.mu.
type node struct {
	sup      *Supervisor
	parent   *node // nil for the root
	name     string
	path     string // dotted, also the logger name
	runnable Runnable
	logger   *zap.Logger

	state    State
	since    time.Time
	restarts int
	lastErr  string
	// backoffUntil is when a node in StateBackoff restarts.
	backoffUntil time.Time
	// cur is the latest run of the runnable; nil before the first one.
	cur *run
	// kids are the children started by cur, sorted by name.
	kids []*node
	// dirty marks a node whose published snapshot is stale, or that has a
	// stale descendant. A dirty node's ancestors are always dirty.
	dirty bool
	// snap is the node's latest published snapshot.
	snap *snapNode
}

// run is one call of a node's runnable. It is what a runnable's context
// carries, so that a goroutine left over from an earlier run can neither
// signal nor start children on behalf of the current one.
type run struct {
	node *node
	ctx  context.Context
	// live counts the goroutines of the run of the group this run belongs
	// to; children started through this run are counted there too.
	live *tracker

	// Guarded by Supervisor.mu.
	exited     bool
	doneSignal bool
	healthyAt  time.Time // zero until SignalHealthy
	// cleanups are registered with Cleanup; cleanedUp is set once they
	// have run (see group.runCleanups).
	cleanups  []func()
	cleanedUp bool
}

type runKey struct{}

func runFrom(ctx context.Context) *run {
	r, _ := ctx.Value(runKey{}).(*run)
	return r
}

// Run starts r as a child named name of the runnable that owns ctx. The child
// is supervised on its own: its failures restart it, not its parent. Its
// context derives from the parent runnable's own context, not from ctx, so a
// narrower context (say, with a timeout) that the caller passes does not
// bound the child's life; the child is cancelled when its parent's run ends.
func Run(ctx context.Context, name string, r Runnable) error {
	return start(ctx, []string{name}, map[string]Runnable{name: r})
}

// RunGroup starts runnables as children of the runnable that owns ctx, as one
// restart unit: when one of them fails, all of them are cancelled, waited
// for, and restarted together. Use it for runnables that share state that
// none of them can rebuild alone. Either all of them are started or, on
// error, none is. An empty map starts nothing.
func RunGroup(ctx context.Context, runnables map[string]Runnable) error {
	names := make([]string, 0, len(runnables))
	for name := range runnables {
		names = append(names, name)
	}
	slices.Sort(names)
	return start(ctx, names, runnables)
}

// start validates and registers a group, then hands it to a keeper
// goroutine. names are sorted.
func start(ctx context.Context, names []string, runnables map[string]Runnable) error {
	parent := runFrom(ctx)
	if parent == nil {
		return fmt.Errorf("supervisor: starting %s: %w", strings.Join(names, ", "), ErrNotSupervised)
	}
	p := parent.node
	for _, name := range names {
		if err := validName(name); err != nil {
			return fmt.Errorf("supervisor: starting %q under %s: %w", name, p.path, err)
		}
		if runnables[name] == nil {
			return fmt.Errorf("supervisor: starting %q under %s: nil runnable", name, p.path)
		}
	}
	if len(names) == 0 {
		return nil
	}

	s := p.sup
	s.mu.Lock()
	defer s.mu.Unlock()
	if parent.exited || parent.ctx.Err() != nil || ctx.Err() != nil {
		return fmt.Errorf("supervisor: starting %s under %s: %w", strings.Join(names, ", "), p.path, ErrNotRunning)
	}
	if p.cur != parent {
		// Unreachable while the run has not exited: a node's next run only
		// starts after the previous one and all its goroutines are gone.
		panic("supervisor: internal error: run is live but not current")
	}
	for _, name := range names {
		if _, found := p.kid(name); found {
			return fmt.Errorf("supervisor: starting %q under %s: %w", name, p.path, ErrDuplicateName)
		}
	}

	g := &group{sup: s, members: make([]*node, len(names))}
	now := time.Now()
	for i, name := range names {
		n := &node{
			sup:      s,
			parent:   p,
			name:     name,
			path:     p.path + "." + name,
			runnable: runnables[name],
			logger:   p.logger.Named(name),
			state:    StateNew,
			since:    now,
		}
		g.members[i] = n
		idx, _ := p.kid(name)
		p.kids = slices.Insert(p.kids, idx, n)
		s.markDirty(n)
	}
	s.publishLocked()
	parent.live.add()
	go g.keep(parent.ctx, parent.live)
	return nil
}

// kid returns where name is, or would be inserted, among the sorted kids.
func (n *node) kid(name string) (int, bool) {
	return slices.BinarySearchFunc(n.kids, name, func(k *node, name string) int {
		return strings.Compare(k.name, name)
	})
}

// validName checks a name by hand rather than with a regexp: the rule is
// short and this way it cannot be left unanchored.
func validName(name string) error {
	if name == "" {
		return ErrInvalidName
	}
	for _, c := range []byte(name) {
		switch {
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9', c == '_', c == '-':
		default:
			return ErrInvalidName
		}
	}
	return nil
}

// setState records a state change; the caller holds Supervisor.mu and
// publishes.
func (n *node) setState(st State, now time.Time) {
	if n.state == st {
		return
	}
	n.state = st
	n.since = now
	n.sup.markDirty(n)
}
