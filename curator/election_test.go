package curator

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/polis-os/polis/event"
	"github.com/polis-os/polis/supervisor"
)

func leading(s *LeaderStatus) bool { return s != nil && s.Leading != nil }

// Three candidates: one leads, the others see it; when the leader stops, a
// follower takes over, and the old leadership can no longer write.
func TestElection(t *testing.T) {
	cli := startConsensus(t)
	elections := make([]*Election, 3)
	cancels := make([]func(), 3)
	for i := range elections {
		elections[i] = &Election{Client: cli, Candidate: []byte(fmt.Sprintf("curator-%d", i)), LeaseTTL: DefaultLeaseTTL}
		cancels[i] = supervisor.TestHarness(t, elections[i].Run)
	}

	// Exactly one leads; everybody agrees who.
	var leader int = -1
	for leader < 0 {
		for i, e := range elections {
			st, err := event.Get(ctxT(t), e.Status(), event.Filter(func(s *LeaderStatus) bool { return s.Leader != nil }))
			if err != nil {
				t.Fatal(err)
			}
			if st.Leading != nil {
				leader = i
			}
		}
	}
	want := fmt.Sprintf("curator-%d", leader)
	for i, e := range elections {
		st, err := event.Get(ctxT(t), e.Status(), event.Filter(func(s *LeaderStatus) bool { return string(s.Leader) == want }))
		if err != nil {
			t.Fatalf("curator %d never saw %s lead: %v", i, want, err)
		}
		if (st.Leading != nil) != (i == leader) {
			t.Fatalf("curator %d: leading = %v", i, st.Leading != nil)
		}
	}

	// The leader's guarded writes work, and its compares are honoured.
	old, _ := event.Get(ctxT(t), elections[leader].Status())
	put := []clientv3.Op{clientv3.OpPut("k", "v1")}
	if _, ok, err := old.Leading.Txn(ctxT(t), nil, put, nil); err != nil || !ok {
		t.Fatalf("leader write: ok=%v, %v", ok, err)
	}
	absent := []clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision("k"), "=", 0)}
	if _, ok, err := old.Leading.Txn(ctxT(t), absent, put, nil); err != nil || ok {
		t.Fatalf("leader write with a failing compare: ok=%v, %v", ok, err)
	}

	// Stopping the leader resigns at once: another takes over.
	cancels[leader]()
	var in event.Inputs
	defer in.Close()
	var followers []*event.In[*LeaderStatus]
	for i, e := range elections {
		if i != leader {
			followers = append(followers, event.Input(&in, e.Status(), nil))
		}
	}
	for newLeader := false; !newLeader; {
		if _, err := in.Wait(ctxT(t)); err != nil {
			t.Fatalf("waiting for a new leader: %v", err)
		}
		for _, f := range followers {
			newLeader = newLeader || leading(f.Latest())
		}
	}
	if _, _, err := old.Leading.Txn(ctxT(t), nil, []clientv3.Op{clientv3.OpPut("k", "stale")}, nil); !errors.Is(err, ErrNotLeader) {
		t.Fatalf("write with a lost leadership: %v, want ErrNotLeader", err)
	}
	resp, err := cli.Get(ctxT(t), "k")
	if err != nil || string(resp.Kvs[0].Value) != "v1" {
		t.Fatalf("k = %v, %v", resp, err)
	}
}

// A handover waits for another candidate that is between terms instead of
// answering at once that none could take over: the count it gets is the
// candidate that stood while it waited.
func TestWaitOtherCandidates(t *testing.T) {
	cli := startConsensus(t)
	first := &Election{Client: cli, Candidate: []byte("curator-0"), LeaseTTL: DefaultLeaseTTL}
	supervisor.TestHarness(t, first.Run)
	if _, err := event.Get(ctxT(t), first.Status(), event.Filter(leading)); err != nil {
		t.Fatal(err)
	}

	// Alone, patience runs out with none.
	if n, err := first.WaitOtherCandidates(ctxT(t), 300*time.Millisecond); err != nil || n != 0 {
		t.Fatalf("alone: %d other candidates, %v; want 0", n, err)
	}

	// A second candidate stands while the first waits: the wait sees it.
	// The wait starts first, and its first count almost always comes
	// before the second candidate's campaign, so a count without waiting
	// would see none.
	counted := make(chan struct{})
	got := make(chan int, 1)
	go func() {
		close(counted)
		n, err := first.WaitOtherCandidates(ctxT(t), time.Minute)
		if err != nil {
			t.Error(err)
		}
		got <- n
	}()
	<-counted
	second := &Election{Client: cli, Candidate: []byte("curator-1"), LeaseTTL: DefaultLeaseTTL}
	supervisor.TestHarness(t, second.Run)
	if n := <-got; n != 1 {
		t.Fatalf("with a second candidate standing: %d other candidates, want 1", n)
	}

	// A caller's context that ends stops the wait with its error.
	ctx, cancel := context.WithCancel(ctxT(t))
	cancel()
	if _, err := first.WaitOtherCandidates(ctx, time.Minute); err == nil {
		t.Fatal("a cancelled wait returned no error")
	}
}
