package kubelet

import (
	"context"
	"fmt"
	"net"
	"net/netip"

	"go.uber.org/zap"

	"github.com/polis-os/polis/kube/apiproxy"
	"github.com/polis-os/polis/supervisor"
)

// runProxy serves p on addr until ctx ends, logging the connections no
// apiserver took. It is a supervisor.Runnable.
func runProxy(p *apiproxy.Relay, addr netip.AddrPort) supervisor.Runnable {
	return func(ctx context.Context) error {
		lis, err := (&net.ListenConfig{}).Listen(ctx, "tcp", addr.String())
		if err != nil {
			return fmt.Errorf("apiserver proxy: %w", err)
		}
		log := supervisor.Logger(ctx)
		log.Info("forwarding to the apiservers", zap.Stringer("listen", addr), zap.Stringers("apiservers", p.Order()))
		supervisor.Signal(ctx, supervisor.SignalHealthy)
		if err := p.Serve(ctx, lis); err != nil {
			return err
		}
		return ctx.Err()
	}
}
