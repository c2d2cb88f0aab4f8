package apiproxy

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// echoAddr listens on loopback port 0 and answers each connection's first
// line with its own address.
func echoAddr(t *testing.T) net.Listener {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	t.Cleanup(func() { l.Close(); <-done })
	go func() {
		defer close(done)
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			if _, err := bufio.NewReader(c).ReadString('\n'); err == nil {
				fmt.Fprintf(c, "%s\n", l.Addr())
			}
			c.Close()
		}
	}()
	return l
}

// The relay sends a connection to the first server that accepts, keeps
// using it, moves to the next while it is off, and tells Reached each time;
// with none answering the client sees its connection closed.
func TestRelayFollowsServers(t *testing.T) {
	first, second := echoAddr(t), echoAddr(t)
	servers := []netip.AddrPort{netip.MustParseAddrPort(first.Addr().String()), netip.MustParseAddrPort(second.Addr().String())}
	reached := make(chan error, 10)
	r := &Relay{Reached: func(_ context.Context, err error) { reached <- err }}
	r.SetServers(servers)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- r.Serve(ctx, l) }()
	defer func() {
		cancel()
		if err := <-served; err != nil {
			t.Errorf("Serve: %v", err)
		}
	}()
	call := func() (string, error) {
		c, err := net.Dial("tcp", l.Addr().String())
		if err != nil {
			return "", err
		}
		defer c.Close()
		fmt.Fprintf(c, "hello\n")
		line, err := bufio.NewReader(c).ReadString('\n')
		return strings.TrimSpace(line), err
	}
	for range 2 {
		if got, err := call(); err != nil || got != first.Addr().String() {
			t.Fatalf("through the relay: %q, %v; want the first server %s", got, err, first.Addr())
		}
		if err := <-reached; err != nil {
			t.Fatalf("Reached: %v, want nil", err)
		}
	}
	first.Close()
	if got, err := call(); err != nil || got != second.Addr().String() {
		t.Fatalf("with the first server off: %q, %v; want the second %s", got, err, second.Addr())
	}
	<-reached
	if got := r.Order(); got[0] != servers[1] {
		t.Errorf("Order after the second answered: %v, want %s first", got, servers[1])
	}
	second.Close()
	if got, err := call(); err == nil {
		t.Fatalf("with no server on: %q, want the connection closed", got)
	}
	if err := <-reached; err == nil || !strings.Contains(err.Error(), "no apiserver answers") {
		t.Errorf("Reached with no server on: %v", err)
	}
}
