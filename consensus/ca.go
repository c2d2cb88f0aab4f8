package consensus

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	// Named so, since this package's own identity (datadir.go) is the
	// member's.
	polisidentity "github.com/polis-os/polis/identity"
)

// The peer CA signs the certificates etcd members present to each other. It
// is ed25519 like every other Polis identity: keys are small, signing is
// fast and deterministic, and Go's TLS stack (1.2 and 1.3) and x509 package
// support it for certificates and CRLs alike. It is not the cluster CA of
// package identity and signs nothing but etcd peers; it shares only the
// mechanics of issuing with it (serial numbers, backdating by ClockSkew,
// key identifiers, signing: polisidentity.Sign).
//
// Certificates never expire (RFC 5280's "no well-defined expiration date"):
// a member's right to talk to its peers ends when it is removed, which
// revokes its certificate, not when a clock says so. A cluster whose nodes
// were powered off for longer than a validity period must still come back.

// Keys of the internal namespace that hold the CA and the CRL. Nothing a
// namespaced client can reach starts with internalPrefix (see clients.go).
const (
	caKeyKey   = internalPrefix + "ca/key"  // PKCS#8 DER of the CA private key
	caCertKey  = internalPrefix + "ca/cert" // DER of the CA certificate
	crlKey     = internalPrefix + "crl"     // DER of the current CRL
	peerPrefix = internalPrefix + "peers/"  // + member name: DER of its peer certificate
)

// noExpiry is the GeneralizedTime 99991231235959Z that RFC 5280 §4.1.2.5
// reserves for certificates without a well-defined expiration date.
var noExpiry = time.Date(9999, time.December, 31, 23, 59, 59, 0, time.UTC)

// ca is the peer certificate authority: its certificate, and its key when the
// caller is allowed to issue (the key lives in etcd, see loadCA).
type ca struct {
	cert *x509.Certificate
	key  ed25519.PrivateKey
}

// newCA creates the self-signed CA of a new cluster.
func newCA(now time.Time) (*ca, error) {
	pub, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generating CA key: %w", err)
	}
	tmpl := &x509.Certificate{
		Subject:               pkix.Name{CommonName: "Polis consensus peer CA"},
		NotBefore:             now.Add(-polisidentity.ClockSkew),
		NotAfter:              noExpiry,
		IsCA:                  true,
		BasicConstraintsValid: true,
		MaxPathLenZero:        true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		SubjectKeyId:          polisidentity.SubjectKeyID(pub),
	}
	cert, err := polisidentity.Sign(tmpl, tmpl, pub, key)
	if err != nil {
		return nil, fmt.Errorf("self-signing CA certificate: %w", err)
	}
	return &ca{cert: cert, key: key}, nil
}

// issuePeer issues the peer certificate of member name reachable at addr. The
// certificate serves both sides of a peer connection (etcd members dial each
// other with the same certificate they serve), names the member in its CN
// (for logs and audits), carries the peer IP (dialing members verify it) and
// the peer URL as a URI (so an unstarted member can be named from its
// certificate alone).
func (c *ca) issuePeer(name string, addr netip.AddrPort, pub ed25519.PublicKey, now time.Time) (*x509.Certificate, error) {
	if c.key == nil {
		return nil, errors.New("CA key not available")
	}
	u, err := url.Parse(peerURL(addr))
	if err != nil {
		return nil, fmt.Errorf("parsing peer URL: %w", err)
	}
	tmpl := &x509.Certificate{
		Subject:     pkix.Name{CommonName: name},
		NotBefore:   now.Add(-polisidentity.ClockSkew),
		NotAfter:    noExpiry,
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		IPAddresses: []net.IP{addr.Addr().AsSlice()},
		URIs:        []*url.URL{u},
	}
	cert, err := polisidentity.Sign(tmpl, c.cert, pub, c.key)
	if err != nil {
		return nil, fmt.Errorf("issuing peer certificate for %q: %w", name, err)
	}
	return cert, nil
}

