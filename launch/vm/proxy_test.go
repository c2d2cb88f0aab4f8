package vm

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"path/filepath"
	"strings"
	"testing"
	"time"

	xproxy "golang.org/x/net/proxy"
)

// TestProxyIntoTheSwitchNetwork stands a second netstack in for a node:
// a client on the host reaches it through the proxy and the switch at its
// cluster address, and nothing outside the cluster network is reachable.
func TestProxyIntoTheSwitchNetwork(t *testing.T) {
	sw, err := NewSwitch(filepath.Join(t.TempDir(), "sw.sock"))
	if err != nil {
		t.Fatal(err)
	}
	defer sw.Close()
	network := netip.MustParsePrefix("10.9.0.0/24")
	host, err := AttachHost(sw, netip.MustParsePrefix("10.9.0.254/24"), "52:54:00:00:00:fe")
	if err != nil {
		t.Fatal(err)
	}
	defer host.Close()
	node, err := AttachHost(sw, netip.MustParsePrefix("10.9.0.1/24"), "52:54:00:00:00:01")
	if err != nil {
		t.Fatal(err)
	}
	defer node.Close()
	ln, err := node.Listen(7835)
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan struct{})
	go func() {
		defer close(served)
		for range 2 { // one tunnel through HTTP CONNECT, one through SOCKS5
			c, err := ln.Accept()
			if err != nil {
				return
			}
			line, _ := bufio.NewReader(c).ReadString('\n')
			fmt.Fprintf(c, "echo %s", line)
			c.Close()
		}
	}()
	p, err := ServeProxy(host, network)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()

	connect := func(target string) (net.Conn, *bufio.Reader, *http.Response) {
		t.Helper()
		c, err := net.Dial("tcp", strings.TrimPrefix(p.URL(), "http://"))
		if err != nil {
			t.Fatal(err)
		}
		c.SetDeadline(time.Now().Add(time.Minute))
		fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", target, target)
		br := bufio.NewReader(c)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		return c, br, resp
	}
	c, br, resp := connect("10.9.0.1:7835")
	defer c.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("CONNECT to the node: %s", resp.Status)
	}
	fmt.Fprintf(c, "hello\n")
	got, err := io.ReadAll(br)
	if err != nil || got == nil || string(got) != "echo hello\n" {
		t.Fatalf("through the tunnel: %q, %v", got, err)
	}

	// The same port speaks SOCKS5.
	d, err := xproxy.SOCKS5("tcp", strings.TrimPrefix(p.SOCKS5URL(), "socks5://"), nil, &net.Dialer{Timeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	sc, err := d.Dial("tcp", "10.9.0.1:7835")
	if err != nil {
		t.Fatalf("SOCKS5 to the node: %v", err)
	}
	sc.SetDeadline(time.Now().Add(time.Minute))
	fmt.Fprintf(sc, "hello socks\n")
	got, err = io.ReadAll(sc)
	sc.Close()
	if err != nil || string(got) != "echo hello socks\n" {
		t.Fatalf("through the SOCKS5 tunnel: %q, %v", got, err)
	}
	<-served
	ln.Close()

	c2, _, resp := connect("127.0.0.1:22")
	c2.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("CONNECT outside the cluster network: %s, want 403", resp.Status)
	}
	if sc, err := d.Dial("tcp", "127.0.0.1:22"); err == nil || !strings.Contains(err.Error(), "not allowed") {
		if sc != nil {
			sc.Close()
		}
		t.Errorf("SOCKS5 outside the cluster network: %v, want it not allowed", err)
	}
	if sc, err := d.Dial("tcp", "node1.example:7835"); err == nil {
		sc.Close()
		t.Error("SOCKS5 to a name: accepted, want refused (the cluster network has addresses only)")
	}
}
