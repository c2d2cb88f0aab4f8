package supervisor

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cenkalti/backoff/v5"
	"go.uber.org/zap/zaptest/observer"
)

func TestHealthyThenDone(t *testing.T) {
	proceed := make(chan struct{})
	var worker runs
	var child runs
	var workerCtx context.Context
	tr := startTree(t, func(ctx context.Context) error {
		if err := Run(ctx, "worker", func(ctx context.Context) error {
			worker.start(ctx)
			Signal(ctx, SignalHealthy)
			<-proceed
			if err := Run(ctx, "child", func(ctx context.Context) error {
				child.start(ctx)
				return healthyUntilCancelled(ctx)
			}); err != nil {
				return err
			}
			workerCtx = ctx
			Signal(ctx, SignalDone)
			return nil
		}); err != nil {
			return err
		}
		return healthyUntilCancelled(ctx)
	})

	tr.waitState(t, "root", StateHealthy)
	tr.waitState(t, "root.worker", StateHealthy)
	if st := tr.now(t); len(st.String()) == 0 {
		t.Fatal("empty tree rendering")
	}
	close(proceed)
	ts := tr.waitFor(t, "worker done and child healthy", func(ts TreeState) bool {
		w, _ := ts.Node("root.worker")
		c, _ := ts.Node("root.worker.child")
		return w.State == StateDone && c.State == StateHealthy
	})
	if w, _ := ts.Node("root.worker"); w.Restarts != 0 || w.LastError != "" {
		t.Errorf("done worker: restarts %d, last error %q; want 0, none", w.Restarts, w.LastError)
	}
	if worker.count() != 1 || child.count() != 1 {
		t.Errorf("worker ran %d times, child %d; want 1 each", worker.count(), child.count())
	}
	if err := child.ctx(1).Err(); err != nil {
		t.Errorf("child of a done runnable was cancelled: %v", err)
	}
	// The worker has returned: it can no longer start children.
	if err := Run(workerCtx, "late", healthyUntilCancelled); !errors.Is(err, ErrNotRunning) {
		t.Errorf("Run after return: got %v, want ErrNotRunning", err)
	}
	if n := len(tr.logs.FilterMessageSnippet("failed").All()); n != 0 {
		t.Errorf("%d failure logs for a clean run", n)
	}

	tr.stop(t)
	if err := child.ctx(1).Err(); err == nil {
		t.Error("child still running after the tree stopped")
	}
	ts = tr.now(t)
	for n := range ts.All() {
		if n.State != StateStopped && n.State != StateDone {
			t.Errorf("%s is %v after the tree stopped", n.Name, n.State)
		}
	}
}

func TestFailureRestartsWithBackoff(t *testing.T) {
	bo := &recordingBackoff{d: time.Millisecond}
	var a runs
	tr := startTree(t, func(ctx context.Context) error {
		if err := Run(ctx, "a", func(ctx context.Context) error {
			if n := a.start(ctx); n <= 3 {
				return fmt.Errorf("attempt %d failed", n)
			}
			return healthyUntilCancelled(ctx)
		}); err != nil {
			return err
		}
		return healthyUntilCancelled(ctx)
	}, WithBackoff(func() backoff.BackOff { return bo }))

	n := tr.waitState(t, "root.a", StateHealthy)
	if n.Restarts != 3 || n.LastError != "attempt 3 failed" {
		t.Errorf("root.a: restarts %d, last error %q; want 3, %q", n.Restarts, n.LastError, "attempt 3 failed")
	}
	if nexts, _ := bo.counts(); nexts != 3 {
		t.Errorf("backoff consulted %d times, want 3", nexts)
	}
	failures := tr.logs.FilterMessageSnippet("runnable failed").All()
	if len(failures) != 3 {
		t.Fatalf("%d failure logs, want 3", len(failures))
	}
	for i, e := range failures {
		fields := e.ContextMap()
		if e.LoggerName != "root.a" || fields["error"] != fmt.Sprintf("attempt %d failed", i+1) ||
			fields["restarts"] != int64(i) || fields["backoff"] != time.Millisecond {
			t.Errorf("failure log %d: logger %q, fields %v", i, e.LoggerName, fields)
		}
	}
	if r, _ := tr.now(t).Node("root"); r.Restarts != 0 {
		t.Errorf("root restarted %d times because of a child", r.Restarts)
	}
}

