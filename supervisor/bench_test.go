package supervisor

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/cenkalti/backoff/v5"
)

func zeroBackoff() backoff.BackOff { return &backoff.ZeroBackOff{} }

// BenchmarkStartToHealthy measures the whole life of a one-runnable tree:
// New, the runnable signalling healthy, cancellation and Wait.
func BenchmarkStartToHealthy(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		healthy := make(chan struct{})
		ctx, cancel := context.WithCancel(context.Background())
		s := New(ctx, func(ctx context.Context) error {
			Signal(ctx, SignalHealthy)
			close(healthy)
			<-ctx.Done()
			return ctx.Err()
		})
		<-healthy
		cancel()
		s.Wait()
	}
}

// BenchmarkRunChildToHealthy measures Run of one child under a running
// parent until the child is healthy. Children signal Done and stay in the
// tree, so the parent is replaced every 1,000 children to measure one Run
// and not the snapshot of an ever wider parent.
func BenchmarkRunChildToHealthy(b *testing.B) {
	b.ReportAllocs()
	p := startSpawner()
	for i := 0; b.Loop(); i++ {
		if i%1000 == 999 {
			b.StopTimer()
			p.stop()
			p = startSpawner()
			b.StartTimer()
		}
		healthy := make(chan struct{})
		p.reqs <- healthy
		<-healthy
	}
	p.stop()
}

// spawner is a tree whose root starts a child for every channel it
// receives; the child closes the channel once healthy.
type spawner struct {
	s      *Supervisor
	cancel context.CancelFunc
	reqs   chan chan struct{}
}

func startSpawner() *spawner {
	ctx, cancel := context.WithCancel(context.Background())
	p := &spawner{cancel: cancel, reqs: make(chan chan struct{})}
	p.s = New(ctx, func(ctx context.Context) error {
		Signal(ctx, SignalHealthy)
		for i := 0; ; i++ {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case healthy := <-p.reqs:
				if err := Run(ctx, fmt.Sprintf("c%d", i), func(ctx context.Context) error {
					Signal(ctx, SignalDone)
					close(healthy)
					return nil
				}); err != nil {
					return err
				}
			}
		}
	}, WithBackoff(zeroBackoff))
	return p
}

func (p *spawner) stop() {
	p.cancel()
	p.s.Wait()
}

// BenchmarkRestartCycle measures one failure and restart of a runnable with
// zero backoff: cancelling its (empty) subtree, logging, and running it again.
func BenchmarkRestartCycle(b *testing.B) {
	b.ReportAllocs()
	var n atomic.Int64
	var target int64
	healthy := make(chan struct{})
	errBoom := errors.New("boom")
	start := make(chan struct{})
	ctx, cancel := context.WithCancel(context.Background())
	s := New(ctx, func(ctx context.Context) error {
		<-start
		if n.Add(1) < target {
			return errBoom
		}
		Signal(ctx, SignalHealthy)
		close(healthy)
		<-ctx.Done()
		return ctx.Err()
	}, WithBackoff(zeroBackoff))
	defer func() {
		cancel()
		s.Wait()
	}()
	// b.N is only known once; the loop body is the wait for all restarts.
	b.ResetTimer()
	target = int64(b.N)
	close(start)
	<-healthy
	b.StopTimer()
	if got := n.Load(); got != target {
		b.Fatalf("%d runs, want %d", got, target)
	}
}

// BenchmarkRun1000Children measures a runnable starting 1,000 children and
// all of them reaching healthy, then the tree's teardown.
func BenchmarkRun1000Children(b *testing.B) {
	const children = 1000
	b.ReportAllocs()
	names := make([]string, children)
	for i := range names {
		names[i] = fmt.Sprintf("child-%d", i)
	}
	for b.Loop() {
		var healthy atomic.Int64
		all := make(chan struct{})
		child := func(ctx context.Context) error {
			Signal(ctx, SignalHealthy)
			if healthy.Add(1) == children {
				close(all)
			}
			<-ctx.Done()
			return ctx.Err()
		}
		ctx, cancel := context.WithCancel(context.Background())
		s := New(ctx, func(ctx context.Context) error {
			for _, name := range names {
				if err := Run(ctx, name, child); err != nil {
					return err
				}
			}
			return healthyUntilCancelled(ctx)
		})
		<-all
		cancel()
		s.Wait()
	}
}
