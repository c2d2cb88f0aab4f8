package curator

import (
	"errors"
	"fmt"
	"testing"

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
