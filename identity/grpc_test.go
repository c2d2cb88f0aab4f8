package identity

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
)

// identityHeader is the response header in which the test server tells
// the caller who it thinks the caller is.
const identityHeader = "x-polis-test-identity"

// whoIsCalling is the test server's central check, as the curator's will
// be: it establishes the caller's identity before any handler runs, refuses
// the call without one, and reports it in a response header.
func whoIsCalling(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	id, err := PeerIdentity(ctx)
	if err != nil {
		return nil, status.Error(codes.Unauthenticated, err.Error())
	}
	if err := grpc.SetHeader(ctx, metadata.Pairs(identityHeader, id.String())); err != nil {
		return nil, err
	}
	return handler(ctx, req)
}

// serveGRPC runs a gRPC server with the health service and whoIsCalling on
// 127.0.0.1:0 until the test ends, and returns its address.
func serveGRPC(t testing.TB, creds credentials.TransportCredentials) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer(grpc.Creds(creds), grpc.UnaryInterceptor(whoIsCalling))
	healthpb.RegisterHealthServer(s, health.NewServer())
	var wg sync.WaitGroup
	wg.Go(func() { s.Serve(ln) })
	t.Cleanup(func() {
		s.Stop()
		wg.Wait()
	})
	return ln.Addr().String()
}

// callAs makes one health check on addr with cfg and returns who the
// server said the caller is.
func callAs(t testing.TB, addr string, cfg *tls.Config) (string, error) {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(credentials.NewTLS(cfg)))
	if err != nil {
		t.Fatalf("grpc.NewClient: %v", err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	var md metadata.MD
	if _, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{}, grpc.Header(&md)); err != nil {
		return "", err
	}
	if v := md.Get(identityHeader); len(v) == 1 {
		return v[0], nil
	}
	return "", errors.New("no identity header")
}

func TestGRPCIdentity(t *testing.T) {
	now := testNow()
	ca := mustCA(t, now)
	v := ca.Verifier()
	curator := mustCurator(t, ca, now)
	creds, err := ServerCredentials(v, serving(t, v, curator))
	if err != nil {
		t.Fatal(err)
	}
	addr := serveGRPC(t, creds)

	n := mustNode(t, ca, now)
	nodeCfg, err := NodeClientConfig(v, n.tls)
	if err != nil {
		t.Fatal(err)
	}
	userCfg, err := UserClientConfig(v, mustUser(t, ca, "owner", now).tls)
	if err != nil {
		t.Fatal(err)
	}
	regKey := mustKey(t)
	regCfg, err := KeyHolderClientConfig(v, regKey)
	if err != nil {
		t.Fatal(err)
	}
	forged := mustTLS(t, selfSign(t, n.cert, n.key), n.key)

	for _, tc := range []struct {
		name string
		cfg  *tls.Config
		want string
	}{
		{"node", nodeCfg, "node " + NodeID(pubOf(n.key))},
		{"user", userCfg, "user owner"},
		{"registering node", regCfg, "key-holder " + NodeID(pubOf(regKey))},
		{"self-signed copy of a node", clientConfig(v, forged), "key-holder " + NodeID(pubOf(n.key))},
		{"anonymous", &tls.Config{MinVersion: tls.VersionTLS13, RootCAs: v.roots}, "anonymous"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := callAs(t, addr, tc.cfg)
			if err != nil {
				t.Fatalf("call: %v", err)
			}
			if got != tc.want {
				t.Errorf("server saw %q, want %q", got, tc.want)
			}
		})
	}

	for _, tc := range []struct {
		name string
		cfg  *tls.Config
	}{
		{"another CA's node", clientConfig(v, mustNode(t, mustCA(t, now), now).tls)},
		{"expired node", clientConfig(v, mustNode(t, ca, now.Add(-2*NodeCertificateLifetime)).tls)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := callAs(t, addr, tc.cfg)
			if status.Code(err) != codes.Unavailable {
				t.Errorf("call = %q, %v; want refused connection (Unavailable)", got, err)
			}
		})
	}
}

// TestGRPCWithoutServerCredentials serves with gRPC's plain TLS
// credentials around ServerConfig: handshakes are checked, but no identity
// is attached, and PeerIdentity says so rather than guessing.
func TestGRPCWithoutServerCredentials(t *testing.T) {
	now := testNow()
	ca := mustCA(t, now)
	v := ca.Verifier()
	cfg, err := ServerConfig(v, serving(t, v, mustCurator(t, ca, now)))
	if err != nil {
		t.Fatal(err)
	}
	addr := serveGRPC(t, credentials.NewTLS(cfg))
	nodeCfg, err := NodeClientConfig(v, mustNode(t, ca, now).tls)
	if err != nil {
		t.Fatal(err)
	}
	got, err := callAs(t, addr, nodeCfg)
	if status.Code(err) != codes.Unauthenticated {
		t.Errorf("call = %q, %v; want Unauthenticated", got, err)
	}
}

func TestPeerIdentity(t *testing.T) {
	if _, err := PeerIdentity(context.Background()); !errors.Is(err, ErrNoIdentity) {
		t.Errorf("PeerIdentity without a peer = %v, want ErrNoIdentity", err)
	}
	withAuth := func(ai credentials.AuthInfo) context.Context {
		return peer.NewContext(context.Background(), &peer.Peer{AuthInfo: ai})
	}
	if _, err := PeerIdentity(withAuth(credentials.TLSInfo{})); !errors.Is(err, ErrNoIdentity) {
		t.Errorf("PeerIdentity with plain TLS info = %v, want ErrNoIdentity", err)
	}
	id := NodeID(pubOf(mustKey(t)))
	valid := Identity{Kind: KindNode, NodeID: id, NotAfter: time.Now().Add(time.Hour)}
	if got, err := PeerIdentity(withAuth(AuthInfo{Identity: valid})); err != nil || !got.IsNode(id) {
		t.Errorf("PeerIdentity = %+v, %v; want node %s", got, err, id)
	}
	// A certificate that expired while the connection was open.
	expired := Identity{Kind: KindNode, NodeID: id, NotAfter: time.Now().Add(-time.Second)}
	if got, err := PeerIdentity(withAuth(AuthInfo{Identity: expired})); !errors.Is(err, ErrExpired) {
		t.Errorf("PeerIdentity with an expired certificate = %+v, %v; want ErrExpired", got, err)
	}
	// Anonymous callers and key holders have no certificate validity to
	// outlive.
	if _, err := PeerIdentity(withAuth(AuthInfo{})); err != nil {
		t.Errorf("PeerIdentity(anonymous) = %v", err)
	}
	holder := Identity{Kind: KindKeyHolder, PublicKey: pubOf(mustKey(t))}
	if got, err := PeerIdentity(withAuth(AuthInfo{Identity: holder})); err != nil || !got.HoldsKey() {
		t.Errorf("PeerIdentity(key holder) = %+v, %v", got, err)
	}
	if (AuthInfo{}).AuthType() != "tls" {
		t.Errorf("AuthInfo.AuthType() = %q, want tls", (AuthInfo{}).AuthType())
	}
}
