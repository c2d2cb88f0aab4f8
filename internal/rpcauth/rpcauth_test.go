package rpcauth

import (
	"context"
	"crypto/ed25519"
	"errors"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	cpb "github.com/polis-os/polis/api/curator/v1"
	"github.com/polis-os/polis/identity"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func key(t *testing.T) ed25519.PublicKey {
	t.Helper()
	pub, _, err := ed25519.GenerateKey(nil)
	if err != nil {
		t.Fatal(err)
	}
	return pub
}

// Each caller kind is a rule of its own, with the error that names what
// was missing.
func TestCheckCaller(t *testing.T) {
	pub := key(t)
	node := identity.Identity{Kind: identity.KindNode, NodeID: "node-a", PublicKey: pub}
	owner := identity.Identity{Kind: identity.KindUser, UserName: OwnerUserName, PublicKey: pub}
	alice := identity.Identity{Kind: identity.KindUser, UserName: "alice", PublicKey: pub}
	holder := identity.Identity{Kind: identity.KindKeyHolder, PublicKey: pub}
	anon := identity.Identity{}
	user := Rule{Caller: cpb.Caller_CALLER_USER, Permission: cpb.Permission_PERMISSION_APPROVE_NODE}
	for _, c := range []struct {
		rule   Rule
		caller identity.Identity
		code   codes.Code
		msg    string
	}{
		{Rule{Caller: cpb.Caller_CALLER_UNAUTHENTICATED}, anon, codes.OK, ""},
		{Rule{Caller: cpb.Caller_CALLER_KEY_HOLDER}, holder, codes.OK, ""},
		{Rule{Caller: cpb.Caller_CALLER_KEY_HOLDER}, anon, codes.Unauthenticated, "proving a key"},
		{Rule{Caller: cpb.Caller_CALLER_NODE}, node, codes.OK, ""},
		{Rule{Caller: cpb.Caller_CALLER_NODE_SELF}, node, codes.OK, ""},
		{Rule{Caller: cpb.Caller_CALLER_NODE}, owner, codes.PermissionDenied, "only nodes may make this call"},
		{user, owner, codes.OK, ""},
		{user, node, codes.PermissionDenied, "only users may make this call"},
		{user, alice, codes.PermissionDenied, `user "alice" does not hold PERMISSION_APPROVE_NODE`},
		{Rule{}, owner, codes.PermissionDenied, "unknown caller requirement"},
	} {
		err := CheckCaller(c.rule, c.caller)
		if status.Code(err) != c.code || (c.msg != "" && !strings.Contains(err.Error(), c.msg)) {
			t.Errorf("CheckCaller(%v, %s) = %v, want %v containing %q", c.rule.Caller, c.caller, err, c.code, c.msg)
		}
	}
}

// An owner certificate stands only for the current owner key.
func TestOwnerStands(t *testing.T) {
	current, old := key(t), key(t)
	if err := OwnerStands(identity.Identity{Kind: identity.KindUser, UserName: OwnerUserName, PublicKey: current}, current); err != nil {
		t.Errorf("the current owner: %v", err)
	}
	if err := OwnerStands(identity.Identity{Kind: identity.KindUser, UserName: OwnerUserName, PublicKey: old}, current); !errors.Is(err, ErrOwnerKeyRotated) {
		t.Errorf("a rotated owner key: %v", err)
	}
	if err := OwnerStands(identity.Identity{Kind: identity.KindNode, NodeID: "node-a", PublicKey: current}, current); err == nil || !strings.Contains(err.Error(), "is not the owner") {
		t.Errorf("a node: %v", err)
	}
}

func TestForMethod(t *testing.T) {
	err := ForMethod("/p.S/M", status.Error(codes.PermissionDenied, "no"))
	if status.Code(err) != codes.PermissionDenied || status.Convert(err).Message() != "/p.S/M: no" {
		t.Errorf("ForMethod = %v", err)
	}
	if ForMethod("/p.S/M", nil) != nil {
		t.Error("ForMethod(nil) is not nil")
	}
}

// The interceptors check every method but the open services, and leave an
// audit line for every call but a quiet method's successful ones.
func TestInterceptorsAuthorizeAndAudit(t *testing.T) {
	core, logs := observer.New(zap.InfoLevel)
	log := zap.New(core)
	rules := map[string]Rule{
		"/p.S/Quiet": {Caller: cpb.Caller_CALLER_NODE, Quiet: true},
		"/p.S/Loud":  {Caller: cpb.Caller_CALLER_NODE},
	}
	type ctxKey struct{}
	srv := &Server[Rule]{
		Lookup: func(method string) (Rule, error) {
			r, ok := rules[method]
			if !ok {
				return Rule{}, errors.New("declares no requirement")
			}
			return r, nil
		},
		Rule: func(r Rule) Rule { return r },
		Authorize: func(ctx context.Context, _ string, r Rule, caller identity.Identity) (context.Context, error) {
			if err := CheckCaller(r, caller); err != nil {
				return nil, err
			}
			return context.WithValue(ctx, ctxKey{}, caller.NodeID), nil
		},
		Log: func() *zap.Logger { return log },
	}
	unary := srv.UnaryInterceptor()
	node := identity.Identity{Kind: identity.KindNode, NodeID: "node-a", PublicKey: key(t), NotAfter: time.Now().Add(time.Hour)}
	asNode := peer.NewContext(context.Background(), &peer.Peer{AuthInfo: identity.AuthInfo{Identity: node}})
	handler := func(ctx context.Context, _ any) (any, error) {
		if ctx.Value(ctxKey{}) != "node-a" {
			return nil, errors.New("the handler did not get Authorize's context")
		}
		return "ok", nil
	}
	call := func(ctx context.Context, method string) error {
		_, err := unary(ctx, nil, &grpc.UnaryServerInfo{FullMethod: method}, handler)
		return err
	}
	if err := call(asNode, "/p.S/Quiet"); err != nil {
		t.Fatalf("Quiet: %v", err)
	}
	if n := logs.Len(); n != 0 {
		t.Fatalf("a quiet method's successful call left %d lines", n)
	}
	if err := call(asNode, "/p.S/Loud"); err != nil {
		t.Fatalf("Loud: %v", err)
	}
	if err := call(asNode, "/p.S/Undeclared"); status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), "/p.S/Undeclared: declares no requirement") {
		t.Fatalf("Undeclared: %v", err)
	}
	if err := call(context.Background(), "/p.S/Quiet"); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("Quiet without a peer: %v", err)
	}
	open, err := unary(context.Background(), nil, &grpc.UnaryServerInfo{FullMethod: "/grpc.health.v1.Health/Check"}, func(context.Context, any) (any, error) { return "open", nil })
	if err != nil || open != "open" {
		t.Fatalf("health check: %v, %v", open, err)
	}
	var got []string
	for _, e := range logs.FilterMessage("call").All() {
		f := e.ContextMap()
		got = append(got, f["method"].(string)+" "+f["code"].(string)+" "+f["caller"].(string))
	}
	want := []string{"/p.S/Loud OK " + node.String(), "/p.S/Undeclared PermissionDenied " + node.String(), "/p.S/Quiet Unauthenticated unknown"}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("audit lines:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
