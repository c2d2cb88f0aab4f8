package polisctl

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// connectProxy is a minimal HTTP CONNECT proxy on loopback that tunnels
// to allowed only.
func connectProxy(t *testing.T, allowed string) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	t.Cleanup(func() { ln.Close(); <-done })
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			br := bufio.NewReader(c)
			req, err := http.ReadRequest(br)
			if err != nil || req.Method != http.MethodConnect || req.Host != allowed {
				fmt.Fprintf(c, "HTTP/1.1 403 Forbidden\r\nConnection: close\r\n\r\nnot in the cluster network\n")
				c.Close()
				continue
			}
			up, err := net.Dial("tcp", req.Host)
			if err != nil {
				c.Close()
				continue
			}
			io.WriteString(c, "HTTP/1.1 200 Connection established\r\n\r\n")
			go func() { io.Copy(up, br); up.Close() }()
			io.Copy(c, up)
			c.Close()
		}
	}()
	return "http://" + ln.Addr().String()
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
	cfg, err := newConfig(dir)
	if err != nil {
		t.Fatal(err)
	}
	if d, err := cfg.dialer(); err != nil || d != nil {
		t.Fatalf("without a saved proxy: dialer %v, %v; want a direct one (nil)", d != nil, err)
	}
	if err := SaveProxy(dir, "socks5://127.0.0.1:1080"); err == nil {
		t.Error("SaveProxy accepted a SOCKS URL; only HTTP CONNECT is spoken")
	}
	if err := SaveProxy(dir, connectProxy(t, echo.Addr().String())); err != nil {
		t.Fatal(err)
	}
	d, err := cfg.dialer()
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
	if err := SaveProxy(dir, ""); err != nil {
		t.Fatal(err)
	}
	if d, err := cfg.dialer(); err != nil || d != nil {
		t.Errorf("after removing the proxy: dialer %v, %v", d != nil, err)
	}
}
