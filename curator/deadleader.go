package curator

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/protobuf/proto"

	cpb "github.com/polis-os/polis/api/curator/v1"
	"github.com/polis-os/polis/consensus"
	"github.com/polis-os/polis/event"
	"github.com/polis-os/polis/supervisor"
)

// A leader whose process died (SIGKILL, a crash) does not revoke its
// election lease: left alone, the leadership would outlive it by the
// lease's TTL, and by more when etcd's raft leader died with it, since a
// new raft leader renews every lease to its full TTL. So each follower
// looks for evidence that the leader's process is gone
// (Election.LeaderGone), and revokes the leader's lease at once when it
// finds it. Evidence is what only a live kernel with nothing listening
// answers: connections refused (a TCP RST), never a timeout, which a slow
// or partitioned leader causes as well. doc.go ("Leadership") says why
// acting on it is safe.
//
// When to look. A follower that can reach the leader holds one idle TCP
// connection to it (Election.LeaderAddress), and looks when that
// connection ends: the leader's kernel closes it the moment the process
// dies, so the look comes at once and costs nothing while the leader
// lives. Asking every deadLeaderProbe instead meant five connections a
// second from every follower, each a TLS handshake begun on the leader:
// the largest part of an idle follower's CPU that was Polis's own. The
// connection can also end for a live leader (its server gives up on a
// handshake that never comes, after minutes); the look then finds no
// evidence, and the follower connects again. While no connection can be
// held (the leader unreachable, or nothing listening but the process
// maybe alive), the follower looks every deadLeaderProbe, as it does
// without a LeaderAddress.

// deadLeaderProbe is how often a follower looks for evidence that the
// leader's process is gone while it holds no connection to the leader.
const deadLeaderProbe = 200 * time.Millisecond

// probeTimeout bounds one probe. A dial that takes longer is no evidence
// of anything (a slow or unreachable leader), and the next probe comes.
const probeTimeout = time.Second

// refusesConnections reports whether addr (IP:port) refuses a TCP
// connection now: a live kernel answered that nothing listens there. A
// connection made, a timeout, an unreachable network or any other error
// is not a refusal.
func refusesConnections(ctx context.Context, addr string) bool {
	d := net.Dialer{Timeout: probeTimeout}
	c, err := d.DialContext(ctx, "tcp", addr)
	if err == nil {
		c.Close()
		return false
	}
	return errors.Is(err, syscall.ECONNREFUSED)
}

// watchLeaderGone runs beside a candidacy: while another curator leads, it
// revokes that leader's election lease as soon as LeaderGone finds its
// process gone. Revoking deletes the leader's key, so the oldest
// remaining candidate leads at once.
func (e *Election) watchLeaderGone(ctx context.Context) error {
	if e.LeaderGone == nil {
		supervisor.Signal(ctx, supervisor.SignalHealthy)
		supervisor.Signal(ctx, supervisor.SignalDone)
		return nil
	}
	// A change of the leadership (who leads, under which lease) wakes
	// every wait below; the fields are read under mu, the watcher only
	// says that they changed. The first pass comes with the first status
	// (the watcher has not returned it yet); the timer only paces the
	// looks while no connection is held.
	changes := e.status.Watch()
	defer changes.Close()
	supervisor.Signal(ctx, supervisor.SignalHealthy)
	probe := time.NewTimer(deadLeaderProbe)
	probe.Stop()
	defer probe.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-changes.Ready():
			if _, err := changes.Get(ctx); err != nil {
				return err
			}
		case <-probe.C:
		}
		e.mu.Lock()
		leading, leader, lease := e.leading != nil, e.leader, e.leaderLease
		e.mu.Unlock()
		if leading || leader == nil || lease == clientv3.NoLease {
			continue // until the leadership changes
		}
		if e.deposeIfGone(ctx, leader, lease) {
			probe.Reset(deadLeaderProbe) // until the key's deletion is seen
			continue
		}
		if e.LeaderAddress != nil {
			held := time.Now()
			if holdConnection(ctx, e.LeaderAddress(leader), changes.Ready()) {
				// It ended: look now, unless it ended as soon as it
				// was made (a server that takes connections and drops
				// them), which would otherwise be a busy loop.
				probe.Reset(max(0, deadLeaderProbe-time.Since(held)))
				continue
			}
		}
		// Not held, or the leadership changed while it was.
		probe.Reset(deadLeaderProbe)
	}
}

