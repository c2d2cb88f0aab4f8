package curator

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	cpb "github.com/polis-os/polis/api/curator/v1"
	"github.com/polis-os/polis/event"
	"github.com/polis-os/polis/identity"
	"github.com/polis-os/polis/internal/rpcauth"
)

// Every RPC passes through one check before its handler runs, in the
// shared authorization layer (internal/rpcauth: interceptors, audit lines,
// caller kinds, the owner's standing) with the curator's own steps here:
//
//  1. the method's requirement, as declared in the proto
//     (curatorv1.MethodRequirement); a method without one is refused;
//  2. the caller's identity from its TLS certificate (identity.PeerIdentity);
//  3. for nodes, their record: a node that was deleted or decommissioned is
//     refused even though its certificate is still valid; for users, their
//     permissions (the owner holds all);
//  4. where the method is served, as declared beside the caller rule
//     (Requirement.Serve): a SERVE_ANY method is answered by whichever
//     curator it reached, from its node cache once that has caught up
//     with etcd (nodeCache.fenced; before step 3, so that the caller's
//     record is current too; not for methods declared unfenced, which
//     heartbeats are); a SERVE_LEADER method only by the leader, after
//     it confirmed its leadership with etcd (for the methods in
//     confirmedByWrite, in the write that carries the call's effect:
//     confirmedwrite.go), and the others answer
//     UNAVAILABLE naming the leader, which the curator client follows
//     (a follower does so before step 3: the leader judges the callers
//     of what it serves);
//  5. for users, their standing: an owner certificate only counts while it
//     is for the current owner key (RotateOwnerKey revokes the old key's
//     certificates); confirmedByWrite methods check it in their write.
//
// Handlers then find the caller, and for SERVE_LEADER methods the leader
// state, in their context.

type callerKey struct{}
type leaderKey struct{}
type fencedKey struct{}

// fencedFrom returns the node snapshot a SERVE_ANY call was fenced on
// (nodeCache.fenced): it holds every write acknowledged before the call
// arrived. Nil for calls that were not fenced.
func fencedFrom(ctx context.Context) *nodeSnapshot {
	s, _ := ctx.Value(fencedKey{}).(*nodeSnapshot)
	return s
}

// callerFrom returns the authorised caller of an RPC.
func callerFrom(ctx context.Context) identity.Identity {
	id, _ := ctx.Value(callerKey{}).(identity.Identity)
	return id
}

// leaderFrom returns the leader state an RPC runs under; nil for
// SERVE_ANY methods, which must not depend on leading.
func leaderFrom(ctx context.Context) *leaderState {
	l, _ := ctx.Value(leaderKey{}).(*leaderState)
	return l
}

// authzServer is the curator's server in the shared authorization layer
// (internal/rpcauth): the requirement its methods declare, and authorize
// for the steps particular to the curator.
func (s *Service) authzServer() *rpcauth.Server[cpb.Requirement] {
	return &rpcauth.Server[cpb.Requirement]{
		Lookup: cpb.MethodRequirement,
		Rule: func(r cpb.Requirement) rpcauth.Rule {
			return rpcauth.Rule{Caller: r.Caller, Permission: r.Permission, Quiet: r.Quiet}
		},
		Authorize: s.authorize,
		Log:       s.rpcLogger,
	}
}

// authorize runs the curator's steps 3 to 5 for a call of method by
// caller (steps 1 and 2 are rpcauth's).
func (s *Service) authorize(ctx context.Context, method string, req cpb.Requirement, caller identity.Identity) (context.Context, error) {
	var l *leaderState
	switch {
	case !req.ServedByAny():
		// A follower sends the caller on before judging it: the leader
		// judges callers of what it serves, from its own view.
		if l, _ = event.Get(ctx, &s.leader); l == nil {
			return nil, s.notLeader()
		}
	case req.Caller != cpb.Caller_CALLER_UNAUTHENTICATED && !req.Unfenced:
		// Served here from this curator's view, which may lag etcd:
		// bring it up to every write acknowledged so far, for the
		// caller's standing and for the handler (fencedFrom).
		snap, err := s.nodes.fenced(ctx)
		if err != nil {
			return nil, err
		}
		ctx = context.WithValue(ctx, fencedKey{}, snap.detached())
	}
	if err := s.checkCaller(ctx, req, caller); err != nil {
		return nil, err
	}
	ctx = context.WithValue(ctx, callerKey{}, caller)
	if req.ServedByAny() {
		if req.Caller == cpb.Caller_CALLER_USER {
			if err := s.checkUserStanding(ctx, caller); err != nil {
				return nil, err
			}
		}
		return ctx, nil
	}
	if confirmedByWrite[method] {
		// The handler confirms with its write (confirmedwrite.go).
		ctx, err := s.deferChecks(ctx, req, caller, l)
		if err != nil {
			return nil, err
		}
		return context.WithValue(ctx, leaderKey{}, l), nil
	}
	// A leader cut off from etcd believes it leads until its lease runs
	// out; confirming with etcd first keeps it from answering from a
	// stale view meanwhile. Writes are guarded anyway.
	if err := l.leadership.Confirm(ctx); err != nil {
		if errors.Is(err, ErrNotLeader) {
			return nil, s.notLeader()
		}
		return nil, status.Errorf(codes.Unavailable, "confirming the leadership with etcd: %v", err)
	}
	if req.Caller == cpb.Caller_CALLER_USER {
		if err := s.checkUserStanding(ctx, caller); err != nil {
			return nil, err
		}
	}
	return context.WithValue(ctx, leaderKey{}, l), nil
}

