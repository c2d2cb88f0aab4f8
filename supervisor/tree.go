package supervisor

import (
	"fmt"
	"iter"
	"slices"
	"strings"
	"time"
)

// State is where a node of the tree is in its life cycle.
type State int

// The states a node goes through. A node starts New, is Running once its
// runnable has been called, Healthy after SignalHealthy, and ends Done
// (returned after SignalDone), Failed (then Backoff, then Running again), or
// Cancelling then Stopped when the supervisor cancelled it because an
// ancestor or a group sibling failed or the tree is shutting down.
const (
	// StateNew: registered by Run, not called yet.
	StateNew State = iota
	// StateRunning: called, has not signalled healthy yet.
	StateRunning
	// StateHealthy: signalled SignalHealthy (or SignalDone, not returned yet).
	StateHealthy
	// StateDone: signalled SignalDone and returned nil; never restarted
	// unless its parent or a group sibling fails.
	StateDone
	// StateFailed: returned an error, returned nil without Done, or
	// panicked; its subtree is being cancelled before the restart. A node
	// stays Failed for good if the backoff policy gave up.
	StateFailed
	// StateBackoff: waiting for its backoff to elapse before a restart.
	StateBackoff
	// StateCancelling: its context was cancelled by the supervisor and it
	// has not returned yet.
	StateCancelling
	// StateStopped: returned after the supervisor cancelled it; it waits for
	// the restart of an ancestor or sibling, or the tree is gone.
	StateStopped
)

// String returns the lower-case name used in logs and by the CLI.
func (s State) String() string {
	switch s {
	case StateNew:
		return "new"
	case StateRunning:
		return "running"
	case StateHealthy:
		return "healthy"
	case StateDone:
		return "done"
	case StateFailed:
		return "failed"
	case StateBackoff:
		return "backoff"
	case StateCancelling:
		return "cancelling"
	case StateStopped:
		return "stopped"
	}
	return fmt.Sprintf("state(%d)", int(s))
}

// TreeState is an immutable snapshot of a whole tree, published by
// Supervisor.Tree on every change. Snapshots share unchanged parts with
// their predecessors, so publishing one costs only the path from the changed
// node to the root, and holding one never blocks the supervisor. The zero
// TreeState is an empty tree.
type TreeState struct {
	root *snapNode
}

// NodeState describes one node of a TreeState. It is a copy: changing it
// does not change the snapshot it came from.
type NodeState struct {
	// Name is the full dotted name, "root.roleserve.controlplane", the same
	// as the node's logger name.
	Name string
	// State is the node's life-cycle state.
	State State
	// Restarts counts how often the runnable was restarted since its parent
	// last (re)started it. A restart of the parent starts a new node at 0.
	Restarts int
	// LastError is the cause of the last failure, or empty if the node has
	// not failed yet. It is kept after a restart so that a crash loop can
	// be diagnosed from the tree alone.
	LastError string
	// Since is when the node entered State.
	Since time.Time
	// Until is, in StateBackoff, when the restart is due; zero otherwise.
	Until time.Time

	snap *snapNode
}

// snapNode is the shared, never-modified representation behind TreeState.
type snapNode struct {
	name      string
	state     State
	restarts  int
	lastError string
	since     time.Time
	until     time.Time
	// children are sorted by name and cut into chunks of at most
	// chunkSize, so that a change below a wide node copies one chunk and
	// the chunk index rather than every sibling.
	children [][]*snapNode
}

// chunkSize trades the cost of copying a chunk against the cost of
// copying the chunk index; 32 keeps both small up to thousands of siblings.
const chunkSize = 32

func (n *snapNode) public() NodeState {
	return NodeState{
		Name:      n.name,
		State:     n.state,
		Restarts:  n.restarts,
		LastError: n.lastError,
		Since:     n.since,
		Until:     n.until,
		snap:      n,
	}
}

// Root returns the root node, or false for the zero TreeState.
func (t TreeState) Root() (NodeState, bool) {
	if t.root == nil {
		return NodeState{}, false
	}
	return t.root.public(), true
}

// Node looks a node up by its full dotted name ("root.a.b").
func (t TreeState) Node(name string) (NodeState, bool) {
	n := t.root
	first, rest, more := strings.Cut(name, ".")
	if n == nil || first != n.name {
		return NodeState{}, false
	}
	for more {
		var part string
		part, rest, more = strings.Cut(rest, ".")
		if n = n.child(part); n == nil {
			return NodeState{}, false
		}
	}
	return n.public(), true
}

// child finds a direct child by its last name component.
func (n *snapNode) child(short string) *snapNode {
	prefix := len(n.name) + 1
	cmp := func(c *snapNode, short string) int { return strings.Compare(c.name[prefix:], short) }
	// The first chunk whose last child is not before short holds it, if
	// any does.
	ci, _ := slices.BinarySearchFunc(n.children, short, func(chunk []*snapNode, short string) int {
		return cmp(chunk[len(chunk)-1], short)
	})
	if ci == len(n.children) {
		return nil
	}
	if i, found := slices.BinarySearchFunc(n.children[ci], short, cmp); found {
		return n.children[ci][i]
	}
	return nil
}

// All yields every node, parents before children and siblings by name.
func (t TreeState) All() iter.Seq[NodeState] {
	return func(yield func(NodeState) bool) {
		if t.root != nil {
			t.root.walk(yield)
		}
	}
}

func (n *snapNode) walk(yield func(NodeState) bool) bool {
	if !yield(n.public()) {
		return false
	}
	for _, chunk := range n.children {
		for _, c := range chunk {
			if !c.walk(yield) {
				return false
			}
		}
	}
	return true
}

// Children yields the node's direct children, by name.
func (n NodeState) Children() iter.Seq[NodeState] {
	return func(yield func(NodeState) bool) {
		if n.snap == nil {
			return
		}
		for _, chunk := range n.snap.children {
			for _, c := range chunk {
				if !yield(c.public()) {
					return
				}
			}
		}
	}
}

// ShortName is the last component of Name, as passed to Run.
func (n NodeState) ShortName() string {
	return n.Name[strings.LastIndexByte(n.Name, '.')+1:]
}

// String renders the tree one node per line, indented by depth, for humans
// (logs, the CLI). Its layout is not stable; parse the fields instead.
func (t TreeState) String() string {
	var b strings.Builder
	for n := range t.All() {
		depth := strings.Count(n.Name, ".")
		fmt.Fprintf(&b, "%s%s %s", strings.Repeat("  ", depth), n.ShortName(), n.State)
		if n.Restarts > 0 {
			fmt.Fprintf(&b, " restarts=%d", n.Restarts)
		}
		if n.LastError != "" {
			fmt.Fprintf(&b, " last_error=%q", n.LastError)
		}
		b.WriteByte('\n')
	}
	return b.String()
}
