package curator

import (
	"sync"
	"testing"
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
