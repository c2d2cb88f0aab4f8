package client

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest"
	"go.uber.org/zap/zaptest/observer"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	cpb "github.com/polis-os/polis/api/curator/v1"
	"github.com/polis-os/polis/event/memory"
	"github.com/polis-os/polis/internal/testutil"
)

// dialT is New for tests: the connection closes with the test. distort, if
// set, replaces the answers of discovery.
func (c *haCluster) dialT(cfg Config, distort func(*cpb.GetLeaderResponse) *cpb.GetLeaderResponse) (*grpc.ClientConn, *router) {
	c.t.Helper()
	return dialRouter(c.t, cfg, distort)
}

// servedBy checks that a leader-only call through conn is served, and by nd.
// (The curator declares no leader-only stream since ListNodes became
// SERVE_ANY; streams and unary calls are routed by the same lookup of the
// method's declaration.)
func (c *haCluster) servedBy(ctx context.Context, conn *grpc.ClientConn, nd *haNode) {
	c.t.Helper()
	got, err := leaderOnly(ctx, conn)
	if err != nil {
		c.t.Fatalf("leader-only call: %v", err)
	}
	if got != nd.listen.String() {
		c.t.Fatalf("leader-only call served by %s, want the leader %s at %s", got, nd.id, nd.listen)
	}
}

// notLeader checks that nd's curator, called directly, refuses a
// leader-only call as a follower.
func (c *haCluster) notLeader(nd *haNode) {
	c.t.Helper()
	_, err := leaderOnly(ctxT(c.t), c.direct(nd))
	if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "not the leader") {
		c.t.Fatalf("direct call to %s: %v, want UNAVAILABLE: not the leader", nd.id, err)
	}
}

// TestHA runs three curators over a three-member etcd and checks, on one
// connection made by New, that calls reach the leader through a stale
// answer, a leader that stops, and a leader cut off from etcd. The phases
// share one cluster because forming it takes most of the time.
func TestHA(t *testing.T) {
	c := newHACluster(t, 3)
	cfg := Config{Endpoints: c.endpoints(), TLS: c.ownerTLS(), Logger: zaptest.NewLogger(t)}

	t.Run("follower answer retried", func(t *testing.T) {
		// The first discovery answer names a follower as the leader,
		// as a curator whose view lags would: the follower refuses the
		// call, and the call must end up on the leader all the same.
		l := c.leader()
		follower := c.follower(l)
		c.notLeader(c.nodes[indexOf(c, follower.NodeId)])
		lied := false
		conn, r := c.dialT(cfg, func(resp *cpb.GetLeaderResponse) *cpb.GetLeaderResponse {
			if lied {
				return resp
			}
			lied = true
			return &cpb.GetLeaderResponse{Leader: follower, Responder: resp.Responder}
		})
		c.servedBy(ctxT(t), conn, l)
		if g := r.generation(); g < 2 {
			t.Errorf("%d discovery rounds, want at least 2 (the stale one and a corrected one)", g)
		}
	})

	t.Run("stale followers do not move a healthy leader", func(t *testing.T) {
		// Once the connection follows the leader, the followers start
		// answering with a stale view naming one of them. Directory
		// changes and discovery rounds must leave the connection on the
		// leader, which is asked first and confirms itself. On main, a
		// directory change started a round that asked the leader last:
		// the first follower's answer moved the connection.
		l := c.leader()
		stale := c.follower(l)
		var lying atomic.Bool
		core, logs := observer.New(zap.InfoLevel)
		dir := &memory.Value[[]*cpb.CuratorEndpoint]{Name: "test-directory"}
		dir.Set(c.endpoints())
		scfg := Config{Directory: dir, TLS: c.ownerTLS(), Logger: zap.New(zapcore.NewTee(core, zaptest.NewLogger(t).Core()))}
		conn, r := c.dialT(scfg, func(resp *cpb.GetLeaderResponse) *cpb.GetLeaderResponse {
			if !lying.Load() || resp.GetResponder().GetNodeId() == l.id {
				return resp
			}
			return &cpb.GetLeaderResponse{Leader: stale, Responder: resp.Responder}
		})
		c.servedBy(ctxT(t), conn, l)
		lying.Store(true)
		eps := c.endpoints()
		for i := range 2 * len(eps) {
			next := append(slices.Clone(eps[i%len(eps):]), eps[:i%len(eps)]...)
			dir.Set(next)
			testutil.Eventually(t, waitTimeout, "the resolver's directory", func() error {
				r.mu.Lock()
				lr := r.active
				r.mu.Unlock()
				if lr == nil {
					return fmt.Errorf("no resolver")
				}
				lr.mu.Lock()
				defer lr.mu.Unlock()
				if !slices.Equal(lr.directory, next) {
					return fmt.Errorf("directory not taken yet")
				}
				return nil
			})
			if _, err := r.refresh(ctxT(t), r.generation()); err != nil {
				t.Fatal(err)
			}
		}
		for _, e := range logs.FilterMessage("following the curator leader").All() {
			if e.ContextMap()["node"] == stale.NodeId {
				t.Fatalf("the connection moved to %s on a stale follower's word", stale.NodeId)
			}
		}
		c.servedBy(ctxT(t), conn, l)
	})

	conn, _ := c.dialT(cfg, nil)

	t.Run("leader stops", func(t *testing.T) {
		old := c.leader()
		c.servedBy(ctxT(t), conn, old)
		c.stopCurator(old)
		start := time.Now()
		l := c.newLeaderServes(t, conn, old, start, "the leader stopped")
		c.servedBy(ctxT(t), conn, l)
		// Back to three curators, the old leader now following.
		c.startCurator(old)
		c.notLeader(old)
		c.servedBy(ctxT(t), conn, c.leader())
	})

	t.Run("leader partitioned", func(t *testing.T) {
		old := c.leader()
		c.servedBy(ctxT(t), conn, old)
		// Cut the leader's curator off from etcd. It keeps serving, but
		// loses its lease and steps down, and another curator takes over.
		c.stopConsensus(old)
		start := time.Now()
		testutil.Eventually(t, waitTimeout, "the partitioned leader stepping down", func() error {
			if leading(old) {
				return fmt.Errorf("%s still leads", old.id)
			}
			return nil
		})
		// The connection still goes to the old leader, which now
		// refuses: the call must go through regardless.
		l := c.newLeaderServes(t, conn, old, start, "the leader was cut off")
		c.notLeader(old)
		c.servedBy(ctxT(t), conn, l)

		// Healing the partition makes the old leader a follower.
		c.heal(old)
		c.notLeader(old)
		c.servedBy(ctxT(t), conn, c.leader())
	})
}

