package nodeapi

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"strings"
	"time"

	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	cpb "github.com/polis-os/polis/api/curator/v1"
	nodev1 "github.com/polis-os/polis/api/node/v1"
	"github.com/polis-os/polis/curator"
	"github.com/polis-os/polis/event"
	"github.com/polis-os/polis/identity"
	"github.com/polis-os/polis/roleserve"
)

// openServices answer any caller with a TLS connection: the standard
// health and reflection services, which tell which services exist and
// whether they serve, and nothing about the node's state.
var openServices = []string{
	"/grpc.health.v1.Health/",
	"/grpc.reflection.v1.ServerReflection/",
	"/grpc.reflection.v1alpha.ServerReflection/",
}

// authorize checks the caller of method against the method's declared
// requirement.
func (s *Service) authorize(ctx context.Context, method string) (identity.Identity, error) {
	for _, prefix := range openServices {
		if strings.HasPrefix(method, prefix) {
			return identity.Identity{}, nil
		}
	}
	req, err := nodev1.MethodRequirement(method)
	if err != nil {
		return identity.Identity{}, status.Errorf(codes.PermissionDenied, "%s: %v", method, err)
	}
	caller, err := identity.PeerIdentity(ctx)
	if err != nil {
		return identity.Identity{}, status.Errorf(codes.Unauthenticated, "%s: %v", method, err)
	}
	switch req.Caller {
	case cpb.Caller_CALLER_USER:
		if caller.Kind != identity.KindUser {
			return caller, status.Errorf(codes.PermissionDenied, "%s: only users may make this call; the caller is %s", method, caller)
		}
		if !userHolds(caller.UserName, req.Permission) {
			return caller, status.Errorf(codes.PermissionDenied, "%s: user %q does not hold %s", method, caller.UserName, req.Permission)
		}
		if err := s.ownerStands(ctx, caller); err != nil {
			return caller, status.Errorf(codes.PermissionDenied, "%s: %v", method, err)
		}
	case cpb.Caller_CALLER_NODE:
		if caller.Kind != identity.KindNode {
			return caller, status.Errorf(codes.PermissionDenied, "%s: only nodes may make this call; the caller is %s", method, caller)
		}
	default:
		return caller, status.Errorf(codes.PermissionDenied, "%s: unknown caller requirement %v", method, req.Caller)
	}
	return caller, nil
}

// userHolds says whether a user holds a node permission: as in the
// curator, the owner holds every permission and there are no other users
// yet.
func userHolds(user string, _ nodev1.NodePermission) bool {
	return user == curator.OwnerUserName
}

// ownerStands checks that id is the owner with a certificate for the
// current owner key, as the curator does (curator/authz.go,
// checkUserStanding): rotating the owner key revokes the old key's
// certificates here too. The node asks the curator for the key
// (GetOwnerKey) on every owner call; when no curator answers in time it
// goes by the key the curator last gave, so that the node API still
// serves the owner while the control plane is down, which is when it is
// needed most (a rotation takes effect on a node at its first owner call
// a curator answers). Only a node that has a key to fall back on bounds
// the question by ownerKeyTimeout; a node that never got an answer waits
// as long as the call may (its deadline, at most ownerKeyFirstTimeout),
// since a curator that is merely slow (a loaded machine, an election)
// should not refuse the owner. A node that never got an answer in that
// time refuses the owner. Without
// Config.OwnerKey any owner certificate from the CA stands.
func (s *Service) ownerStands(ctx context.Context, id identity.Identity) error {
	if id.Kind != identity.KindUser || id.UserName != curator.OwnerUserName {
		return fmt.Errorf("%s is not the owner", id)
	}
	if s.cfg.OwnerKey == nil {
		return nil
	}
	wait := ownerKeyFirstTimeout
	if s.ownerKey.Load() != nil {
		wait = ownerKeyTimeout
	}
	qctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	key, err := s.cfg.OwnerKey(qctx)
	if err == nil && len(key) == ed25519.PublicKeySize {
		s.ownerKey.Store(&key)
	} else if last := s.ownerKey.Load(); last != nil {
		key = *last
	} else {
		return fmt.Errorf("this node cannot tell whether this owner certificate is revoked: no curator has told it the owner key yet (%v)", err)
	}
	if !key.Equal(id.PublicKey) {
		return errors.New("this owner certificate is for a key that is no longer the owner key (rotated): it is revoked")
	}
	return nil
}

// ownerKeyTimeout bounds the wait for the curator's answer in ownerStands
// when the node has a key the curator gave earlier to fall back on.
const ownerKeyTimeout = 3 * time.Second

// ownerKeyFirstTimeout bounds it when the node has none yet: as long as
// polisctl's default timeout, so that only the call's own deadline is
// shorter.
const ownerKeyFirstTimeout = 30 * time.Second

// CuratorOwnerKey is an OwnerKeyFunc that asks the curator through the
// node's membership, if it has one.
func CuratorOwnerKey(membership event.ValueWatch[*roleserve.ClusterMembership]) OwnerKeyFunc {
	return func(ctx context.Context) (ed25519.PublicKey, error) {
		m, ok := current(membership)
		if !ok || m == nil {
			return nil, errors.New("the node is not connected to the cluster")
		}
		resp, err := cpb.NewCuratorServiceClient(m.Curator).GetOwnerKey(ctx, &cpb.GetOwnerKeyRequest{})
		if err != nil {
			return nil, fmt.Errorf("asking the curator for the owner key: %w", err)
		}
		if len(resp.OwnerKey) != ed25519.PublicKeySize {
			return nil, fmt.Errorf("the curator's owner key has %d bytes, want %d", len(resp.OwnerKey), ed25519.PublicKeySize)
		}
		return ed25519.PublicKey(resp.OwnerKey), nil
	}
}

// logCall leaves a line for every call that changes something or was
// refused: who rebooted a node is worth knowing; who read its logs is
// not worth a line per call.
func logCall(log *zap.Logger, method string, caller identity.Identity, err error) {
	if err == nil && method != nodev1.NodeService_Reboot_FullMethodName && method != nodev1.NodeService_PowerOff_FullMethodName {
		return
	}
	log.Info("call", zap.String("method", method), zap.Stringer("caller", caller), zap.Stringer("code", status.Code(err)), zap.NamedError("error", err))
}

func (s *Service) unaryAuthz(log *zap.Logger) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (resp any, err error) {
		caller, err := s.authorize(ctx, info.FullMethod)
		defer func() { logCall(log, info.FullMethod, caller, err) }()
		if err != nil {
			return nil, err
		}
		return handler(ctx, req)
	}
}

func (s *Service) streamAuthz(log *zap.Logger) grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) (err error) {
		caller, err := s.authorize(ss.Context(), info.FullMethod)
		if err != nil {
			logCall(log, info.FullMethod, caller, err)
			return err
		}
		return handler(srv, ss)
	}
}
