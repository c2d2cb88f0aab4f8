package roleserve

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/polis-os/polis/event"
)

// Graph records which worker reads and which writes each value. Every
// worker has a handle on the Graph (Graph.Worker), which carries its name:
// the worker's constructor obtains every value it uses through Reads or
// Writes on that handle and keeps only what those return. A worker
// therefore holds exactly the values it declared, and the graph is the
// true list of who depends on whom: it is logged at start, checked by New
// and drawn in the package doc (TestDataFlowGolden keeps the drawing true).
//
// Workers wait through their handle too (Worker.Inputs, Input): an input
// the worker has not declared makes its Wait fail, so every value a worker
// reacts to is in the graph. The Graph also records each worker's last
// reaction (see Workers), for status pages and the node API.
type Graph struct {
	mu        sync.Mutex
	workers   []string
	edges     []Edge
	reactions map[string]Reaction
}

// Edge is one declared use of a value by a worker.
type Edge struct {
	Worker string
	Value  string
	Writes bool
}

// Worker is one worker's handle on a Graph: its name, given once (to
// Graph.Worker), under which it declares what it reads and writes (Reads,
// Writes, Produces, ReadsProduced), waits (Inputs), and runs (the role
// server runs each worker under its handle's name).
type Worker struct {
	g    *Graph
	name string
}

// Worker adds the worker called name to the graph and returns its handle.
// Names are unique: Check reports a name given twice.
func (g *Graph) Worker(name string) *Worker {
	if name == "" {
		panic("roleserve: every worker in the graph needs a name")
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.workers = append(g.workers, name)
	return &Worker{g: g, name: name}
}

// Name is the worker's name: in the graph, in its reactions, and of its
// runnable in the supervisor tree.
func (w *Worker) Name() string { return w.name }

// workerNames returns the names of the graph's workers, in the order
// they were added.
func (g *Graph) workerNames() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return slices.Clone(g.workers)
}

// named is what a value must offer to be part of the graph: its name.
type named interface{ Info() event.Info }

// Reads declares that worker w reads v, and returns v's read side only.
func Reads[T any, V interface {
	event.ValueWatch[T]
	named
}](w *Worker, v V) event.ValueWatch[T] {
	w.g.add(Edge{Worker: w.name, Value: valueName(v), Writes: false})
	return v
}

// Writes declares that worker w writes v, and returns it.
func Writes[T any, V interface {
	event.Value[T]
	named
}](w *Worker, v V) event.Value[T] {
	w.g.add(Edge{Worker: w.name, Value: valueName(v), Writes: true})
	return v
}

// Produces declares that the runnables w starts write the value called
// name: a service's status (the local curator's, the local consensus
// member's) that exists only while the worker runs it, and that the worker
// may therefore wait on.
func (w *Worker) Produces(name string) {
	w.g.add(Edge{Worker: w.name, Value: name, Writes: true})
}

// ReadsProduced declares that w waits on the value called name that
// another worker's runnables produce (see Produces): the local consensus
// member's status, which the kubernetes worker follows.
func (w *Worker) ReadsProduced(name string) {
	w.g.add(Edge{Worker: w.name, Value: name, Writes: false})
}

// declared reports whether worker declared a use of the value called name.
func (g *Graph) declared(worker, name string) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return slices.ContainsFunc(g.edges, func(e Edge) bool { return e.Worker == worker && e.Value == name })
}

// Reaction is what a worker last reacted to.
type Reaction struct {
	// Worker is the worker's name.
	Worker string
	// Why is the explanation of its last Wait that returned.
	Why string
	// At is when that Wait returned.
	At time.Time
	// Count is how many Waits of the worker have returned.
	Count uint64
}

// Workers returns the last reaction of every worker that has reacted, by
// worker name. The result is a copy.
func (g *Graph) Workers() []Reaction {
	g.mu.Lock()
	defer g.mu.Unlock()
	out := slices.Collect(maps.Values(g.reactions))
	slices.SortFunc(out, func(a, b Reaction) int { return strings.Compare(a.Worker, b.Worker) })
	return out
}

func (g *Graph) reacted(worker string, why event.Why) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.reactions == nil {
		g.reactions = map[string]Reaction{}
	}
	r := g.reactions[worker]
	g.reactions[worker] = Reaction{Worker: worker, Why: why.String(), At: time.Now(), Count: r.Count + 1}
}

// Inputs is an event.Inputs that belongs to one worker of a Graph: it
// accepts only values the worker declared, and records its reactions.
type Inputs struct {
	in event.Inputs
	w  *Worker
	// err is set by an Input of an undeclared value; Wait returns it.
	err error
}

// Inputs returns an Inputs for w. The caller must Close it.
func (w *Worker) Inputs() *Inputs {
	return &Inputs{w: w}
}

// Input registers v with in, as event.Input does. A value the worker did
// not declare (through Reads, Writes or Produces) makes every Wait fail: a
// worker must not react to a value the graph does not show.
func Input[T any](in *Inputs, v event.ValueWatch[T], pred func(T) bool) *event.In[T] {
	name := ""
	if d, ok := v.(event.Describer); ok {
		name = d.Info().Name
	}
	if in.err == nil && (name == "" || !in.w.g.declared(in.w.name, name)) {
		in.err = fmt.Errorf("worker %s waits on %q, which it did not declare", in.w.name, name)
	}
	return event.Input(&in.in, v, pred)
}

// Wait is event.Inputs.Wait, recording the reaction in the Graph.
func (in *Inputs) Wait(ctx context.Context) (event.Why, error) {
	if in.err != nil {
		return event.Why{}, in.err
	}
	why, err := in.in.Wait(ctx)
	if err == nil {
		in.w.g.reacted(in.w.name, why)
	}
	return why, err
}

// Close closes the inputs' watchers; see event.Inputs.Close.
func (in *Inputs) Close() error { return in.in.Close() }

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
// ever set them: the reader waits forever), values written by more than
// one worker (two owners of one answer) and worker names given twice (two
// workers whose declarations, reactions and runnables would mix). Values
// provided from outside the role server are listed in external and count
// as written.
func (g *Graph) Check(external ...string) error {
	var problems []string
	names := map[string]int{}
	for _, w := range g.workerNames() {
		if names[w]++; names[w] == 2 {
			problems = append(problems, fmt.Sprintf("two workers are named %s", w))
		}
	}
	writers := map[string][]string{}
	for _, v := range external {
		writers[v] = append(writers[v], "(outside)")
	}
	for _, e := range g.Edges() {
		if e.Writes {
			writers[e.Value] = append(writers[e.Value], e.Worker)
		}
	}
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