func indexOf(c *haCluster, id string) int {
	for i, nd := range c.nodes {
		if nd.id == id {
			return i
		}
	}
	return -1
}

// BenchmarkLeaderFailover measures the time from losing the leading
// curator to a leader-only call through a connection that was using it
// being served by the new leader:
//
//   - stop: the leader's curator stops, resigning as it does (a restart, an
//     upgrade, a role change);
//   - cut-off: the leader's consensus member stops, so its curator loses
//     etcd and, after its lease (testLeaseTTL), the leadership (a
//     partition, a crash). Until the old leader notices, it still serves:
//     calls are repeated until another curator serves one.
//
// Forming the cluster takes seconds; run it with -benchtime=3x.
func BenchmarkLeaderFailover(b *testing.B) {
	c := newHACluster(b, 3)
	conn, _ := c.dialT(Config{Endpoints: c.endpoints(), TLS: c.ownerTLS()}, nil)
	// prepare returns the leader, after a call that made the connection
	// use it.
	prepare := func(b *testing.B) *haNode {
		b.Helper()
		old := c.leader()
		if got, err := leaderOnly(ctxT(b), conn); err != nil || got != old.listen.String() {
			b.Fatalf("before failover: served by %s (%v), want %s", got, err, old.listen)
		}
		return old
	}
	// failedOver makes leader-only calls until one is served by another
	// curator than old.
	failedOver := func(b *testing.B, old *haNode) {
		b.Helper()
		for {
			got, err := leaderOnly(ctxT(b), conn)
			if err != nil {
				b.Fatal(err)
			}
			if got != old.listen.String() {
				return
			}
		}
	}

	b.Run("stop", func(b *testing.B) {
		for range b.N {
			b.StopTimer()
			old := prepare(b)
			b.StartTimer()
			c.stopCurator(old)
			failedOver(b, old)
			b.StopTimer()
			c.startCurator(old)
		}
	})
	b.Run("cut-off", func(b *testing.B) {
		for range b.N {
			b.StopTimer()
			old := prepare(b)
			b.StartTimer()
			c.stopConsensus(old)
			failedOver(b, old)
			b.StopTimer()
			c.heal(old)
		}
	})
}

// newLeaderServes makes a leader-only call through conn after what
// happened to the old leader (since start), and checks that the leader
// now, another node, served it. It returns that leader.
func (c *haCluster) newLeaderServes(t *testing.T, conn *grpc.ClientConn, old *haNode, start time.Time, what string) *haNode {
	t.Helper()
	got, err := leaderOnly(ctxT(t), conn)
	if err != nil {
		t.Fatalf("leader-only call after %s: %v", what, err)
	}
	t.Logf("served by %s %s after %s", got, time.Since(start), what)
	l := c.leader()
	if l == old || got != l.listen.String() {
		t.Fatalf("served by %s; the leader is %s at %s, the old one was %s", got, l.id, l.listen, old.id)
	}
	return l
}
