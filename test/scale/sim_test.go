package scale

import (
	"context"
	"crypto/ed25519"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	cpb "github.com/polis-os/polis/api/curator/v1"
	"github.com/polis-os/polis/identity"
)

// simNode is one simulated node: a key, a node certificate, and the calls
// a real node makes, over its own connection to one curator at a time.
type simNode struct {
	id   string
	key  ed25519.PrivateKey
	tls  *tls.Config
	home atomic.Int32 // the curator it talks to, an index into fleet.curators

	// worker is whether the node holds KubernetesWorker, as its own
	// Watch last said; roleSeen gets the time each change arrived.
	worker   atomic.Bool
	roleSeen chan time.Time
}

// fleet is every simulated node and what they measure together.
type fleet struct {
	curators []netip.AddrPort
	// dead marks curators that were killed: nodes move off them.
	dead  []atomic.Bool
	nodes []*simNode

	mu sync.Mutex
	// beats is every heartbeat's latency, with when it was sent and to
	// which curator.
	beats []beat
	// beatErrs is when each failed heartbeat was sent.
	beatErrs []time.Time
	// ready counts nodes whose two watches have their initial state, on
	// their current connection.
	ready atomic.Int64
	// moves counts reconnections to another curator.
	moves atomic.Int64
	// ended counts why sessions ended, by error message; guarded by mu.
	ended map[string]int

	// directoryMsgs counts the directories received after the initial
	// ones: a directory goes out only when a curator changes.
	directoryMsgs atomic.Int64
	// interval is the heartbeat interval the nodes start with, before
	// the curator names one.
	interval time.Duration
	// killedAt is when a curator was killed (Unix nanoseconds, 0 before);
	// survivorEnded counts the sessions on other curators that ended
	// after it: streams a leader change ended.
	killedAt      atomic.Int64
	survivorEnded atomic.Int64
}

type beat struct {
	at      time.Time
	took    time.Duration
	curator int
}

func newSimNode(key ed25519.PrivateKey, cert *x509.Certificate, v *identity.Verifier) (*simNode, error) {
	tc, err := identity.TLSCertificate(cert, key)
	if err != nil {
		return nil, err
	}
	cfg, err := identity.NodeClientConfig(v, tc)
	if err != nil {
		return nil, err
	}
	return &simNode{id: identity.NodeID(key.Public().(ed25519.PublicKey)), key: key, tls: cfg, roleSeen: make(chan time.Time, 16)}, nil
}

// run keeps the node connected until ctx ends: on its own curator while
// that lives (a broken session is retried there, as a balancing client
// keeps its spread), on the next live one once it is killed.
func (f *fleet) run(ctx context.Context, n *simNode) {
	for ctx.Err() == nil {
		home := int(n.home.Load())
		err := f.session(ctx, n, home)
		if ctx.Err() != nil {
			return
		}
		f.sessionEnded(err)
		if !f.dead[home].Load() && f.killedAt.Load() != 0 {
			f.survivorEnded.Add(1)
		}
		if !f.dead[home].Load() {
			select {
			case <-ctx.Done():
			case <-time.After(100 * time.Millisecond): // a retry's pause, not synchronisation
			}
			continue
		}
		for i := 1; i < len(f.curators); i++ {
			if c := (home + i) % len(f.curators); !f.dead[c].Load() {
				n.home.Store(int32(c))
				f.moves.Add(1)
				break
			}
		}
	}
}