func TestBackoffIsInterruptedByCancellation(t *testing.T) {
	var a runs
	tr := startTree(t, func(ctx context.Context) error {
		if err := Run(ctx, "a", func(ctx context.Context) error {
			a.start(ctx)
			return errors.New("boom")
		}); err != nil {
			return err
		}
		return healthyUntilCancelled(ctx)
	}, WithBackoff(func() backoff.BackOff { return backoff.NewConstantBackOff(time.Hour) }))

	n := tr.waitState(t, "root.a", StateBackoff)
	if n.LastError != "boom" || n.Restarts != 0 {
		t.Errorf("in backoff: %+v", n)
	}
	tr.stop(t) // fails if the hour-long backoff is waited for
	if a.count() != 1 {
		t.Errorf("a ran %d times, want 1", a.count())
	}
	if n, _ := tr.now(t).Node("root.a"); n.State != StateStopped {
		t.Errorf("after stop, root.a is %v", n.State)
	}
}

func TestBackoffResetAfterHealthy(t *testing.T) {
	for _, tc := range []struct {
		name      string
		reset     time.Duration
		wantReset bool
	}{
		{"healthy long enough", 0, true},
		{"not healthy long enough", time.Hour, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bo := &recordingBackoff{}
			// The root gets its own policy: it never fails.
			var calls atomic.Int32
			newBackoff := func() backoff.BackOff {
				if calls.Add(1) == 1 {
					return &backoff.ZeroBackOff{}
				}
				return bo
			}
			var a runs
			tr := startTree(t, func(ctx context.Context) error {
				return doneAfter(ctx, Run(ctx, "a", func(ctx context.Context) error {
					if a.start(ctx) <= 3 {
						Signal(ctx, SignalHealthy)
						return errors.New("boom")
					}
					return healthyUntilCancelled(ctx)
				}))
			}, WithBackoff(newBackoff), WithBackoffReset(tc.reset))
			tr.waitNode(t, "root.a", "healthy after 3 restarts", func(n NodeState) bool {
				return n.State == StateHealthy && n.Restarts == 3
			})
			nexts, resets := bo.counts()
			// One Reset is the keeper preparing the policy before the first run.
			if wantResets := map[bool]int{true: 4, false: 1}[tc.wantReset]; resets != wantResets || nexts != 3 {
				t.Errorf("backoff: %d resets, %d nexts; want %d, 3", resets, nexts, wantResets)
			}
		})
	}
}

func TestBackoffStopGivesUp(t *testing.T) {
	var a runs
	tr := startTree(t, func(ctx context.Context) error {
		if err := Run(ctx, "a", func(ctx context.Context) error {
			a.start(ctx)
			return errors.New("fatal")
		}); err != nil {
			return err
		}
		return healthyUntilCancelled(ctx)
	}, WithBackoff(func() backoff.BackOff { return &backoff.StopBackOff{} }))

	tr.waitState(t, "root.a", StateFailed)
	tr.waitLog(t, "about giving up", func(e observer.LoggedEntry) bool {
		return e.LoggerName == "root.a" && strings.Contains(e.Message, "gave up")
	})
	if n, _ := tr.now(t).Node("root.a"); n.State != StateFailed || a.count() != 1 {
		t.Errorf("after giving up: %v, ran %d times", n.State, a.count())
	}
	if r, _ := tr.now(t).Node("root"); r.State != StateHealthy {
		t.Errorf("root is %v", r.State)
	}
}

