package identity

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/netip"
	"time"
)

// Lifetimes of the certificates this package makes. Each is counted from
// the moment of issue; certificates are also backdated by an hour
// (ClockSkew) so that a peer whose clock lags a little accepts them.
const (
	// CALifetime is how long the cluster CA is valid: 20 years. No
	// certificate outlives the CA that signed it (issuance clamps to the
	// CA's expiry), and this package cannot rotate the CA, so the CA must
	// outlive any cluster that is not rebuilt in between. Compromise of
	// an ed25519 key does not become likelier with age; the CA's key is
	// protected by where it lives (etcd), not by its lifetime.
	CALifetime = 20 * 365 * 24 * time.Hour

	// NodeCertificateLifetime is how long a node certificate is valid: one
	// year. Running nodes renew once NeedsRenewal says so (after eight
	// months), leaving four months in which a node that was switched off
	// can come back and renew. A node that stays off longer cannot renew
	// over mTLS and must be enrolled anew, as the curator allows. Expiry is a backstop, not the way to remove a node: the
	// curator refuses decommissioned and deleted nodes by their state.
	NodeCertificateLifetime = 365 * 24 * time.Hour

	// UserCertificateLifetime is how long a user certificate is valid: 90
	// days, renewed by the user's tools after 60. A user's key sits on an
	// operator's workstation, so its certificate is kept shorter-lived than
	// a node's, bounding how long the credentials of a tool nobody runs
	// any more stay usable. It cannot bound a stolen key (whoever holds the
	// key can renew), and removing a user is, again, done by the curator's
	// state, not by expiry. 90 rather than 30 days: the owner can always
	// get a fresh certificate with its key, but delegated users depend on
	// the owner or the curator for one, and should not lose access after a
	// quiet month.
	UserCertificateLifetime = 90 * 24 * time.Hour

	// EphemeralCertificateLifetime is the nominal lifetime of a
	// self-signed certificate (EphemeralCertificate). Nothing relies on it: a self-signed
	// certificate conveys only its key, whose possession the TLS handshake
	// proves, so servers ignore its validity period (a machine that has not
	// registered yet may have no trustworthy clock).
	EphemeralCertificateLifetime = 24 * time.Hour

	// CuratorCertificateLifetime is how long a curator certificate is
	// valid: two hours, renewed by the running curator after about one
	// (RenewAt, counting the hour of backdating). It is short on purpose:
	// it is how a curator that must no longer serve (its node
	// decommissioned or deleted, or ConsensusMember taken away) stops being
	// accepted by clients, without a revocation list that every client
	// would have to fetch, from a curator, before it could trust one. A
	// curator renews only while its node's record holds ConsensusMember,
	// so the certificate of a node taken out of the control plane expires
	// within this lifetime, whoever keeps a copy of it and its key.
	CuratorCertificateLifetime = 2 * time.Hour

	// NodeAPICertificateLifetime is how long a node API certificate is
	// valid: 30 days, renewed by the running node after 20. It names an
	// address the node reported, which may change; the node asks for a
	// new one when it does, and the short lifetime bounds how long a
	// certificate naming an address the node gave up stays valid.
	NodeAPICertificateLifetime = 30 * 24 * time.Hour
)

// ClockSkew is how far back every certificate's NotBefore lies from the
// moment of issue, so that a peer whose clock lags a little behind the
// issuer's still accepts the certificate. Polis's other certificate
// authority, consensus's peer CA, backdates by the same.
const ClockSkew = time.Hour

// Organizational units that say which kind of certificate a certificate is.
// Every certificate the CA issues carries exactly one of ouNode, ouUser and
// ouCurator, and the verification reads nothing else to tell the kinds
// apart (besides checking that the rest of the certificate agrees): node
// and user certificates identify clients (Verifier.Identify), curator
// certificates servers (identifyServer), never the other way round. Ephemeral certificates
// carry ouEphemeral, only for the benefit of people reading them: they are
// recognised by being self-signed, never by their contents.
const (
	organization = "Polis"
	ouNode       = "polis-node"
	ouUser       = "polis-user"
	ouEphemeral  = "polis-ephemeral"
	ouCurator    = "polis-curator"
	ouNodeAPI    = "polis-node-api"
)

// CA is the cluster's certificate authority: a self-signed ed25519
// certificate and its private key. It issues node and user certificates.
// A CA lives in etcd (see CreateCA, LoadCA and EnsureCA) and is held in
// memory by the control plane; everything else needs only its certificate
// (see NewVerifier).
type CA struct {
	cert *x509.Certificate
	key  ed25519.PrivateKey
}

