package clustertest

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"

	cpb "github.com/polis-os/polis/api/curator/v1"
	"github.com/polis-os/polis/internal/testutil"
)

// Writer writes labels one after the other, as a client of the cluster
// would, while a suite breaks the cluster, and records which writes were
// acknowledged, when, and which failed. A failed write (no leader, a
// connection cut, the writer stopped mid-call) may have been applied all
// the same; an acknowledged one must never be lost. Write number s sets
// the label Prefix+s (or, with Keys, Prefix+(s mod Keys), so that later
// writes overwrite earlier ones) to s.
type Writer struct {
	// Write sets one label and returns nil once the cluster acknowledged
	// it.
	Write func(ctx context.Context, key, value string) error
	// Prefix starts every label's key.
	Prefix string
	// Keys is how many keys the writes cycle through; every write has its
	// own key if zero.
	Keys int
	// Max is how many writes to make; until the writer is stopped if
	// zero.
	Max int

	mu      sync.Mutex
	seq     int
	acked   map[string]int          // key → last acknowledged value
	unknown map[string]map[int]bool // key → values whose write failed: maybe applied
	ackAt   []time.Time             // when each acknowledgement came
	failed  int
	lastErr error
	// writing is when the write under way began, zero between writes;
	// stopped is when Stop was called.
	writing, stopped time.Time

	cancel context.CancelFunc
	done   chan struct{}
}

// LabelWrites are writes of a label of the node nodeID through conn (a
// leader-following connection to the cluster's curators), each bounded by
// timeout.
func LabelWrites(conn grpc.ClientConnInterface, nodeID string, timeout time.Duration) func(ctx context.Context, key, value string) error {
	mgmt := cpb.NewManagementServiceClient(conn)
	return func(ctx context.Context, key, value string) error {
		ctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		_, err := mgmt.UpdateNodeLabels(ctx, &cpb.UpdateNodeLabelsRequest{NodeId: nodeID, Set: map[string]string{key: value}})
		return err
	}
}

// Start starts writing, until Max writes are made, ctx ends or Stop.
func (w *Writer) Start(ctx context.Context) {
	w.acked = map[string]int{}
	w.unknown = map[string]map[int]bool{}
	ctx, w.cancel = context.WithCancel(ctx)
	w.done = make(chan struct{})
	go func() {
		defer close(w.done)
		w.run(ctx)
	}()
}

// Wait waits until the writer has ended: Max writes made, or stopped.
func (w *Writer) Wait() { <-w.done }

// Stop stops the writer, cutting short the write under way (which counts
// as failed), and waits until it has ended.
func (w *Writer) Stop() {
	w.mu.Lock()
	if w.stopped.IsZero() {
		w.stopped = time.Now()
	}
	w.mu.Unlock()
	w.cancel()
	<-w.done
}

func (w *Writer) run(ctx context.Context) {
	defer w.cancel()
	for ctx.Err() == nil {
		w.mu.Lock()
		if w.Max > 0 && w.seq >= w.Max {
			w.mu.Unlock()
			return
		}
		w.seq++
		seq := w.seq
		w.mu.Unlock()
		key := w.key(seq)
		w.mu.Lock()
		w.writing = time.Now()
		w.mu.Unlock()
		err := w.Write(ctx, key, strconv.Itoa(seq))
		w.mu.Lock()
		w.writing = time.Time{}
		if err == nil {
			w.acked[key] = seq
			w.ackAt = append(w.ackAt, time.Now())
		} else {
			if w.unknown[key] == nil {
				w.unknown[key] = map[int]bool{}
			}
			w.unknown[key][seq] = true
			if ctx.Err() == nil {
				w.failed++
				w.lastErr = err
			}
		}
		w.mu.Unlock()
	}
}

func (w *Writer) key(seq int) string {
	if w.Keys > 0 {
		seq %= w.Keys
	}
	return w.Prefix + strconv.Itoa(seq)
}

// WaitAcked waits until n writes were acknowledged, failing tb after
// timeout.
func (w *Writer) WaitAcked(tb testing.TB, n int, timeout time.Duration) {
	tb.Helper()
	testutil.Eventually(tb, timeout, fmt.Sprintf("%d writes acknowledged", n), func() error {
		w.mu.Lock()
		defer w.mu.Unlock()
		if len(w.ackAt) < n {
			return fmt.Errorf("%d acknowledged, %d failed (the last with %v)", len(w.ackAt), w.failed, w.lastErr)
		}
		return nil
	})
}

// Acked counts the acknowledged writes.
func (w *Writer) Acked() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.ackAt)
}

// AcksBetween counts the acknowledgements from a to b.
func (w *Writer) AcksBetween(a, b time.Time) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for _, at := range w.ackAt {
		if !at.Before(a) && !at.After(b) {
			n++
		}
	}
	return n
}

// Lost compares the node's labels with what was acknowledged: every key
// must hold its last acknowledged value, or a later one whose write failed
// (a write whose answer was lost may have been applied). It returns an
// error naming every acknowledged write that was lost, or, if no write
// was acknowledged at all, saying so: a writer that never got through
// proves nothing.
func (w *Writer) Lost(labels map[string]string) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.ackAt) == 0 {
		return fmt.Errorf("no write was acknowledged (%d failed, the last with %v)", w.failed, w.lastErr)
	}
	var errs []error
	for key, want := range w.acked {
		got, err := strconv.Atoi(labels[key])
		switch {
		case err != nil:
			errs = append(errs, fmt.Errorf("label %s: %q, but %d was acknowledged: an acknowledged write was lost", key, labels[key], want))
		case got == want:
		case got > want && w.unknown[key][got]:
		default:
			errs = append(errs, fmt.Errorf("label %s is %d, but %d was acknowledged last: an acknowledged write was lost", key, got, want))
		}
	}
	return errors.Join(errs...)
}

// LongestGap is the longest time without an acknowledgement, from from
// until the writer was stopped (until now if it was not): a writer stuck
// on one write until it was stopped counts that time too.
func (w *Writer) LongestGap(from time.Time) time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	var longest time.Duration
	prev := from
	for _, at := range w.ackAt {
		longest = max(longest, at.Sub(prev))
		prev = at
	}
	end := w.stopped
	if end.IsZero() {
		end = time.Now()
	}
	return max(longest, end.Sub(prev))
}

// Doing says what the writer is doing at the moment, for a test that
// found no acknowledgement where it wanted one: waiting on a write since
// when, or between writes, with the last failure.
func (w *Writer) Doing() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.writing.IsZero() {
		return fmt.Sprintf("a write under way for %v (since %s), the last failure: %v", time.Since(w.writing).Round(10*time.Millisecond), w.writing.Format("15:04:05.000"), w.lastErr)
	}
	return fmt.Sprintf("no write under way, the last failure: %v", w.lastErr)
}

// String says how many writes were acknowledged and how many failed.
func (w *Writer) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return fmt.Sprintf("%d writes acknowledged, %d failed (the last failure: %v)", len(w.ackAt), w.failed, w.lastErr)
}