func TestParentFailureRestartsSubtree(t *testing.T) {
	var parent, child, grandchild runs
	var restartedEarly bool
	grandchildHealthy := make(chan struct{}, 1)
	tr := startTree(t, func(ctx context.Context) error {
		if err := Run(ctx, "parent", func(ctx context.Context) error {
			n := parent.start(ctx)
			if n == 2 {
				// The restart must only happen once the whole old
				// subtree has returned.
				restartedEarly = !child.hasReturned(1) || !grandchild.hasReturned(1)
			}
			err := Run(ctx, "child", func(ctx context.Context) error {
				defer child.end(child.start(ctx))
				if err := Run(ctx, "grandchild", func(ctx context.Context) error {
					defer grandchild.end(grandchild.start(ctx))
					Signal(ctx, SignalHealthy)
					grandchildHealthy <- struct{}{}
					<-ctx.Done()
					return ctx.Err()
				}); err != nil {
					return err
				}
				return healthyUntilCancelled(ctx)
			})
			if err != nil {
				return err
			}
			if n == 1 {
				<-grandchildHealthy
				return errors.New("parent broke")
			}
			return healthyUntilCancelled(ctx)
		}); err != nil {
			return err
		}
		return healthyUntilCancelled(ctx)
	})

	tr.waitFor(t, "subtree restarted", func(ts TreeState) bool {
		p, _ := ts.Node("root.parent")
		g, _ := ts.Node("root.parent.child.grandchild")
		return p.State == StateHealthy && p.Restarts == 1 && g.State == StateHealthy
	})
	if restartedEarly {
		t.Error("parent restarted before its old subtree returned")
	}
	if parent.count() != 2 || child.count() != 2 || grandchild.count() != 2 {
		t.Errorf("runs: parent %d, child %d, grandchild %d; want 2 each", parent.count(), child.count(), grandchild.count())
	}
	// The restarted parent started new nodes, not restarted old ones.
	if c, _ := tr.now(t).Node("root.parent.child"); c.Restarts != 0 || c.LastError != "" {
		t.Errorf("new child inherited history: %+v", c)
	}
	// Being cancelled because the parent failed is not a failure.
	for _, e := range tr.logs.FilterMessageSnippet("runnable failed").All() {
		if e.LoggerName != "root.parent" {
			t.Errorf("unexpected failure log from %s: %v", e.LoggerName, e.ContextMap())
		}
	}
}

func TestChildFailureDoesNotRestartParent(t *testing.T) {
	var parent, child runs
	tr := startTree(t, func(ctx context.Context) error {
		return doneAfter(ctx, Run(ctx, "parent", func(ctx context.Context) error {
			parent.start(ctx)
			if err := Run(ctx, "child", func(ctx context.Context) error {
				if child.start(ctx) <= 3 {
					return errors.New("child broke")
				}
				return healthyUntilCancelled(ctx)
			}); err != nil {
				return err
			}
			return healthyUntilCancelled(ctx)
		}))
	})
	tr.waitNode(t, "root.parent.child", "healthy after 3 restarts", func(n NodeState) bool {
		return n.State == StateHealthy && n.Restarts == 3
	})
	p, _ := tr.now(t).Node("root.parent")
	if parent.count() != 1 || p.Restarts != 0 || p.State != StateHealthy || parent.ctx(1).Err() != nil {
		t.Errorf("parent affected by child failure: ran %d times, %+v", parent.count(), p)
	}
}

