package client

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"

	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	cpb "github.com/polis-os/polis/api/curator/v1"
)

// Discovery: how a round finds the leader (discover), which curators it
// asks in which order (candidates), and the probe connections it asks on.
// It runs in the resolver's loop (resolver.go), which owns down and next.

// discover asks the known curators, one after the other, who leads, and
// returns the first answer that names a valid leader. The current leader,
// if any, is asked first: while it answers that it leads, it is the
// authority on its own leadership, and no other curator's view (which may
// lag behind) can move the connection off it. If it names another leader
// (it handed the leadership over), that answer is taken too.
//
// hint, if set, is a leader a WatchLeader stream named: it is asked first
// instead, and taken if it says it leads. refused reports a round in which
// every curator asked refused the connection (see ask).
func (lr *leaderResolver) discover(ctx context.Context, hint *cpb.CuratorEndpoint) (_ *cpb.CuratorEndpoint, refused bool, _ error) {
	eps := lr.candidates(hint)
	lr.pruneProbes(eps)
	if len(eps) == 0 {
		return nil, false, errors.New("no curator endpoints are known")
	}
	var errs []error
	refusals := 0
	for _, ep := range eps {
		ap := addrPort(ep)
		resp, answered, err := lr.ask(ctx, ap)
		if answered {
			delete(lr.down, ap)
		} else {
			lr.down[ap] = true
		}
		if err != nil {
			if lr.refusedConnection(ap, err) {
				refusals++
			}
			errs = append(errs, fmt.Errorf("asking %s: %w", ap, err))
			continue
		}
		if err := validEndpoint(resp.Leader); err != nil {
			errs = append(errs, fmt.Errorf("%s named an unusable leader: %w", ap, err))
			continue
		}
		if named := addrPort(resp.Leader); named != ap && lr.down[named] {
			// A dead leader stays named by the others until its
			// lease runs out.
			errs = append(errs, fmt.Errorf("%s named %s as the leader, which did not answer", ap, named))
			continue
		}
		return resp.Leader, false, nil
	}
	return nil, refusals == len(eps), errors.Join(errs...)
}

// refusedConnection says whether the probe of ap failed because no
// connection could be made at all (refused, or a failed handshake), which
// gRPC reports by putting the probe connection in TRANSIENT_FAILURE and
// failing the call at once; a curator that let the probe time out may
// only be slow, and is not counted.
func (lr *leaderResolver) refusedConnection(ap netip.AddrPort, err error) bool {
	if status.Code(err) != codes.Unavailable {
		return false
	}
	lr.probeMu.Lock()
	conn := lr.probes[ap]
	lr.probeMu.Unlock()
	return conn != nil && conn.GetState() == connectivity.TransientFailure
}

// probe returns the connection discovery and watchLeader ask ap on.
func (lr *leaderResolver) probe(ap netip.AddrPort) (*grpc.ClientConn, error) {
	lr.probeMu.Lock()
	defer lr.probeMu.Unlock()
	if lr.probes == nil {
		return nil, errors.New("the connection is closing")
	}
	conn, ok := lr.probes[ap]
	if !ok {
		var err error
		// The probe reaches the curator by IP, which its curator
		// certificate names, so the target's host is the TLS name.
		conn, err = grpc.NewClient("passthrough:///"+ap.String(),
			grpc.WithTransportCredentials(lr.r.creds),
			grpc.WithConnectParams(connectParams),
			grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: KeepaliveTime, Timeout: KeepaliveTimeout, PermitWithoutStream: true}),
			dialOption(lr.r.cfg.Dialer),
		)
		if err != nil {
			return nil, err
		}
		lr.probes[ap] = conn
	}
	return conn, nil
}

