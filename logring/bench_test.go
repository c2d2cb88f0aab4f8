package logring

import (
	"fmt"
	"sync"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// BenchmarkLog is the cost a runnable pays per line for the ring: a line
// with two fields through a named logger with one field of its own, into a
// full ring (every line overwrites the oldest), with no subscriber.
func BenchmarkLog(b *testing.B) {
	r := New(Config{})
	l := zap.New(r.Core(zapcore.InfoLevel)).Named("root").Named("roleserve").Named("heartbeat").With(zap.String("node", "n1"))
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		l.Info("heartbeat sent", zap.Int("seq", i), zap.String("curator", "127.0.0.1:7835"))
	}
}

// BenchmarkFollow10 is the same with 10 subscribers following every line
// and reading as fast as they can: the logger's cost per line, with each
// line handed to ten readers. Dropped lines, if the readers fall behind,
// are reported per op.
func BenchmarkFollow10(b *testing.B) {
	r := New(Config{})
	l := zap.New(r.Core(zapcore.InfoLevel)).Named("root").Named("roleserve").Named("heartbeat").With(zap.String("node", "n1"))
	var wg sync.WaitGroup
	subs := make([]*Subscription, 10)
	stop := make(chan struct{})
	for i := range subs {
		_, subs[i] = r.Follow(Filter{Runnable: "root"})
		wg.Go(func() {
			for {
				select {
				case <-subs[i].C():
				case <-stop:
					return
				}
			}
		})
	}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		l.Info("heartbeat sent", zap.Int("seq", i), zap.String("curator", "127.0.0.1:7835"))
	}
	b.StopTimer()
	close(stop)
	wg.Wait()
	var dropped uint64
	for _, s := range subs {
		dropped += s.Dropped()
		s.Close()
	}
	b.ReportMetric(float64(dropped)/float64(b.N)/10, "dropped/line/sub")
}

// BenchmarkBacklog is the cost of reading one runnable's full ring back
// out of a node with 50 busy runnables.
func BenchmarkBacklog(b *testing.B) {
	r := New(Config{})
	l := zap.New(r.Core(zapcore.InfoLevel))
	for i := range 50 * DefaultPerRunnable {
		l.Named(fmt.Sprint("r", i%50)).Info("line", zap.Int("i", i))
	}
	b.ReportAllocs()
	for b.Loop() {
		if n := len(r.Backlog(Filter{Runnable: "r7"})); n != DefaultPerRunnable {
			b.Fatal(n)
		}
	}
}
