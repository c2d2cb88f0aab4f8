package nodeapi

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	cpb "github.com/polis-os/polis/api/curator/v1"
	nodev1 "github.com/polis-os/polis/api/node/v1"
	"github.com/polis-os/polis/event"
	"github.com/polis-os/polis/identity"
	"github.com/polis-os/polis/internal/rpcauth"
	"github.com/polis-os/polis/roleserve"
)

// authzServer is the node API's server in the shared authorization layer
// (internal/rpcauth), which checks every call but the open services
// (health, reflection) against the requirement its method declares
// (nodev1.MethodRequirement) and leaves the audit line: successful calls
// of quiet methods (reading logs and state) leave none; who rebooted a
// node is worth knowing.
func (s *Service) authzServer(log *zap.Logger) *rpcauth.Server[nodev1.Requirement] {
	return &rpcauth.Server[nodev1.Requirement]{
		Lookup: nodev1.MethodRequirement,
		Rule: func(r nodev1.Requirement) rpcauth.Rule {
			return rpcauth.Rule{Caller: r.Caller, Permission: r.Permission, Quiet: r.Quiet}
		},
		Authorize: s.authorize,
		Log:       func() *zap.Logger { return log },
	}
}

// authorize checks the caller's kind and permission and, for the owner,
// its standing. Its refusals name the method.
func (s *Service) authorize(ctx context.Context, method string, req nodev1.Requirement, caller identity.Identity) (context.Context, error) {
	if err := rpcauth.CheckCaller(rpcauth.Rule{Caller: req.Caller, Permission: req.Permission}, caller); err != nil {
		return nil, rpcauth.ForMethod(method, err)
	}
	if req.Caller == cpb.Caller_CALLER_USER {
		if err := s.ownerStands(ctx, caller); err != nil {
			return nil, status.Errorf(codes.PermissionDenied, "%s: %v", method, err)
		}
	}
	return ctx, nil
}

// ownerStands checks that id is the owner with a certificate for the
// current owner key (rpcauth.OwnerStands), as the curator does
// (curator/authz.go, checkUserStanding): rotating the owner key revokes the old key's
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
	if id.Kind != identity.KindUser || id.UserName != rpcauth.OwnerUserName {
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
	return rpcauth.OwnerStands(id, key)
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
