package curator

import (
	"context"
	"fmt"
	"sync"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"

	cpb "github.com/polis-os/polis/api/curator/v1"
)

// Concurrent fences share quorum reads: 200 calls at once make far fewer
// than 200 reads, and each still gets a snapshot.
func TestFencesShareReads(t *testing.T) {
	c := newTestCluster(t)
	nodes := c.curator.nodes
	before := nodes.fences.issued.Load()
	start := make(chan struct{})
	var wg sync.WaitGroup
	errs := make(chan error, 200)
	for range 200 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			if _, err := nodes.fenced(ctxT(t)); err != nil {
				errs <- err
			}
		}()
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("fenced: %v", err)
	}
	if n := nodes.fences.issued.Load() - before; n > 100 {
		t.Errorf("200 concurrent fences issued %d reads; want them shared", n)
	}
}

// A fence after writes to other keys than node records (the register
// ticket, heartbeats' records, ...) completes: the cache's revision does
// not move with them, and the fence learns from the watch's progress that
// the cache holds everything up to etcd's revision. And it answers with
// the cache as it is: a write to a node record before the call is in it.
func TestFenceAfterWritesElsewhere(t *testing.T) {
	c := newTestCluster(t)
	tn := c.seedNode(cpb.NodeState_NODE_STATE_UP)
	for i := range 20 {
		if _, err := c.etcd.Put(ctxT(t), "fence-test/other", fmt.Sprint(i)); err != nil {
			t.Fatal(err)
		}
	}
	snap, err := c.curator.nodes.fenced(ctxT(t))
	if err != nil {
		t.Fatalf("fenced after writes elsewhere: %v", err)
	}
	if snap.nodes[tn.node.Id] == nil {
		t.Errorf("the fenced snapshot lacks node %s, written before the call", tn.node.Id)
	}
	resp, err := c.etcd.Get(ctxT(t), fenceKey)
	if err != nil || len(resp.Kvs) != 0 {
		t.Errorf("the fence key holds %v (%v): fences must only read", resp.Kvs, err)
	}
}

// etcd sends no progress while a watch on the stream starts at a revision
// it has not reached; a fence then reads the node keys instead, and still
// completes with every write made before the call.
func TestFenceWhenEtcdWithholdsProgress(t *testing.T) {
	c := newTestCluster(t)
	resp, err := c.etcd.Get(ctxT(t), fenceKey)
	if err != nil {
		t.Fatal(err)
	}
	// On the node cache's stream (same client, same metadata): a watch
	// from a revision far ahead.
	ctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctxT(t)))
	defer cancel()
	c.etcd.Watch(ctx, "fence-test/future", clientv3.WithRev(resp.Header.Revision+1_000_000))
	tn := c.seedNode(cpb.NodeState_NODE_STATE_UP)
	for i := range 5 {
		if _, err := c.etcd.Put(ctxT(t), "fence-test/other", fmt.Sprint(i)); err != nil {
			t.Fatal(err)
		}
	}
	before := c.curator.nodes.listings.issued.Load()
	snap, err := c.curator.nodes.fenced(ctxT(t))
	if err != nil {
		t.Fatalf("fenced while etcd withholds progress: %v", err)
	}
	if snap.nodes[tn.node.Id] == nil {
		t.Errorf("the fenced snapshot lacks node %s, written before the call", tn.node.Id)
	}
	if c.curator.nodes.listings.issued.Load() == before {
		t.Error("the fence did not read the node keys: did etcd send progress after all?")
	}
}
