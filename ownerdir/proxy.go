package ownerdir

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

	xproxy "golang.org/x/net/proxy"
)

// SaveProxy records in the configuration directory dir that the cluster is
// reached through the proxy at proxyURL: an HTTP CONNECT proxy
// (http://HOST:PORT) or a SOCKS5 one (socks5://HOST:PORT), as for a
// cluster of VMs whose addresses the host cannot route to: polis-launch
// --vm saves its proxy there, and every later polisctl call with that
// configuration goes through it (unless --proxy names another). An empty
// proxyURL removes it.
func SaveProxy(dir, proxyURL string) error {
	cfg, err := Open(dir)
	if err != nil {
		return err
	}
	if proxyURL == "" {
		return cfg.Proxy.Remove()
	}
	if _, err := proxyDialerFor(proxyURL); err != nil {
		return err
	}
	if err := cfg.Create(); err != nil {
		return err
	}
	return cfg.Proxy.Write([]byte(proxyURL + "\n"))
}

// proxyDialerFor returns a dialer through the proxy at proxyURL:
// http://HOST:PORT (HTTP CONNECT) or socks5://HOST:PORT (SOCKS5, no
// authentication).
func proxyDialerFor(proxyURL string) (func(context.Context, string) (net.Conn, error), error) {
	u, err := url.Parse(strings.TrimSpace(proxyURL))
	if err != nil || u.Host == "" || u.Port() == "" || (u.Path != "" && u.Path != "/") || u.User != nil {
		return nil, fmt.Errorf("proxy %q: want http://HOST:PORT (HTTP CONNECT) or socks5://HOST:PORT (SOCKS5)", proxyURL)
	}
	switch u.Scheme {
	case "http":
		return connectDialer(u.Host), nil
	case "socks5":
		d, err := xproxy.SOCKS5("tcp", u.Host, nil, &net.Dialer{})
		if err != nil {
			return nil, fmt.Errorf("proxy %q: %w", proxyURL, err)
		}
		return socksDialer(u.Host, d.(xproxy.ContextDialer)), nil
	}
	return nil, fmt.Errorf("proxy %q: want http://HOST:PORT (HTTP CONNECT) or socks5://HOST:PORT (SOCKS5)", proxyURL)
}

// socksDialer opens TCP connections through the SOCKS5 proxy at
// proxyAddr, with errors that name it.
func socksDialer(proxyAddr string, d xproxy.ContextDialer) func(context.Context, string) (net.Conn, error) {
	return func(ctx context.Context, addr string) (net.Conn, error) {
		c, err := d.DialContext(ctx, "tcp", addr)
		if err != nil {
			return nil, fmt.Errorf("SOCKS5 proxy %s, reaching %s: %w", proxyAddr, addr, err)
		}
		return c, nil
	}
}

// ProxyAddress is the URL of the proxy the configuration asks for: the one
// given to polisctl (--proxy) if any, else the saved one, or "" (direct).
func (c *Dir) ProxyAddress() (string, error) {
	if c.ProxyURL != "" {
		return c.ProxyURL, nil
	}
	b, err := c.Proxy.Read()
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	// The file holds the URL and a newline.
	return strings.TrimSpace(string(b)), nil
}

// Dialer returns the dialer the configuration asks for: through the proxy
// given to polisctl (--proxy) if any, else through the saved one, or nil
// (direct) when there is neither.
func (c *Dir) Dialer() (func(context.Context, string) (net.Conn, error), error) {
	addr, err := c.ProxyAddress()
	if err != nil || addr == "" {
		return nil, err
	}
	d, err := proxyDialerFor(addr)
	if err != nil && c.ProxyURL == "" {
		return nil, fmt.Errorf("%s: %w", c.Proxy.Path, err)
	}
	return d, err
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
