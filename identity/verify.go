package identity

import (
	"crypto/ed25519"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"slices"
	"time"
)

// Kind says what kind of caller an Identity describes. The kinds match the
// callers the curator's API declares (api/curator/v1, enum Caller):
// KindAnonymous satisfies only CALLER_UNAUTHENTICATED, every other kind
// also CALLER_KEY_HOLDER (see Identity.HoldsKey), KindNode CALLER_NODE and,
// for its own record, CALLER_NODE_SELF, and KindUser CALLER_USER.
type Kind int

// The kinds of callers. The zero Kind is KindAnonymous, so a zero Identity
// grants nothing.
const (
	// KindAnonymous is a caller that presented no certificate. Nothing is
	// known about it; it may only ask what is not secret.
	KindAnonymous Kind = iota
	// KindKeyHolder is a caller that presented a self-signed certificate:
	// all that is known is that it holds the private key of
	// Identity.PublicKey. A registering node is one, as are a node joining
	// after its certificate expired and an owner taking ownership. It is
	// never a node or a user, whatever its certificate says.
	KindKeyHolder
	// KindNode is a node, with a node certificate from the cluster CA.
	KindNode
	// KindUser is a user (an operator), with a user certificate from the
	// cluster CA.
	KindUser
)

// String returns "anonymous", "key-holder", "node" or "user".
func (k Kind) String() string {
	switch k {
	case KindAnonymous:
		return "anonymous"
	case KindKeyHolder:
		return "key-holder"
	case KindNode:
		return "node"
	case KindUser:
		return "user"
	}
	return fmt.Sprintf("Kind(%d)", int(k))
}

// Identity is who a peer is, as established from the certificate it
// presented. Only the fields of its Kind are set.
type Identity struct {
	// Kind is the kind of peer.
	Kind Kind
	// NodeID is the node's ID, for KindNode. It is NodeID(PublicKey).
	NodeID string
	// UserName is the user's name, for KindUser.
	UserName string
	// PublicKey is the peer's public key, for every kind but KindAnonymous:
	// the peer proved in the handshake that it holds the private key. For a
	// node, the curator must find this key in the node's record; for a key
	// holder, it is the key that asks to register, join or take
	// ownership.
	PublicKey ed25519.PublicKey
	// NotAfter is when the peer's certificate expires, for KindNode and
	// KindUser; after it, the identity no longer holds (see PeerIdentity).
	NotAfter time.Time
}

// IsNode reports whether i is the node nodeID, authenticated by a
// certificate from the cluster CA. It is the check behind "a node may only
// update itself".
func (i Identity) IsNode(nodeID string) bool {
	return i.Kind == KindNode && i.NodeID != "" && i.NodeID == nodeID
}

// HoldsKey reports whether the peer proved that it holds the private key
// of i.PublicKey: true for every kind but KindAnonymous.
func (i Identity) HoldsKey() bool {
	return i.Kind != KindAnonymous && len(i.PublicKey) == ed25519.PublicKeySize
}

// String describes i for logs: "node node-…", "user owner", "key-holder
// node-…" (the ID the key would have) or "anonymous".
func (i Identity) String() string {
	switch i.Kind {
	case KindNode:
		return "node " + i.NodeID
	case KindUser:
		return "user " + i.UserName
	case KindKeyHolder:
		if len(i.PublicKey) == ed25519.PublicKeySize {
			return "key-holder " + NodeID(i.PublicKey)
		}
	}
	return i.Kind.String()
}

// ErrUntrusted is what Verifier.Identify and the TLS configurations wrap
// when they refuse a certificate; the rest of the error says why.
var (
	// ErrUntrusted means that the peer's certificate is neither valid and
	// issued by the cluster CA, nor a self-signed ephemeral certificate:
	// another cluster's, expired, not yet valid, or malformed.
	ErrUntrusted = errors.New("certificate not trusted")
)

// Verifier establishes identities against one cluster CA. It needs only
// the CA's certificate, so every node and user can have one. A Verifier is
// safe for concurrent use.
type Verifier struct {
	ca    *x509.Certificate
	roots *x509.CertPool
}

