package client

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// TestMain fails the package if any goroutine outlives the tests. It waits
// up to leakGrace for goroutines to end by themselves: etcd's peer HTTP
// client keeps idle keep-alive connections that last until the peer
// server's read timeout (5s) closes the other end.
func TestMain(m *testing.M) {
	code := m.Run()
	if code == 0 {
		deadline := time.Now().Add(leakGrace)
		for {
			err := goleak.Find()
			if err == nil {
				break
			}
			if time.Now().After(deadline) {
				fmt.Fprintf(os.Stderr, "goroutines leaked: %v\n", err)
				code = 1
				break
			}
			time.Sleep(100 * time.Millisecond) // polling interval, not synchronisation
		}
	}
	os.Exit(code)
}

const leakGrace = 15 * time.Second

// waitTimeout bounds every wait of a test. Generous: under -race on busy
// cores an etcd election can take seconds.
const waitTimeout = 60 * time.Second

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	t.Cleanup(cancel)
	return ctx
}

// Each cluster of this package gets its own 127.26.<n>.0/24 (the curator
// package uses 127.25, consensus 127.24), one address per node.
var subnet atomic.Uint32

// nodeIPs returns n loopback addresses in a fresh /24.
func nodeIPs(n int) []netip.Addr {
	s := 1 + (subnet.Add(1)-1)%250
	var ips []netip.Addr
	for i := 1; i <= n; i++ {
		ips = append(ips, netip.AddrFrom4([4]byte{127, 26, byte(s), byte(i)}))
	}
	return ips
}

// freePort returns ip with a port the kernel just reported free on it.
func freePort(t testing.TB, ip netip.Addr) netip.AddrPort {
	t.Helper()
	l, err := net.Listen("tcp", netip.AddrPortFrom(ip, 0).String())
	if err != nil {
		t.Fatalf("finding a free port on %s: %v", ip, err)
	}
	defer l.Close()
	return netip.MustParseAddrPort(l.Addr().String())
}

// eventually polls cond until it returns nil or waitTimeout passes. It is
// for conditions no event value reports.
func eventually(t testing.TB, what string, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(waitTimeout)
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: still failing after %s: %v", what, waitTimeout, err)
		}
		time.Sleep(20 * time.Millisecond) // polling interval, not synchronisation
	}
}