// checkPeerCert verifies that der is a peer certificate issued by caCert for
// the given name, address and public key: a joining member checks the join
// data it was handed before it writes anything.
func checkPeerCert(caCert *x509.Certificate, der []byte, name string, addr netip.AddrPort, pub ed25519.PublicKey) (*x509.Certificate, error) {
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("parsing peer certificate: %w", err)
	}
	if err := cert.CheckSignatureFrom(caCert); err != nil {
		return nil, fmt.Errorf("peer certificate not signed by the cluster CA: %w", err)
	}
	if cert.Subject.CommonName != name {
		return nil, fmt.Errorf("peer certificate is for %q, not %q", cert.Subject.CommonName, name)
	}
	if err := cert.VerifyHostname(addr.Addr().String()); err != nil {
		return nil, fmt.Errorf("peer certificate does not cover peer address %s: %w", addr, err)
	}
	certPub, ok := cert.PublicKey.(ed25519.PublicKey)
	if !ok || !certPub.Equal(pub) {
		return nil, errors.New("peer certificate is not for this member's peer key")
	}
	return cert, nil
}

// peerAddressOf returns the peer address a peer certificate was issued for,
// from its URI.
func peerAddressOf(cert *x509.Certificate) (netip.AddrPort, bool) {
	for _, u := range cert.URIs {
		if ap, err := netip.ParseAddrPort(u.Host); err == nil && u.Scheme == "https" {
			return ap, true
		}
	}
	return netip.AddrPort{}, false
}

// loadCA reads the CA, key included, from the internal namespace. Any voter
// can therefore issue and revoke peer certificates; the key never exists on
// disk outside etcd once the bootstrap is finished.
func loadCA(ctx context.Context, kv clientv3.KV) (*ca, error) {
	resp, err := kv.Txn(ctx).Then(clientv3.OpGet(caCertKey), clientv3.OpGet(caKeyKey)).Commit()
	if err != nil {
		return nil, fmt.Errorf("reading CA from etcd: %w", err)
	}
	certKVs := resp.Responses[0].GetResponseRange().Kvs
	keyKVs := resp.Responses[1].GetResponseRange().Kvs
	if len(certKVs) != 1 || len(keyKVs) != 1 {
		return nil, errors.New("CA not found in etcd (bootstrap not finished?)")
	}
	cert, err := x509.ParseCertificate(certKVs[0].Value)
	if err != nil {
		return nil, fmt.Errorf("parsing CA certificate from etcd: %w", err)
	}
	keyAny, err := x509.ParsePKCS8PrivateKey(keyKVs[0].Value)
	if err != nil {
		return nil, fmt.Errorf("parsing CA key from etcd: %w", err)
	}
	key, ok := keyAny.(ed25519.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("CA key in etcd is a %T, want ed25519", keyAny)
	}
	if !key.Public().(ed25519.PublicKey).Equal(cert.PublicKey) {
		return nil, errors.New("CA key in etcd does not match the CA certificate")
	}
	return &ca{cert: cert, key: key}, nil
}

// fingerprint identifies a certificate (the CA's, in identity.json) by the
// SHA-256 of its DER.
func fingerprint(der []byte) string {
	sum := sha256.Sum256(der)
	return hex.EncodeToString(sum[:])
}

// certPEM encodes a certificate for etcd's TLS file options.
func certPEM(der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

// keyPEM encodes a private key as PKCS#8 PEM, which tls.X509KeyPair reads.
func keyPEM(key ed25519.PrivateKey) ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("marshalling private key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}

// parseCertPEM decodes a single PEM certificate.
func parseCertPEM(data []byte) (*x509.Certificate, error) {
	b, _ := pem.Decode(data)
	if b == nil || b.Type != "CERTIFICATE" {
		return nil, errors.New("no PEM certificate found")
	}
	return x509.ParseCertificate(b.Bytes)
}

// parseKeyPEM decodes a PKCS#8 PEM ed25519 private key.
func parseKeyPEM(data []byte) (ed25519.PrivateKey, error) {
	b, _ := pem.Decode(data)
	if b == nil || b.Type != "PRIVATE KEY" {
		return nil, errors.New("no PEM private key found")
	}
	k, err := x509.ParsePKCS8PrivateKey(b.Bytes)
	if err != nil {
		return nil, fmt.Errorf("parsing private key: %w", err)
	}
	key, ok := k.(ed25519.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("private key is a %T, want ed25519", k)
	}
	return key, nil
}