// checkCaller checks the caller's kind and permission (rpcauth) and, for
// nodes, their standing.
func (s *Service) checkCaller(ctx context.Context, req cpb.Requirement, caller identity.Identity) error {
	if err := rpcauth.CheckCaller(rpcauth.Rule{Caller: req.Caller, Permission: req.Permission}, caller); err != nil {
		return err
	}
	if req.Caller == cpb.Caller_CALLER_NODE || req.Caller == cpb.Caller_CALLER_NODE_SELF {
		return s.checkNodeStanding(ctx, caller)
	}
	// The user's standing (checkUserStanding) is checked last, after the
	// leadership where the leader serves: it reads etcd.
	return nil
}

// checkNodeStanding refuses nodes whose record is gone or decommissioned,
// or holds another key: their certificate may still be valid, but they are
// no longer part of the cluster.
//
// A call that was not fenced (leader-served methods, unfenced heartbeats)
// is judged from the cache as it is, which may lag etcd: a node approved a
// moment ago may not be UP in it yet. A refusal is final for the caller,
// so one from an unfenced view is confirmed on a fenced one first; the
// quorum read that costs is paid only on the refusal path. (The tests of
// authz_standing_test.go hold the cache behind etcd to take that path on
// every run.)
func (s *Service) checkNodeStanding(ctx context.Context, caller identity.Identity) error {
	if snap := fencedFrom(ctx); snap != nil {
		return nodeStanding(snap, caller)
	}
	snap, err := s.nodes.current(ctx)
	if err != nil {
		return status.Errorf(codes.Unavailable, "the curator's view of nodes is not ready: %v", err)
	}
	if err := nodeStanding(snap, caller); err == nil {
		return nil
	}
	if snap, err = s.nodes.fenced(ctx); err != nil {
		return err
	}
	return nodeStanding(snap, caller)
}

// nodeStanding is checkNodeStanding's verdict on one view of the nodes.
func nodeStanding(snap *nodeSnapshot, caller identity.Identity) error {
	n := snap.nodes[caller.NodeID]
	switch {
	case n == nil:
		return status.Errorf(codes.PermissionDenied, "node %s is not part of the cluster (deleted or never registered)", caller.NodeID)
	case !caller.PublicKey.Equal(ed25519.PublicKey(n.PublicKey)):
		return status.Errorf(codes.PermissionDenied, "node %s: the certificate's key is not the node's key", caller.NodeID)
	case n.State == cpb.NodeState_NODE_STATE_DECOMMISSIONED:
		return errNodeDecommissioned(caller.NodeID)
	case n.State != cpb.NodeState_NODE_STATE_UP:
		return status.Errorf(codes.PermissionDenied, "node %s is %s, not UP", caller.NodeID, n.State)
	}
	return nil
}

// checkUserStanding refuses users whose certificate, valid as it is, no
// longer stands: an owner certificate stands only while it is for the
// current owner key, so that rotating the owner key (RotateOwnerKey)
// revokes every certificate of the old one at once. The key is read from
// etcd on every call, not cached, so a rotation takes effect on every
// curator from its next call on.
func (s *Service) checkUserStanding(ctx context.Context, caller identity.Identity) error {
	owner, err := s.ownerKey(ctx)
	if err != nil {
		return err
	}
	if err := rpcauth.OwnerStands(caller, owner); err != nil {
		return status.Error(codes.PermissionDenied, err.Error())
	}
	return nil
}

// ownerKey reads the current owner key.
func (s *Service) ownerKey(ctx context.Context) (ed25519.PublicKey, error) {
	resp, err := s.cfg.Client.Get(ctx, ownerKey)
	if err != nil {
		return nil, leaderWriteError(fmt.Errorf("reading the owner key: %w", err))
	}
	if len(resp.Kvs) != 1 || len(resp.Kvs[0].Value) != ed25519.PublicKeySize {
		return nil, status.Error(codes.Internal, "the cluster state holds no valid owner key")
	}
	return ed25519.PublicKey(resp.Kvs[0].Value), nil
}

// OwnerUserName is the name in the owner's user certificate.
const OwnerUserName = rpcauth.OwnerUserName

// notLeader is the error a follower gives for calls only the leader serves.
func (s *Service) notLeader() error {
	st := s.election.Current()
	var ep cpb.CuratorEndpoint
	if st.Leader != nil && proto.Unmarshal(st.Leader, &ep) == nil {
		return status.Errorf(codes.Unavailable, "not the leader: the leader is %s at %s:%d", ep.NodeId, ep.Address, ep.Port)
	}
	return status.Error(codes.Unavailable, "not the leader, and no leader is known (an election is under way)")
}
