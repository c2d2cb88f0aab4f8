package curator

import (
	"context"
	"errors"
	"fmt"
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
// looks, every deadLeaderProbe, for evidence that the leader's process is
// gone (Election.LeaderGone), and revokes the leader's lease at once when
// it finds it. Evidence is what only a live kernel with nothing listening
// answers: connections refused (a TCP RST), never a timeout, which a slow
// or partitioned leader causes as well. doc.go ("Leadership") says why
// acting on it is safe.

// deadLeaderProbe is how often a follower looks for evidence that the
// leader's process is gone. A probe costs a refused connection or, while
// the leader lives, one TCP handshake.
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
	supervisor.Signal(ctx, supervisor.SignalHealthy)
	tick := time.NewTicker(deadLeaderProbe)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
		e.mu.Lock()
		leading, leader, lease := e.leading != nil, e.leader, e.leaderLease
		e.mu.Unlock()
		if leading || leader == nil || lease == clientv3.NoLease {
			continue
		}
		pctx, cancel := context.WithTimeout(ctx, probeTimeout)
		gone, why := e.LeaderGone(pctx, leader)
		if gone {
			_, err := e.Client.Revoke(pctx, lease)
			switch {
			case err == nil:
				supervisor.Logger(ctx).Info("the leader's process is gone: revoked its election lease", zap.String("evidence", why), zap.Int64("lease", int64(lease)))
			case errors.Is(err, rpctypes.ErrLeaseNotFound):
				// Another follower, or the lease's expiry, was first.
			default:
				supervisor.Logger(ctx).Warn("the leader's process is gone, but revoking its election lease failed; trying again", zap.String("evidence", why), zap.Error(err))
			}
		}
		cancel()
	}
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
	curatorAddr := net.JoinHostPort(ep.GetAddress(), fmt.Sprint(ep.GetPort()))
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
