package consensus

import (
	"context"
	"testing"

	"go.uber.org/zap"

	"github.com/polis-os/polis/event"
	"github.com/polis-os/polis/supervisor"
)

// BenchmarkBootstrap measures a single-member bootstrap, from Run to a
// voter that serves clients: creating the CA and certificates, writing the
// data directory, starting etcd, winning the first election and storing the
// CA in etcd. Shutting down is not measured.
func BenchmarkBootstrap(b *testing.B) {
	for b.Loop() {
		b.StopTimer()
		svc := newService(b, bootstrapConfig(b, "one", addrs(b, 1)[0]))
		ctx, cancel := context.WithCancel(context.Background())
		b.StartTimer()

		sup := supervisor.New(ctx, svc.Run, supervisor.WithLogger(zap.NewNop()))
		wctx, wcancel := context.WithTimeout(ctx, waitTimeout)
		_, err := event.Get(wctx, svc.Status(), event.Filter(IsVoter))
		wcancel()

		b.StopTimer()
		if err != nil {
			b.Fatalf("waiting for the member: %v", err)
		}
		cancel()
		sup.Wait()
		b.StartTimer()
	}
}
