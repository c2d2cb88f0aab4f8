package curator

import (
	"net"
	"sync"
)

// closingListener remembers the connections it accepted until they are
// closed, so that a stopping curator can close them all (closeAll). grpc's
// Server.Stop closes the connections it serves, but waits for those still
// in their TLS handshake until the handshake times out (grpc's
// ConnectionTimeout, two minutes): a follower's held connection
// (deadleader.go) never begins one, and neither does a client that
// connects and says nothing. Without this, a leader whose last
// revocation failed kept its run, and its node's stop, waiting on its
// followers' connections.
type closingListener struct {
	net.Listener

	mu     sync.Mutex
	conns  map[*closingConn]struct{}
	closed bool
}

func newClosingListener(l net.Listener) *closingListener {
	return &closingListener{Listener: l, conns: make(map[*closingConn]struct{})}
}

// Accept accepts a connection and remembers it; after closeAll, it
// closes what it accepts at once.
func (l *closingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	cc := &closingConn{Conn: c, l: l}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		c.Close()
		return cc, nil
	}
	l.conns[cc] = struct{}{}
	return cc, nil
}

// closeAll closes every connection accepted and not yet closed, and any
// accepted from now on.
func (l *closingListener) closeAll() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.closed = true
	for c := range l.conns {
		c.Conn.Close()
	}
	clear(l.conns)
}

// closingConn is an accepted connection that its listener forgets when it
// is closed.
type closingConn struct {
	net.Conn
	l *closingListener
}

func (c *closingConn) Close() error {
	c.l.mu.Lock()
	delete(c.l.conns, c)
	c.l.mu.Unlock()
	return c.Conn.Close()
}
