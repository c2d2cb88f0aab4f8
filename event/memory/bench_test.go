package memory

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/polis-os/polis/event"
)

// BenchmarkSet measures Set with many watchers that are idle (caught up, not
// in Get). Its cost must not grow with the number of watchers.
func BenchmarkSet(b *testing.B) {
	for _, n := range []int{1, 100, 10000} {
		b.Run(fmt.Sprintf("watchers=%d", n), func(b *testing.B) {
			var v Value[int]
			v.Set(0)
			ws := make([]event.Watcher[int], n)
			for i := range ws {
				ws[i] = v.Watch()
				if _, err := ws[i].Get(context.Background()); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; b.Loop(); i++ {
				v.Set(i)
			}
			b.StopTimer()
			for _, w := range ws {
				w.Close()
			}
		})
	}
}

// BenchmarkSetBlockedWatchers is Set when n watchers are blocked in Get: the
// cost includes waking every one of them, so it grows with n by nature.
func BenchmarkSetBlockedWatchers(b *testing.B) {
	for _, n := range []int{1, 100} {
		b.Run(fmt.Sprintf("watchers=%d", n), func(b *testing.B) {
			var v, ack Value[int]
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			done := make(chan struct{})
			for range n {
				w := v.Watch()
				go func() {
					defer w.Close()
					for {
						d, err := w.Get(ctx)
						if err != nil {
							done <- struct{}{}
							return
						}
						ack.Set(d)
					}
				}()
			}
			aw := ack.Watch()
			defer aw.Close()
			b.ReportAllocs()
			for i := 1; b.Loop(); i++ {
				v.Set(i)
				// Wait until at least one watcher has seen this round.
				if _, err := aw.Get(ctx, event.Filter(func(d int) bool { return d >= i })); err != nil {
					b.Fatal(err)
				}
			}
			cancel()
			for range n {
				<-done
			}
		})
	}
}

// BenchmarkWakeLatency is the time from Set to a blocked Get returning in
// another goroutine (plus a channel hand-back to the setter).
func BenchmarkWakeLatency(b *testing.B) {
	var v Value[int]
	w := v.Watch()
	defer w.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	got := make(chan int)
	go func() {
		for {
			d, err := w.Get(ctx)
			if err != nil {
				close(got)
				return
			}
			got <- d
		}
	}()
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		v.Set(i)
		<-got
	}
	cancel()
	for range got {
	}
}

// BenchmarkPingPong bounces a counter between two goroutines: one op is a
// round trip, two hand-offs. "value" goes through two Values (two Sets, two
// wake-ups), "channel" through two bare unbuffered channels, in the same
// run, as the floor a value's wake-up is measured against.
func BenchmarkPingPong(b *testing.B) {
	b.Run("value", func(b *testing.B) {
		var ping, pong Value[int]
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		pingW, pongW := ping.Watch(), pong.Watch()
		defer pingW.Close()
		defer pongW.Close()
		exited := make(chan struct{})
		go func() {
			defer close(exited)
			for {
				d, err := pingW.Get(ctx)
				if err != nil {
					return
				}
				pong.Set(d)
			}
		}()
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			ping.Set(i)
			// One Set per round: the next Get returns exactly i.
			if d, err := pongW.Get(ctx); err != nil || d != i {
				b.Fatalf("Get = %d, %v; want %d", d, err, i)
			}
		}
		cancel()
		<-exited
	})
	b.Run("channel", func(b *testing.B) {
		ping, pong := make(chan int), make(chan int)
		exited := make(chan struct{})
		go func() {
			defer close(exited)
			for d := range ping {
				pong <- d
			}
		}()
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			ping <- i
			if d := <-pong; d != i {
				b.Fatalf("got %d, want %d", d, i)
			}
		}
		close(ping)
		<-exited
	})
}

