package curator

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.uber.org/zap"

	"github.com/polis-os/polis/event"
	"github.com/polis-os/polis/event/memory"
	"github.com/polis-os/polis/supervisor"
)

// electionPrefix holds one key per candidate; the oldest one leads.
const electionPrefix = "election"

// DefaultLeaseTTL is how long a leader that stopped renewing its lease (a
// crash, a partition) keeps the leadership: the time to a new leader after a
// leader dies.
const DefaultLeaseTTL = 5 * time.Second

// ErrNotLeader is returned by a leader-guarded write when this curator no
// longer holds the leadership it was given: the write did not happen.
var ErrNotLeader = errors.New("curator: not the leader (leadership lost)")

// Election runs one curator's candidacy for leadership through etcd and
// publishes who leads. Every curator runs one; the winner keeps a lease
// alive, and loses the leadership when the lease expires or is revoked.
type Election struct {
	// Client reaches etcd, in the curator's namespace.
	Client *clientv3.Client
	// Candidate is what this curator publishes while it leads: who it is
	// and how to reach it. Followers read it from Status.
	Candidate []byte
	// LeaseTTL defaults to DefaultLeaseTTL. etcd counts it in whole seconds.
	LeaseTTL time.Duration
	// LeaderGone, if set, is asked while another curator leads whether
	// there is clear evidence that the process of leader (its Candidate
	// value) is gone; if so, this curator revokes that leader's lease
	// instead of waiting for it to expire (deadleader.go). It must answer
	// false on anything short of evidence: a timeout is none. why names
	// the evidence, for the log.
	LeaderGone func(ctx context.Context, leader []byte) (gone bool, why string)
	// LeaderAddress, if set, names an address (IP:port) the process of
	// leader listens on, so that a follower can hold a connection to it
	// and ask LeaderGone the moment that connection ends (deadleader.go);
	// without it LeaderGone is asked every deadLeaderProbe. "" if leader
	// names none.
	LeaderAddress func(leader []byte) string

	mu     sync.Mutex
	status memory.Value[*LeaderStatus]
	// resign asks the leading Run to hand the leadership over.
	resign chan struct{}
	// The two halves of the status, written by Run and by its observer.
	leading *Leadership
	leader  []byte
	// leaderLease is the lease of the leader's key, as observed.
	leaderLease clientv3.LeaseID
}

// LeaderStatus is a curator's view of the leadership.
type LeaderStatus struct {
	// Leading is set while this curator is the leader; its writes must go
	// through it.
	Leading *Leadership
	// Leader is the current leader's Candidate value (this curator's own
	// while it leads), nil while nobody leads.
	Leader []byte
}

// Leadership is proof of leadership at one point in etcd's history: the
// election key this curator created and its revision. A transaction guarded
// by it succeeds only while that key still exists, so a deposed leader can
// never overwrite its successor's state.
type Leadership struct {
	client *clientv3.Client
	key    string
	rev    int64
}

// Guard is the comparison that holds exactly while this leadership lasts.
func (l *Leadership) Guard() clientv3.Cmp {
	return clientv3.Compare(clientv3.CreateRevision(l.key), "=", l.rev)
}

// confirmTimeout bounds Confirm: a leader that cannot reach etcd that fast
// cannot serve anyway.
const confirmTimeout = 3 * time.Second

// Confirm checks with etcd (a linearizable round trip) that the leadership
// still holds; ErrNotLeader if it does not.
func (l *Leadership) Confirm(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, confirmTimeout)
	defer cancel()
	resp, err := l.client.Txn(ctx).If(l.Guard()).Commit()
	if err != nil {
		return fmt.Errorf("confirming leadership: %w", err)
	}
	if !resp.Succeeded {
		return ErrNotLeader
	}
	return nil
}