func TestGroupRestartsTogether(t *testing.T) {
	var a, b, c runs
	var restartedEarly bool
	bHealthy := make(chan struct{})
	cDone := make(chan struct{})
	tr := startTree(t, func(ctx context.Context) error {
		if err := RunGroup(ctx, map[string]Runnable{
			"a": func(ctx context.Context) error {
				if a.start(ctx) == 1 {
					<-bHealthy
					<-cDone
					return errors.New("a broke")
				}
				restartedEarly = !b.hasReturned(1)
				return healthyUntilCancelled(ctx)
			},
			"b": func(ctx context.Context) error {
				n := b.start(ctx)
				defer b.end(n)
				if n == 1 {
					Signal(ctx, SignalHealthy)
					close(bHealthy)
					<-ctx.Done()
					return ctx.Err()
				}
				return healthyUntilCancelled(ctx)
			},
			"c": func(ctx context.Context) error {
				if c.start(ctx) == 1 {
					defer close(cDone)
				}
				Signal(ctx, SignalDone)
				return nil
			},
		}); err != nil {
			return err
		}
		return healthyUntilCancelled(ctx)
	})

	ts := tr.waitFor(t, "group restarted", func(ts TreeState) bool {
		a, _ := ts.Node("root.a")
		b, _ := ts.Node("root.b")
		c, _ := ts.Node("root.c")
		return a.State == StateHealthy && b.State == StateHealthy && c.State == StateDone &&
			a.Restarts == 1 && b.Restarts == 1 && c.Restarts == 1
	})
	if a.count() != 2 || b.count() != 2 || c.count() != 2 {
		t.Errorf("runs: a %d, b %d, c %d; want 2 each", a.count(), b.count(), c.count())
	}
	if restartedEarly {
		t.Error("group restarted before all members returned")
	}
	if n, _ := ts.Node("root.a"); n.LastError != "a broke" {
		t.Errorf("a's last error %q", n.LastError)
	}
	if n, _ := ts.Node("root.b"); n.LastError != "" {
		t.Errorf("b, cancelled with its group, has last error %q", n.LastError)
	}
	e := tr.waitLog(t, "group failure", func(e observer.LoggedEntry) bool {
		return e.LoggerName == "root.a" && strings.Contains(e.Message, "runnable failed")
	})
	if g, ok := e.ContextMap()["group"].([]any); !ok || len(g) != 3 {
		t.Errorf("failure log does not name the group: %v", e.ContextMap())
	}
}

func TestSiblingUnaffected(t *testing.T) {
	var x, y runs
	tr := startTree(t, func(ctx context.Context) error {
		if err := Run(ctx, "x", func(ctx context.Context) error {
			x.start(ctx)
			return errors.New("x always fails")
		}); err != nil {
			return err
		}
		if err := Run(ctx, "y", func(ctx context.Context) error {
			y.start(ctx)
			return healthyUntilCancelled(ctx)
		}); err != nil {
			return err
		}
		return healthyUntilCancelled(ctx)
	}, WithBackoff(func() backoff.BackOff { return backoff.NewConstantBackOff(time.Millisecond) }))

	tr.waitNode(t, "root.x", "restarted 5 times", func(n NodeState) bool { return n.Restarts >= 5 })
	ts := tr.waitState(t, "root.y", StateHealthy)
	if y.count() != 1 || y.ctx(1).Err() != nil || ts.Restarts != 0 {
		t.Errorf("sibling affected: ran %d times, ctx err %v, %+v", y.count(), y.ctx(1).Err(), ts)
	}
	if r, _ := tr.now(t).Node("root"); r.Restarts != 0 || r.State != StateHealthy {
		t.Errorf("root affected: %+v", r)
	}
}

func TestPanicIsRecoveredAndRestarted(t *testing.T) {
	var a runs
	tr := startTree(t, func(ctx context.Context) error {
		return doneAfter(ctx, Run(ctx, "a", func(ctx context.Context) error {
			if a.start(ctx) == 1 {
				panicky()
			}
			return healthyUntilCancelled(ctx)
		}))
	})
	n := tr.waitNode(t, "root.a", "healthy after the panic", func(n NodeState) bool {
		return n.State == StateHealthy && n.Restarts == 1
	})
	if n.LastError != "panic: kaboom" {
		t.Errorf("last error %q", n.LastError)
	}
	e := tr.waitLog(t, "with the stack", func(e observer.LoggedEntry) bool {
		return e.LoggerName == "root.a" && strings.Contains(e.Message, "failed")
	})
	if stack, _ := e.ContextMap()["stack"].(string); !strings.Contains(stack, "supervisor.panicky") {
		t.Errorf("stack does not show the panicking function:\n%s", stack)
	}
}

