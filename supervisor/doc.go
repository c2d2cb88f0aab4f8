// Package supervisor runs Polis' workers as a tree of supervised runnables,
// restarting the parts that fail without disturbing the rest.
//
// # Why a tree
//
// A node agent is dozens of small workers, each waiting on a few event values
// and reacting. Workers fail: a peer goes away, a file is missing for a
// moment, a bug panics. Handling every such error where it happens buries the
// logic under retry loops, and letting it crash the process takes down work
// that was fine. Instead each worker is written as straight-line code that
// returns an error when it cannot go on, and the supervisor restarts it. The
// workers form a tree because their state does: a worker that runs the
// control plane owns the consensus and curator workers it started, and when
// it restarts they must restart with it, while a sibling that pushes status
// must not even notice.
//
// # Runnables and signals
//
// A [Runnable] is a func(ctx) error. [New] runs one as the root, named
// "root"; a runnable starts children with [Run] (or [RunGroup]) from its own
// ctx, which carries its place in the tree. A child is named after the
// caller: "root.roleserve.controlplane". Names are non-empty, use
// [a-z0-9_-], and are unique among the children of one run.
//
// A runnable calls [Signal] with [SignalHealthy] once it has started its
// work, and with [SignalDone] when it has nothing more to do, right before
// returning nil. A done runnable is not restarted and its children keep
// running. Every other way of ending is a failure: returning an error,
// returning nil without SignalDone (a worker that stops silently looks just
// like one that lost track of its work), panicking (the panic is recovered
// and logged with its stack) and runtime.Goexit. Returning, with or without
// an error, after the supervisor cancelled ctx is not a failure.
//
// Signals are bound to one run of a runnable: a goroutine left behind by a
// run that has returned cannot signal, or start children, for the next run
// (its Signal calls are ignored, its Run calls return [ErrNotRunning]).
// Signal panics when ctx belongs to no runnable, because that is a
// programming error no caller could handle.
//
// # Failure, restart, backoff
//
// When a runnable fails, its whole subtree is cancelled, the supervisor
// waits until every runnable of it has returned, and then restarts the
// runnable after a backoff; the new run starts its children afresh. The
// parent and siblings are not touched. A cancelled runnable that takes long
// to return is logged as a warning ([WithExitWarning]), repeatedly, because
// until it returns its subtree cannot restart.
//
// Backoff is exponential (github.com/cenkalti/backoff, 500ms growing to one
// minute by default; see [WithBackoff]) and kept per restart unit. It starts
// from scratch when the run that failed had been healthy for at least
// [DefaultBackoffReset] ([WithBackoffReset]): a failure after a long healthy
// period is a new incident, not part of a crash loop. A policy returning
// backoff.Stop leaves the runnable failed until its parent restarts.
//
// [RunGroup] starts siblings that form one restart unit: when one fails, all
// of them (done ones included) are cancelled, waited for and restarted
// together. Use it for runnables that share state none of them can rebuild
// alone.
//
// # Loggers and tree state
//
// Every runnable has a zap logger named after its place in the tree
// ([Logger]), derived from the logger given with [WithLogger]; without one
// the supervisor logs nothing. Failures are logged on the failed runnable's
// logger with the error, its restart count and the chosen backoff.
//
// The whole tree is observable as an event value, [Supervisor.Tree]: an
// immutable [TreeState] snapshot, published on every state change, with each
// node's dotted name, [State], restart count, last error and the time it
// entered its state. Tests wait on it with event.Filter instead of sleeping;
// the CLI prints it ([TreeState.String]).
//
// # Resources shared with children
//
// A runnable that opens something and hands it to its children (a
// connection, a client) must not close it with defer: defers run when the
// runnable returns, while its children are still being cancelled.
// [Cleanup] registers a function that runs once the runnable and its whole
// subtree have returned, before any restart.
//
// Tests run a runnable as the root of a tree for one test with package
// supervisortest, which logs through the test, restarts after a short
// backoff, and waits for the whole tree when the test ends so that no
// goroutine outlives it (a package of its own, so that programs do not
// link the test framework).
//
// # What this package does not do
//
// It only supervises what it runs: a panic in a goroutine that a runnable
// starts by itself still crashes the program, so work that may fail belongs
// in a child runnable.
//
// It never gives up on its own and never escalates a failure to the parent:
// a worker that cannot work keeps being restarted with growing backoff and
// stays visible in the tree, and the parent decides nothing about it. It
// does not kill runnables that ignore cancellation (Go cannot); it warns and
// waits. It does not order the start of siblings or wait for a child to be
// healthy; runnables that depend on each other express that through event
// values. It keeps no global state: every tree is independent.
package supervisor
