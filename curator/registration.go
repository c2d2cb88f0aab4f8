package curator

import (
	"context"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	cpb "github.com/polis-os/polis/api/curator/v1"
	"github.com/polis-os/polis/event"
	"github.com/polis-os/polis/identity"
)

// Registration is the one call through which a caller the cluster has not
// approved makes the curator store something, so it is bounded on every
// side:
//
//   - The register ticket admits the call. The owner can replace it
//     (RotateRegisterTicket), so that copies of the old one (every enrolled
//     node had it on disk) register nobody.
//   - What is stored per key is bounded: one key makes one record, its
//     status is checked in full (validate.go: no unknown fields, at most
//     1.5 KiB), and a key's retries replace its status at most once per
//     RegisterStatusInterval, so one key cannot churn etcd's history
//     either.
//   - What is stored in all is bounded: at most Config.MaxNewNodes NEW
//     records exist; beyond that Register refuses new keys with
//     RESOURCE_EXHAUSTED until an operator approves or deletes some. The
//     count is taken from the node cache under leaderState.registration,
//     after the cache has seen this term's own earlier creations, so
//     concurrent calls cannot overshoot it.
//   - A key that was decommissioned is retired for good: DeleteNode of a
//     DECOMMISSIONED node records its key under retiredPrefix in the same
//     transaction that deletes the record, and Register refuses retired
//     keys. Deleting a NEW or STANDBY node retires nothing: such a node
//     never had credentials, and may register again (and need approval
//     again).

func (r *rpcServer) Register(ctx context.Context, req *cpb.RegisterRequest) (*cpb.RegisterResponse, error) {
	if len(req.RegisterTicket) == 0 {
		return nil, status.Error(codes.InvalidArgument, "register_ticket is required")
	}
	if err := r.checkTicket(ctx, req.RegisterTicket); err != nil {
		return nil, err
	}
	if req.Status != nil {
		if err := validateNodeStatus(req.Status); err != nil {
			return nil, err
		}
	}
	pub := callerFrom(ctx).PublicKey
	id := identity.NodeID(pub)
	l := leaderFrom(ctx)
	l.registration.Lock()
	defer l.registration.Unlock()

	if err := r.checkNotRetired(ctx, id); err != nil {
		return nil, err
	}
	now := r.s.cfg.Now()
	created := false
	_, err := r.changeNode(ctx, id, func(n *cpb.Node) (*cpb.Node, error) {
		created = false
		if n == nil {
			if err := r.checkNewNodeLimit(ctx); err != nil {
				return nil, err
			}
			created = true
			return &cpb.Node{Id: id, PublicKey: pub, State: cpb.NodeState_NODE_STATE_NEW, Status: req.Status}, nil
		}
		switch n.State {
		case cpb.NodeState_NODE_STATE_NEW, cpb.NodeState_NODE_STATE_STANDBY:
			// A retry. The status is the node's own report, so the
			// newest one wins, but at most once per interval; the state
			// stays as the operator left it.
			if last, ok := l.statusWrites[id]; req.Status != nil && (!ok || now.Sub(last) >= RegisterStatusInterval) {
				n.Status = req.Status
			}
			return n, nil
		case cpb.NodeState_NODE_STATE_UP:
			return nil, status.Errorf(codes.AlreadyExists, "node %s is already UP: rejoin with Join instead of registering", id)
		case cpb.NodeState_NODE_STATE_DECOMMISSIONED:
			return nil, status.Errorf(codes.PermissionDenied, "node %s is decommissioned and cannot register again", id)
		default:
			return nil, status.Errorf(codes.Internal, "node %s has invalid state %v", id, n.State)
		}
	})
	if err != nil {
		return nil, err
	}
	l.noteStatusWrite(id, now)
	if created {
		// The next registration counts NEW records from the node cache:
		// wait until it holds this one.
		if err := r.awaitCache(ctx, func(s *nodeSnapshot) bool { return s.nodes[id] != nil }); err != nil {
			return nil, err
		}
	}
	return &cpb.RegisterResponse{NodeId: id}, nil
}

// checkNotRetired refuses node id if its key was retired (decommissioned,
// then deleted).
func (r *rpcServer) checkNotRetired(ctx context.Context, id string) error {
	retired, err := r.s.cfg.Client.Get(ctx, retiredKey(id), clientv3.WithCountOnly())
	if err != nil {
		return leaderWriteError(fmt.Errorf("reading retired keys: %w", err))
	}
	if retired.Count > 0 {
		return status.Errorf(codes.PermissionDenied, "node %s was decommissioned and deleted: its key is retired for good; give the machine a new key (a fresh data directory) to enrol it again", id)
	}
	return nil
}

// noteStatusWrite records that node id registered at now, and forgets
// entries older than the interval, so the map holds at most the keys that
// registered within it. Called with l.registration held.
func (l *leaderState) noteStatusWrite(id string, now time.Time) {
	if last, ok := l.statusWrites[id]; ok && now.Sub(last) < RegisterStatusInterval {
		return // the status was not replaced: the interval still runs
	}
	for k, t := range l.statusWrites {
		if now.Sub(t) >= RegisterStatusInterval {
			delete(l.statusWrites, k)
		}
	}
	l.statusWrites[id] = now
}

// checkNewNodeLimit refuses a new record when the cluster holds
// Config.MaxNewNodes NEW records already. Called with
// leaderState.registration held.
func (r *rpcServer) checkNewNodeLimit(ctx context.Context) error {
	snap, err := r.s.nodes.current(ctx)
	if err != nil {
		return status.Errorf(codes.Unavailable, "the curator's view of nodes is not ready: %v", err)
	}
	pending := 0
	for _, n := range snap.nodes {
		if n.State == cpb.NodeState_NODE_STATE_NEW {
			pending++
		}
	}
	if pending >= r.s.cfg.MaxNewNodes {
		return status.Errorf(codes.ResourceExhausted, "the cluster holds %d nodes awaiting approval, its limit: an operator must approve or delete some before more can register", pending)
	}
	return nil
}

// awaitCache waits until the node cache satisfies pred.
func (r *rpcServer) awaitCache(ctx context.Context, pred func(*nodeSnapshot) bool) error {
	_, err := event.Get(ctx, r.s.nodes.Snapshots(), event.Filter(func(s *nodeSnapshot) bool { return s.complete && pred(s) }))
	if err != nil {
		return status.Errorf(codes.Unavailable, "waiting for the curator's view of nodes: %v", err)
	}
	return nil
}

func (r *rpcServer) RotateRegisterTicket(ctx context.Context, _ *cpb.RotateRegisterTicketRequest) (*cpb.RotateRegisterTicketResponse, error) {
	ticket, err := NewRegisterTicket()
	if err != nil {
		return nil, status.Errorf(codes.Internal, "%v", err)
	}
	l := leaderFrom(ctx)
	if _, _, err := l.leadership.Txn(ctx, nil, []clientv3.Op{clientv3.OpPut(ticketKey, string(ticket))}, nil); err != nil {
		return nil, leaderWriteError(fmt.Errorf("storing the register ticket: %w", err))
	}
	dir, err := r.clusterDirectory(ctx)
	if err != nil {
		return nil, err
	}
	return &cpb.RotateRegisterTicketResponse{RegisterTicket: ticket, ClusterDirectory: dir}, nil
}
