package curator

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/polis-os/polis/event"
	"github.com/polis-os/polis/internal/testutil"
	"github.com/polis-os/polis/supervisor/supervisortest"
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
		cancels[i] = supervisortest.Harness(t, elections[i].Run)
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
	supervisortest.Harness(t, first.Run)
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
	supervisortest.Harness(t, second.Run)
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

// A candidate that stops while it waits for its turn ends at once, even
// when etcd cannot commit anything (the cluster has lost its quorum,
// every node stopping at the same moment). etcd's Campaign, cancelled,
// deletes its key on its client's own context, which for the node's
// client lasts as long as the local member; the member, in turn, stops
// only after the curator (roleserve), so the candidate waited for the
// member and the member for the candidate until the member's grace ran
// out. The lost quorum is played by a KV whose deletes wait for their
// context to end.
func TestCandidateStopsWithoutQuorum(t *testing.T) {
	cli := startConsensus(t)
	leader := &Election{Client: cli, Candidate: []byte("curator-0"), LeaseTTL: DefaultLeaseTTL}
	supervisortest.Harness(t, leader.Run)
	if _, err := event.Get(ctxT(t), leader.Status(), event.Filter(leading)); err != nil {
		t.Fatal(err)
	}

	// Like the node's client (consensus.Status.ClientFor), its context
	// outlives any one curator. (Closing it would close cli's watcher
	// and lessor: its context is cancelled instead, before the harness
	// waits for the candidate, so that a failing test ends.)
	clientCtx, endClient := context.WithCancel(context.Background())
	stuck := clientv3.NewCtxClient(clientCtx)
	stuck.KV, stuck.Watcher, stuck.Lease = noQuorumDeletes{cli.KV}, cli.Watcher, cli.Lease
	candidate := &Election{Client: stuck, Candidate: []byte("curator-1"), LeaseTTL: DefaultLeaseTTL}
	sup, cancel := supervisortest.HarnessTree(t, candidate.Run)
	t.Cleanup(endClient)
	// Its campaign waits once its key is in: two keys under the prefix.
	testutil.Eventually(t, waitTimeout, "the candidate's key stored", func() error {
		resp, err := cli.Get(ctxT(t), electionPrefix+"/", clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err != nil || resp.Count != 2 {
			return fmt.Errorf("%v keys under %s/ (%v), want 2", resp.Count, electionPrefix, err)
		}
		return nil
	})

	cancel()
	stopped := make(chan struct{})
	go func() {
		sup.Wait()
		close(stopped)
	}()
	select {
	case <-stopped:
	case <-time.After(waitTimeout):
		t.Fatal("the stopped candidate's run did not end: its campaign waits on a delete etcd cannot commit")
	}
}

// noQuorumDeletes is a KV whose transactions that delete wait for their
// context to end, as a write does on an etcd that lost its quorum.
type noQuorumDeletes struct{ clientv3.KV }

func (kv noQuorumDeletes) Txn(ctx context.Context) clientv3.Txn {
	return &noQuorumTxn{Txn: kv.KV.Txn(ctx), ctx: ctx}
}

type noQuorumTxn struct {
	clientv3.Txn
	ctx     context.Context
	deletes bool
}

func (t *noQuorumTxn) If(cs ...clientv3.Cmp) clientv3.Txn { t.Txn = t.Txn.If(cs...); return t }

func (t *noQuorumTxn) Then(ops ...clientv3.Op) clientv3.Txn {
	for _, op := range ops {
		t.deletes = t.deletes || op.IsDelete()
	}
	t.Txn = t.Txn.Then(ops...)
	return t
}

func (t *noQuorumTxn) Else(ops ...clientv3.Op) clientv3.Txn { t.Txn = t.Txn.Else(ops...); return t }

func (t *noQuorumTxn) Commit() (*clientv3.TxnResponse, error) {
	if t.deletes {
		<-t.ctx.Done()
		return nil, t.ctx.Err()
	}
	return t.Txn.Commit()
}
