package pki

import (
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"
)

func marshalPub(t *testing.T, pub any) []byte {
	t.Helper()
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	return der
}

// A person's key is certified without its private half: the certificate
// is for that key, chains to the CA, names the user and groups, and
// expires after the lifetime asked for.
func TestSignClient(t *testing.T) {
	c := newCluster(t)
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	pub, err := ParseClientPublicKey(marshalPub(t, &key.PublicKey))
	if err != nil {
		t.Fatalf("ParseClientPublicKey of a P-256 key: %v", err)
	}
	certPEM, err := c.SignClient(pub, "polis-owner", []string{MastersGroup}, 24*time.Hour, now)
	if err != nil {
		t.Fatalf("SignClient: %v", err)
	}
	cert, err := ParseCertificate(certPEM)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cert.Verify(x509.VerifyOptions{Roots: pool(t, c), CurrentTime: now, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Errorf("the client certificate does not verify against the CA: %v", err)
	}
	if !key.PublicKey.Equal(cert.PublicKey) {
		t.Error("the certificate is not for the key sent")
	}
	if cert.Subject.CommonName != "polis-owner" || !slices.Equal(cert.Subject.Organization, []string{MastersGroup}) {
		t.Errorf("subject %v, want CN polis-owner, O %s", cert.Subject, MastersGroup)
	}
	if !cert.NotAfter.Equal(now.Add(24 * time.Hour)) {
		t.Errorf("expires %v, want %v", cert.NotAfter, now.Add(24*time.Hour))
	}
	if _, err := cert.Verify(x509.VerifyOptions{Roots: pool(t, c), CurrentTime: now.Add(25 * time.Hour), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err == nil {
		t.Error("the client certificate still verifies after its lifetime")
	}
}

// A kubelet's serving key is certified without its private half, for
// the node's address, and a certificate for no address is refused.
func TestSignServing(t *testing.T) {
	c := newCluster(t)
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	certPEM, err := c.SignServing(&key.PublicKey, "system:node:n1", []netip.Addr{nodeAddr}, []string{"n1"}, time.Hour, now)
	if err != nil {
		t.Fatalf("SignServing: %v", err)
	}
	cert, err := ParseCertificate(certPEM)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{nodeAddr.String(), "n1"} {
		if _, err := cert.Verify(x509.VerifyOptions{Roots: pool(t, c), CurrentTime: now, DNSName: name, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
			t.Errorf("the serving certificate does not verify for %s: %v", name, err)
		}
	}
	if _, err := cert.Verify(x509.VerifyOptions{Roots: pool(t, c), CurrentTime: now, DNSName: "10.9.9.9", KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err == nil {
		t.Error("the serving certificate verifies for another address")
	}
	if !key.PublicKey.Equal(cert.PublicKey) || !cert.NotAfter.Equal(now.Add(time.Hour)) {
		t.Errorf("certificate for the key sent: %v, expires %v", key.PublicKey.Equal(cert.PublicKey), cert.NotAfter)
	}
	if _, err := c.SignServing(&key.PublicKey, "x", nil, nil, time.Hour, now); err == nil {
		t.Error("a serving certificate for no address was issued")
	}
}

// Keys of the wrong kind are refused with an error naming what they are.
func TestParseClientPublicKeyRefuses(t *testing.T) {
	edPub, _, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	p384, err := ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		der  []byte
		want string
	}{
		{"empty", nil, "no public key"},
		{"garbage", []byte("not a key"), "not a DER PKIX public key"},
		{"ed25519", marshalPub(t, edPub), "ed25519.PublicKey, not an ECDSA P-256 key"},
		{"P-384", marshalPub(t, &p384.PublicKey), "on P-384, not on P-256"},
	} {
		_, err := ParseClientPublicKey(tc.der)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want one saying %q", tc.name, err, tc.want)
		}
	}
}