// Txn runs a transaction guarded by the leadership: if the leadership still
// holds and every cmp succeeds, then is applied, otherwise els. A lost
// leadership is ErrNotLeader whatever the other comparisons say. succeeded
// reports whether then was applied.
func (l *Leadership) Txn(ctx context.Context, cmps []clientv3.Cmp, then, els []clientv3.Op) (resp *clientv3.TxnResponse, succeeded bool, err error) {
	// The guard is checked in a nested transaction so that a failing cmp and
	// a lost leadership can be told apart in one round trip.
	inner := clientv3.OpTxn(cmps, then, els)
	resp, err = l.client.Txn(ctx).If(l.Guard()).Then(inner).Commit()
	if err != nil {
		return nil, false, fmt.Errorf("leader transaction: %w", err)
	}
	if !resp.Succeeded {
		return nil, false, ErrNotLeader
	}
	in := resp.Responses[0].GetResponseTxn()
	return (*clientv3.TxnResponse)(in), in.Succeeded, nil
}

func (e *Election) setCandidate(c []byte) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.Candidate = c
}

// Current is the leadership as this curator sees it now, without waiting;
// before Run has started, nobody is known to lead.
func (e *Election) Current() LeaderStatus {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.leading != nil {
		return LeaderStatus{Leading: e.leading, Leader: e.Candidate}
	}
	return LeaderStatus{Leader: e.leader}
}

// Status is the leadership as this curator sees it.
func (e *Election) Status() event.ValueWatch[*LeaderStatus] { return &e.status }

func (e *Election) publish(leading *Leadership, leader []byte) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.leading, e.leader = leading, leader
	if leader == nil {
		e.leaderLease = clientv3.NoLease
	}
	if leading != nil {
		leader = e.Candidate
	}
	e.status.Set(&LeaderStatus{Leading: leading, Leader: leader})
}

func (e *Election) setLeader(leader []byte, lease clientv3.LeaseID) {
	e.mu.Lock()
	leading := e.leading
	e.leaderLease = lease
	e.mu.Unlock()
	e.publish(leading, leader)
}

// resignTimeout bounds the revocation of the election lease when Run
// ends. Revoking is a courtesy (the lease expires by itself, and the next
// curator leads a lease later): on a working etcd it takes milliseconds,
// but a local member that stops too, before the revocation went through,
// would have the client retry against it for as long as it is allowed to.
// The node's control plane stops its member only after the curator
// (roleserve, memberusers.go), so that a planned reboot of the leader's
// node hands the leadership over at once.
const resignTimeout = time.Second

// Run campaigns until this curator leads, holds the leadership while its
// lease lives, and returns an error when it is lost, so that the supervisor
// starts a new candidacy. It resigns when ctx is cancelled, handing the
// leadership over at once instead of after the lease expires.
func (e *Election) Run(ctx context.Context) error {
	ttl := e.LeaseTTL
	if ttl == 0 {
		ttl = DefaultLeaseTTL
	}
	seconds := max(int(ttl/time.Second), 1)
	// The session outlives ctx by the time it takes to resign, so that a
	// cancelled curator can still revoke its lease.
	sessionCtx, cancelSession := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelSession()
	// A campaign cancelled while it waits deletes its key on its
	// client's own context (etcd's concurrency.Election.Campaign), which
	// for the node's client lasts as long as the local member. When the
	// cluster has lost its quorum (every node stopping at once), that
	// delete hangs until the member stops, and the member waits for this
	// curator to stop first (roleserve): the election's client therefore
	// ends with ctx; the lease's revocation below deletes the key anyway.
	// It shares e.Client's KV, watcher and lessor and is never closed,
	// which would close those.
	client := clientv3.NewCtxClient(ctx, clientv3.WithZapLogger(e.Client.GetLogger()))
	client.KV, client.Watcher, client.Lease = e.Client.KV, e.Client.Watcher, e.Client.Lease
	session, err := concurrency.NewSession(client, concurrency.WithTTL(seconds), concurrency.WithContext(sessionCtx))
	if err != nil {
		return fmt.Errorf("creating election session: %w", err)
	}
	defer func() {
		// Revoking the lease deletes our key: followers see a new leader
		// immediately rather than after the TTL.
		closeCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), min(ttl, resignTimeout))
		defer cancel()
		if _, err := e.Client.Revoke(closeCtx, session.Lease()); err != nil {
			supervisor.Logger(ctx).Warn("revoking the election lease failed; it will expire", zap.Error(err))
		}
		session.Orphan()
	}()
	election := concurrency.NewElection(session, electionPrefix)
	e.publish(nil, nil)

	if err := supervisor.Run(ctx, "observer", func(ctx context.Context) error {
		supervisor.Signal(ctx, supervisor.SignalHealthy)
		return e.observe(ctx, election)
	}); err != nil {
		return err
	}
	if err := supervisor.Run(ctx, "leader-gone", e.watchLeaderGone); err != nil {
		return err
	}
	supervisor.Signal(ctx, supervisor.SignalHealthy)

	if err := election.Campaign(ctx, string(e.Candidate)); err != nil {
		return fmt.Errorf("campaigning: %w", err)
	}
	// A request to resign made during an earlier term is not for this one.
	select {
	case <-e.resignChan():
	default:
	}
	leadership := &Leadership{client: e.Client, key: election.Key(), rev: election.Rev()}
	supervisor.Logger(ctx).Info("leading", zap.String("key", election.Key()), zap.Int64("revision", election.Rev()))
	e.publish(leadership, nil)
	defer e.publish(nil, nil)

	select {
	case <-session.Done():
		return errors.New("leadership lost: the election lease expired")
	case <-e.resignChan():
		// Returning revokes the lease (above): the next candidate leads
		// at once, and this curator campaigns again after its restart's
		// backoff, behind the others.
		return ErrHandedOver
	case <-ctx.Done():
		return ctx.Err()
	}
}

