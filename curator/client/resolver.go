package client

import (
	"context"
	"errors"
	"net/netip"
	"slices"
	"sync"
	"time"

	"github.com/cenkalti/backoff/v5"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	grpcbackoff "google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/resolver"

	cpb "github.com/polis-os/polis/api/curator/v1"
	"github.com/polis-os/polis/event"
	"github.com/polis-os/polis/event/memory"
)

// scheme is the target scheme of the connections New makes. The builder is
// handed to each connection (grpc.WithResolvers) and never registered
// globally, so two connections with different curators cannot mix.
const scheme = "polis-curator"

// probeTimeout bounds one GetLeader call during discovery, so that a
// curator whose address swallows packets delays a round by this much, not
// by the caller's whole deadline.
const probeTimeout = 2 * time.Second

// quietReset is how long without a discovery round makes the next round's
// backoff start from scratch: a leader change an hour after the previous one
// is a new incident.
const quietReset = 5 * time.Second

// connectParams make reconnection faster than gRPC's default (a one second
// first backoff): the curators are few and close, and a leader that comes
// back after a restart should be used again at once.
var connectParams = grpc.ConnectParams{
	Backoff: grpcbackoff.Config{
		BaseDelay:  100 * time.Millisecond,
		Multiplier: 1.6,
		Jitter:     0.2,
		MaxDelay:   5 * time.Second,
	},
	MinConnectTimeout: 5 * time.Second,
}

// resolution is the outcome of one discovery round.
type resolution struct {
	// gen numbers the rounds of one connection, so that a failed call can
	// wait for a round that ended after it failed.
	gen uint64
	// leader is whom the round found leading, nil if it found nobody.
	leader *cpb.CuratorEndpoint
	err    error
	// unreachable is set when the round reached no curator at all: every
	// one asked refused the connection or failed its handshake.
	unreachable bool
}

// router is what a connection's resolver and its interceptors share. The
// resolver itself may be closed and rebuilt by gRPC (when the connection
// goes idle and wakes up), the router lives as long as the connection.
type router struct {
	cfg   Config
	log   *zap.Logger
	creds credentials.TransportCredentials

	// resolutions is the newest discovery round's outcome; unset before
	// the first round.
	resolutions memory.Value[*resolution]
	// distort, in tests only, replaces the answers discovery gets, to
	// play a curator with a stale view of the leadership.
	distort func(*cpb.GetLeaderResponse) *cpb.GetLeaderResponse

	mu     sync.Mutex
	gen    uint64
	active *leaderResolver
	// roundErr is the newest discovery round's error (nil if it found a
	// leader), for a call whose context ends before any attempt failed.
	roundErr error
}

// generation is the number of the newest discovery round, 0 before any.
func (r *router) generation() uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.gen
}

func (r *router) publish(leader *cpb.CuratorEndpoint, err error, unreachable bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.gen++
	r.roundErr = err
	r.resolutions.Set(&resolution{gen: r.gen, leader: leader, err: err, unreachable: unreachable})
}

// lastRoundError is the newest discovery round's error; nil before any
// round or when it found a leader.
func (r *router) lastRoundError() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.roundErr
}

// kick asks for a discovery round without waiting for it.
func (r *router) kick() {
	r.mu.Lock()
	a := r.active
	r.mu.Unlock()
	if a != nil {
		a.ResolveNow(resolver.ResolveNowOptions{})
	}
}

// refresh asks for a discovery round, waits until a round newer than
// seen has ended, and returns that round's outcome: whatever the connection routes to then is what the
// newest knowledge of the leadership says.
func (r *router) refresh(ctx context.Context, seen uint64) (*resolution, error) {
	r.kick()
	return event.Get(ctx, &r.resolutions, event.Filter(func(res *resolution) bool { return res.gen > seen }))
}

// Scheme implements resolver.Builder.
func (r *router) Scheme() string { return scheme }

// Build implements resolver.Builder. gRPC builds the resolver when the
// connection first leaves idleness; the first discovery round starts at
// once.
func (r *router) Build(_ resolver.Target, cc resolver.ClientConn, _ resolver.BuildOptions) (resolver.Resolver, error) {
	ctx, cancel := context.WithCancel(context.Background())
	lr := &leaderResolver{
		r:      r,
		cc:     cc,
		cancel: cancel,
		kicks:  make(chan struct{}, 1),
		hints:  make(chan *cpb.CuratorEndpoint, 1),
		probes: map[netip.AddrPort]*grpc.ClientConn{},
		down:   map[netip.AddrPort]bool{},
	}
	lr.kicks <- struct{}{}
	r.mu.Lock()
	r.active = lr
	r.mu.Unlock()
	// The configured curators serve SERVE_ANY calls before any leader is
	// known.
	lr.publishState()
	lr.wg.Add(2)
	go func() {
		defer lr.wg.Done()
		lr.loop(ctx)
	}()
	go func() {
		defer lr.wg.Done()
		lr.watchLeader(ctx)
	}()
	if r.cfg.Directory != nil {
		lr.wg.Add(1)
		go func() {
			defer lr.wg.Done()
			lr.watchDirectory(ctx)
		}()
	}
	return lr, nil
}