// deposeIfGone asks LeaderGone about leader and, on evidence, revokes its
// lease; it reports whether it found evidence.
func (e *Election) deposeIfGone(ctx context.Context, leader []byte, lease clientv3.LeaseID) bool {
	pctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	gone, why := e.LeaderGone(pctx, leader)
	if !gone {
		return false
	}
	_, err := e.Client.Revoke(pctx, lease)
	switch {
	case err == nil:
		supervisor.Logger(ctx).Info("the leader's process is gone: revoked its election lease", zap.String("evidence", why), zap.Int64("lease", int64(lease)))
	case errors.Is(err, rpctypes.ErrLeaseNotFound):
		// Another follower, or the lease's expiry, was first.
	default:
		supervisor.Logger(ctx).Warn("the leader's process is gone, but revoking its election lease failed; trying again", zap.String("evidence", why), zap.Error(err))
	}
	return true
}

// heldKeepAlive has the kernel ask, every second the held connection is
// idle, whether the other end still has it: a leader's machine that
// rebooted answers with a reset, and one that is gone answers nothing,
// which ends the connection after three unanswered probes. Without it
// (Go's default waits 15 s between probes, nine times) a follower could
// hold a connection to a kernel that no longer knows it for minutes,
// and look for nothing meanwhile. The probes are the kernels' alone, a
// few bytes each, no TLS.
var heldKeepAlive = net.KeepAliveConfig{Enable: true, Idle: time.Second, Interval: time.Second, Count: 3}

// holdConnection connects to addr and holds the connection, reading and
// dropping whatever comes, until it ends (closed by the other side, or
// broken: true) or until changed is ready or ctx ends (false). It returns
// false at once when no connection can be made. Nothing is sent: to the
// curator's TLS server it is a client that has not said hello yet.
func holdConnection(ctx context.Context, addr string, changed <-chan struct{}) (ended bool) {
	d := net.Dialer{Timeout: probeTimeout, KeepAliveConfig: heldKeepAlive}
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return false
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		io.Copy(io.Discard, c) //nolint:errcheck // any end is the answer
	}()
	select {
	case <-done:
		ended = true
	case <-changed:
	case <-ctx.Done():
	}
	c.Close()
	<-done
	return ended
}

// leaderGone is the curator's Election.LeaderGone: the leader's curator
// endpoint and every peer address of its node's consensus member (named by
// the node's ID) refuse connections. Both are served by the leader node's
// one process, so both refusing means that process is gone; a member that
// cannot be found, or any answer other than a refusal, is no evidence.
func (s *Service) leaderGone(ctx context.Context, leader []byte) (bool, string) {
	var ep cpb.CuratorEndpoint
	if err := proto.Unmarshal(leader, &ep); err != nil {
		return false, ""
	}
	curatorAddr := ep.HostPort()
	if !refusesConnections(ctx, curatorAddr) {
		return false, ""
	}
	if s.cfg.Consensus == nil {
		return false, ""
	}
	st, err := event.Get(ctx, s.cfg.Consensus, event.Filter(consensus.IsVoter))
	if err != nil {
		return false, ""
	}
	members, err := st.Members(ctx)
	if err != nil {
		return false, ""
	}
	for _, m := range members {
		if m.Name != ep.GetNodeId() {
			continue
		}
		if m.Address == "" || !refusesConnections(ctx, m.Address) {
			return false, ""
		}
		return true, fmt.Sprintf("curator %s and consensus member %s refuse connections", curatorAddr, m.Address)
	}
	return false, ""
}

// curatorAddress is the curator's Election.LeaderAddress: the leader's
// curator endpoint (IP:port) from its Candidate value.
func curatorAddress(leader []byte) string {
	var ep cpb.CuratorEndpoint
	if err := proto.Unmarshal(leader, &ep); err != nil {
		return ""
	}
	return ep.HostPort()
}
