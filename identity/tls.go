package identity

import (
	"crypto/ed25519"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"sync/atomic"
	"time"
)

// ServingCertificate is the curator certificate a server presents, which
// the server replaces while it serves (curator certificates are
// short-lived: CuratorCertificateLifetime). Make it with
// NewServingCertificate; it is safe for concurrent use.
type ServingCertificate struct {
	v *Verifier
	// node says the server is a node's own API (NewNodeServingCertificate),
	// presenting the node certificate, instead of a curator.
	node bool
	cur  atomic.Pointer[tls.Certificate]
}

// NewServingCertificate returns a ServingCertificate presenting cert, a
// curator certificate from v's CA, valid now.
func NewServingCertificate(v *Verifier, cert tls.Certificate) (*ServingCertificate, error) {
	if err := v.check(); err != nil {
		return nil, err
	}
	s := &ServingCertificate{v: v}
	if err := s.Replace(cert); err != nil {
		return nil, err
	}
	return s, nil
}

// NewNodeServingCertificate returns a ServingCertificate for a node's own
// API (not the curator), presenting cert, valid now: the node's API
// certificate from v's CA (CA.IssueNodeAPI), which stock TLS clients verify
// (NodeAPIClientConfig), or, until the node has one, its node certificate,
// which no client verifying the host accepts. Curator clients accept
// neither.
func NewNodeServingCertificate(v *Verifier, cert tls.Certificate) (*ServingCertificate, error) {
	if err := v.check(); err != nil {
		return nil, err
	}
	s := &ServingCertificate{v: v, node: true}
	if err := s.Replace(cert); err != nil {
		return nil, err
	}
	return s, nil
}

// Replace makes the server present cert from the next handshake on, after
// checking that it is a curator certificate (for NewNodeServingCertificate,
// a node API or node certificate) from the CA, valid now. Connections
// already made keep the certificate they were made with.
func (s *ServingCertificate) Replace(cert tls.Certificate) error {
	var leaf *x509.Certificate
	var err error
	if s.node {
		leaf, err = checkOwnNodeAPI(s.v, cert, time.Now())
		if err != nil {
			// Not a node API certificate: a node certificate will do
			// until the node has one.
			if leaf, err = ownLeaf(cert); err == nil {
				err = checkOwn(s.v, cert, KindNode, time.Now())
			}
		}
	} else {
		leaf, err = checkOwnCurator(s.v, cert, time.Now())
	}
	if err != nil {
		return fmt.Errorf("server certificate: %w", err)
	}
	cert.Leaf = leaf
	s.cur.Store(&cert)
	return nil
}

// Leaf returns the certificate presented now.
func (s *ServingCertificate) Leaf() *x509.Certificate { return s.cur.Load().Leaf }

// ServerConfig returns the TLS configuration of the curator (the service
// that nodes, users and nodes still enrolling reach), presenting its
// curator certificate, held by cert.
//
// Clients may present a certificate (tls.RequestClientCert), which the TLS
// stack checks only for possession of its key: VerifyConnection verifies
// it, with v.Identify, on every connection. A certificate that is neither a
// valid node or user certificate from the CA nor a self-signed one fails
// the handshake. A connection that succeeds may be anonymous (no
// certificate) or a mere key holder (self-signed): what a caller may do is
// decided per call from its Identity (see Verifier.Identify,
// ServerCredentials and PeerIdentity), never from the mere fact that the
// handshake succeeded.
//
// Only TLS 1.3 is offered, and session tickets are disabled, so that every
// connection is a full handshake in which the client proves possession of
// its key.
func ServerConfig(v *Verifier, cert *ServingCertificate) (*tls.Config, error) {
	if err := v.check(); err != nil {
		return nil, err
	}
	if cert == nil || cert.cur.Load() == nil {
		return nil, errors.New("server certificate: none (make it with NewServingCertificate)")
	}
	return &tls.Config{
		MinVersion: tls.VersionTLS13,
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
			return cert.cur.Load(), nil
		},
		ClientAuth:             tls.RequestClientCert,
		SessionTicketsDisabled: true,
		VerifyConnection: func(cs tls.ConnectionState) error {
			_, err := v.Identify(cs.PeerCertificates, time.Now())
			return err
		},
	}, nil
}

