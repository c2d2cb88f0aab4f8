package clustertest

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	cpb "github.com/polis-os/polis/api/curator/v1"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// labels is an in-memory node's labels, standing in for the cluster: the
// Writer's bookkeeping is what is tested here, the suites test it against
// real clusters.
type labels struct {
	mu sync.Mutex
	m  map[string]string
}

func (l *labels) snapshot() map[string]string {
	l.mu.Lock()
	defer l.mu.Unlock()
	c := map[string]string{}
	for k, v := range l.m {
		c[k] = v
	}
	return c
}

// The Writer accepts what the cluster kept, a write that failed but was
// applied included, and names an acknowledged write that is gone.
func TestWriterLost(t *testing.T) {
	l := &labels{m: map[string]string{}}
	fail := errors.New("no leader")
	w := &Writer{Prefix: "k", Keys: 2, Max: 6, Write: func(_ context.Context, key, value string) error {
		l.mu.Lock()
		defer l.mu.Unlock()
		l.m[key] = value
		if value == "6" { // applied, but the answer was lost
			return fail
		}
		return nil
	}}
	w.Start(context.Background())
	w.WaitAcked(t, 5, time.Minute)
	w.Wait()
	if got := w.Acked(); got != 5 {
		t.Fatalf("%d writes acknowledged, want 5", got)
	}
	if err := w.Lost(l.snapshot()); err != nil {
		t.Fatalf("Lost of the labels as written: %v", err)
	}
	if !strings.Contains(w.String(), "1 failed") {
		t.Errorf("the writer says %q; want one failure", w.String())
	}
	lost := l.snapshot()
	lost["k1"] = "3" // 5 was acknowledged last
	if err := w.Lost(lost); err == nil || !strings.Contains(err.Error(), "label k1 is 3, but 5 was acknowledged last") {
		t.Errorf("Lost with k1 rolled back: %v", err)
	}
	delete(lost, "k0")
	if err := w.Lost(lost); err == nil || !strings.Contains(err.Error(), "label k0") {
		t.Errorf("Lost with k0 gone: %v", err)
	}
}

// A Writer that never got through proves nothing, and says so.
func TestWriterNothingAcknowledged(t *testing.T) {
	w := &Writer{Prefix: "k", Write: func(ctx context.Context, _, _ string) error {
		<-ctx.Done()
		return ctx.Err()
	}}
	w.Start(context.Background())
	w.Stop()
	if err := w.Lost(nil); err == nil {
		t.Error("Lost with no write acknowledged: nil")
	}
}

// A writer stuck on one write until it is stopped counts that time as a
// gap (the last acknowledgement is not the end), and says what it is
// stuck on.
func TestWriterStuckGap(t *testing.T) {
	stuck := make(chan struct{})
	w := &Writer{Prefix: "k", Write: func(ctx context.Context, _, value string) error {
		if value == "1" {
			return nil
		}
		close(stuck)
		<-ctx.Done()
		return ctx.Err()
	}}
	begin := time.Now()
	w.Start(context.Background())
	<-stuck
	if got := w.Doing(); !strings.Contains(got, "a write under way for") {
		t.Errorf("Doing while a write hangs: %q", got)
	}
	w.WaitAcked(t, 1, time.Minute)
	acked := time.Now()
	// The writer is stopped at least this long after its only
	// acknowledgement.
	for time.Since(acked) < 50*time.Millisecond {
		time.Sleep(time.Millisecond)
	}
	w.Stop()
	if gap := w.LongestGap(begin); gap < 50*time.Millisecond {
		t.Errorf("LongestGap = %v; want the time the last write hung until Stop, at least 50ms", gap)
	}
	if got := w.Doing(); !strings.Contains(got, "no write under way") {
		t.Errorf("Doing after Stop: %q", got)
	}
}

// Whole names every node still awaited.
func TestWhole(t *testing.T) {
	up := func(id, boot string, member bool) *cpb.Node {
		n := &cpb.Node{Id: id, State: cpb.NodeState_NODE_STATE_UP, Health: cpb.NodeHealth_NODE_HEALTH_HEALTHY, Status: &cpb.NodeStatus{BootId: boot}, Roles: &cpb.Roles{}}
		if member {
			n.Roles.ConsensusMember = &cpb.ConsensusMemberRole{}
			n.Status.RunningCurator = &cpb.RunningCurator{}
		}
		return n
	}
	recs := ByID([]*cpb.Node{up("a", "1", true), up("b", "2", true)})
	if err := Whole(recs, 2, CuratorServing); err != nil {
		t.Errorf("Whole of two serving curators: %v", err)
	}
	if err := Whole(recs, 3, HealthyUp); err == nil || !strings.Contains(err.Error(), "2 nodes listed, want 3") {
		t.Errorf("Whole of two nodes, want three: %v", err)
	}
	recs["c"] = up("c", "3", false)
	recs["c"].Health = cpb.NodeHealth_NODE_HEALTH_HEARTBEAT_TIMEOUT
	err := Whole(recs, 3, CuratorServing, NewBoot(map[string]string{"a": "1", "b": "0"}))
	if err == nil || !strings.Contains(err.Error(), "a still reports the boot 1") || strings.Contains(err.Error(), "b ") || !strings.Contains(err.Error(), "c is NODE_STATE_UP and NODE_HEALTH_HEARTBEAT_TIMEOUT") {
		t.Errorf("Whole of an old boot and an unhealthy node: %v", err)
	}
	if got := BootIDs(recs); got["b"] != "2" || len(got) != 3 {
		t.Errorf("BootIDs: %v", got)
	}
}