// ErrHandedOver ends a leader's Run when it handed the leadership over on
// request (Resign); the supervisor restarts it as a candidate.
var ErrHandedOver = errors.New("handed the leadership over on request; campaigning again")

func (e *Election) resignChan() chan struct{} {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.resign == nil {
		e.resign = make(chan struct{}, 1)
	}
	return e.resign
}

// OtherCandidates counts the curators other than this one that stand for
// election: those that could take the leadership over.
func (e *Election) OtherCandidates(ctx context.Context) (int, error) {
	resp, err := e.Client.Get(ctx, electionPrefix+"/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		return 0, fmt.Errorf("counting candidates: %w", err)
	}
	n := int(resp.Count)
	if e.Current().Leading != nil {
		n-- // this curator's own key
	}
	return max(n, 0), nil
}

// WaitOtherCandidates is OtherCandidates, waiting up to patience for a
// count above zero. A curator stands again soon after its election key
// expired (its lease ran out while etcd was slow to apply, or its run is
// restarting), so a count of zero on one look does not mean that no curator
// could take over.
func (e *Election) WaitOtherCandidates(ctx context.Context, patience time.Duration) (int, error) {
	deadline := time.Now().Add(patience)
	for {
		n, err := e.OtherCandidates(ctx)
		if err != nil || n > 0 || !time.Now().Before(deadline) {
			return n, err
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(candidatePoll):
		}
	}
}

// candidatePoll is how often WaitOtherCandidates counts again.
const candidatePoll = 100 * time.Millisecond

// Resign makes this curator hand the leadership over if it leads: its Run
// revokes its lease and starts over as a candidate. It does not wait.
func (e *Election) Resign() {
	ch := e.resignChan()
	e.mu.Lock()
	leading := e.leading != nil
	e.mu.Unlock()
	if !leading {
		return
	}
	select {
	case ch <- struct{}{}:
	default:
	}
}

// observe publishes the current leader's candidate value as it changes.
func (e *Election) observe(ctx context.Context, election *concurrency.Election) error {
	for resp := range election.Observe(ctx) {
		if len(resp.Kvs) == 0 {
			e.setLeader(nil, clientv3.NoLease)
			continue
		}
		e.setLeader(resp.Kvs[0].Value, clientv3.LeaseID(resp.Kvs[0].Lease))
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return errors.New("observing the election stopped")
}
