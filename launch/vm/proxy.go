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

// Proxy is a proxy on a loopback address that tunnels TCP connections
// into the cluster network through a HostPort. It speaks HTTP CONNECT and
// SOCKS5 (CONNECT, no authentication: it is on loopback) on the same
// port, told apart by a connection's first byte (5 is SOCKS5's version;
// no HTTP method starts with it). polisctl uses it when its configuration
// names it (ownerdir.SaveProxy) or --proxy does; HTTPS_PROXY is not
// enough, because gRPC's own proxy support loses the TLS server name the
// curator client gives each curator. It reaches only addresses in the
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

// URL is the proxy's address as an HTTP CONNECT proxy (http://IP:PORT).
func (p *Proxy) URL() string { return "http://" + p.ln.Addr().String() }

// SOCKS5URL is the same proxy's address as a SOCKS5 proxy
// (socks5://IP:PORT).
func (p *Proxy) SOCKS5URL() string { return "socks5://" + p.ln.Addr().String() }

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
	if first, err := br.Peek(1); err != nil {
		return
	} else if first[0] == socks5Version {
		p.socks5(c, br)
		return
	}
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
	node, err := p.dialNode(ap)
	if err != nil {
		fail(http.StatusBadGateway, err.Error())
		return
	}
	defer node.Close()
	// Close ends the node's side too: a tunnel to a VM that died reads
	// from it forever (no FIN or RST ever comes), even once the client's
	// side is closed.
	if !p.track(node, true) {
		return
	}
	defer p.track(node, false)
	if _, err := io.WriteString(c, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
		return
	}
	splice(c, br, node)
}

// dialNode opens a connection to ap in the cluster network; an address
// outside it is refused.
func (p *Proxy) dialNode(ap netip.AddrPort) (net.Conn, error) {
	if !p.network.Contains(ap.Addr().Unmap()) {
		return nil, fmt.Errorf("%v is not an address in the cluster network %v", ap, p.network)
	}
	ctx, cancel := context.WithTimeout(context.Background(), dialTimeout)
	defer cancel()
	return p.host.DialContext(ctx, "tcp", netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port()).String())
}

// splice copies bytes both ways between the client c (whose bytes sent
// after its request are in br) and node, until both are done.
func splice(c net.Conn, br *bufio.Reader, node net.Conn) {
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
