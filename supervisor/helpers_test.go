package supervisor

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/cenkalti/backoff/v5"
	"go.uber.org/goleak"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest"
	"go.uber.org/zap/zaptest/observer"

	"github.com/polis-os/polis/event"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// patience bounds every wait of the tests: long enough for a loaded CI
// machine under -race, short enough that a broken test fails rather than
// hangs.
const patience = 20 * time.Second

type tree struct {
	*Supervisor
	logs   *observer.ObservedLogs
	cancel context.CancelFunc
}

// startTree runs root with a zero backoff (tests override it with opts) and
// logs going both to t and to an observer. Cleanup cancels and waits.
func startTree(t *testing.T, root Runnable, opts ...Option) *tree {
	t.Helper()
	core, logs := observer.New(zap.DebugLevel)
	logger := zap.New(zapcore.NewTee(core, zaptest.NewLogger(t).Core()))
	ctx, cancel := context.WithCancel(context.Background())
	base := []Option{
		WithLogger(logger),
		WithBackoff(func() backoff.BackOff { return &backoff.ZeroBackOff{} }),
	}
	s := New(ctx, root, append(base, opts...)...)
	t.Cleanup(func() {
		cancel()
		s.Wait()
	})
	return &tree{Supervisor: s, logs: logs, cancel: cancel}
}

// stop cancels the tree and waits for it, failing the test if it hangs.
func (tr *tree) stop(t *testing.T) {
	t.Helper()
	tr.cancel()
	done := make(chan struct{})
	go func() {
		tr.Wait()
		close(done)
	}()
	waitChan(t, done, "tree to stop")
}

// waitFor blocks until the tree state satisfies pred.
func (tr *tree) waitFor(t *testing.T, what string, pred func(TreeState) bool) TreeState {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	w := tr.Tree().Watch()
	defer w.Close()
	ts, err := w.Get(ctx, event.Filter(pred))
	if err != nil {
		last, _ := event.Get(context.Background(), tr.Tree())
		t.Fatalf("waiting for %s: %v; tree:\n%s", what, err, last)
	}
	return ts
}

// waitNode waits until the named node satisfies pred and returns it.
func (tr *tree) waitNode(t *testing.T, name string, what string, pred func(NodeState) bool) NodeState {
	t.Helper()
	ts := tr.waitFor(t, name+" "+what, func(ts TreeState) bool {
		n, ok := ts.Node(name)
		return ok && pred(n)
	})
	n, _ := ts.Node(name)
	return n
}

func (tr *tree) waitState(t *testing.T, name string, st State) NodeState {
	t.Helper()
	return tr.waitNode(t, name, "to be "+st.String(), func(n NodeState) bool { return n.State == st })
}

// now returns the current tree state.
func (tr *tree) now(t *testing.T) TreeState {
	t.Helper()
	ts, err := event.Get(context.Background(), tr.Tree())
	if err != nil {
		t.Fatal(err)
	}
	return ts
}

// waitLog polls the observed logs until one entry satisfies pred. The logs
// are no event value, so polling on a ticker with a deadline is the honest
// way to wait for them.
func (tr *tree) waitLog(t *testing.T, what string, pred func(observer.LoggedEntry) bool) observer.LoggedEntry {
	t.Helper()
	deadline := time.After(patience)
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for {
		for _, e := range tr.logs.All() {
			if pred(e) {
				return e
			}
		}
		select {
		case <-tick.C:
		case <-deadline:
			t.Fatalf("no log entry %s", what)
		}
	}
}

func waitChan(t *testing.T, c <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-c:
	case <-time.After(patience):
		t.Fatalf("timed out waiting for %s", what)
	}
}

func isClosed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// healthyUntilCancelled is the shape of a well-behaved long-running worker.
func healthyUntilCancelled(ctx context.Context) error {
	Signal(ctx, SignalHealthy)
	<-ctx.Done()
	return ctx.Err()
}

// runs records the contexts of successive runs of one runnable, so that
// tests can check how often it ran and whether earlier runs were cancelled.
type runs struct {
	mu       sync.Mutex
	ctxs     []context.Context
	returned []chan struct{}
}

// start records a run and returns its 1-based number.
func (r *runs) start(ctx context.Context) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.ctxs = append(r.ctxs, ctx)
	r.returned = append(r.returned, make(chan struct{}))
	return len(r.ctxs)
}

// end records that run i has returned; runnables defer it.
func (r *runs) end(i int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	close(r.returned[i-1])
}

// hasReturned reports whether run i has called end.
func (r *runs) hasReturned(i int) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return isClosed(r.returned[i-1])
}

func (r *runs) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.ctxs)
}

func (r *runs) ctx(i int) context.Context {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.ctxs[i-1]
}

// recordingBackoff counts calls and always waits d.
type recordingBackoff struct {
	mu     sync.Mutex
	d      time.Duration
	nexts  int
	resets int
}

func (b *recordingBackoff) NextBackOff() time.Duration {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.nexts++
	return b.d
}

func (b *recordingBackoff) Reset() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.resets++
}

func (b *recordingBackoff) counts() (nexts, resets int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.nexts, b.resets
}

// doneAfter is how a runnable that only starts children finishes: it
// reports a failure to start them, or signals Done.
func doneAfter(ctx context.Context, err error) error {
	if err != nil {
		return err
	}
	Signal(ctx, SignalDone)
	return nil
}