// NodeClientConfig returns the TLS configuration of a node calling another
// node (the curator), presenting cert, its node certificate. See
// clientConfig for how the server is checked.
func NodeClientConfig(v *Verifier, cert tls.Certificate) (*tls.Config, error) {
	if err := checkOwn(v, cert, KindNode, time.Now()); err != nil {
		return nil, fmt.Errorf("node client certificate: %w", err)
	}
	return clientConfig(v, cert), nil
}

// UserClientConfig returns the TLS configuration of a user (polisctl)
// calling the curator, presenting cert, the user's certificate. See
// clientConfig for how the server is checked.
func UserClientConfig(v *Verifier, cert tls.Certificate) (*tls.Config, error) {
	if err := checkOwn(v, cert, KindUser, time.Now()); err != nil {
		return nil, fmt.Errorf("user client certificate: %w", err)
	}
	return clientConfig(v, cert), nil
}

// KeyHolderClientConfig returns the TLS configuration of a peer that
// proves only that it holds key: it presents a self-signed certificate for
// key (EphemeralCertificate), and the server sees a KindKeyHolder. It is
// what a node uses to register (with v made from the CA certificate of the
// register ticket or cluster directory), what a node whose certificate
// expired while it was down uses to join again, and what the owner uses to
// take ownership. See clientConfig for how the server is checked.
func KeyHolderClientConfig(v *Verifier, key ed25519.PrivateKey) (*tls.Config, error) {
	if err := v.check(); err != nil {
		return nil, err
	}
	cert, err := EphemeralCertificate(key, time.Now())
	if err != nil {
		return nil, err
	}
	tc, err := TLSCertificate(cert, key)
	if err != nil {
		return nil, fmt.Errorf("ephemeral certificate: %w", err)
	}
	return clientConfig(v, tc), nil
}

// NodeAPIClientConfig returns the TLS configuration of a user or node
// calling the own API of node nodeID (not the curator), presenting cert, a
// user or node certificate from v's CA. The server is verified as any
// stock TLS client would: a chain to v's CA (and no other root), server
// authentication, and nodeID as the server name, which the node's API
// certificate (CA.IssueNodeAPI) carries as a DNS name. VerifyConnection
// then checks that it is a node API certificate: the curator certificate
// of the same node also names its node ID, but the node API never serves
// with it.
func NodeAPIClientConfig(v *Verifier, cert tls.Certificate, nodeID string) (*tls.Config, error) {
	if err := v.check(); err != nil {
		return nil, err
	}
	if err := ValidateNodeID(nodeID); err != nil {
		return nil, err
	}
	leaf, err := ownLeaf(cert)
	if err != nil {
		return nil, fmt.Errorf("client certificate: %w", err)
	}
	id, err := v.Identify([]*x509.Certificate{leaf}, time.Now())
	if err != nil {
		return nil, fmt.Errorf("client certificate: %w", err)
	}
	if id.Kind != KindNode && id.Kind != KindUser {
		return nil, fmt.Errorf("client certificate: %s is a %s certificate, want a node or user certificate", id, id.Kind)
	}
	return &tls.Config{
		MinVersion:   tls.VersionTLS13,
		Certificates: []tls.Certificate{cert},
		RootCAs:      v.roots,
		ServerName:   nodeID,
		VerifyConnection: func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 {
				return fmt.Errorf("%w: node %s presented no certificate", ErrUntrusted, nodeID)
			}
			if _, err := classifyNodeAPI(cs.PeerCertificates[0]); err != nil {
				return fmt.Errorf("%w: node %s: %w", ErrUntrusted, nodeID, err)
			}
			return nil
		},
	}, nil
}

// checkOwnNodeAPI checks that a certificate this process is about to
// serve with is a node API certificate from v's CA, valid at now, and
// returns its parsed leaf.
func checkOwnNodeAPI(v *Verifier, cert tls.Certificate, now time.Time) (*x509.Certificate, error) {
	return checkOwnServing(v, cert, now, classifyNodeAPI)
}

