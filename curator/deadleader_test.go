package curator

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/namespace"

	"github.com/polis-os/polis/event"
	"github.com/polis-os/polis/supervisor/supervisortest"
)

// A leader whose process dies without revoking its lease (its etcd client
// gone, its port closed: what SIGKILL leaves) is deposed by a follower that
// finds its port refusing connections, long before the lease would expire;
// while the leader lives, however slowly it answers, the follower's probes
// depose nobody. The follower holds a connection to the leader and looks
// when it ends: a connection the live leader drops is followed by a look
// that finds nothing and a new connection; the dead leader's ends it.
//
// The lease is far longer than the test's wait, so a follower that leads at
// all proves that the dead leader's lease was revoked, not that it ran out.
// Candidates publish the address of a real listener; the followers' probe
// is the curator's own refusal check.
func TestDeadLeaderDeposed(t *testing.T) {
	const lease = 10 * time.Minute
	st := startConsensusStatus(t)
	listen := func() net.Listener {
		t.Helper()
		l, err := net.Listen("tcp", net.JoinHostPort(subnets.Addrs(1)[0].String(), "0"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close() })
		return l
	}

	// The leader: its own etcd client, and two ports that accept
	// connections (the kernel completes them) but never answer, as a
	// live but stalled process would: one that the probes ask
	// (leaderPort, the leader's Candidate) and one that the follower
	// holds a connection to (holdPort), so that each accepted connection
	// on the latter is one the follower holds.
	leaderPort, holdPort := listen(), listen()
	// Its etcd client has a connection of its own, which the kill below
	// closes under it: the client's watches and keepalives then fail as a
	// dead process's would, without Client.Close racing with the watch
	// the election's observer is setting up (etcd's client does not make
	// Close safe against a concurrent Watch).
	conn, err := st.ConnectionFor("curator")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	leaderClient := clientv3.NewCtxClient(conn.Client.Ctx())
	leaderClient.KV = namespace.NewKV(conn.Client.KV, conn.Prefix)
	leaderClient.Watcher = namespace.NewWatcher(conn.Client.Watcher, conn.Prefix)
	leaderClient.Lease = namespace.NewLease(conn.Client.Lease, conn.Prefix)
	leader := &Election{Client: leaderClient, Candidate: []byte(leaderPort.Addr().String()), LeaseTTL: lease}
	supervisortest.Harness(t, leader.Run)
	old, err := event.Get(ctxT(t), leader.Status(), event.Filter(leading))
	if err != nil {
		t.Fatal(err)
	}

	// probes carries each probe's answer to the test; a probe never
	// waits for the test to read it.
	probes := make(chan bool, 1000)
	cli := curatorClient(t, st)
	follower := &Election{
		Client:    cli,
		Candidate: []byte(listen().Addr().String()),
		LeaseTTL:  lease,
		LeaderGone: func(ctx context.Context, leader []byte) (bool, string) {
			gone := refusesConnections(ctx, string(leader))
			select {
			case probes <- gone:
			default:
			}
			return gone, "refused"
		},
		LeaderAddress: func([]byte) string { return holdPort.Addr().String() },
	}
	supervisortest.Harness(t, follower.Run)
	alive := func(what string) {
		t.Helper()
		select {
		case gone := <-probes:
			if gone {
				t.Fatalf("%s: a live leader's port counted as refusing connections", what)
			}
		case <-ctxT(t).Done():
			t.Fatalf("%s: the follower never probed the leader", what)
		}
	}
	// held is the follower's connection as the leader's kernel accepted
	// it; the process, stalled, reads nothing.
	held := func(what string) net.Conn {
		t.Helper()
		if err := holdPort.(*net.TCPListener).SetDeadline(time.Now().Add(waitTimeout)); err != nil {
			t.Fatal(err)
		}
		c, err := holdPort.Accept()
		if err != nil {
			t.Fatalf("%s: the follower holds no connection to the leader: %v", what, err)
		}
		// While it holds one, the follower does not probe: a probe now
		// would be the old polling, five connections a second.
		select {
		case <-probes:
			t.Fatalf("%s: the follower probed while it held a connection", what)
		case <-time.After(3 * deadLeaderProbe):
		}
		return c
	}

	// Alive: the follower looked, and holds a connection.
	alive("the leader elected")
	c := held("the leader elected")
	// The live leader drops it (its server gives up on the silent
	// client): the follower looks again, finds nothing, and holds another.
	c.Close()
	alive("the connection dropped")
	c = held("the connection dropped")
	if err := old.Leading.Confirm(ctxT(t)); err != nil {
		t.Fatalf("the live leader was deposed by a follower's probes: %v", err)
	}
	if st := follower.Current(); st.Leading != nil || string(st.Leader) != leaderPort.Addr().String() {
		t.Fatalf("with the leader alive, the follower sees leading=%v, leader %q", st.Leading != nil, st.Leader)
	}

	// Killed: its connections and port close and the etcd client goes
	// without a word; the lease would live on for ten minutes.
	c.Close()
	leaderPort.Close()
	holdPort.Close()
	conn.Client.ActiveConnection().Close()
	if _, err := event.Get(ctxT(t), follower.Status(), event.Filter(leading)); err != nil {
		t.Fatalf("the follower never took over from the dead leader: %v", err)
	}
	dead := &Leadership{client: cli, key: old.Leading.key, rev: old.Leading.rev}
	if _, _, err := dead.Txn(ctxT(t), nil, []clientv3.Op{clientv3.OpPut("k", "stale")}, nil); !errors.Is(err, ErrNotLeader) {
		t.Fatalf("write with the dead leader's leadership: %v, want ErrNotLeader", err)
	}
}
