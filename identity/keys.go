package identity

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
)

// GenerateKey makes a new ed25519 key from the system's secure random
// source. It is how a node gets its identity (its ID is NodeID of the public
// half) and how users and the CA get theirs.
func GenerateKey() (ed25519.PrivateKey, error) {
	_, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generating ed25519 key: %w", err)
	}
	return key, nil
}

// MarshalPrivateKey encodes key as PKCS#8 DER, the form the CA key has in
// etcd and the form to persist a node's key in. The result is a secret:
// whoever writes it to a file must make that file private (mode 0600,
// written atomically).
func MarshalPrivateKey(key ed25519.PrivateKey) ([]byte, error) {
	if len(key) != ed25519.PrivateKeySize {
		return nil, fmt.Errorf("ed25519 private key of %d bytes, want %d", len(key), ed25519.PrivateKeySize)
	}
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("encoding private key as PKCS#8: %w", err)
	}
	return der, nil
}

// ParsePrivateKey decodes a PKCS#8 DER ed25519 private key, as written by
// MarshalPrivateKey. Keys of other algorithms are refused.
func ParsePrivateKey(der []byte) (ed25519.PrivateKey, error) {
	k, err := x509.ParsePKCS8PrivateKey(der)
	if err != nil {
		return nil, fmt.Errorf("parsing PKCS#8 private key: %w", err)
	}
	key, ok := k.(ed25519.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("private key is a %T, want ed25519", k)
	}
	return key, nil
}

// TLSCertificate pairs a certificate with its private key for a tls.Config,
// checking that they belong together.
func TLSCertificate(cert *x509.Certificate, key ed25519.PrivateKey) (tls.Certificate, error) {
	if cert == nil {
		return tls.Certificate{}, errors.New("no certificate")
	}
	if len(key) != ed25519.PrivateKeySize {
		return tls.Certificate{}, fmt.Errorf("ed25519 private key of %d bytes, want %d", len(key), ed25519.PrivateKeySize)
	}
	pub, ok := cert.PublicKey.(ed25519.PublicKey)
	if !ok {
		return tls.Certificate{}, fmt.Errorf("certificate %q has a %T key, want ed25519", cert.Subject.CommonName, cert.PublicKey)
	}
	if !pub.Equal(key.Public()) {
		return tls.Certificate{}, fmt.Errorf("certificate %q is not for this private key", cert.Subject.CommonName)
	}
	return tls.Certificate{Certificate: [][]byte{cert.Raw}, PrivateKey: key, Leaf: cert}, nil
}
