package client

import (
	"context"
	"crypto/tls"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	cpb "github.com/polis-os/polis/api/curator/v1"
	"github.com/polis-os/polis/event"
	"github.com/polis-os/polis/event/memory"
	"github.com/polis-os/polis/internal/testutil"
)

func TestConfigValidation(t *testing.T) {
	good := []*cpb.CuratorEndpoint{{NodeId: "node-1", Address: "127.0.0.1", Port: 7835}}
	for _, tc := range []struct {
		name string
		cfg  Config
		want string
	}{
		{"no TLS", Config{Endpoints: good}, "TLS field is required"},
		{"server name", Config{Endpoints: good, TLS: &tls.Config{ServerName: "curator"}}, "must be empty"},
		{"nowhere to look", Config{TLS: &tls.Config{}}, "neither Endpoints nor Directory"},
		{"bad address", Config{Endpoints: []*cpb.CuratorEndpoint{{Address: "curator.example", Port: 1}}, TLS: &tls.Config{}}, "address"},
		{"bad port", Config{Endpoints: []*cpb.CuratorEndpoint{{Address: "127.0.0.1", Port: 70000}}, TLS: &tls.Config{}}, "port 70000"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := New(tc.cfg)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("New: %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

// TestNoLeader checks that a call that finds no curator fails with its own
// deadline and says why, rather than with a routing error, whether it is
// routed to the leader or to any curator.
func TestNoLeader(t *testing.T) {
	ap := testutil.FreePort(t, subnets.Addrs(1)[0]) // nothing listens there
	conn, err := New(Config{
		Endpoints: []*cpb.CuratorEndpoint{{Address: ap.Addr().String(), Port: uint32(ap.Port())}},
		TLS:       &tls.Config{MinVersion: tls.VersionTLS13},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	// A call only the leader serves, and one any curator serves.
	_, err = cpb.NewManagementServiceClient(conn).GetRegisterTicket(ctx, &cpb.GetRegisterTicketRequest{})
	if status.Code(err) != codes.DeadlineExceeded || !strings.Contains(err.Error(), "no curator leader served the call") {
		t.Fatalf("GetRegisterTicket: %v, want DEADLINE_EXCEEDED explaining that no leader was found", err)
	}
	ctx, cancel = context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	_, err = cpb.NewManagementServiceClient(conn).GetClusterInfo(ctx, &cpb.GetClusterInfoRequest{})
	if status.Code(err) != codes.DeadlineExceeded || !strings.Contains(err.Error(), "no curator served the call") || !strings.Contains(err.Error(), "connection refused") {
		t.Fatalf("GetClusterInfo: %v, want DEADLINE_EXCEEDED explaining that no curator was reachable", err)
	}
}

// TestDirectory checks that curators published in the directory after a
// call started are used by that call.
func TestDirectory(t *testing.T) {
	c := newHACluster(t, 1)
	var dir memory.Value[[]*cpb.CuratorEndpoint]
	dir.Set(nil)
	conn, r := c.dialT(Config{Directory: &dir, TLS: c.ownerTLS()}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	served := make(chan error, 1)
	go func() {
		_, err := leaderOnly(ctx, conn)
		served <- err
	}()
	// Once discovery has found nobody, the call waits for a later round:
	// only the directory can tell it where to go.
	if _, err := event.Get(ctx, &r.resolutions, event.Filter(func(res *resolution) bool { return res.err != nil })); err != nil {
		t.Fatalf("waiting for a failed discovery: %v", err)
	}
	dir.Set(c.endpoints())
	if err := <-served; err != nil {
		t.Fatalf("leader-only call: %v", err)
	}
}

// TestCloseEndsWaitingCalls checks that closing the connection ends calls
// that are waiting for a leader, instead of leaving them to their deadline.
func TestCloseEndsWaitingCalls(t *testing.T) {
	ap := testutil.FreePort(t, subnets.Addrs(1)[0]) // nothing listens there
	cfg := Config{
		Endpoints: []*cpb.CuratorEndpoint{{Address: ap.Addr().String(), Port: uint32(ap.Port())}},
		TLS:       &tls.Config{MinVersion: tls.VersionTLS13},
	}
	conn, r := dialRouter(t, cfg, nil)
	ctx := ctxT(t)
	done := make(chan error, 1)
	go func() {
		_, err := cpb.NewManagementServiceClient(conn).GetClusterInfo(ctx, &cpb.GetClusterInfoRequest{})
		done <- err
	}()
	if _, err := event.Get(ctx, &r.resolutions, event.Filter(func(res *resolution) bool { return res.err != nil })); err != nil {
		t.Fatalf("waiting for a failed discovery: %v", err)
	}
	conn.Close()
	select {
	case err := <-done:
		if status.Code(err) != codes.Canceled {
			t.Fatalf("call on a closed connection: %v, want CANCELED", err)
		}
	case <-ctx.Done():
		t.Fatal("the call still waits after the connection was closed")
	}
}

// TestDeadLeaderNotAskedFirst checks that once the leader followed fails
// to answer a probe, discovery rounds no longer ask it first: before, a
// dead leader was asked first in every round until a new leader was
// followed, each time costing a refused connection or, for an address
// that swallows packets, a whole probe timeout.
func TestDeadLeaderNotAskedFirst(t *testing.T) {
	var eps []*cpb.CuratorEndpoint
	for _, ip := range subnets.Addrs(3) {
		ap := testutil.FreePort(t, ip) // nothing listens there
		eps = append(eps, &cpb.CuratorEndpoint{NodeId: "node-" + ip.String(), Address: ap.Addr().String(), Port: uint32(ap.Port())})
	}
	lr := newTestResolver(t, Config{Endpoints: eps, TLS: &tls.Config{MinVersion: tls.VersionTLS13}})
	leader := eps[1]
	lr.leader = leader
	if first := lr.candidates(nil)[0]; first != leader {
		t.Fatalf("the leader followed is asked after %s; it must be asked first while it answers", first.NodeId)
	}
	if _, _, err := lr.discover(ctxT(t), nil); err == nil {
		t.Fatal("discovery found a leader where no curator listens")
	}
	if !lr.down[addrPort(leader)] {
		t.Fatal("the leader's failed probe was not recorded")
	}
	// The others answer again (as followers of a dead leader do, naming
	// it until its lease runs out): the leader stays behind them.
	for _, ep := range eps {
		if ep != leader {
			delete(lr.down, addrPort(ep))
		}
	}
	for round := range 2 * len(eps) {
		if first := lr.candidates(nil)[0]; first == leader {
			t.Fatalf("round %d: the leader that did not answer is asked first again", round)
		}
	}
	// A hint goes first all the same: the leader watch named it.
	if first := lr.candidates(leader)[0]; first != leader {
		t.Fatalf("a hinted curator is asked after %s", first.NodeId)
	}
}

// TestFailFastWhenEveryConnectionRefused checks that a connection with
// FailFast ends a call as soon as a discovery round found every curator
// refusing the connection, with an error that says so, instead of waiting
// for the call's deadline (issue 26: polisctl against a stopped cluster
// waited 30 s); the same call without FailFast keeps waiting, as a node
// agent must.
func TestFailFastWhenEveryConnectionRefused(t *testing.T) {
	var eps []*cpb.CuratorEndpoint
	for _, ip := range subnets.Addrs(2) {
		ap := testutil.FreePort(t, ip) // nothing listens there
		eps = append(eps, &cpb.CuratorEndpoint{Address: ap.Addr().String(), Port: uint32(ap.Port())})
	}
	for _, call := range []struct {
		name string
		f    func(context.Context, *grpc.ClientConn) error
	}{
		{"leader call", func(ctx context.Context, conn *grpc.ClientConn) error {
			_, err := cpb.NewManagementServiceClient(conn).UpdateNodeLabels(ctx, &cpb.UpdateNodeLabelsRequest{NodeId: "x"})
			return err
		}},
		{"any-curator call", func(ctx context.Context, conn *grpc.ClientConn) error {
			_, err := cpb.NewManagementServiceClient(conn).GetClusterInfo(ctx, &cpb.GetClusterInfoRequest{})
			return err
		}},
	} {
		t.Run(call.name, func(t *testing.T) {
			conn, err := New(Config{Endpoints: eps, TLS: &tls.Config{MinVersion: tls.VersionTLS13}, FailFast: true})
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			ctx := ctxT(t)
			err = call.f(ctx, conn)
			if ctx.Err() != nil {
				t.Fatalf("the call waited for its deadline: %v", err)
			}
			if !IsUnreachable(err) || status.Code(err) != codes.Unavailable {
				t.Fatalf("call with every curator refusing: %v, want UNAVAILABLE recognised by IsUnreachable", err)
			}
			if !strings.Contains(err.Error(), "connection refused") {
				t.Errorf("the error does not say the connections were refused: %v", err)
			}
		})
	}

	// Without FailFast the call waits (here, for a short deadline).
	conn, err := New(Config{Endpoints: eps, TLS: &tls.Config{MinVersion: tls.VersionTLS13}})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(ctxT(t), time.Second)
	defer cancel()
	_, err = cpb.NewManagementServiceClient(conn).GetClusterInfo(ctx, &cpb.GetClusterInfoRequest{})
	if status.Code(err) != codes.DeadlineExceeded || IsUnreachable(err) {
		t.Fatalf("call without FailFast: %v, want DEADLINE_EXCEEDED", err)
	}
}
