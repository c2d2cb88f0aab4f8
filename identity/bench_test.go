package identity

import (
	"crypto/x509"
	"testing"
)

// BenchmarkIssueNode measures what the curator spends issuing one node
// certificate (serial, signing, parsing back).
func BenchmarkIssueNode(b *testing.B) {
	now := testNow()
	ca := mustCA(b, now)
	pub := pubOf(mustKey(b))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := ca.IssueNode(pub, now); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkIdentify measures the per-connection decision on a node
// certificate (chain verification and classification).
func BenchmarkIdentify(b *testing.B) {
	now := testNow()
	ca := mustCA(b, now)
	v := ca.Verifier()
	certs := []*x509.Certificate{mustNode(b, ca, now).cert}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := v.Identify(certs, now); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkHandshake measures a full mutual-TLS connection on loopback
// between a node (NodeClientConfig) and a curator (ServerConfig): dial,
// TLS 1.3 handshake with both certificates verified, the server's
// identification of the client, and one line back.
func BenchmarkHandshake(b *testing.B) {
	p := newPKI(b)
	n := mustNode(b, p.ca, testNow())
	cfg, err := NodeClientConfig(p.v, n.tls)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		_, r, cerr := p.srv.dial(b, cfg)
		if cerr != nil || r.err != nil || r.id.Kind != KindNode {
			b.Fatalf("client: %v; server: %v, %+v", cerr, r.err, r.id)
		}
	}
}
