package rpcauth

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"strings"

	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	cpb "github.com/polis-os/polis/api/curator/v1"
	"github.com/polis-os/polis/identity"
)

// OwnerUserName is the user name in the owner's user certificate.
const OwnerUserName = "owner"

// Rule is the part of a method's declared requirement that every server
// checks alike.
type Rule struct {
	// Caller is the kind of caller the method accepts.
	Caller cpb.Caller
	// Permission is the permission a user must hold, for CALLER_USER; its
	// String names it in errors.
	Permission fmt.Stringer
	// Quiet says that the method's successful calls leave no audit line.
	Quiet bool
}

// Server is one gRPC server's authorization, over the requirement type R
// its API declares (curatorv1.Requirement, nodev1.Requirement).
type Server[R any] struct {
	// Lookup returns the requirement a method declares, or an error if it
	// declares none that is valid.
	Lookup func(method string) (R, error)
	// Rule returns the shared part of a requirement.
	Rule func(R) Rule
	// Authorize runs the server's own steps for a call of method by
	// caller, and returns the context the handler runs in. Its errors are
	// gRPC status errors.
	Authorize func(ctx context.Context, method string, req R, caller identity.Identity) (context.Context, error)
	// Log returns the logger of the audit lines.
	Log func() *zap.Logger
}

// authorize runs steps 2 to 4 of the package doc.
func (s *Server[R]) authorize(ctx context.Context, method string) (context.Context, R, error) {
	req, err := s.Lookup(method)
	if err != nil {
		return nil, req, status.Errorf(codes.PermissionDenied, "%s: %v", method, err)
	}
	caller, err := identity.PeerIdentity(ctx)
	if err != nil {
		return nil, req, status.Errorf(codes.Unauthenticated, "%s: %v", method, err)
	}
	ctx, err = s.Authorize(ctx, method, req, caller)
	return ctx, req, err
}

// UnaryInterceptor checks every unary call but those of the open services.
func (s *Server[R]) UnaryInterceptor() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, in any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (resp any, err error) {
		if IsOpen(info.FullMethod) {
			return handler(ctx, in)
		}
		callCtx := ctx
		authorized := false
		var req R
		defer func() { s.logCall(callCtx, info.FullMethod, authorized && s.Rule(req).Quiet, err) }()
		ctx, req, err = s.authorize(ctx, info.FullMethod)
		if err != nil {
			return nil, err
		}
		authorized = true
		return handler(ctx, in)
	}
}

// StreamInterceptor checks every stream but those of the open services;
// the handler's stream carries the context Authorize returned.
func (s *Server[R]) StreamInterceptor() grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) (err error) {
		if IsOpen(info.FullMethod) {
			return handler(srv, ss)
		}
		authorized := false
		var req R
		defer func() { s.logCall(ss.Context(), info.FullMethod, authorized && s.Rule(req).Quiet, err) }()
		var ctx context.Context
		ctx, req, err = s.authorize(ss.Context(), info.FullMethod)
		if err != nil {
			return err
		}
		authorized = true
		return handler(srv, &authorizedStream{ServerStream: ss, ctx: ctx})
	}
}

// logCall leaves the audit line of a call: who made it and how it ended.
// A quiet method's successful calls leave none; refused and failed ones
// do, quiet or not.
func (s *Server[R]) logCall(ctx context.Context, method string, quiet bool, err error) {
	if quiet && err == nil {
		return
	}
	caller := "unknown"
	if id, idErr := identity.PeerIdentity(ctx); idErr == nil {
		caller = id.String()
	}
	s.Log().Info("call",
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

// CheckCaller checks that caller is of the kind rule accepts and, for a
// user, holds its permission. It says nothing of the caller's standing
// (a node's record, the owner key), which the server checks after it. The
// error is a gRPC status error.
func CheckCaller(rule Rule, caller identity.Identity) error {
	switch rule.Caller {
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
		return nil
	case cpb.Caller_CALLER_USER:
		if caller.Kind != identity.KindUser {
			return status.Errorf(codes.PermissionDenied, "only users may make this call; the caller is %s", caller)
		}
		if !UserHolds(caller.UserName, rule.Permission) {
			return status.Errorf(codes.PermissionDenied, "user %q does not hold %s", caller.UserName, rule.Permission)
		}
		return nil
	default:
		return status.Errorf(codes.PermissionDenied, "unknown caller requirement %v", rule.Caller)
	}
}

// UserHolds says whether a user holds a permission. There is one user so
// far, the owner, and it holds every permission of every API; users with
// explicit permission sets come with the user management RPCs.
func UserHolds(user string, _ fmt.Stringer) bool {
	return user == OwnerUserName
}

// ErrOwnerKeyRotated is OwnerStands' error for a certificate of an owner
// key that was rotated away.
var ErrOwnerKeyRotated = errors.New("this owner certificate is for a key that is no longer the owner key (rotated): it is revoked")

// OwnerStands checks that caller is the owner with a certificate for the
// current owner key: an owner certificate stands only while it is for that
// key, so that rotating the owner key revokes every certificate of the old
// one at once. Each server finds the current key its own way.
func OwnerStands(caller identity.Identity, ownerKey ed25519.PublicKey) error {
	if caller.Kind != identity.KindUser || caller.UserName != OwnerUserName {
		return fmt.Errorf("%s is not the owner", caller)
	}
	if !ownerKey.Equal(caller.PublicKey) {
		return ErrOwnerKeyRotated
	}
	return nil
}

// ForMethod returns err, a gRPC status error, with its message prefixed by
// the method's name and its code kept: for servers whose refusals name the
// method (the node API's).
func ForMethod(method string, err error) error {
	if err == nil {
		return nil
	}
	st := status.Convert(err)
	return status.Errorf(st.Code(), "%s: %s", method, st.Message())
}

// openServices are the standard services every caller may use.
var openServices = []string{
	"/grpc.health.v1.Health/",
	"/grpc.reflection.v1.ServerReflection/",
	"/grpc.reflection.v1alpha.ServerReflection/",
}

// IsOpen says whether method belongs to a service every caller may use:
// health and reflection, which tell which services exist and whether they
// serve, and nothing about the cluster's state.
func IsOpen(method string) bool {
	for _, p := range openServices {
		if strings.HasPrefix(method, p) {
			return true
		}
	}
	return false
}