// BenchmarkPingPongInterleaved is PingPong with the two kinds interleaved
// in blocks of pingPongBlock round trips, so that the load of a shared
// machine hits both alike: it reports the median time of a value round
// trip and of a channel round trip over the blocks, and the median of the
// ratios of neighbouring blocks (value/channel), the figure the goal is
// stated in. The value side waits with a context that can be cancelled,
// as workers do.
func BenchmarkPingPongInterleaved(b *testing.B) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var ping, pong Value[int]
	pingW, pongW := ping.Watch(), pong.Watch()
	defer pingW.Close()
	defer pongW.Close()
	var echoes sync.WaitGroup
	echoes.Go(func() {
		for {
			d, err := pingW.Get(ctx)
			if err != nil {
				return
			}
			pong.Set(d)
		}
	})
	cping, cpong := make(chan int), make(chan int)
	echoes.Go(func() {
		for d := range cping {
			cpong <- d
		}
	})
	defer echoes.Wait()
	defer close(cping)
	defer cancel()

	blocks := b.N/pingPongBlock + 1
	valueNs := make([]float64, 0, blocks)
	chanNs := make([]float64, 0, blocks)
	i := 0
	b.ReportAllocs()
	b.ResetTimer()
	for n := 0; n < b.N; n += 2 * pingPongBlock {
		start := time.Now()
		for range pingPongBlock {
			ping.Set(i)
			if d, err := pongW.Get(ctx); err != nil || d != i {
				b.Fatalf("Get = %d, %v; want %d", d, err, i)
			}
			i++
		}
		mid := time.Now()
		for range pingPongBlock {
			cping <- i
			if d := <-cpong; d != i {
				b.Fatalf("got %d, want %d", d, i)
			}
			i++
		}
		end := time.Now()
		valueNs = append(valueNs, float64(mid.Sub(start))/pingPongBlock)
		chanNs = append(chanNs, float64(end.Sub(mid))/pingPongBlock)
	}
	b.StopTimer()
	ratios := make([]float64, len(valueNs))
	for k := range valueNs {
		ratios[k] = valueNs[k] / chanNs[k]
	}
	b.ReportMetric(median(valueNs), "value-ns/rt")
	b.ReportMetric(median(chanNs), "channel-ns/rt")
	b.ReportMetric(median(ratios), "ratio")
}

// pingPongBlock is the number of round trips of one kind in a row.
const pingPongBlock = 128

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}

// BenchmarkIdleWatcher reports the memory one idle watcher costs (B/op).
func BenchmarkIdleWatcher(b *testing.B) {
	var v Value[int]
	v.Set(1)
	ws := make([]event.Watcher[int], 0, b.N)
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		ws = append(ws, v.Watch())
	}
	b.StopTimer()
	for _, w := range ws {
		w.Close()
	}
}

// BenchmarkInputsWait measures one Inputs.Wait over two values of different
// types after one of them changed, without blocking.
func BenchmarkInputsWait(b *testing.B) {
	var a Value[int]
	var s Value[string]
	s.Set("ready")
	var in event.Inputs
	defer in.Close()
	event.Input(&in, &a, func(d int) bool { return d >= 0 })
	event.Input(&in, &s, func(s string) bool { return s == "ready" })
	ctx := context.Background()
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		a.Set(i)
		if _, err := in.Wait(ctx); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkInputsWaitBlocked is the same wait when the change comes from
// another goroutine while Wait is blocked.
func BenchmarkInputsWaitBlocked(b *testing.B) {
	var a, ack Value[int]
	var s Value[string]
	s.Set("ready")
	var in event.Inputs
	defer in.Close()
	ai := event.Input(&in, &a, nil)
	event.Input(&in, &s, func(s string) bool { return s == "ready" })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	exited := make(chan struct{})
	go func() {
		defer close(exited)
		for {
			if _, err := in.Wait(ctx); err != nil {
				return
			}
			ack.Set(ai.Latest())
		}
	}()
	aw := ack.Watch()
	defer aw.Close()
	b.ReportAllocs()
	for i := 1; b.Loop(); i++ {
		a.Set(i)
		if _, err := aw.Get(ctx, event.Filter(func(d int) bool { return d == i })); err != nil {
			b.Fatal(err)
		}
	}
	cancel()
	<-exited
}
