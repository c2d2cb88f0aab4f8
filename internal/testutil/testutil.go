// Package testutil holds what the tests of several packages need alike: the
// goroutine-leak checks of packages that run embedded etcd members,
// loopback addresses that tests of different packages never share,
// polling with a deadline (poll.go), and a mutual-TLS HTTP server for
// stand-ins of an apiserver (servetls.go). Its subpackage etcdtest starts the
// embedded etcd member that tests store into.
//
// Leaks. Every test package checks with goleak that no goroutine outlives
// its tests. etcd makes that harder in one known way: its peer transport
// (raft messages, promotion forwarding, version checks) talks HTTP between
// members and keeps idle keep-alive connections that it does not close when
// a member stops. Both ends of such a connection stay until the peer
// server's read timeout (rafthttp.ConnReadTimeout, 5 s) closes it. A
// package can either ignore exactly those goroutines (EtcdLeakOptions) or
// wait for them to end (VerifyTestMainWithin); nothing else is tolerated.
//
// Addresses. Tests start servers on fixed or free ports. So that two tests,
// or the tests of two packages that go test runs in parallel, never meet on
// an address, each package owns one second octet of 127.0.0.0/8 and each
// test takes a fresh /24 of it (Subnets). The octets in use: consensus 24,
// curator 25, curator/client 26, node 27, polisctl 28, roleserve 29, nodeapi 31,
// event/etcd 61, identity 62, test/e2e 78, kube/etcdproxy 80,
// kube/controlplane 81, kubernetes/test 82, kube/pki 83, kube/controller 84,
// test/scale 86,
// kube/roletest 87, internal/testutil/etcdtest 88; launch uses 127.77
// (its default) and 127.79.
package testutil

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// EtcdLeakOptions are the goleak options for a package whose tests run
// embedded etcd members and serve no HTTP of their own: they ignore the
// client side (persistConn's read and write loops) and the server side
// (conn.serve and its background read) of etcd's idle peer keep-alive
// connections, which outlive a stopped member by up to the peer read
// timeout.
func EtcdLeakOptions() []goleak.Option {
	return []goleak.Option{
		goleak.IgnoreAnyFunction("net/http.(*persistConn).readLoop"),
		goleak.IgnoreAnyFunction("net/http.(*persistConn).writeLoop"),
		goleak.IgnoreAnyFunction("net/http.(*conn).serve"),
		goleak.IgnoreAnyFunction("net/http.(*connReader).backgroundRead"),
	}
}

// VerifyTestMainWithin runs the tests and, if they pass, fails the package
// if any goroutine is still running grace after they ended. It ignores
// nothing: it is for packages that would rather wait for etcd's idle peer
// connections to close (see the package doc) than ignore every HTTP
// goroutine. Like goleak.VerifyTestMain it exits the process.
func VerifyTestMainWithin(m *testing.M, grace time.Duration) {
	code := m.Run()
	if code == 0 {
		deadline := time.Now().Add(grace)
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

// Subnets hands out loopback /24s of one package: 127.<Octet>.<n>.0/24 with
// n counting from a start derived from the process ID, so that two test
// binaries of the same package running at once (two checkouts, or -count
// runs in parallel) rarely meet on a /24. It wraps around after 250 (long
// benchmarks); by then the earlier users are long gone, and ports are
// checked free anyway. The zero value is ready; declare one Subnets per
// package, with the package's own Octet (see the package doc for those in
// use).
type Subnets struct {
	// Octet is the second octet of every address, the package's own.
	Octet byte

	next atomic.Uint32
}

// Addrs returns n addresses, 127.<Octet>.<s>.1 to .n, in a /24 no earlier
// call returned.
func (s *Subnets) Addrs(n int) []netip.Addr {
	sub := 1 + (uint32(os.Getpid())+s.next.Add(1)-1)%250
	res := make([]netip.Addr, 0, n)
	for i := 1; i <= n; i++ {
		res = append(res, netip.AddrFrom4([4]byte{127, s.Octet, byte(sub), byte(i)}))
	}
	return res
}

// FreePort returns ip with a port the kernel just reported free on it.
func FreePort(t testing.TB, ip netip.Addr) netip.AddrPort {
	t.Helper()
	l, err := net.Listen("tcp", netip.AddrPortFrom(ip, 0).String())
	if err != nil {
		t.Fatalf("finding a free port on %s: %v", ip, err)
	}
	defer l.Close()
	return netip.MustParseAddrPort(l.Addr().String())
}
