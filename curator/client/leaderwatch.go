package client

import (
	"context"
	"net/netip"
	"slices"
	"time"

	"go.uber.org/zap"

	cpb "github.com/polis-os/polis/api/curator/v1"
)

// Learning of a new leader as soon as it is elected.
//
// Discovery rounds run when a call fails; on their own, they would find a
// new leader only by asking again and again while the election runs (a
// dead leader keeps its lease, and every curator keeps naming it, until
// the lease runs out). So each connection also keeps one WatchLeader
// stream open, on a curator other than the leader when there is one (a
// follower's stream outlives the leader it names), and hands every leader
// the stream names that the connection does not follow to the discovery
// loop as a hint: the next round asks that curator first and follows it
// if it says it leads. A stale curator's hint costs one GetLeader and
// moves nothing, since the curator asked answers for itself.

// watchLeader keeps a WatchLeader stream open until ctx ends, moving to
// another curator when one ends.
func (lr *leaderResolver) watchLeader(ctx context.Context) {
	b := newRoundBackoff()
	for turn := 0; ctx.Err() == nil; turn++ {
		if ep := lr.watchTarget(turn); ep != nil {
			delivered, err := lr.watchOne(ctx, ep)
			if ctx.Err() != nil {
				return
			}
			if delivered {
				// The curator was alive: a stream that ends after
				// it served is a curator that stopped, and the next
				// one is tried at once.
				b.Reset()
			}
			lr.r.log.Debug("leader watch ended", zap.Stringer("curator", addrPort(ep)), zap.Error(err))
		}
		// Paces the attempts while no curator answers.
		t := time.NewTimer(b.NextBackOff())
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// watchTarget is the curator to watch on this turn: the known curators
// but the leader followed, in turn; the leader only if it is the only one.
func (lr *leaderResolver) watchTarget(turn int) *cpb.CuratorEndpoint {
	lr.mu.Lock()
	all := slices.Concat(lr.r.cfg.Endpoints, lr.directory)
	leader := lr.leader
	lr.mu.Unlock()
	seen := map[netip.AddrPort]bool{}
	var eps []*cpb.CuratorEndpoint
	for _, ep := range all {
		if validEndpoint(ep) != nil || seen[addrPort(ep)] {
			continue
		}
		seen[addrPort(ep)] = true
		if leader == nil || addrPort(ep) != addrPort(leader) {
			eps = append(eps, ep)
		}
	}
	if len(eps) == 0 {
		return leader
	}
	return eps[turn%len(eps)]
}

// watchOne holds a WatchLeader stream on ep until it ends, and reports
// whether it delivered anything.
func (lr *leaderResolver) watchOne(ctx context.Context, ep *cpb.CuratorEndpoint) (bool, error) {
	conn, err := lr.probe(addrPort(ep))
	if err != nil {
		return false, err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	s, err := cpb.NewCuratorServiceClient(conn).WatchLeader(ctx, &cpb.WatchLeaderRequest{})
	if err != nil {
		return false, err
	}
	delivered := false
	for {
		resp, err := s.Recv()
		if err != nil {
			return delivered, err
		}
		delivered = true
		lr.hint(resp.Leader)
	}
}

// hint hands loop a leader to check, unless it is the one followed. Only
// the newest hint is kept.
func (lr *leaderResolver) hint(leader *cpb.CuratorEndpoint) {
	if validEndpoint(leader) != nil {
		// No leader (an election is under way), or one that cannot be
		// dialled.
		return
	}
	lr.mu.Lock()
	followed := lr.leader
	lr.mu.Unlock()
	if sameEndpoint(leader, followed) {
		return
	}
	select {
	case <-lr.hints:
	default:
	}
	select {
	case lr.hints <- leader:
	default:
	}
}
