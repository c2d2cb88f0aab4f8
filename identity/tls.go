package identity

import (
	"crypto/ed25519"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"time"
)

// ServerConfig returns the TLS configuration of a curator (or any service
// that nodes, users and nodes still enrolling reach), presenting cert, the
// server's node certificate from v's CA.
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
// its key. The configuration presents a fixed certificate; to serve a
// renewed one without restarting, set GetCertificate on a clone and clear
// Certificates.
func ServerConfig(v *Verifier, cert tls.Certificate) (*tls.Config, error) {
	if err := checkOwn(v, cert, KindNode, time.Now()); err != nil {
		return nil, fmt.Errorf("server certificate: %w", err)
	}
	return &tls.Config{
		MinVersion:             tls.VersionTLS13,
		Certificates:           []tls.Certificate{cert},
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

// clientConfig presents cert and accepts only servers with a node
// certificate from v's CA, and no other roots (the CA is pinned). The TLS
// stack checks the chain, the validity period, server authentication and
// the server name (ServerName, or the host dialled: an IP address, or a
// node ID, both of which node certificates carry); VerifyConnection then
// checks that the certificate is a node's. Only TLS 1.3 is offered.
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

// checkOwn checks that a certificate this process is about to present is
// one of kind from v's CA and valid at now: a wrong or expired certificate
// is better refused here than by every peer.
func checkOwn(v *Verifier, cert tls.Certificate, kind Kind, now time.Time) error {
	if len(cert.Certificate) == 0 {
		return errors.New("no certificate")
	}
	leaf := cert.Leaf
	if leaf == nil {
		var err error
		if leaf, err = x509.ParseCertificate(cert.Certificate[0]); err != nil {
			return fmt.Errorf("parsing: %w", err)
		}
	}
	key, ok := cert.PrivateKey.(ed25519.PrivateKey)
	if !ok {
		return fmt.Errorf("private key is a %T, want ed25519", cert.PrivateKey)
	}
	if _, err := TLSCertificate(leaf, key); err != nil {
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
