package consensus

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/polis-os/polis/event"
	"github.com/polis-os/polis/internal/testutil"
	"github.com/polis-os/polis/supervisor/supervisortest"
)

// TestMain fails the package if any goroutine outlives the tests. Nothing
// is ignored, but the check waits up to leakGrace for goroutines to end by
// themselves: etcd's peer HTTP client (promotion forwarding, version
// checks) keeps idle keep-alive connections that etcd never closes on
// shutdown, and they last until the peer server's read timeout
// (rafthttp.ConnReadTimeout, 5s) closes the other end.
func TestMain(m *testing.M) {
	testutil.VerifyTestMainWithin(m, leakGrace)
}

// leakGrace is how long TestMain waits for goroutines to end after the
// tests (see TestMain).
const leakGrace = 15 * time.Second

// waitTimeout bounds every wait of a test on a member's status. Generous:
// under -race on two busy cores an etcd election can take seconds.
const waitTimeout = 60 * time.Second

// subnets hands each test (and each benchmark iteration) its own
// 127.24.N.0/24, so members of different tests never share an address.
var subnets = testutil.Subnets{Octet: 24}

// addrs returns n peer addresses on a fresh loopback /24, each with a port
// the kernel just reported free on that address.
func addrs(t testing.TB, n int) []string {
	t.Helper()
	var res []string
	for _, ip := range subnets.Addrs(n) {
		res = append(res, testutil.FreePort(t, ip).String())
	}
	return res
}

// start runs svc under a supervisor test harness; the returned function
// stops it and waits until Run has returned (etcd closed).
func start(t testing.TB, svc *Service) (stop func()) {
	t.Helper()
	cancel := supervisortest.Harness(t, svc.Run)
	return func() {
		t.Helper()
		cancel()
		waitFor(t, svc, "stopped", func(s *Status) bool { return s.State == StateStopped })
	}
}

// newService is New that fails the test on error.
func newService(t testing.TB, cfg Config) *Service {
	t.Helper()
	svc, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return svc
}

// waitFor waits until svc's status satisfies pred and returns it.
func waitFor(t testing.TB, svc *Service, what string, pred func(*Status) bool) *Status {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	st, err := event.Get(ctx, svc.Status(), event.Filter(pred))
	if err != nil {
		t.Fatalf("waiting for %s to be %s: %v", svc.cfg.Name, what, err)
	}
	return st
}

// waitVoter waits until svc serves as a voter.
func waitVoter(t testing.TB, svc *Service) *Status {
	t.Helper()
	return waitFor(t, svc, "a voter", IsVoter)
}

// waitStoppedWith waits until svc's Run has returned an error matching
// target (the harness keeps restarting it; every run ends the same way).
func waitStoppedWith(t testing.TB, svc *Service, target error) *Status {
	t.Helper()
	return waitFor(t, svc, fmt.Sprintf("stopped with %v", target), func(s *Status) bool {
		return s.State == StateStopped && errors.Is(s.Err, target)
	})
}

// ctxT is a context for one RPC of a test.
func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	t.Cleanup(cancel)
	return ctx
}

// mustAddr parses an IP:port.
func mustAddr(t testing.TB, s string) netip.AddrPort {
	t.Helper()
	ap, err := parseAddress(s)
	if err != nil {
		t.Fatal(err)
	}
	return ap
}
