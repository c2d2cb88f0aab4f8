package kubelet

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"slices"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/polis-os/polis/supervisor"
)

// dialTimeout bounds connecting to one apiserver before the proxy tries
// the next.
const dialTimeout = 3 * time.Second

// apiProxy forwards TCP connections on 127.0.0.1 to the apiservers, trying
// them in turn from the one that last worked; see the package doc.
type apiProxy struct {
	mu      sync.Mutex
	servers []netip.AddrPort
	next    int // index of the server to try first
	// reachable is told whether the last connection found an apiserver.
	reachable func(bool)
}

func (p *apiProxy) set(servers []netip.AddrPort) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !slices.Equal(p.servers, servers) {
		p.servers, p.next = slices.Clone(servers), 0
	}
}

// order is the servers in the order to try them now.
func (p *apiProxy) order() []netip.AddrPort {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := len(p.servers)
	out := make([]netip.AddrPort, 0, n)
	for i := range n {
		out = append(out, p.servers[(p.next+i)%n])
	}
	return out
}

// worked records that server answered, so the next connection tries it
// first.
func (p *apiProxy) worked(server netip.AddrPort) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if i := slices.Index(p.servers, server); i >= 0 {
		p.next = i
	}
}

// dial connects to the first apiserver that answers.
func (p *apiProxy) dial(ctx context.Context) (net.Conn, error) {
	var errs []error
	d := net.Dialer{Timeout: dialTimeout}
	for _, s := range p.order() {
		c, err := d.DialContext(ctx, "tcp", s.String())
		if err == nil {
			p.worked(s)
			p.reachable(true)
			return c, nil
		}
		errs = append(errs, err)
	}
	p.reachable(false)
	return nil, fmt.Errorf("no apiserver answers: %w", errors.Join(errs...))
}

// run serves on addr until ctx ends. It is a supervisor.Runnable.
func (p *apiProxy) run(addr netip.AddrPort) supervisor.Runnable {
	return func(ctx context.Context) error {
		lis, err := (&net.ListenConfig{}).Listen(ctx, "tcp", addr.String())
		if err != nil {
			return fmt.Errorf("apiserver proxy: %w", err)
		}
		log := supervisor.Logger(ctx)
		log.Info("forwarding to the apiservers", zap.Stringer("listen", addr), zap.Stringers("apiservers", p.order()))
		supervisor.Signal(ctx, supervisor.SignalHealthy)
		var conns sync.WaitGroup
		defer conns.Wait()
		stop := context.AfterFunc(ctx, func() { lis.Close() })
		defer stop()
		for {
			c, err := lis.Accept()
			if err != nil {
				if ctx.Err() != nil {
					return ctx.Err()
				}
				return fmt.Errorf("apiserver proxy: %w", err)
			}
			conns.Go(func() { p.forward(ctx, log, c) })
		}
	}
}

// forward copies between c and an apiserver until either side closes or
// ctx ends.
func (p *apiProxy) forward(ctx context.Context, log *zap.Logger, c net.Conn) {
	defer c.Close()
	up, err := p.dial(ctx)
	if err != nil {
		log.Warn("dropping a connection", zap.Error(err))
		return
	}
	defer up.Close()
	stop := context.AfterFunc(ctx, func() { c.Close(); up.Close() })
	defer stop()
	var done sync.WaitGroup
	done.Go(func() {
		_, _ = io.Copy(up, c)
		closeWrite(up)
	})
	_, _ = io.Copy(c, up)
	closeWrite(c)
	done.Wait()
}

func closeWrite(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.CloseWrite()
	}
}
