package vm

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"time"
)

// Proxy is an HTTP CONNECT proxy on a loopback address that tunnels TCP
// connections into the cluster network through a HostPort. polisctl uses
// it when its configuration names it (polisctl.SaveProxy); HTTPS_PROXY is
// not enough, because gRPC's own proxy support loses the TLS server name
// the curator client gives each curator. It reaches only addresses in the
// cluster network, so it is no way out to anywhere else.
type Proxy struct {
	ln      net.Listener
	host    *HostPort
	network netip.Prefix
	wg      sync.WaitGroup
	mu      sync.Mutex
	conns   map[net.Conn]bool
	closed  bool
}

// dialTimeout bounds a tunnel's TCP handshake with a node.
const dialTimeout = 30 * time.Second

// ServeProxy listens on a free port of 127.0.0.1.
func ServeProxy(host *HostPort, network netip.Prefix) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("proxy: %w", err)
	}
	p := &Proxy{ln: ln, host: host, network: network.Masked(), conns: map[net.Conn]bool{}}
	p.wg.Add(1)
	go p.serve()
	return p, nil
}

// URL is the proxy's address for HTTPS_PROXY.
func (p *Proxy) URL() string { return "http://" + p.ln.Addr().String() }

func (p *Proxy) serve() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		if !p.track(c, true) {
			c.Close()
			return
		}
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			defer p.track(c, false)
			p.tunnel(c)
		}()
	}
}

// track records open connections so that Close can end them.
func (p *Proxy) track(c net.Conn, add bool) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if add {
		if p.closed {
			return false
		}
		p.conns[c] = true
		return true
	}
	delete(p.conns, c)
	return true
}

// tunnel serves one CONNECT request and then copies bytes both ways.
func (p *Proxy) tunnel(c net.Conn) {
	defer c.Close()
	c.SetReadDeadline(time.Now().Add(dialTimeout))
	br := bufio.NewReader(c)
	req, err := http.ReadRequest(br)
	if err != nil {
		return
	}
	c.SetReadDeadline(time.Time{})
	fail := func(code int, msg string) {
		fmt.Fprintf(c, "HTTP/1.1 %d %s\r\nContent-Type: text/plain\r\nConnection: close\r\n\r\n%s\n", code, http.StatusText(code), msg)
	}
	if req.Method != http.MethodConnect {
		fail(http.StatusMethodNotAllowed, "this proxy only tunnels (CONNECT) into the cluster network")
		return
	}
	ap, err := netip.ParseAddrPort(req.Host)
	if err != nil || !p.network.Contains(ap.Addr()) {
		fail(http.StatusForbidden, fmt.Sprintf("%s is not an address in the cluster network %v", req.Host, p.network))
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), dialTimeout)
	node, err := p.host.DialContext(ctx, "tcp", ap.String())
	cancel()
	if err != nil {
		fail(http.StatusBadGateway, err.Error())
		return
	}
	defer node.Close()
	if _, err := io.WriteString(c, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
		return
	}
	done := make(chan struct{}, 2)
	go func() {
		// Bytes the client sent after its request are in br's buffer.
		io.Copy(node, br)
		if cw, ok := node.(interface{ CloseWrite() error }); ok {
			cw.CloseWrite()
		}
		done <- struct{}{}
	}()
	io.Copy(c, node)
	c.Close()
	node.Close()
	<-done
}

// Close stops the proxy and ends every tunnel.
func (p *Proxy) Close() error {
	p.mu.Lock()
	p.closed = true
	for c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	err := p.ln.Close()
	p.wg.Wait()
	if errors.Is(err, net.ErrClosed) {
		err = nil
	}
	return err
}
