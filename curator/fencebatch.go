package curator

import (
	"context"
	"sync"
	"sync/atomic"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// The quorum read behind a fence (nodeCache.fenced) reads etcd's
// revision. Reading it once per call broke at 5,000 nodes, when the read
// still listed every node key: the 10,000 streams the nodes open at once
// queued 10,000 such reads, which took longer than fenceTimeout, so the
// calls failed and were retried, and the streams never all opened. The
// read is one key now, but thousands of calls at once are thousands of
// quorum round trips all the same; a fence only needs a read issued after
// its call arrived, so every call waiting for a read shares the next one:
// at most one read is in flight per curator, and a call waits for at most
// two of them.

// fenceRead is the result of one quorum read for fences: etcd's revision
// and, for a listing, how many node keys etcd held and the newest
// revision any was written at.
type fenceRead struct {
	done   chan struct{} // closed once the fields are set
	rev    int64
	keys   int
	newest int64
	err    error
}

// fenceBatch hands out fence reads. The zero value is ready.
type fenceBatch struct {
	// listing makes the reads list the node keys (keys, newest), for
	// when etcd withholds progress (nodeCache.fenced); otherwise they
	// read one key.
	listing bool
	mu      sync.Mutex
	// next is the read calls join: not issued yet, so it is issued after
	// every call that joined it arrived.
	next *fenceRead
	// reading is whether a goroutine issues reads (issue).
	reading bool
	// issued counts the reads issued (tests check the sharing with it).
	issued atomic.Int64
	// life ends the reads when the cache that owns them stops (setLifetime):
	// a shared read runs on no caller's context, and must not outlive the
	// curator, retrying against a closed etcd.
	life context.Context
}

// setLifetime ties the reads issued from now on to ctx.
func (b *fenceBatch) setLifetime(ctx context.Context) {
	b.mu.Lock()
	b.life = ctx
	b.mu.Unlock()
}

// read returns a fence read issued after the call, shared with the other
// calls waiting at the same time.
func (b *fenceBatch) read(ctx context.Context, cli *clientv3.Client) (*fenceRead, error) {
	b.mu.Lock()
	r := b.next
	if r == nil {
		r = &fenceRead{done: make(chan struct{})}
		b.next = r
		if !b.reading {
			b.reading = true
			life := b.life
			if life == nil {
				life = context.Background()
			}
			go b.issue(life, cli)
		}
	}
	b.mu.Unlock()
	select {
	case <-r.done:
		return r, r.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// issue makes the reads calls joined, one after the other, until none is
// waiting. A read is shared, so it runs on its own deadline, not a
// caller's, within the cache's life.
func (b *fenceBatch) issue(life context.Context, cli *clientv3.Client) {
	for {
		b.mu.Lock()
		r := b.next
		b.next = nil
		if r == nil {
			b.reading = false
			b.mu.Unlock()
			return
		}
		b.mu.Unlock()
		b.issued.Add(1)
		ctx, cancel := context.WithTimeout(life, fenceTimeout)
		var resp *clientv3.GetResponse
		var err error
		if b.listing {
			resp, err = cli.Get(ctx, nodePrefix, clientv3.WithPrefix(), clientv3.WithKeysOnly(),
				clientv3.WithSort(clientv3.SortByModRevision, clientv3.SortDescend), clientv3.WithLimit(1))
		} else {
			// Any key will do: the answer's header carries etcd's
			// revision. This one is never written.
			resp, err = cli.Get(ctx, fenceKey, clientv3.WithCountOnly())
		}
		cancel()
		if err != nil {
			r.err = err
		} else {
			if b.listing && len(resp.Kvs) > 0 {
				r.newest = resp.Kvs[0].ModRevision
			}
			r.keys, r.rev = int(resp.Count), resp.Header.Revision
		}
		close(r.done)
	}
}

// fenceKey is the key a fence reads for etcd's revision: no key is ever
// stored under it.
const fenceKey = "fence"