// leaderResolver finds the leader and points the connection at it. It runs
// discovery rounds one at a time, each when asked (by gRPC when the
// connection to the leader breaks, by the interceptors when a curator
// answers UNAVAILABLE, by a directory change while no leader is known);
// requests that arrive during a round are served by one more round.
type leaderResolver struct {
	r      *router
	cc     resolver.ClientConn
	cancel context.CancelFunc
	wg     sync.WaitGroup
	// kicks holds at most one pending request for a round.
	kicks chan struct{}
	// hints holds the newest leader a WatchLeader stream named that the
	// connection does not follow (watchLeader).
	hints chan *cpb.CuratorEndpoint

	// Which lock guards what. None is held across a call to a curator or
	// to gRPC but stateMu (held across publishState's UpdateState), and
	// mu, held alone and briefly, is taken inside stateMu, never the other
	// way round:
	//   - mu: directory, known and leader (written by watchDirectory and
	//     loop, read by publishState and watchLeader);
	//   - stateMu: the order of connection state updates (publishState,
	//     from loop and watchDirectory), so that an older list never
	//     overwrites a newer one at gRPC;
	//   - probeMu: probes (discovery, watchLeader and Close);
	//   - router.mu (r.mu): the router's round number and active
	//     resolver;
	//   - none: down and next, loop's alone (discovery.go runs in loop).
	mu sync.Mutex
	// directory is the newest list from Config.Directory.
	directory []*cpb.CuratorEndpoint
	// known is set while the connection follows a leader (leader is set).
	known bool
	// leader is the leader the connection follows, nil while none; written
	// by loop only.
	leader *cpb.CuratorEndpoint

	// stateMu orders the connection state updates of loop and
	// watchDirectory.
	stateMu sync.Mutex

	probeMu sync.Mutex
	probes  map[netip.AddrPort]*grpc.ClientConn

	// Owned by loop.
	// down are the curators whose latest probe got no answer: they are
	// asked last (the leader followed too), and a follower naming one as
	// the leader is not believed until it answers again.
	down map[netip.AddrPort]bool
	// next rotates the endpoint asked first, so that a dead or stale
	// curator is not always asked first.
	next int
}

// ResolveNow implements resolver.Resolver.
func (lr *leaderResolver) ResolveNow(resolver.ResolveNowOptions) {
	select {
	case lr.kicks <- struct{}{}:
	default: // A round is already pending.
	}
}

// Close implements resolver.Resolver. It returns once the resolver's
// goroutines have ended and its probe connections are closed.
func (lr *leaderResolver) Close() {
	lr.cancel()
	lr.wg.Wait()
	lr.r.mu.Lock()
	if lr.r.active == lr {
		lr.r.active = nil
	}
	lr.r.mu.Unlock()
	lr.probeMu.Lock()
	for _, c := range lr.probes {
		c.Close()
	}
	lr.probes = nil
	lr.probeMu.Unlock()
	// Calls waiting for a round try again now: on a closed connection
	// they fail at once instead of waiting for their deadline, on an idle
	// one they wake it, and a new resolver.
	lr.r.publish(nil, errors.New("the connection is closing or going idle"), false)
}

func (lr *leaderResolver) watchDirectory(ctx context.Context) {
	w := lr.r.cfg.Directory.Watch()
	defer w.Close()
	for {
		eps, err := w.Get(ctx)
		if err != nil {
			// Only Close ends the context; a closed directory leaves
			// the last list in use.
			return
		}
		lr.mu.Lock()
		lr.directory = eps
		known := lr.known
		lr.mu.Unlock()
		// Calls any curator serves spread over the new list at once.
		lr.publishState()
		// For the leader, a new list matters only while no leader is
		// known: it may lead somewhere the old one did not. While a
		// leader is followed, the connection to it says when it fails
		// (gRPC and the interceptors then ask for a round), and a list
		// change is no reason to ask anyone.
		if !known {
			lr.ResolveNow(resolver.ResolveNowOptions{})
		}
	}
}

// newRoundBackoff spaces out discovery rounds, and leader watches, that
// follow each other without news: 25ms growing to one second.
func newRoundBackoff() *backoff.ExponentialBackOff {
	b := &backoff.ExponentialBackOff{
		InitialInterval:     25 * time.Millisecond,
		RandomizationFactor: 0.2,
		Multiplier:          1.6,
		MaxInterval:         time.Second,
	}
	b.Reset()
	return b
}

