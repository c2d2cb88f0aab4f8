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
	"github.com/polis-os/polis/supervisor"
)

// A leader whose process dies without revoking its lease (its etcd client
// gone, its port closed: what SIGKILL leaves) is deposed by a follower that
// finds its port refusing connections, long before the lease would expire;
// while the leader lives, however slowly it answers, the follower's probes
// depose nobody.
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

	// The leader: its own etcd client, and a port that accepts
	// connections (the kernel completes them) but never answers, as a
	// live but stalled process would.
	leaderPort := listen()
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
	supervisor.TestHarness(t, leader.Run)
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
	}
	supervisor.TestHarness(t, follower.Run)

	// Alive: several probes later, nothing changed.
	for range 5 {
		select {
		case gone := <-probes:
			if gone {
				t.Fatal("a live leader's port counted as refusing connections")
			}
		case <-ctxT(t).Done():
			t.Fatal("the follower never probed the leader")
		}
	}
	if err := old.Leading.Confirm(ctxT(t)); err != nil {
		t.Fatalf("the live leader was deposed by a follower's probes: %v", err)
	}
	if st := follower.Current(); st.Leading != nil || string(st.Leader) != leaderPort.Addr().String() {
		t.Fatalf("with the leader alive, the follower sees leading=%v, leader %q", st.Leading != nil, st.Leader)
	}

	// Killed: the port closes and the etcd client goes without a word;
	// the lease would live on for ten minutes.
	leaderPort.Close()
	conn.Client.ActiveConnection().Close()
	if _, err := event.Get(ctxT(t), follower.Status(), event.Filter(leading)); err != nil {
		t.Fatalf("the follower never took over from the dead leader: %v", err)
	}
	dead := &Leadership{client: cli, key: old.Leading.key, rev: old.Leading.rev}
	if _, _, err := dead.Txn(ctxT(t), nil, []clientv3.Op{clientv3.OpPut("k", "stale")}, nil); !errors.Is(err, ErrNotLeader) {
		t.Fatalf("write with the dead leader's leadership: %v, want ErrNotLeader", err)
	}
}
