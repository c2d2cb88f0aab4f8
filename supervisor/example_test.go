package supervisor_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/cenkalti/backoff/v5"
	"go.uber.org/zap"

	"github.com/polis-os/polis/event"
	"github.com/polis-os/polis/supervisor"
)

// A program runs its workers as a tree: New starts the root and returns at
// once, every runnable starts its children with Run, a child that fails is
// restarted on its own, and the whole tree lives until the context given
// to New is cancelled. Wait then returns once every runnable has exited,
// so that the program can exit without cutting any of them off.
//
// Here the root opens a connection that its two children share: "server"
// signals healthy and works until it is cancelled, "sync" fails on its
// first attempt and is restarted after a backoff. The root closes the
// connection with Cleanup, not defer, because a defer would run as soon as
// the root returns, while its children still use the connection.
func Example() {
	ctx, stop := context.WithCancel(context.Background())
	defer stop()

	root := func(ctx context.Context) error {
		// Opening a real connection is left out. users counts the
		// children that hold it; when the cleanup closes it, it must
		// find none.
		var users atomic.Int32
		supervisor.Cleanup(ctx, func() {
			fmt.Println("closing the connection; children still using it:", users.Load())
		})

		// A well-behaved long-running worker: it signals healthy once its
		// work has started, so that the tree tells a stuck start from a
		// working service, and returns when its context is cancelled.
		// Returning after cancellation is not a failure, whatever it
		// returns.
		err := supervisor.Run(ctx, "server", func(ctx context.Context) error {
			users.Add(1)
			defer users.Add(-1)
			supervisor.Signal(ctx, supervisor.SignalHealthy)
			<-ctx.Done()
			return ctx.Err()
		})
		if err != nil {
			return err
		}

		// A worker that cannot go on simply returns an error, and the
		// supervisor restarts it: no retry loop of its own. Its runs never
		// overlap, and each starts afresh with a new context.
		var attempts atomic.Int32
		err = supervisor.Run(ctx, "sync", func(ctx context.Context) error {
			users.Add(1)
			defer users.Add(-1)
			if attempts.Add(1) == 1 {
				return errors.New("peer unreachable")
			}
			supervisor.Signal(ctx, supervisor.SignalHealthy)
			<-ctx.Done()
			return ctx.Err()
		})
		if err != nil {
			return err
		}

		// The root has nothing more to do itself. It says so before it
		// returns nil: a runnable that returns nil without SignalDone
		// counts as failed. A done runnable is not restarted, and its
		// children keep running.
		supervisor.Signal(ctx, supervisor.SignalDone)
		return nil
	}

	s := supervisor.New(ctx, root,
		// Without a logger the supervisor logs nothing, failures
		// included: a program always passes its own. zap.NewExample
		// writes to standard output without timestamps, so that its lines
		// can be part of this example's output.
		supervisor.WithLogger(zap.NewExample()),
		// A program keeps the default backoff (500ms, growing); a short
		// one keeps this example fast.
		supervisor.WithBackoff(func() backoff.BackOff {
			return backoff.NewConstantBackOff(10 * time.Millisecond)
		}),
	)

	// The tree's state is an event value: wait on it, rather than sleep,
	// until everything is up. A status page would show the same data.
	up, err := event.Get(context.Background(), s.Tree(), event.Filter(func(ts supervisor.TreeState) bool {
		top, _ := ts.Node("root")
		server, _ := ts.Node("root.server")
		syncer, _ := ts.Node("root.sync")
		return top.State == supervisor.StateDone &&
			server.State == supervisor.StateHealthy &&
			syncer.State == supervisor.StateHealthy
	}))
	if err != nil {
		fmt.Println(err)
		return
	}
	// TreeState.String is for humans and its layout may change: programs
	// read the fields.
	show := func(ts supervisor.TreeState) {
		for n := range ts.All() {
			fmt.Printf("%s: %s, restarts %d, last error %q\n", n.Name, n.State, n.Restarts, n.LastError)
		}
	}
	show(up)

	// A program stops the tree by cancelling the context given to New,
	// typically on a signal, and then waits for every runnable to return
	// and every cleanup to run.
	stop()
	s.Wait()

	down, err := event.Get(context.Background(), s.Tree())
	if err != nil {
		fmt.Println(err)
		return
	}
	show(down)

	// Output:
	// {"level":"error","logger":"root.sync","msg":"runnable failed; restarting after backoff","error":"peer unreachable","restarts":0,"backoff":"10ms"}
	// root: done, restarts 0, last error ""
	// root.server: healthy, restarts 0, last error ""
	// root.sync: healthy, restarts 1, last error "peer unreachable"
	// closing the connection; children still using it: 0
	// root: done, restarts 0, last error ""
	// root.server: stopped, restarts 0, last error ""
	// root.sync: stopped, restarts 1, last error "peer unreachable"
}