//go:noinline
func panicky() { panic("kaboom") }

func TestReturnNilWithoutDoneIsFailure(t *testing.T) {
	var a runs
	tr := startTree(t, func(ctx context.Context) error {
		return doneAfter(ctx, Run(ctx, "a", func(ctx context.Context) error {
			if a.start(ctx) == 1 {
				Signal(ctx, SignalHealthy)
				return nil
			}
			return healthyUntilCancelled(ctx)
		}))
	})
	n := tr.waitNode(t, "root.a", "restarted", func(n NodeState) bool {
		return n.State == StateHealthy && n.Restarts == 1
	})
	if n.LastError != ErrReturnedWithoutDone.Error() {
		t.Errorf("last error %q", n.LastError)
	}
}

func TestGoexitIsFailure(t *testing.T) {
	var a runs
	tr := startTree(t, func(ctx context.Context) error {
		return doneAfter(ctx, Run(ctx, "a", func(ctx context.Context) error {
			if a.start(ctx) == 1 {
				runtime.Goexit()
			}
			return healthyUntilCancelled(ctx)
		}))
	})
	n := tr.waitNode(t, "root.a", "restarted", func(n NodeState) bool {
		return n.State == StateHealthy && n.Restarts == 1
	})
	if n.LastError != ErrGoexit.Error() {
		t.Errorf("last error %q", n.LastError)
	}
}

func TestErrorAfterCancellationIsNotFailure(t *testing.T) {
	tr := startTree(t, func(ctx context.Context) error {
		if err := Run(ctx, "a", func(ctx context.Context) error {
			Signal(ctx, SignalHealthy)
			<-ctx.Done()
			return fmt.Errorf("shutting down: %w", ctx.Err())
		}); err != nil {
			return err
		}
		if err := Run(ctx, "b", func(ctx context.Context) error {
			Signal(ctx, SignalHealthy)
			<-ctx.Done()
			return nil // without Done, but cancelled: fine too
		}); err != nil {
			return err
		}
		return healthyUntilCancelled(ctx)
	})
	tr.waitState(t, "root.a", StateHealthy)
	tr.waitState(t, "root.b", StateHealthy)
	tr.stop(t)
	for n := range tr.now(t).All() {
		if n.State != StateStopped || n.LastError != "" {
			t.Errorf("%s after shutdown: %v, last error %q", n.Name, n.State, n.LastError)
		}
	}
	if n := len(tr.logs.FilterMessageSnippet("failed").All()); n != 0 {
		t.Errorf("%d failure logs for a clean shutdown", n)
	}
}

