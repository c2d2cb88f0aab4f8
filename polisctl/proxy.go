package polisctl

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// SaveProxy records in the configuration directory dir that the cluster is
// reached through the HTTP CONNECT proxy at proxyURL (http://IP:PORT), as
// for a cluster of VMs whose addresses the host cannot route to:
// polis-launch --vm saves its proxy there, and every later polisctl call
// with that configuration goes through it. An empty proxyURL removes it.
func SaveProxy(dir, proxyURL string) error {
	cfg, err := newConfig(dir)
	if err != nil {
		return err
	}
	if proxyURL == "" {
		return cfg.proxy.Remove()
	}
	if _, err := parseProxy(proxyURL); err != nil {
		return err
	}
	if err := cfg.create(); err != nil {
		return err
	}
	return cfg.proxy.Write([]byte(proxyURL + "\n"))
}

// parseProxy accepts http://HOST:PORT.
func parseProxy(s string) (string, error) {
	u, err := url.Parse(strings.TrimSpace(s))
	if err != nil || u.Scheme != "http" || u.Host == "" || u.Port() == "" || (u.Path != "" && u.Path != "/") {
		return "", fmt.Errorf("proxy %q: want http://HOST:PORT (an HTTP CONNECT proxy)", s)
	}
	return u.Host, nil
}

// dialer returns the dialer the configuration asks for: through the saved
// proxy, or nil (direct) when there is none.
func (c *config) dialer() (func(context.Context, string) (net.Conn, error), error) {
	b, err := c.proxy.Read()
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	host, err := parseProxy(string(b))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", c.proxy.Path, err)
	}
	return connectDialer(host), nil
}

// connectDialer opens TCP connections through the HTTP CONNECT proxy at
// proxyAddr.
func connectDialer(proxyAddr string) func(context.Context, string) (net.Conn, error) {
	return func(ctx context.Context, addr string) (net.Conn, error) {
		var d net.Dialer
		c, err := d.DialContext(ctx, "tcp", proxyAddr)
		if err != nil {
			return nil, fmt.Errorf("reaching the proxy %s: %w", proxyAddr, err)
		}
		if dl, ok := ctx.Deadline(); ok {
			c.SetDeadline(dl)
		}
		// Unblock the handshake when ctx ends without a deadline.
		stop := context.AfterFunc(ctx, func() { c.Close() })
		defer stop()
		if _, err := fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", addr, addr); err != nil {
			c.Close()
			return nil, fmt.Errorf("proxy %s: %w", proxyAddr, err)
		}
		br := bufio.NewReader(c)
		resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
		if err != nil {
			c.Close()
			return nil, fmt.Errorf("proxy %s: %w", proxyAddr, err)
		}
		if resp.StatusCode != http.StatusOK {
			msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
			c.Close()
			return nil, fmt.Errorf("proxy %s refused %s: %s: %s", proxyAddr, addr, resp.Status, strings.TrimSpace(string(msg)))
		}
		c.SetDeadline(time.Time{})
		if br.Buffered() > 0 {
			// The proxy sent nothing after its answer before the
			// server spoke; should it have, keep those bytes.
			return &bufferedConn{Conn: c, r: br}, nil
		}
		return c, nil
	}
}

// bufferedConn reads first what was buffered while reading the proxy's
// answer.
type bufferedConn struct {
	net.Conn
	r *bufio.Reader
}

func (b *bufferedConn) Read(p []byte) (int, error) { return b.r.Read(p) }