func (lr *leaderResolver) loop(ctx context.Context) {
	b := newRoundBackoff()
	var last time.Time
	var wait time.Duration
	for {
		var hint *cpb.CuratorEndpoint
		select {
		case <-ctx.Done():
			return
		case <-lr.kicks:
		case hint = <-lr.hints:
		}
		if since := time.Since(last); since > quietReset {
			b.Reset()
		} else if since < wait && hint == nil {
			// Rounds asked for in quick succession that keep finding
			// nobody, or the same leader, are spaced out: the leader
			// they name is failing or has not yet been replaced.
			t := time.NewTimer(wait - since)
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
		}
		// Requests made while waiting are answered by this round.
		select {
		case <-lr.kicks:
		default:
		}

		leader, refused, err := lr.discover(ctx, hint)
		last = time.Now()
		if ctx.Err() != nil {
			return
		}
		switch {
		case err != nil:
			wait = b.NextBackOff()
			lr.r.log.Warn("no curator leader found", zap.Error(err), zap.Duration("next_round_after", wait))
			if lr.leader != nil && lr.down[addrPort(lr.leader)] {
				// The leader followed does not answer and nobody
				// names another: stop routing to it, so that its
				// calls fail at once and wait for the next round
				// (a WatchLeader stream names the next leader as
				// soon as it is elected) instead of asking it first
				// every round.
				lr.forget()
			}
		case sameEndpoint(leader, lr.leader):
			wait = b.NextBackOff()
		default:
			b.Reset()
			wait = 0
			lr.follow(leader)
		}
		lr.r.publish(leader, err, refused)
	}
}

// follow points the connection's leader calls at leader.
func (lr *leaderResolver) follow(leader *cpb.CuratorEndpoint) {
	lr.r.log.Info("following the curator leader", zap.String("node", leader.NodeId), zap.Stringer("address", addrPort(leader)))
	lr.mu.Lock()
	lr.leader = leader
	lr.known = true
	lr.mu.Unlock()
	lr.publishState()
}

// forget stops routing leader calls to the leader followed so far.
func (lr *leaderResolver) forget() {
	lr.r.log.Info("the curator leader does not answer; waiting for the next", zap.String("node", lr.leader.NodeId), zap.Stringer("address", addrPort(lr.leader)))
	lr.mu.Lock()
	lr.leader = nil
	lr.known = false
	lr.mu.Unlock()
	lr.publishState()
}

// publishState gives the connection every known curator, the leader
// marked (see balancer.go).
func (lr *leaderResolver) publishState() {
	lr.stateMu.Lock()
	defer lr.stateMu.Unlock()
	lr.mu.Lock()
	all := slices.Concat(lr.r.cfg.Endpoints, lr.directory)
	leader := lr.leader
	lr.mu.Unlock()
	if leader != nil {
		all = append([]*cpb.CuratorEndpoint{leader}, all...)
	}
	var eps []resolver.Endpoint
	seen := map[netip.AddrPort]int{}
	for _, ep := range all {
		if validEndpoint(ep) != nil {
			continue
		}
		ap := addrPort(ep)
		if i, ok := seen[ap]; ok {
			// The same curator listed twice: keep the name one of
			// the listings gives it.
			if eps[i].Addresses[0].ServerName == ep.Address && ep.NodeId != "" {
				eps[i].Addresses[0].ServerName = ep.NodeId
			}
			continue
		}
		seen[ap] = len(eps)
		addr := resolver.Address{
			Addr: ap.String(),
			// The connection's target names no host, so the TLS name
			// must come with each address: the node ID, which every
			// curator certificate carries as a DNS name, or else the
			// IP address, which it carries too.
			ServerName: ep.NodeId,
		}
		if addr.ServerName == "" {
			addr.ServerName = ep.Address
		}
		e := resolver.Endpoint{Addresses: []resolver.Address{addr}}
		if leader != nil && ap == addrPort(leader) {
			e.Attributes = e.Attributes.WithValue(leaderAttr{}, true)
		}
		eps = append(eps, e)
	}
	if len(eps) == 0 {
		// Calls fail at once and the interceptors retry them once a
		// curator is known, instead of waiting for their deadline.
		lr.cc.ReportError(errors.New("no curator endpoints are known"))
		return
	}
	if err := lr.cc.UpdateState(resolver.State{Endpoints: eps}); err != nil {
		// The balancer accepts any non-empty list; an error here means
		// the connection is closing.
		lr.r.log.Debug("updating the connection's curators", zap.Error(err))
	}
}