// NewCA creates the CA of a new cluster, valid from now (backdated by an
// hour) for CALifetime. It only exists in memory: store it with CreateCA or,
// usually, let EnsureCA create and store it in one step.
func NewCA(now time.Time) (*CA, error) {
	key, err := GenerateKey()
	if err != nil {
		return nil, fmt.Errorf("creating CA: %w", err)
	}
	pub := key.Public().(ed25519.PublicKey)
	tmpl := &x509.Certificate{
		Subject:               pkix.Name{Organization: []string{organization}, CommonName: "Polis cluster CA"},
		NotBefore:             now.Add(-ClockSkew),
		NotAfter:              now.Add(CALifetime),
		IsCA:                  true,
		BasicConstraintsValid: true,
		MaxPathLenZero:        true,
		KeyUsage:              x509.KeyUsageCertSign,
		SubjectKeyId:          SubjectKeyID(pub),
	}
	cert, err := Sign(tmpl, tmpl, pub, key)
	if err != nil {
		return nil, fmt.Errorf("creating CA: %w", err)
	}
	return &CA{cert: cert, key: key}, nil
}

// newCAFrom checks that cert and key form a CA this package could have made
// and returns it. It is what makes a CA read back from etcd trustworthy.
func newCAFrom(cert *x509.Certificate, key ed25519.PrivateKey) (*CA, error) {
	pub, ok := cert.PublicKey.(ed25519.PublicKey)
	if !ok {
		return nil, fmt.Errorf("CA certificate has a %T key, want ed25519", cert.PublicKey)
	}
	if !cert.IsCA || !cert.BasicConstraintsValid || cert.KeyUsage&x509.KeyUsageCertSign == 0 {
		return nil, errors.New("CA certificate is not a CA certificate (basic constraints or key usage)")
	}
	if err := cert.CheckSignature(cert.SignatureAlgorithm, cert.RawTBSCertificate, cert.Signature); err != nil {
		return nil, fmt.Errorf("CA certificate is not self-signed: %w", err)
	}
	if !pub.Equal(key.Public()) {
		return nil, errors.New("CA key does not match the CA certificate")
	}
	return &CA{cert: cert, key: key}, nil
}

// Certificate returns the CA's certificate: what nodes and users pin, what
// register tickets and the cluster directory carry (its Raw DER), and what
// NewVerifier takes. Callers must not modify it.
func (c *CA) Certificate() *x509.Certificate { return c.cert }

// Verifier returns a Verifier that trusts this CA.
func (c *CA) Verifier() *Verifier {
	v, err := NewVerifier(c.cert)
	if err != nil {
		// c.cert passed the same checks when c was made.
		panic(fmt.Sprintf("identity: CA certificate refused by NewVerifier: %v", err))
	}
	return v
}