// NewVerifier returns a Verifier trusting the CA whose certificate is
// caCert (from the register ticket, the cluster directory or CA.Certificate).
// caCert must be a self-signed ed25519 CA certificate.
func NewVerifier(caCert *x509.Certificate) (*Verifier, error) {
	if caCert == nil {
		return nil, errors.New("no CA certificate")
	}
	if _, ok := caCert.PublicKey.(ed25519.PublicKey); !ok {
		return nil, fmt.Errorf("CA certificate has a %T key, want ed25519", caCert.PublicKey)
	}
	if !caCert.IsCA || !caCert.BasicConstraintsValid {
		return nil, errors.New("CA certificate is not a CA certificate")
	}
	if err := caCert.CheckSignature(caCert.SignatureAlgorithm, caCert.RawTBSCertificate, caCert.Signature); err != nil {
		return nil, fmt.Errorf("CA certificate is not self-signed: %w", err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(caCert)
	return &Verifier{ca: caCert, roots: roots}, nil
}

// check refuses a Verifier not made by NewVerifier: with no roots, Go's
// x509 and TLS verification would fall back to the system's public roots.
func (v *Verifier) check() error {
	if v == nil || v.roots == nil {
		return errors.New("identity: Verifier not made by NewVerifier")
	}
	return nil
}

// CACertificate returns the certificate of the CA v trusts.
func (v *Verifier) CACertificate() *x509.Certificate { return v.ca }

// Identify says who a client is from the certificates it presented in a
// TLS handshake (leaf first, as in tls.ConnectionState.PeerCertificates),
// at time now. There are exactly four outcomes besides an error:
//
//   - Nothing presented: KindAnonymous.
//   - The leaf is valid at now and signed by the CA, and is a node
//     certificate: KindNode. (The CA signs leaves directly; any other
//     certificates presented are ignored, never used as intermediates.)
//   - Likewise for a user certificate: KindUser.
//   - The leaf does not verify against the CA, is self-signed (by the key it
//     carries), is not a CA certificate and is the only certificate
//     presented: KindKeyHolder, with only PublicKey set. Its subject,
//     extensions and validity period are ignored: it proves only that the
//     peer holds its key. (The TLS handshake proves that, by checking the
//     peer's signature with the key; Identify does not, so call it only on
//     the certificates of a completed handshake.)
//
// Anything else is an error wrapping ErrUntrusted: a certificate from
// another CA, an expired or not yet valid one, one the CA signed but that
// is not a well-formed node or user certificate (such as the CA's own).
// Such a certificate is not downgraded to a key holder: a peer that
// presents one is misconfigured or lying, and is refused. In particular, a
// node whose certificate has expired must present a self-signed one to
// prove its key (see KeyHolderClientConfig). A certificate that verifies
// against the CA is never reconsidered as self-signed.
func (v *Verifier) Identify(presented []*x509.Certificate, now time.Time) (Identity, error) {
	if err := v.check(); err != nil {
		return Identity{}, err
	}
	if len(presented) == 0 {
		return Identity{Kind: KindAnonymous}, nil
	}
	if presented[0] == nil {
		return Identity{}, fmt.Errorf("%w: nil certificate", ErrUntrusted)
	}
	leaf := presented[0]
	_, verr := leaf.Verify(x509.VerifyOptions{
		Roots:       v.roots,
		CurrentTime: now,
		KeyUsages:   []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	})
	if verr == nil {
		id, err := classify(leaf)
		if err != nil {
			return Identity{}, fmt.Errorf("%w: issued by the cluster CA but %w", ErrUntrusted, err)
		}
		return id, nil
	}
	if len(presented) == 1 && isSelfSigned(leaf) {
		return Identity{Kind: KindKeyHolder, PublicKey: leaf.PublicKey.(ed25519.PublicKey)}, nil
	}
	return Identity{}, fmt.Errorf("%w: %q: %w", ErrUntrusted, leaf.Subject.CommonName, verr)
}

// identifyServer checks the certificate a server presented, which the TLS
// stack has verified against the CA (chain, time, server authentication,
// host name): it must be a curator certificate, which only a curator
// issues, to itself, while its node holds ConsensusMember. A node
// certificate, whoever holds it, never passes as a curator.
func identifyServer(presented []*x509.Certificate) error {
	if len(presented) == 0 {
		return fmt.Errorf("%w: server presented no certificate", ErrUntrusted)
	}
	if _, err := classifyCurator(presented[0]); err != nil {
		return fmt.Errorf("%w: server certificate issued by the cluster CA but %w", ErrUntrusted, err)
	}
	return nil
}

// classifyCurator checks that cert, which the CA issued, is a well-formed
// curator certificate and returns the node ID it names: OU polis-curator,
// CN the node ID of its own key, good for server authentication only, and
// naming that node ID as its one DNS name.
func classifyCurator(cert *x509.Certificate) (string, error) {
	if cert.IsCA {
		return "", errors.New("it is a CA certificate")
	}
	pub, ok := cert.PublicKey.(ed25519.PublicKey)
	if !ok {
		return "", fmt.Errorf("it has a %T key, want ed25519", cert.PublicKey)
	}
	if len(cert.Subject.OrganizationalUnit) != 1 || cert.Subject.OrganizationalUnit[0] != ouCurator {
		return "", fmt.Errorf("it is not a curator certificate (organizational units %q)", cert.Subject.OrganizationalUnit)
	}
	name := cert.Subject.CommonName
	if err := VerifyNodeID(name, pub); err != nil {
		return "", fmt.Errorf("curator certificate: %w", err)
	}
	if !slices.Equal(cert.ExtKeyUsage, []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}) || len(cert.UnknownExtKeyUsage) != 0 {
		return "", fmt.Errorf("curator certificate of %s: not for server authentication only", name)
	}
	if !slices.Equal(cert.DNSNames, []string{name}) || len(cert.URIs) != 0 || len(cert.EmailAddresses) != 0 {
		return "", fmt.Errorf("curator certificate of %s: names other hosts than its node", name)
	}
	return name, nil
}

// classifyNodeAPI checks that cert, which the CA issued, is a well-formed
// node API certificate and returns the node ID it names: OU
// polis-node-api, CN the node ID of its own key, good for server
// authentication only, naming that node ID as its one DNS name and at
// most one IP address.
func classifyNodeAPI(cert *x509.Certificate) (string, error) {
	if cert.IsCA {
		return "", errors.New("it is a CA certificate")
	}
	pub, ok := cert.PublicKey.(ed25519.PublicKey)
	if !ok {
		return "", fmt.Errorf("it has a %T key, want ed25519", cert.PublicKey)
	}
	if len(cert.Subject.OrganizationalUnit) != 1 || cert.Subject.OrganizationalUnit[0] != ouNodeAPI {
		return "", fmt.Errorf("it is not a node API certificate (organizational units %q)", cert.Subject.OrganizationalUnit)
	}
	name := cert.Subject.CommonName
	if err := VerifyNodeID(name, pub); err != nil {
		return "", fmt.Errorf("node API certificate: %w", err)
	}
	if !slices.Equal(cert.ExtKeyUsage, []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}) || len(cert.UnknownExtKeyUsage) != 0 {
		return "", fmt.Errorf("node API certificate of %s: not for server authentication only", name)
	}
	if !slices.Equal(cert.DNSNames, []string{name}) || len(cert.IPAddresses) > 1 || len(cert.URIs) != 0 || len(cert.EmailAddresses) != 0 {
		return "", fmt.Errorf("node API certificate of %s: names other hosts than its node", name)
	}
	return name, nil
}

