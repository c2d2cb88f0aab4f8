package curator

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"

	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	cpb "github.com/polis-os/polis/api/curator/v1"
	"github.com/polis-os/polis/event"
	"github.com/polis-os/polis/identity"
)

// Every RPC passes through one check before its handler runs:
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
//     record is current too); a SERVE_LEADER method only by the leader, after
//     it confirmed its leadership with etcd, and the others answer
//     UNAVAILABLE naming the leader, which the curator client follows
//     (a follower does so before step 3: the leader judges the callers
//     of what it serves);
//  5. for users, their standing: an owner certificate only counts while it
//     is for the current owner key (RotateOwnerKey revokes the old key's
//     certificates).
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

func (s *Service) unaryInterceptor(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (resp any, err error) {
	callCtx := ctx
	defer func() { s.logCall(callCtx, info.FullMethod, err) }()
	ctx, err = s.authorize(ctx, info.FullMethod)
	if err != nil {
		return nil, err
	}
	return handler(ctx, req)
}

func (s *Service) streamInterceptor(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) (err error) {
	defer func() { s.logCall(ss.Context(), info.FullMethod, err) }()
	ctx, err := s.authorize(ss.Context(), info.FullMethod)
	if err != nil {
		return err
	}
	return handler(srv, &authorizedStream{ServerStream: ss, ctx: ctx})
}

// quietMethods are calls too frequent, or too harmless, to log each one.
var quietMethods = map[string]bool{
	cpb.CuratorService_Heartbeat_FullMethodName:        true,
	cpb.CuratorService_GetLeader_FullMethodName:        true,
	cpb.CuratorService_WatchLeader_FullMethodName:      true,
	cpb.CuratorService_GetCACertificate_FullMethodName: true,
}

// logCall leaves a record of every call but the quiet ones, with who made
// it and how it ended: the audit trail of what operators and nodes did.
// Refused and failed quiet calls are logged too.
func (s *Service) logCall(ctx context.Context, method string, err error) {
	if quietMethods[method] && err == nil {
		return
	}
	caller := "unknown"
	if id, idErr := identity.PeerIdentity(ctx); idErr == nil {
		caller = id.String()
	}
	s.rpcLogger().Info("call",
		zap.String("method", method),
		zap.String("caller", caller),
		zap.Stringer("code", status.Code(err)),
		zap.NamedError("error", err),
	)
}

type authorizedStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (a *authorizedStream) Context() context.Context { return a.ctx }

func (s *Service) authorize(ctx context.Context, method string) (context.Context, error) {
	req, err := cpb.MethodRequirement(method)
	if err != nil {
		return nil, status.Errorf(codes.PermissionDenied, "%s: %v", method, err)
	}
	caller, err := identity.PeerIdentity(ctx)
	if err != nil {
		return nil, status.Errorf(codes.Unauthenticated, "%s: %v", method, err)
	}
	var l *leaderState
	switch {
	case !req.ServedByAny():
		// A follower sends the caller on before judging it: the leader
		// judges callers of what it serves, from its own view.
		if l, _ = event.Get(ctx, &s.leader); l == nil {
			return nil, s.notLeader()
		}
	case req.Caller != cpb.Caller_CALLER_UNAUTHENTICATED && !unfencedMethods[method]:
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

// unfencedMethods are SERVE_ANY methods served without first fencing the
// node cache on a quorum read: heartbeats are too frequent for a round
// trip each, and one accepted from a node decommissioned a moment ago
// harms nobody (only UP nodes' health is ever reported). The caller's
// standing is checked against the cache as it is.
var unfencedMethods = map[string]bool{
	cpb.CuratorService_Heartbeat_FullMethodName: true,
}

func (s *Service) checkCaller(ctx context.Context, req cpb.Requirement, caller identity.Identity) error {
	switch req.Caller {
	case cpb.Caller_CALLER_UNAUTHENTICATED:
		return nil
	case cpb.Caller_CALLER_KEY_HOLDER:
		if !caller.HoldsKey() {
			return status.Error(codes.Unauthenticated, "this call needs a client certificate proving a key (a self-signed certificate is enough)")
		}
		return nil
	case cpb.Caller_CALLER_NODE, cpb.Caller_CALLER_NODE_SELF:
		if caller.Kind != identity.KindNode {
			return status.Errorf(codes.PermissionDenied, "only nodes may make this call; the caller is %s", caller)
		}
		return s.checkNodeStanding(ctx, caller)
	case cpb.Caller_CALLER_USER:
		if caller.Kind != identity.KindUser {
			return status.Errorf(codes.PermissionDenied, "only users may make this call; the caller is %s", caller)
		}
		if !userHolds(caller.UserName, req.Permission) {
			return status.Errorf(codes.PermissionDenied, "user %q does not hold %s", caller.UserName, req.Permission)
		}
		// The user's standing (checkUserStanding) is checked last,
		// after the leadership where the leader serves: it reads etcd.
		return nil
	default:
		return status.Errorf(codes.PermissionDenied, "unknown caller requirement %v", req.Caller)
	}
}

// checkNodeStanding refuses nodes whose record is gone or decommissioned,
// or holds another key: their certificate may still be valid, but they are
// no longer part of the cluster.
func (s *Service) checkNodeStanding(ctx context.Context, caller identity.Identity) error {
	snap := fencedFrom(ctx)
	if snap == nil {
		var err error
		if snap, err = s.nodes.current(ctx); err != nil {
			return status.Errorf(codes.Unavailable, "the curator's view of nodes is not ready: %v", err)
		}
	}
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
	if caller.UserName != OwnerUserName {
		return status.Errorf(codes.PermissionDenied, "user %q is not known to the cluster", caller.UserName)
	}
	owner, err := s.ownerKey(ctx)
	if err != nil {
		return err
	}
	if !owner.Equal(caller.PublicKey) {
		return status.Error(codes.PermissionDenied, "this owner certificate is for a key that is no longer the owner key (rotated): it is revoked")
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

// userHolds says whether a user holds a permission. There is one user so
// far, the owner, and it holds every permission; users with explicit
// permission sets come with the user management RPCs.
func userHolds(user string, _ cpb.Permission) bool {
	return user == OwnerUserName
}

// OwnerUserName is the name in the owner's user certificate.
const OwnerUserName = "owner"

// notLeader is the error a follower gives for calls only the leader serves.
func (s *Service) notLeader() error {
	st := s.election.Current()
	var ep cpb.CuratorEndpoint
	if st.Leader != nil && proto.Unmarshal(st.Leader, &ep) == nil {
		return status.Errorf(codes.Unavailable, "not the leader: the leader is %s at %s:%d", ep.NodeId, ep.Address, ep.Port)
	}
	return status.Error(codes.Unavailable, "not the leader, and no leader is known (an election is under way)")
}
