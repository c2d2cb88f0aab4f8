package pki

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"time"
)

// ParseClientPublicKey parses the public key a person sends to be
// certified (SignClient): DER of a PKIX SubjectPublicKeyInfo holding an
// ECDSA P-256 key, the kind of key this PKI uses everywhere. The error says
// what the key is instead.
func ParseClientPublicKey(der []byte) (*ecdsa.PublicKey, error) {
	if len(der) == 0 {
		return nil, errors.New("no public key given")
	}
	k, err := x509.ParsePKIXPublicKey(der)
	if err != nil {
		return nil, fmt.Errorf("not a DER PKIX public key: %w", err)
	}
	ec, ok := k.(*ecdsa.PublicKey)
	if !ok {
		return nil, fmt.Errorf("a %T, not an ECDSA P-256 key", k)
	}
	if ec.Curve != elliptic.P256() {
		return nil, fmt.Errorf("an ECDSA key on %s, not on P-256", ec.Curve.Params().Name)
	}
	return ec, nil
}

// SignClient issues a client certificate for a key whose private half
// stays with its holder (unlike IssueClient, which makes the key): the
// Kubernetes user name in groups, valid for lifetime from now (at most
// until the CA expires). It returns the PEM certificate.
func (c *Cluster) SignClient(pub *ecdsa.PublicKey, user string, groups []string, lifetime time.Duration, now time.Time) ([]byte, error) {
	if user == "" {
		return nil, errors.New("pki: a client certificate needs a user name")
	}
	if pub == nil || pub.Curve != elliptic.P256() {
		return nil, errors.New("pki: a client certificate needs an ECDSA P-256 public key")
	}
	if lifetime <= 0 {
		return nil, fmt.Errorf("pki: client certificate lifetime %v: want a positive one", lifetime)
	}
	ca, caKey, err := c.ca()
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		Subject:     pkix.Name{CommonName: user, Organization: groups},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		KeyUsage:    x509.KeyUsageDigitalSignature,
		NotBefore:   now.Add(-clockSkew),
		NotAfter:    now.Add(lifetime),
	}
	if tmpl.NotAfter.After(ca.NotAfter) {
		tmpl.NotAfter = ca.NotAfter
	}
	certPEM, err := sign(tmpl, ca, pub, caKey)
	if err != nil {
		return nil, fmt.Errorf("pki: signing %q: %w", user, err)
	}
	return certPEM, nil
}

// SignServing issues a serving certificate for a key whose private half
// stays with its holder: a kubelet's, valid for addrs (at least one) as IP
// addresses and names as DNS names, for lifetime from now (at most until
// the CA expires). It returns the PEM certificate.
func (c *Cluster) SignServing(pub *ecdsa.PublicKey, commonName string, addrs []netip.Addr, names []string, lifetime time.Duration, now time.Time) ([]byte, error) {
	if pub == nil || pub.Curve != elliptic.P256() {
		return nil, errors.New("pki: a serving certificate needs an ECDSA P-256 public key")
	}
	if len(addrs) == 0 {
		return nil, errors.New("pki: a serving certificate needs at least one address")
	}
	if lifetime <= 0 {
		return nil, fmt.Errorf("pki: serving certificate lifetime %v: want a positive one", lifetime)
	}
	ca, caKey, err := c.ca()
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		Subject:     pkix.Name{CommonName: commonName},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		KeyUsage:    x509.KeyUsageDigitalSignature,
		DNSNames:    names,
		NotBefore:   now.Add(-clockSkew),
		NotAfter:    now.Add(lifetime),
	}
	for _, a := range addrs {
		if !a.IsValid() {
			return nil, fmt.Errorf("pki: invalid address %v for a serving certificate", a)
		}
		tmpl.IPAddresses = append(tmpl.IPAddresses, net.IP(a.AsSlice()))
	}
	if tmpl.NotAfter.After(ca.NotAfter) {
		tmpl.NotAfter = ca.NotAfter
	}
	certPEM, err := sign(tmpl, ca, pub, caKey)
	if err != nil {
		return nil, fmt.Errorf("pki: signing %q: %w", commonName, err)
	}
	return certPEM, nil
}