// IssueNode issues the certificate of the node whose public key is pub,
// valid from now for NodeCertificateLifetime (or until the CA expires, if
// sooner). Its subject names the node (CN = NodeID(pub), OU = polis-node);
// it is good for client authentication only and names no host: it proves
// "this is node X" to the curator, and nothing to anyone else. In
// particular it cannot serve as a curator (that takes a curator
// certificate, IssueCurator), so no address a node reported about itself
// ever ends up in a certificate a client trusts.
func (c *CA) IssueNode(pub ed25519.PublicKey, now time.Time) (*x509.Certificate, error) {
	if len(pub) != ed25519.PublicKeySize {
		return nil, fmt.Errorf("issuing node certificate: public key of %d bytes, want %d", len(pub), ed25519.PublicKeySize)
	}
	id := NodeID(pub)
	tmpl := &x509.Certificate{
		Subject:     pkix.Name{Organization: []string{organization}, OrganizationalUnit: []string{ouNode}, CommonName: id},
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	cert, err := c.issue(tmpl, pub, now, NodeCertificateLifetime)
	if err != nil {
		return nil, fmt.Errorf("issuing node certificate for %s: %w", id, err)
	}
	return cert, nil
}

// IssueCurator issues the serving certificate of the curator that runs on
// the node whose public key is pub, valid from now for
// CuratorCertificateLifetime (or until the CA expires, if sooner). Its
// subject names the node (CN = NodeID(pub), OU = polis-curator); it is good
// for server authentication only; it names the node ID as a DNS name, so
// that clients can dial a curator by the node ID the cluster directory
// gives, and ips, the addresses the curator serves on.
//
// Only a curator calls it, for itself, once it has checked that its own
// node's record holds ConsensusMember, a role only the curator gives: the
// CA's key lives in etcd, which only consensus members reach, and the
// addresses are those the curator bound. It is the one certificate every
// client of the curator accepts from a server (see clientConfig).
func (c *CA) IssueCurator(pub ed25519.PublicKey, ips []netip.Addr, now time.Time) (*x509.Certificate, error) {
	if len(pub) != ed25519.PublicKeySize {
		return nil, fmt.Errorf("issuing curator certificate: public key of %d bytes, want %d", len(pub), ed25519.PublicKeySize)
	}
	id := NodeID(pub)
	var netIPs []net.IP
	for _, ip := range ips {
		if !ip.IsValid() {
			return nil, fmt.Errorf("issuing curator certificate for %s: invalid IP address", id)
		}
		netIPs = append(netIPs, ip.Unmap().AsSlice())
	}
	tmpl := &x509.Certificate{
		Subject:     pkix.Name{Organization: []string{organization}, OrganizationalUnit: []string{ouCurator}, CommonName: id},
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames:    []string{id},
		IPAddresses: netIPs,
	}
	cert, err := c.issue(tmpl, pub, now, CuratorCertificateLifetime)
	if err != nil {
		return nil, fmt.Errorf("issuing curator certificate for %s: %w", id, err)
	}
	return cert, nil
}

// IssueNodeAPI issues the serving certificate of the own API of the node
// whose public key is pub (nodeapi: its gRPC API and /metrics), valid from
// now for NodeAPICertificateLifetime (or until the CA expires, if sooner).
// Its subject names the node (CN = NodeID(pub), OU = polis-node-api); it is
// good for server authentication only; it names the node ID as a DNS name
// and addr, the address the node's record reports, as an IP address (none
// if addr is not valid or unspecified). Stock TLS clients verify it with
// the cluster CA as root and the node ID (or the address) as server name.
//
// Curator clients never accept it (they want OU polis-curator), and the
// curator never takes it for a caller (it is not for client
// authentication): it proves only "this server holds node X's key".
func (c *CA) IssueNodeAPI(pub ed25519.PublicKey, addr netip.Addr, now time.Time) (*x509.Certificate, error) {
	if len(pub) != ed25519.PublicKeySize {
		return nil, fmt.Errorf("issuing node API certificate: public key of %d bytes, want %d", len(pub), ed25519.PublicKeySize)
	}
	id := NodeID(pub)
	tmpl := &x509.Certificate{
		Subject:     pkix.Name{Organization: []string{organization}, OrganizationalUnit: []string{ouNodeAPI}, CommonName: id},
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames:    []string{id},
	}
	if addr.IsValid() && !addr.IsUnspecified() {
		tmpl.IPAddresses = []net.IP{addr.Unmap().AsSlice()}
	}
	cert, err := c.issue(tmpl, pub, now, NodeAPICertificateLifetime)
	if err != nil {
		return nil, fmt.Errorf("issuing node API certificate for %s: %w", id, err)
	}
	return cert, nil
}

// IssueUser issues the certificate of user name, whose public key is pub,
// valid from now for UserCertificateLifetime (or until the CA expires, if
// sooner). Its subject names the user (CN = name, OU = polis-user); it is
// good for client authentication only and names no host, so it can neither
// serve nor pass for a node.
func (c *CA) IssueUser(name string, pub ed25519.PublicKey, now time.Time) (*x509.Certificate, error) {
	if err := ValidateUserName(name); err != nil {
		return nil, fmt.Errorf("issuing user certificate: %w", err)
	}
	if len(pub) != ed25519.PublicKeySize {
		return nil, fmt.Errorf("issuing user certificate for %q: public key of %d bytes, want %d", name, len(pub), ed25519.PublicKeySize)
	}
	tmpl := &x509.Certificate{
		Subject:     pkix.Name{Organization: []string{organization}, OrganizationalUnit: []string{ouUser}, CommonName: name},
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	cert, err := c.issue(tmpl, pub, now, UserCertificateLifetime)
	if err != nil {
		return nil, fmt.Errorf("issuing user certificate for %q: %w", name, err)
	}
	return cert, nil
}

// Renew issues a fresh certificate for the same key and the same identity
// as old, which this CA must have issued: a node certificate for the same
// node, or a user certificate for the same user, with a full new lifetime
// from now. It does not check old's validity period, so that the caller
// decides whether an expired certificate may still be renewed (over mTLS
// it cannot be: the handshake refuses it). Curator certificates are not
// renewed this way: a curator issues itself a new one (IssueCurator) after
// checking again that its node may serve.
func (c *CA) Renew(old *x509.Certificate, now time.Time) (*x509.Certificate, error) {
	if err := old.CheckSignatureFrom(c.cert); err != nil {
		return nil, fmt.Errorf("renewing certificate %q: not issued by this CA: %w", old.Subject.CommonName, err)
	}
	id, err := classify(old)
	if err != nil {
		return nil, fmt.Errorf("renewing certificate %q: %w", old.Subject.CommonName, err)
	}
	switch id.Kind {
	case KindNode:
		return c.IssueNode(id.PublicKey, now)
	case KindUser:
		return c.IssueUser(id.UserName, id.PublicKey, now)
	}
	return nil, fmt.Errorf("renewing certificate %q: cannot renew a certificate of kind %s", old.Subject.CommonName, id.Kind)
}

// issue completes tmpl with a serial number, validity and key identifier,
// and signs it for pub.
func (c *CA) issue(tmpl *x509.Certificate, pub ed25519.PublicKey, now time.Time, lifetime time.Duration) (*x509.Certificate, error) {
	notAfter := now.Add(lifetime)
	if notAfter.After(c.cert.NotAfter) {
		notAfter = c.cert.NotAfter
	}
	if !notAfter.After(now) {
		return nil, fmt.Errorf("the CA expired at %s", c.cert.NotAfter.UTC().Format(time.RFC3339))
	}
	tmpl.NotBefore = now.Add(-ClockSkew)
	tmpl.NotAfter = notAfter
	tmpl.SubjectKeyId = SubjectKeyID(pub)
	tmpl.BasicConstraintsValid = true
	return Sign(tmpl, c.cert, pub, c.key)
}

// Sign gives tmpl a fresh serial number (SerialNumber), signs it for pub
// with parent's key parentKey, and returns the certificate parsed back. For
// a self-signed certificate, parent is tmpl and parentKey pub's own key.
// The caller sets everything else, the validity period included. It is
// exported for Polis's other certificate authority, consensus's peer CA,
// which issues certificates of its own kind but the same way.
func Sign(tmpl, parent *x509.Certificate, pub ed25519.PublicKey, parentKey ed25519.PrivateKey) (*x509.Certificate, error) {
	serial, err := SerialNumber()
	if err != nil {
		return nil, err
	}
	tmpl.SerialNumber = serial
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, pub, parentKey)
	if err != nil {
		return nil, fmt.Errorf("signing: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("parsing what was signed: %w", err)
	}
	return cert, nil
}

// RenewAt returns when cert should be renewed: once two thirds of its
// validity period (NotBefore to NotAfter) have passed. A third of the
// lifetime is left for retries, and for nodes that were switched off.
func RenewAt(cert *x509.Certificate) time.Time {
	return cert.NotBefore.Add(cert.NotAfter.Sub(cert.NotBefore) / 3 * 2)
}

// NeedsRenewal reports whether cert should be renewed at now: from
// RenewAt(cert) on, expired certificates included.
func NeedsRenewal(cert *x509.Certificate, now time.Time) bool {
	return !now.Before(RenewAt(cert))
}

// SerialNumber returns a random serial number of 128 bits: unique without
// coordination between the curators (or consensus members) that issue
// certificates, and unpredictable. As a positive DER integer it takes at
// most 17 octets, within the 20 that RFC 5280 allows.
func SerialNumber() (*big.Int, error) {
	b := make([]byte, 16)
	for {
		if _, err := rand.Read(b); err != nil {
			return nil, fmt.Errorf("generating serial number: %w", err)
		}
		// Zero is not a valid serial; the loop ends at once but for a
		// 2⁻¹²⁸ chance.
		if n := new(big.Int).SetBytes(b); n.Sign() > 0 {
			return n, nil
		}
	}
}

// SubjectKeyID is the subject key identifier of pub (RFC 5280 §4.2.1.2,
// method 1 with SHA-256 instead of SHA-1, truncated to 160 bits).
func SubjectKeyID(pub ed25519.PublicKey) []byte {
	sum := sha256.Sum256(pub)
	return sum[:20]
}
