package roleserve

import (
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/polis-os/polis/event"
)

// Graph records which worker reads and which writes each value. Workers are
// built by constructors that receive the Graph and obtain every value they
// use through Reads or Writes; the worker keeps only what those return. A
// worker therefore holds exactly the values it declared, and the graph is
// the true list of who depends on whom: it is logged at start and checked
// in tests.
type Graph struct {
	mu    sync.Mutex
	edges []Edge
}

// Edge is one declared use of a value by a worker.
type Edge struct {
	Worker string
	Value  string
	Writes bool
}

// named is what a value must offer to be part of the graph: its name.
type named interface{ Info() event.Info }

// Reads declares that worker reads v, and returns v's read side only.
func Reads[T any, V interface {
	event.ValueWatch[T]
	named
}](g *Graph, worker string, v V) event.ValueWatch[T] {
	g.add(Edge{Worker: worker, Value: valueName(v), Writes: false})
	return v
}

// Writes declares that worker writes v, and returns it.
func Writes[T any, V interface {
	event.Value[T]
	named
}](g *Graph, worker string, v V) event.Value[T] {
	g.add(Edge{Worker: worker, Value: valueName(v), Writes: true})
	return v
}

func valueName(v named) string {
	name := v.Info().Name
	if name == "" {
		// An unnamed value would make the graph unreadable; this is a
		// programming error caught by the graph test.
		panic("roleserve: every value in the graph needs a name")
	}
	return name
}

func (g *Graph) add(e Edge) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.edges = append(g.edges, e)
}

// Edges returns the declared edges, sorted by worker then value.
func (g *Graph) Edges() []Edge {
	g.mu.Lock()
	defer g.mu.Unlock()
	edges := slices.Clone(g.edges)
	slices.SortFunc(edges, func(a, b Edge) int {
		if c := strings.Compare(a.Worker, b.Worker); c != 0 {
			return c
		}
		return strings.Compare(a.Value, b.Value)
	})
	return edges
}

// Check finds values that are read but written by no worker (nobody will
// ever set them: the reader waits forever) and values written by more than
// one worker (two owners of one answer). Values provided from outside the
// role server are listed in external and count as written.
func (g *Graph) Check(external ...string) error {
	writers := map[string][]string{}
	for _, v := range external {
		writers[v] = append(writers[v], "(outside)")
	}
	for _, e := range g.Edges() {
		if e.Writes {
			writers[e.Value] = append(writers[e.Value], e.Worker)
		}
	}
	var problems []string
	for _, e := range g.Edges() {
		if !e.Writes && len(writers[e.Value]) == 0 {
			problems = append(problems, fmt.Sprintf("%s reads %s, which nothing writes", e.Worker, e.Value))
		}
	}
	for v, ws := range writers {
		if len(ws) > 1 {
			problems = append(problems, fmt.Sprintf("%s is written by %s", v, strings.Join(ws, " and ")))
		}
	}
	slices.Sort(problems)
	if len(problems) > 0 {
		return fmt.Errorf("role server graph: %s", strings.Join(problems, "; "))
	}
	return nil
}

// String renders the graph one worker per line, for logs:
//
//	rolefetch: reads membership; writes localRoles
func (g *Graph) String() string {
	type rw struct{ reads, writes []string }
	byWorker := map[string]*rw{}
	var workers []string
	for _, e := range g.Edges() {
		w, ok := byWorker[e.Worker]
		if !ok {
			w = &rw{}
			byWorker[e.Worker] = w
			workers = append(workers, e.Worker)
		}
		if e.Writes {
			w.writes = append(w.writes, e.Value)
		} else {
			w.reads = append(w.reads, e.Value)
		}
	}
	var b strings.Builder
	for _, name := range workers {
		w := byWorker[name]
		fmt.Fprintf(&b, "%s: reads %s; writes %s\n", name, list(w.reads), list(w.writes))
	}
	return b.String()
}

func list(s []string) string {
	if len(s) == 0 {
		return "nothing"
	}
	return strings.Join(s, ", ")
}
