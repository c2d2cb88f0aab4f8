// Package apiproxy is a TCP relay to a set of Kubernetes apiservers: each
// connection it accepts goes to the first apiserver that accepts a
// connection, trying first the one that last did and then the others in
// turn. It relays bytes only, so TLS runs end to end between the client
// and the apiserver (every apiserver's certificate carries the same
// service names, pki.ServiceNames), and the relay can neither read nor
// forge anything.
//
// Two places use it: a worker node's kubelet reaches the apiservers through
// one on loopback (kube/kubelet), and `polisctl kube-proxy` gives kubectl
// one address that follows every controller node (polisctl). It imports
// nothing of Kubernetes.
package apiproxy

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
)

// DefaultDialTimeout bounds one attempt to reach an apiserver when
// Relay.DialTimeout is zero.
const DefaultDialTimeout = 3 * time.Second

// Relay forwards connections to the apiservers set with SetServers. Its
// exported fields are read by Serve and must be set before it.
type Relay struct {
	// Dial opens a connection to one apiserver ("IP:PORT"); nil dials TCP
	// directly.
	Dial func(ctx context.Context, addr string) (net.Conn, error)
	// DialTimeout bounds one attempt, so that a node that is off costs a
	// connection this much before the next apiserver is tried; zero is
	// DefaultDialTimeout.
	DialTimeout time.Duration
	// Reached, if set, is told after each accepted connection whether an
	// apiserver took it: nil, or why none did. ctx is the one Serve was
	// given (for its logger, say).
	Reached func(ctx context.Context, err error)

	mu      sync.Mutex
	servers []netip.AddrPort
	last    netip.AddrPort // the server that last accepted
}

// SetServers replaces the apiservers to relay to; connections already
// relayed keep theirs.
func (r *Relay) SetServers(servers []netip.AddrPort) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.servers = slices.Clone(servers)
}

// Order is the servers in the order the next connection tries them: the
// one that last accepted first, then the others in turn after it.
func (r *Relay) Order() []netip.AddrPort {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := len(r.servers)
	start := max(slices.Index(r.servers, r.last), 0)
	out := make([]netip.AddrPort, 0, n)
	for i := range n {
		out = append(out, r.servers[(start+i)%n])
	}
	return out
}

// Serve relays every connection l accepts until ctx ends, then closes l,
// waits for the relayed connections to close and returns nil.
func (r *Relay) Serve(ctx context.Context, l net.Listener) error {
	var conns sync.WaitGroup
	defer conns.Wait()
	stop := context.AfterFunc(ctx, func() { l.Close() })
	defer stop()
	for {
		c, err := l.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("apiserver relay: %w", err)
		}
		conns.Go(func() { r.relay(ctx, c) })
	}
}

// dial connects to the first apiserver that accepts.
func (r *Relay) dial(ctx context.Context) (net.Conn, error) {
	timeout := r.DialTimeout
	if timeout == 0 {
		timeout = DefaultDialTimeout
	}
	var errs []error
	for _, s := range r.Order() {
		dctx, cancel := context.WithTimeout(ctx, timeout)
		var c net.Conn
		var err error
		if r.Dial != nil {
			c, err = r.Dial(dctx, s.String())
		} else {
			c, err = (&net.Dialer{}).DialContext(dctx, "tcp", s.String())
		}
		cancel()
		if err == nil {
			r.mu.Lock()
			r.last = s
			r.mu.Unlock()
			return c, nil
		}
		errs = append(errs, err)
	}
	return nil, fmt.Errorf("no apiserver answers: %w", errors.Join(errs...))
}

// relay copies between c and an apiserver until either side closes or ctx
// ends. When no apiserver answers, the client sees c closed.
func (r *Relay) relay(ctx context.Context, c net.Conn) {
	defer c.Close()
	up, err := r.dial(ctx)
	if r.Reached != nil {
		r.Reached(ctx, err)
	}
	if err != nil {
		return
	}
	defer up.Close()
	stop := context.AfterFunc(ctx, func() { c.Close(); up.Close() })
	defer stop()
	var done sync.WaitGroup
	done.Go(func() {
		_, _ = io.Copy(up, c) // either side closing ends the relay
		closeWrite(up)
	})
	_, _ = io.Copy(c, up)
	closeWrite(c)
	done.Wait()
}

// closeWrite passes an end of stream on, where the connection can.
func closeWrite(c net.Conn) {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
	}
}