func TestNames(t *testing.T) {
	type outcome struct {
		call string
		err  error
		want error
	}
	results := make(chan []outcome, 1)
	tr := startTree(t, func(ctx context.Context) error {
		var out []outcome
		try := func(call string, err, want error) { out = append(out, outcome{call, err, want}) }
		try(`Run("")`, Run(ctx, "", healthyUntilCancelled), ErrInvalidName)
		try(`Run("Upper")`, Run(ctx, "Upper", healthyUntilCancelled), ErrInvalidName)
		try(`Run("a.b")`, Run(ctx, "a.b", healthyUntilCancelled), ErrInvalidName)
		try(`Run("a b")`, Run(ctx, "a b", healthyUntilCancelled), ErrInvalidName)
		try(`Run("ok-1_x")`, Run(ctx, "ok-1_x", healthyUntilCancelled), nil)
		try(`Run("ok-1_x") again`, Run(ctx, "ok-1_x", healthyUntilCancelled), ErrDuplicateName)
		try(`RunGroup(good, Bad)`, RunGroup(ctx, map[string]Runnable{
			"good": healthyUntilCancelled, "Bad": healthyUntilCancelled,
		}), ErrInvalidName)
		try(`RunGroup(fresh, ok-1_x)`, RunGroup(ctx, map[string]Runnable{
			"fresh": healthyUntilCancelled, "ok-1_x": healthyUntilCancelled,
		}), ErrDuplicateName)
		try(`RunGroup()`, RunGroup(ctx, nil), nil)
		if err := Run(ctx, "nil", nil); err == nil || !strings.Contains(err.Error(), "nil runnable") {
			try(`Run(nil runnable)`, err, errors.New("an error about a nil runnable"))
		}
		try(`Run(background ctx)`, Run(context.Background(), "x", healthyUntilCancelled), ErrNotSupervised)
		cancelled, cancel := context.WithCancel(ctx)
		cancel()
		try(`Run(cancelled ctx)`, Run(cancelled, "x", healthyUntilCancelled), ErrNotRunning)
		results <- out
		return healthyUntilCancelled(ctx)
	})
	var out []outcome
	select {
	case out = <-results:
	case <-time.After(patience):
		t.Fatal("root did not report")
	}
	for _, o := range out {
		if (o.want == nil) != (o.err == nil) || (o.want != nil && !errors.Is(o.err, o.want)) {
			t.Errorf("%s: got %v, want %v", o.call, o.err, o.want)
		} else if o.err != nil {
			t.Logf("%s: %v", o.call, o.err)
		}
	}
	ts := tr.waitState(t, "root", StateHealthy)
	ts2 := tr.now(t)
	for _, name := range []string{"root.good", "root.fresh", "root.x"} {
		if _, ok := ts2.Node(name); ok {
			t.Errorf("%s was started despite the error", name)
		}
	}
	if _, ok := ts2.Node("root.ok-1_x"); !ok {
		t.Errorf("root.ok-1_x missing; tree:\n%s%v", ts2, ts)
	}
}

func TestConcurrentRunsFromOneRunnable(t *testing.T) {
	const workers = 16
	errs := make(chan error, 2*workers)
	tr := startTree(t, func(ctx context.Context) error {
		var wg sync.WaitGroup
		for i := range workers {
			wg.Go(func() {
				errs <- Run(ctx, fmt.Sprintf("w%d", i), healthyUntilCancelled)
				errs <- Run(ctx, "shared", healthyUntilCancelled)
			})
		}
		wg.Wait()
		close(errs)
		return healthyUntilCancelled(ctx)
	})
	tr.waitFor(t, "all workers healthy", func(ts TreeState) bool {
		healthy := 0
		for n := range ts.All() {
			if n.State == StateHealthy {
				healthy++
			}
		}
		return healthy == workers+2
	})
	var ok, dup int
	for err := range errs {
		switch {
		case err == nil:
			ok++
		case errors.Is(err, ErrDuplicateName):
			dup++
		default:
			t.Errorf("unexpected error %v", err)
		}
	}
	if ok != workers+1 || dup != workers-1 {
		t.Errorf("%d successes, %d duplicates; want %d, %d", ok, dup, workers+1, workers-1)
	}
}

func TestRunAfterCancellation(t *testing.T) {
	var a runs
	tr := startTree(t, func(ctx context.Context) error {
		return doneAfter(ctx, Run(ctx, "a", func(ctx context.Context) error {
			a.start(ctx)
			return healthyUntilCancelled(ctx)
		}))
	})
	tr.waitState(t, "root.a", StateHealthy)
	tr.stop(t)
	if err := Run(a.ctx(1), "late", healthyUntilCancelled); !errors.Is(err, ErrNotRunning) {
		t.Errorf("Run from a cancelled runnable: got %v, want ErrNotRunning", err)
	}
}

