package polisctl

import (
	"bufio"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/polis-os/polis/ownerdir"
)

// serveLoopback serves connections on a loopback port with handle, each
// in its own goroutine, until the test ends; it returns the address.
func serveLoopback(t *testing.T, handle func(c net.Conn)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		conns []net.Conn
	)
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			wg.Go(func() { defer c.Close(); handle(c) })
		}
	})
	return ln.Addr().String()
}

// tunnel copies between a client c (whose buffered bytes are in r) and
// the server at target until either side is done.
func tunnel(c net.Conn, r io.Reader, up net.Conn) {
	defer up.Close()
	go func() { io.Copy(up, r); up.Close() }()
	io.Copy(c, up)
}

// connectProxy is a minimal HTTP CONNECT proxy on loopback that tunnels
// to allowed only.
func connectProxy(t *testing.T, allowed string) string {
	return "http://" + serveLoopback(t, func(c net.Conn) {
		br := bufio.NewReader(c)
		req, err := http.ReadRequest(br)
		if err != nil || req.Method != http.MethodConnect || req.Host != allowed {
			fmt.Fprintf(c, "HTTP/1.1 403 Forbidden\r\nConnection: close\r\n\r\nnot in the cluster network\n")
			return
		}
		up, err := net.Dial("tcp", req.Host)
		if err != nil {
			return
		}
		io.WriteString(c, "HTTP/1.1 200 Connection established\r\n\r\n")
		tunnel(c, br, up)
	})
}

// socks5Proxy is a minimal SOCKS5 proxy on loopback (no authentication,
// CONNECT to IPv4 addresses) that tunnels to allowed only.
func socks5Proxy(t *testing.T, allowed string) string {
	return "socks5://" + serveLoopback(t, func(c net.Conn) {
		// Greeting (5, 1 method, no auth) → no auth; request (5,
		// CONNECT, 0, IPv4, address, port) → success or refusal.
		var greet [3]byte
		var req [10]byte
		if _, err := io.ReadFull(c, greet[:]); err != nil || greet != [3]byte{5, 1, 0} {
			return
		}
		c.Write([]byte{5, 0})
		if _, err := io.ReadFull(c, req[:]); err != nil || req[3] != 1 {
			return
		}
		target := netip.AddrPortFrom(netip.AddrFrom4([4]byte(req[4:8])), binary.BigEndian.Uint16(req[8:])).String()
		if target != allowed {
			c.Write([]byte{5, 2, 0, 1, 0, 0, 0, 0, 0, 0})
			return
		}
		up, err := net.Dial("tcp", target)
		if err != nil {
			c.Write([]byte{5, 4, 0, 1, 0, 0, 0, 0, 0, 0})
			return
		}
		c.Write([]byte{5, 0, 0, 1, 0, 0, 0, 0, 0, 0})
		tunnel(c, c, up)
	})
}

func TestSavedProxyIsUsed(t *testing.T) {
	echo, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer echo.Close()
	served := make(chan struct{})
	go func() {
		defer close(served)
		c, err := echo.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		line, _ := bufio.NewReader(c).ReadString('\n')
		io.WriteString(c, "echo "+line)
	}()
	dir := filepath.Join(t.TempDir(), "config")
	cfg, err := ownerdir.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	if d, err := cfg.Dialer(); err != nil || d != nil {
		t.Fatalf("without a saved proxy: dialer %v, %v; want a direct one (nil)", d != nil, err)
	}
	for _, bad := range []string{"https://127.0.0.1:1080", "socks4://127.0.0.1:1080", "http://127.0.0.1", "socks5://user:pw@127.0.0.1:1080", "127.0.0.1:1080"} {
		if err := ownerdir.SaveProxy(dir, bad); err == nil {
			t.Errorf("SaveProxy accepted %q; want http://HOST:PORT or socks5://HOST:PORT", bad)
		}
	}
	if err := ownerdir.SaveProxy(dir, connectProxy(t, echo.Addr().String())); err != nil {
		t.Fatal(err)
	}
	d, err := cfg.Dialer()
	if err != nil || d == nil {
		t.Fatalf("with a saved proxy: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := d(ctx, echo.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	io.WriteString(c, "hello\n")
	got, _ := bufio.NewReader(c).ReadString('\n')
	c.Close()
	if got != "echo hello\n" {
		t.Fatalf("through the proxy: %q", got)
	}
	<-served
	if _, err := d(ctx, "127.0.0.1:1"); err == nil || !strings.Contains(err.Error(), "403") {
		t.Errorf("a refused tunnel: %v, want the proxy's 403", err)
	}
	// A proxy given to the run replaces the saved one.
	cfg.ProxyURL = "http://127.0.0.1:1"
	if d, err := cfg.Dialer(); err != nil {
		t.Fatal(err)
	} else if _, err := d(ctx, echo.Addr().String()); err == nil || !strings.Contains(err.Error(), "127.0.0.1:1") {
		t.Errorf("through the proxy given to the run: %v, want the dead 127.0.0.1:1 named", err)
	}
	cfg.ProxyURL = ""
	if err := ownerdir.SaveProxy(dir, ""); err != nil {
		t.Fatal(err)
	}
	if d, err := cfg.Dialer(); err != nil || d != nil {
		t.Errorf("after removing the proxy: dialer %v, %v", d != nil, err)
	}
}