// classify reads the identity in a client certificate the CA issued. It
// checks that the whole certificate agrees with the kind its OU claims, so
// that a mistake in issuance cannot yield an identity: a node certificate
// must name the node its key belongs to, authenticate clients only and
// name no host; a user certificate must name a valid user, authenticate
// clients only and name no host. A curator certificate is no caller.
func classify(cert *x509.Certificate) (Identity, error) {
	if cert.IsCA {
		return Identity{}, errors.New("it is a CA certificate")
	}
	pub, ok := cert.PublicKey.(ed25519.PublicKey)
	if !ok {
		return Identity{}, fmt.Errorf("it has a %T key, want ed25519", cert.PublicKey)
	}
	if len(cert.Subject.OrganizationalUnit) != 1 {
		return Identity{}, fmt.Errorf("its subject has %d organizational units, want 1", len(cert.Subject.OrganizationalUnit))
	}
	name := cert.Subject.CommonName
	switch cert.Subject.OrganizationalUnit[0] {
	case ouNode:
		if err := VerifyNodeID(name, pub); err != nil {
			return Identity{}, fmt.Errorf("node certificate: %w", err)
		}
		if !slices.Equal(cert.ExtKeyUsage, []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}) || len(cert.UnknownExtKeyUsage) != 0 {
			return Identity{}, fmt.Errorf("node certificate of %s: not for client authentication only", name)
		}
		if len(cert.DNSNames) != 0 || len(cert.IPAddresses) != 0 || len(cert.URIs) != 0 || len(cert.EmailAddresses) != 0 {
			return Identity{}, fmt.Errorf("node certificate of %s: names hosts", name)
		}
		return Identity{Kind: KindNode, NodeID: name, PublicKey: pub, NotAfter: cert.NotAfter}, nil
	case ouUser:
		if err := ValidateUserName(name); err != nil {
			return Identity{}, fmt.Errorf("user certificate: %w", err)
		}
		if !slices.Equal(cert.ExtKeyUsage, []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}) || len(cert.UnknownExtKeyUsage) != 0 {
			return Identity{}, fmt.Errorf("user certificate of %q: not for client authentication only", name)
		}
		if len(cert.DNSNames) != 0 || len(cert.IPAddresses) != 0 || len(cert.URIs) != 0 || len(cert.EmailAddresses) != 0 {
			return Identity{}, fmt.Errorf("user certificate of %q: names hosts", name)
		}
		return Identity{Kind: KindUser, UserName: name, PublicKey: pub, NotAfter: cert.NotAfter}, nil
	case ouCurator:
		return Identity{}, errors.New("it is a curator certificate, which identifies a server, never a caller")
	case ouNodeAPI:
		return Identity{}, errors.New("it is a node API certificate, which identifies a server, never a caller")
	}
	return Identity{}, fmt.Errorf("its organizational unit %q is not a kind of certificate", cert.Subject.OrganizationalUnit[0])
}