// ask asks the curator at ap who leads. answered reports whether the
// curator answered at all, even if only to say that it knows no leader (an
// election is under way): a curator that answers is alive, one whose
// connection failed or that let the probe time out is not.
func (lr *leaderResolver) ask(ctx context.Context, ap netip.AddrPort) (resp *cpb.GetLeaderResponse, answered bool, err error) {
	conn, err := lr.probe(ap)
	if err != nil {
		return nil, false, err
	}
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	// The peer is recorded only for a call that was sent on a
	// connection: a curator that answered with an error (an electing
	// one's "no leader is known") is up; one whose connection failed, or
	// that let the call time out, is not. (The connection's state cannot
	// tell: gRPC hands the call a ready connection before the state it
	// reports says READY.)
	var answeredBy peer.Peer
	resp, err = cpb.NewCuratorServiceClient(conn).GetLeader(ctx, &cpb.GetLeaderRequest{}, grpc.Peer(&answeredBy))
	if err == nil && lr.r.distort != nil {
		resp = lr.r.distort(resp)
	}
	answered = err == nil || (status.Code(err) != codes.DeadlineExceeded && answeredBy.Addr != nil)
	return resp, answered, err
}

// candidates are the curators to ask in this round: the current leader
// first (see discover), then the configured and directory endpoints,
// deduplicated and rotated by one each round, so that a dead or stale
// curator is not always asked first. A leader that failed costs one
// refused or timed-out probe before the others are asked.
//
// A hint goes first instead of the leader. Curators whose last probe
// failed, the leader among them, go last, so that a dead leader no longer
// costs every round a failed probe first.
func (lr *leaderResolver) candidates(hint *cpb.CuratorEndpoint) []*cpb.CuratorEndpoint {
	lr.mu.Lock()
	all := slices.Concat(lr.r.cfg.Endpoints, lr.directory)
	lr.mu.Unlock()
	first := lr.leader
	if hint != nil {
		first = hint
	} else if first != nil && lr.down[addrPort(first)] {
		first = nil
	}
	seen := map[netip.AddrPort]bool{}
	var eps []*cpb.CuratorEndpoint
	for _, ep := range all {
		if err := validEndpoint(ep); err != nil {
			lr.r.log.Debug("skipping a curator endpoint", zap.Error(err))
			continue
		}
		ap := addrPort(ep)
		if seen[ap] || (first != nil && ap == addrPort(first)) {
			continue
		}
		seen[ap] = true
		eps = append(eps, ep)
	}
	if len(eps) > 0 {
		n := lr.next % len(eps)
		eps = slices.Concat(eps[n:], eps[:n])
	}
	lr.next++
	// Those that did not answer last time go last.
	slices.SortStableFunc(eps, func(a, b *cpb.CuratorEndpoint) int {
		return cmp.Compare(b2i(lr.down[addrPort(a)]), b2i(lr.down[addrPort(b)]))
	})
	if first != nil {
		eps = append([]*cpb.CuratorEndpoint{first}, eps...)
	}
	return eps
}

// pruneProbes closes the probe connections of curators no longer known.
func (lr *leaderResolver) pruneProbes(eps []*cpb.CuratorEndpoint) {
	lr.probeMu.Lock()
	defer lr.probeMu.Unlock()
	for ap, c := range lr.probes {
		if !slices.ContainsFunc(eps, func(ep *cpb.CuratorEndpoint) bool { return addrPort(ep) == ap }) {
			c.Close()
			delete(lr.probes, ap)
		}
	}
}

func validEndpoint(ep *cpb.CuratorEndpoint) error {
	if ep == nil {
		return errors.New("no endpoint")
	}
	if _, err := netip.ParseAddr(ep.Address); err != nil {
		return fmt.Errorf("curator %q: address: %w", ep.NodeId, err)
	}
	if ep.Port == 0 || ep.Port > 65535 {
		return fmt.Errorf("curator %q: port %d out of range", ep.NodeId, ep.Port)
	}
	return nil
}

// addrPort is ep's address; ep must be valid.
func addrPort(ep *cpb.CuratorEndpoint) netip.AddrPort {
	return netip.AddrPortFrom(netip.MustParseAddr(ep.Address), uint16(ep.Port))
}

func sameEndpoint(a, b *cpb.CuratorEndpoint) bool {
	return a != nil && b != nil && a.NodeId == b.NodeId && addrPort(a) == addrPort(b)
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}