func TestLoggerNames(t *testing.T) {
	tr := startTree(t, func(ctx context.Context) error {
		Logger(ctx).Info("hello")
		if err := Run(ctx, "a", func(ctx context.Context) error {
			Logger(ctx).Info("hello")
			if err := Run(ctx, "b", func(ctx context.Context) error {
				Logger(ctx).Info("hello")
				return healthyUntilCancelled(ctx)
			}); err != nil {
				return err
			}
			return healthyUntilCancelled(ctx)
		}); err != nil {
			return err
		}
		return healthyUntilCancelled(ctx)
	})
	tr.waitState(t, "root.a.b", StateHealthy)
	var names []string
	for _, e := range tr.logs.FilterMessage("hello").All() {
		names = append(names, e.LoggerName)
	}
	if got := strings.Join(names, " "); got != "root root.a root.a.b" {
		t.Errorf("logger names %q", got)
	}
	if Logger(context.Background()) == nil {
		t.Error("Logger outside a runnable returned nil")
	}
}

func TestSignalMisuse(t *testing.T) {
	mustPanic := func(what string, f func()) {
		t.Helper()
		defer func() {
			if v := recover(); v == nil {
				t.Errorf("%s did not panic", what)
			} else {
				t.Logf("%s: %v", what, v)
			}
		}()
		f()
	}
	mustPanic("Signal outside a runnable", func() { Signal(context.Background(), SignalHealthy) })

	var a runs
	tr := startTree(t, func(ctx context.Context) error {
		return doneAfter(ctx, Run(ctx, "a", func(ctx context.Context) error {
			if a.start(ctx) == 1 {
				return errors.New("first run fails")
			}
			<-ctx.Done() // never signals
			return ctx.Err()
		}))
	})
	tr.waitNode(t, "root.a", "running again", func(n NodeState) bool {
		return n.State == StateRunning && n.Restarts == 1
	})
	mustPanic("unknown signal", func() { Signal(a.ctx(2), SignalType(42)) })
	// A goroutine left behind by the first run must not mark the second one
	// healthy. Signal is synchronous, so the tree can be checked at once.
	Signal(a.ctx(1), SignalHealthy)
	if n, _ := tr.now(t).Node("root.a"); n.State != StateRunning {
		t.Errorf("stale signal changed the state to %v", n.State)
	}
}

func TestSlowExitWarning(t *testing.T) {
	release := make(chan struct{})
	tr := startTree(t, func(ctx context.Context) error {
		if err := Run(ctx, "slow", func(ctx context.Context) error {
			Signal(ctx, SignalHealthy)
			<-ctx.Done()
			<-release // ignores cancellation until the test allows it
			return ctx.Err()
		}); err != nil {
			return err
		}
		return healthyUntilCancelled(ctx)
	}, WithExitWarning(5*time.Millisecond))
	tr.waitState(t, "root.slow", StateHealthy)
	tr.cancel()
	tr.waitState(t, "root.slow", StateCancelling)
	tr.waitLog(t, "warning about root.slow", func(e observer.LoggedEntry) bool {
		return e.LoggerName == "root.slow" && strings.Contains(e.Message, "slow to return")
	})
	close(release)
	tr.stop(t)
}

func TestWaitReturnsWhenEverythingIsDone(t *testing.T) {
	tr := startTree(t, func(ctx context.Context) error {
		if err := Run(ctx, "a", func(ctx context.Context) error {
			Signal(ctx, SignalDone)
			return nil
		}); err != nil {
			return err
		}
		Signal(ctx, SignalDone)
		return nil
	})
	done := make(chan struct{})
	go func() {
		tr.Wait() // the tree's context is never cancelled here
		close(done)
	}()
	waitChan(t, done, "Wait on a finished tree")
	for n := range tr.now(t).All() {
		if n.State != StateDone {
			t.Errorf("%s is %v", n.Name, n.State)
		}
	}
}
