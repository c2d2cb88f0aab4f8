package identity

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
)

// AuthInfo is the gRPC authentication information of a connection accepted
// with ServerCredentials: the TLS state gRPC's own TLS credentials give, and
// the peer's Identity, established once per connection.
type AuthInfo struct {
	credentials.TLSInfo
	// Identity is who the peer is.
	Identity Identity
}

// ServerCredentials returns gRPC transport credentials for a curator
// presenting the curator certificate cert holds (see ServerConfig for what
// is accepted). Each accepted
// connection carries an AuthInfo with the peer's Identity, which handlers
// and interceptors read with PeerIdentity.
func ServerCredentials(v *Verifier, cert *ServingCertificate) (credentials.TransportCredentials, error) {
	cfg, err := ServerConfig(v, cert)
	if err != nil {
		return nil, err
	}
	return &serverCredentials{TransportCredentials: credentials.NewTLS(cfg), v: v}, nil
}

// serverCredentials wraps gRPC's TLS credentials to attach the peer's
// Identity to the connection.
type serverCredentials struct {
	credentials.TransportCredentials
	v *Verifier
}

// ServerHandshake runs the TLS handshake (which, through ServerConfig's
// VerifyConnection, refuses untrusted peers) and records the identity.
func (c *serverCredentials) ServerHandshake(raw net.Conn) (net.Conn, credentials.AuthInfo, error) {
	conn, ai, err := c.TransportCredentials.ServerHandshake(raw)
	if err != nil {
		return nil, nil, err
	}
	info, ok := ai.(credentials.TLSInfo)
	if !ok {
		conn.Close()
		return nil, nil, fmt.Errorf("identity: TLS credentials returned %T auth info", ai)
	}
	id, err := c.v.Identify(info.State.PeerCertificates, time.Now())
	if err != nil {
		conn.Close()
		return nil, nil, err
	}
	return conn, AuthInfo{TLSInfo: info, Identity: id}, nil
}

// Clone returns a copy of c.
func (c *serverCredentials) Clone() credentials.TransportCredentials {
	return &serverCredentials{TransportCredentials: c.TransportCredentials.Clone(), v: c.v}
}

// ErrNoIdentity means that a gRPC call did not come over a connection
// accepted with ServerCredentials, so who made it is unknown.
var ErrNoIdentity = errors.New("no identity: connection not accepted with identity.ServerCredentials")

// ErrExpired means that the certificate a peer connected with has expired
// since; it must reconnect with a renewed one.
var ErrExpired = errors.New("peer certificate expired during the connection")

// PeerIdentity returns the Identity of the peer that made the gRPC call
// whose context is ctx. The identity was established when the connection
// was made; for a node or user, PeerIdentity also checks that its
// certificate has not expired since, so that a long-lived connection does
// not outlive its credentials. It answers who the caller is, not what it
// may do: that is the curator's central permission check, which also
// refuses nodes and users that its state says are gone.
func PeerIdentity(ctx context.Context) (Identity, error) {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return Identity{}, ErrNoIdentity
	}
	ai, ok := p.AuthInfo.(AuthInfo)
	if !ok {
		return Identity{}, ErrNoIdentity
	}
	id := ai.Identity
	if (id.Kind == KindNode || id.Kind == KindUser) && time.Now().After(id.NotAfter) {
		return Identity{}, fmt.Errorf("%w: %s, at %s", ErrExpired, id, id.NotAfter.UTC().Format(time.RFC3339))
	}
	return id, nil
}
