package supervisor

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/polis-os/polis/event"
)

func TestZeroTreeState(t *testing.T) {
	var ts TreeState
	if _, ok := ts.Root(); ok {
		t.Error("zero tree has a root")
	}
	if _, ok := ts.Node("root"); ok {
		t.Error("zero tree has a node")
	}
	for n := range ts.All() {
		t.Errorf("zero tree yields %s", n.Name)
	}
	if s := ts.String(); s != "" {
		t.Errorf("zero tree renders as %q", s)
	}
}

// Tree hands consumers the read side only: the supervisor alone writes
// the tree's state, so no consumer can make it lie.
func TestTreeReadOnly(t *testing.T) {
	tr := startTree(t, func(ctx context.Context) error {
		Signal(ctx, SignalHealthy)
		<-ctx.Done()
		return ctx.Err()
	})
	if _, ok := tr.Tree().(event.Value[TreeState]); ok {
		t.Error("Tree can be written to by its consumers")
	}
}

func TestTreeStateSnapshots(t *testing.T) {
	fail := make(chan struct{})
	var a runs
	tr := startTree(t, func(ctx context.Context) error {
		for _, name := range []string{"b", "a", "c"} { // registration order is not tree order
			if err := Run(ctx, name, func(ctx context.Context) error {
				if name == "a" {
					if a.start(ctx) == 1 {
						Signal(ctx, SignalHealthy)
						select {
						case <-fail:
							return errors.New("told to fail")
						case <-ctx.Done():
							return ctx.Err()
						}
					}
				}
				if name == "c" {
					if err := Run(ctx, "leaf", healthyUntilCancelled); err != nil {
						return err
					}
				}
				return healthyUntilCancelled(ctx)
			}); err != nil {
				return err
			}
		}
		return healthyUntilCancelled(ctx)
	})

	before := tr.waitFor(t, "everything healthy", func(ts TreeState) bool {
		for _, name := range []string{"root", "root.a", "root.b", "root.c", "root.c.leaf"} {
			if n, ok := ts.Node(name); !ok || n.State != StateHealthy {
				return false
			}
		}
		return true
	})

	var names []string
	for n := range before.All() {
		names = append(names, n.Name)
	}
	if want := []string{"root", "root.a", "root.b", "root.c", "root.c.leaf"}; !slices.Equal(names, want) {
		t.Errorf("All: %v, want %v", names, want)
	}
	root, _ := before.Root()
	var kids []string
	for c := range root.Children() {
		kids = append(kids, c.ShortName())
	}
	if want := []string{"a", "b", "c"}; !slices.Equal(kids, want) {
		t.Errorf("root's children %v, want %v", kids, want)
	}
	for _, name := range []string{"", "roo", "root.", "root..a", "root.a.", "x.a", "root.d", "root.c.leaf.x", "root.leaf"} {
		if _, ok := before.Node(name); ok {
			t.Errorf("Node(%q) found something", name)
		}
	}
	if got, want := before.String(), "root healthy\n  a healthy\n  b healthy\n  c healthy\n    leaf healthy\n"; got != want {
		t.Errorf("String:\n%s\nwant:\n%s", got, want)
	}

	aBefore, _ := before.Node("root.a")
	close(fail)
	after := tr.waitNode(t, "root.a", "restarted", func(n NodeState) bool {
		return n.Restarts == 1 && n.State == StateHealthy
	})
	if !strings.Contains(tr.now(t).String(), `a healthy restarts=1 last_error="told to fail"`) {
		t.Errorf("String does not show the failure:\n%s", tr.now(t))
	}
	// The snapshot taken before is untouched by everything since.
	if n, _ := before.Node("root.a"); n != aBefore || n.State != StateHealthy || n.Restarts != 0 || n.LastError != "" {
		t.Errorf("held snapshot changed: %+v", n)
	}
	if !after.Since.After(aBefore.Since) {
		t.Errorf("Since did not move: %v then %v", aBefore.Since, after.Since)
	}
	// Unchanged parts are shared, not copied.
	bBefore, _ := before.Node("root.c")
	bAfter, _ := tr.now(t).Node("root.c")
	if bBefore.snap != bAfter.snap {
		t.Error("unchanged subtree was copied")
	}
}

func TestStateString(t *testing.T) {
	for st := StateNew; st <= StateStopped; st++ {
		if s := st.String(); s == "" || strings.HasPrefix(s, "state(") {
			t.Errorf("state %d has no name", int(st))
		}
	}
	if s := State(99).String(); s != "state(99)" {
		t.Errorf("unknown state renders as %q", s)
	}
}

// TestWideTree covers a parent with more children than fit in one chunk of
// the snapshot: lookups, order, and sharing of unchanged chunks.
func TestWideTree(t *testing.T) {
	const width = 5*chunkSize + 7
	var names []string
	for i := range width {
		names = append(names, fmt.Sprintf("c%03d", i))
	}
	poke := make(chan struct{})
	var last runs
	tr := startTree(t, func(ctx context.Context) error {
		// Start in reverse so that every Run inserts at the front.
		for _, name := range slices.Backward(names) {
			if err := Run(ctx, name, func(ctx context.Context) error {
				Signal(ctx, SignalHealthy)
				if name == names[width-1] && last.start(ctx) == 1 {
					select {
					case <-poke:
						return errors.New("poked")
					case <-ctx.Done():
					}
				}
				<-ctx.Done()
				return ctx.Err()
			}); err != nil {
				return err
			}
		}
		return healthyUntilCancelled(ctx)
	})
	before := tr.waitFor(t, "all healthy", func(ts TreeState) bool {
		for n := range ts.All() {
			if n.State != StateHealthy {
				return false
			}
		}
		return true
	})
	var got []string
	for n := range before.All() {
		if n.Name != "root" {
			got = append(got, n.ShortName())
		}
	}
	if !slices.Equal(got, names) {
		t.Fatalf("children out of order or missing: %v", got)
	}
	for _, name := range names {
		if n, ok := before.Node("root." + name); !ok || n.ShortName() != name {
			t.Errorf("Node(root.%s): %v, %v", name, n.Name, ok)
		}
		if _, ok := before.Node("root." + name + "x"); ok {
			t.Errorf("Node(root.%sx) found something", name)
		}
	}
	for _, name := range []string{"a", "c", "c0", "d", "c999"} {
		if _, ok := before.Node("root." + name); ok {
			t.Errorf("Node(root.%s) found something", name)
		}
	}

	close(poke)
	tr.waitNode(t, "root."+names[width-1], "restarted", func(n NodeState) bool { return n.Restarts == 1 })
	after := tr.now(t)
	rb, _ := before.Root()
	ra, _ := after.Root()
	if !slices.Equal(rb.snap.children[0], ra.snap.children[0]) || &rb.snap.children[0][0] != &ra.snap.children[0][0] {
		t.Error("a change in the last chunk copied the first one")
	}
}