// sessionEnded counts why a session ended.
func (f *fleet) sessionEnded(err error) {
	msg := "ended"
	if err != nil {
		msg = err.Error()
		if len(msg) > 120 {
			msg = msg[:120]
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.ended == nil {
		f.ended = map[string]int{}
	}
	f.ended[msg]++
}

// session is one connection's life: heartbeats and the two streams (the
// node's own record, the cluster directory), until
// one of them fails (or ctx ends).
func (f *fleet) session(ctx context.Context, n *simNode, curator int) error {
	conn, err := grpc.NewClient(f.curators[curator].String(), grpc.WithTransportCredentials(credentials.NewTLS(n.tls)))
	if err != nil {
		return err
	}
	defer conn.Close()
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	cur := cpb.NewCuratorServiceClient(conn)
	var wg sync.WaitGroup
	var initial atomic.Int32
	counted := false
	markReady := func() {
		if initial.Add(1) == 2 {
			f.ready.Add(1)
			counted = true
		}
	}
	wg.Add(3)
	go func() {
		defer wg.Done()
		f.heartbeat(ctx, cur, curator)
	}()
	go func() {
		defer wg.Done()
		cancel(f.watchSelf(ctx, n, cur, markReady))
	}()
	go func() {
		defer wg.Done()
		cancel(f.watchDirectory(ctx, cur, markReady))
	}()
	wg.Wait()
	if counted {
		f.ready.Add(-1)
	}
	return context.Cause(ctx)
}

// heartbeat beats until ctx ends. A failed heartbeat is counted and
// retried after a pause, on the same connection, as the node's heartbeat
// worker does: it does not end the session (the watches say when the
// curator is gone).
func (f *fleet) heartbeat(ctx context.Context, cur cpb.CuratorServiceClient, curator int) {
	// Real nodes start at unrelated moments: spread the first beats over
	// an interval, then keep the pace the curator names.
	wait := time.Duration(rand.Int64N(int64(f.interval)))
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		start := time.Now()
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		resp, err := cur.Heartbeat(cctx, &cpb.HeartbeatRequest{})
		cancel()
		took := time.Since(start)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			f.mu.Lock()
			f.beatErrs = append(f.beatErrs, start)
			f.mu.Unlock()
			wait = time.Second
			continue
		}
		f.mu.Lock()
		f.beats = append(f.beats, beat{at: start, took: took, curator: curator})
		f.mu.Unlock()
		wait = resp.GetInterval().AsDuration() - took
	}
}

func (f *fleet) watchSelf(ctx context.Context, n *simNode, cur cpb.CuratorServiceClient, ready func()) error {
	s, err := cur.Watch(ctx, &cpb.WatchRequest{Target: &cpb.WatchRequest_NodeId{NodeId: n.id}})
	if err != nil {
		return err
	}
	for {
		m, err := s.Recv()
		if err != nil {
			return fmt.Errorf("own watch: %w", err)
		}
		now := time.Now()
		for _, rec := range m.Nodes {
			if rec.Id != n.id {
				continue
			}
			w := rec.GetRoles().GetKubernetesWorker() != nil
			if n.worker.Swap(w) != w {
				select {
				case n.roleSeen <- now:
				default:
				}
			}
		}
		if m.InitialStateComplete {
			ready()
		}
	}
}

// watchDirectory holds the stream a real node's clusterdirectory worker
// holds, counting the directories that arrive after the first.
func (f *fleet) watchDirectory(ctx context.Context, cur cpb.CuratorServiceClient, ready func()) error {
	s, err := cur.WatchClusterDirectory(ctx, &cpb.WatchClusterDirectoryRequest{})
	if err != nil {
		return err
	}
	for first := true; ; first = false {
		if _, err := s.Recv(); err != nil {
			return fmt.Errorf("directory watch: %w", err)
		}
		if first {
			ready()
		} else {
			f.directoryMsgs.Add(1)
		}
	}
}

// beatsBetween returns the latencies of the heartbeats sent in [from, to),
// in all and per curator.
func (f *fleet) beatsBetween(from, to time.Time) (all []time.Duration, per map[int]int, failed int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, at := range f.beatErrs {
		if !at.Before(from) && at.Before(to) {
			failed++
		}
	}
	per = map[int]int{}
	for _, b := range f.beats {
		if !b.at.Before(from) && b.at.Before(to) {
			all = append(all, b.took)
			per[b.curator]++
		}
	}
	return all, per, failed
}