// isSelfSigned reports whether cert is an acceptable ephemeral certificate:
// an ed25519 end-entity certificate whose issuer is its subject and whose
// signature its own key verifies.
func isSelfSigned(cert *x509.Certificate) bool {
	if _, ok := cert.PublicKey.(ed25519.PublicKey); !ok || cert.IsCA {
		return false
	}
	if string(cert.RawIssuer) != string(cert.RawSubject) {
		return false
	}
	return cert.CheckSignature(cert.SignatureAlgorithm, cert.RawTBSCertificate, cert.Signature) == nil
}

// EphemeralCertificate returns a self-signed certificate for key, made at
// now: what a peer without a valid certificate from the cluster CA presents
// to prove that it holds key (a node registering or joining after its
// certificate expired, an owner taking ownership). Its subject names the
// node ID the key would have, for whoever reads it in a log, but servers
// trust nothing in it beyond its key (see Verifier.Identify): its holder is
// KindKeyHolder, and what it may do with its key is the curator's decision
// (a register ticket, a known node's key, the owner's key). Servers ignore
// its validity period; EphemeralCertificateLifetime is nominal.
func EphemeralCertificate(key ed25519.PrivateKey, now time.Time) (*x509.Certificate, error) {
	if len(key) != ed25519.PrivateKeySize {
		return nil, fmt.Errorf("making ephemeral certificate: ed25519 private key of %d bytes, want %d", len(key), ed25519.PrivateKeySize)
	}
	pub := key.Public().(ed25519.PublicKey)
	tmpl := &x509.Certificate{
		Subject:               pkix.Name{Organization: []string{organization}, OrganizationalUnit: []string{ouEphemeral}, CommonName: NodeID(pub)},
		NotBefore:             now.Add(-ClockSkew),
		NotAfter:              now.Add(EphemeralCertificateLifetime),
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		SubjectKeyId:          SubjectKeyID(pub),
	}
	cert, err := Sign(tmpl, tmpl, pub, key)
	if err != nil {
		return nil, fmt.Errorf("making ephemeral certificate: %w", err)
	}
	return cert, nil
}