// checkOwnServing checks that a certificate this process is about to serve
// with chains to v's CA for server authentication at now and is of the
// kind classify accepts, and returns its parsed leaf.
func checkOwnServing(v *Verifier, cert tls.Certificate, now time.Time, classify func(*x509.Certificate) (string, error)) (*x509.Certificate, error) {
	leaf, err := ownLeaf(cert)
	if err != nil {
		return nil, err
	}
	if _, err := leaf.Verify(x509.VerifyOptions{
		Roots:       v.roots,
		CurrentTime: now,
		KeyUsages:   []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrUntrusted, err)
	}
	if _, err := classify(leaf); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrUntrusted, err)
	}
	return leaf, nil
}

// clientConfig presents cert and accepts only servers with a curator
// certificate from v's CA, and no other roots (the CA is pinned). The TLS
// stack checks the chain, the validity period, server authentication and
// the server name (ServerName, or the host dialled: the node ID, which the
// curator client gives, or an IP address the curator serves on, both of
// which curator certificates carry); VerifyConnection then checks that the
// certificate is a curator's. A node certificate is refused: it is for
// client authentication only, and no node-chosen address is in any
// certificate a client accepts. Only TLS 1.3 is offered.
func clientConfig(v *Verifier, cert tls.Certificate) *tls.Config {
	return &tls.Config{
		MinVersion:   tls.VersionTLS13,
		Certificates: []tls.Certificate{cert},
		RootCAs:      v.roots,
		VerifyConnection: func(cs tls.ConnectionState) error {
			return identifyServer(cs.PeerCertificates)
		},
	}
}

// checkOwnCurator checks that a certificate this process is about to serve
// with is a curator certificate from v's CA, valid at now, and returns
// its parsed leaf.
func checkOwnCurator(v *Verifier, cert tls.Certificate, now time.Time) (*x509.Certificate, error) {
	return checkOwnServing(v, cert, now, classifyCurator)
}

// ownLeaf parses the leaf of cert and checks that its private key belongs
// to it.
func ownLeaf(cert tls.Certificate) (*x509.Certificate, error) {
	if len(cert.Certificate) == 0 {
		return nil, errors.New("no certificate")
	}
	leaf := cert.Leaf
	if leaf == nil {
		var err error
		if leaf, err = x509.ParseCertificate(cert.Certificate[0]); err != nil {
			return nil, fmt.Errorf("parsing: %w", err)
		}
	}
	key, ok := cert.PrivateKey.(ed25519.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("private key is a %T, want ed25519", cert.PrivateKey)
	}
	if _, err := TLSCertificate(leaf, key); err != nil {
		return nil, err
	}
	return leaf, nil
}

// checkOwn checks that a certificate this process is about to present is
// one of kind from v's CA and valid at now: a wrong or expired certificate
// is better refused here than by every peer.
func checkOwn(v *Verifier, cert tls.Certificate, kind Kind, now time.Time) error {
	leaf, err := ownLeaf(cert)
	if err != nil {
		return err
	}
	id, err := v.Identify([]*x509.Certificate{leaf}, now)
	if err != nil {
		return err
	}
	if id.Kind != kind {
		return fmt.Errorf("%s is a %s certificate, want a %s certificate", id, id.Kind, kind)
	}
	return nil
}

// FirstContactConfig returns the TLS configuration of a call to a curator
// made before anything is trusted, to fetch the cluster's CA certificate:
// the handshake verifies nothing (the caller decides afterwards whether
// to trust the answer: a register ticket's proof, or the user), and served
// returns the certificate the server presented (nil before a handshake),
// for the caller to check against the CA the call sent. The certificate
// is kept atomically, so that the race detector need not know how gRPC
// orders the handshake and the call's return.
func FirstContactConfig() (tc *tls.Config, served func() *x509.Certificate) {
	var serverCert atomic.Pointer[x509.Certificate]
	tc = &tls.Config{
		MinVersion:         tls.VersionTLS13,
		InsecureSkipVerify: true, // see above: checked by the caller
		VerifyConnection: func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) > 0 {
				serverCert.Store(cs.PeerCertificates[0])
			}
			return nil
		},
	}
	return tc, serverCert.Load
}
