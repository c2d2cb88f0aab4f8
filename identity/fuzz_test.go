package identity

import (
	"crypto/ed25519"
	"crypto/x509"
	"strings"
	"testing"
)

// The fuzz targets of caller identification: Identify (what every
// connection to the curator goes through) and identifyServer (what every
// client of the curator goes through) on arbitrary certificates, and the
// name rules. Each has a seed corpus in testdata/fuzz, which go test runs
// as ordinary tests; `go test -fuzz FuzzIdentify ./identity` explores
// further (see docs/threat-model.md).

// FuzzIdentify: Identify and identifyServer never panic, and every
// identity they grant is one the certificates prove.
func FuzzIdentify(f *testing.F) {
	now := testNow()
	ca := mustCA(f, now)
	v := ca.Verifier()
	// Certificates of this run's CA, which the corpus cannot hold (the CA
	// is made afresh): each kind once.
	f.Add(mustNode(f, ca, now).cert.Raw, []byte{})
	f.Add(mustUser(f, ca, "owner", now).cert.Raw, []byte{})
	f.Add(mustCurator(f, ca, now).cert.Raw, []byte{})
	f.Add(ca.Certificate().Raw, []byte{})
	f.Fuzz(func(t *testing.T, leafDER, otherDER []byte) {
		var presented []*x509.Certificate
		for _, der := range [][]byte{leafDER, otherDER} {
			if len(der) == 0 {
				continue
			}
			c, err := x509.ParseCertificate(der)
			if err != nil {
				return
			}
			presented = append(presented, c)
		}
		id, err := v.Identify(presented, now)
		if serr := identifyServer(presented); serr == nil {
			if _, err := classifyCurator(presented[0]); err != nil {
				t.Fatalf("identifyServer accepted a certificate classifyCurator refuses: %v", err)
			}
		}
		if err != nil {
			return
		}
		switch id.Kind {
		case KindAnonymous:
			if len(presented) != 0 {
				t.Fatal("anonymous with a certificate")
			}
		case KindKeyHolder:
			pub, ok := presented[0].PublicKey.(ed25519.PublicKey)
			if len(presented) != 1 || !ok || !pub.Equal(id.PublicKey) || id.NodeID != "" || id.UserName != "" {
				t.Fatalf("key holder %+v from %d certificates", id, len(presented))
			}
		case KindNode, KindUser:
			if _, err := presented[0].Verify(x509.VerifyOptions{Roots: v.roots, CurrentTime: now, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
				t.Fatalf("%s from a certificate the CA did not issue: %v", id, err)
			}
			if id.Kind == KindNode && VerifyNodeID(id.NodeID, id.PublicKey) != nil {
				t.Fatalf("node %s for another key", id.NodeID)
			}
			if id.Kind == KindUser && ValidateUserName(id.UserName) != nil {
				t.Fatalf("user %q", id.UserName)
			}
		default:
			t.Fatalf("unknown kind %v", id.Kind)
		}
	})
}

// FuzzNames: the name rules never panic, are anchored, and no string is
// both a node ID and a user name.
func FuzzNames(f *testing.F) {
	pub := ed25519.NewKeyFromSeed(make([]byte, 32)).Public().(ed25519.PublicKey)
	f.Add(NodeID(pub))
	f.Fuzz(func(t *testing.T, s string) {
		nodeErr, userErr := ValidateNodeID(s), ValidateUserName(s)
		if nodeErr == nil {
			if len(s) != len(nodeIDPrefix)+2*nodeIDBytes || !strings.HasPrefix(s, nodeIDPrefix) || strings.TrimLeft(s[len(nodeIDPrefix):], "0123456789abcdef") != "" {
				t.Fatalf("accepted node ID %q", s)
			}
		}
		if userErr == nil {
			if len(s) == 0 || len(s) > 63 || strings.HasPrefix(s, nodeIDPrefix) || strings.TrimLeft(s, "abcdefghijklmnopqrstuvwxyz0123456789-") != "" || s[0] < 'a' || s[0] > 'z' {
				t.Fatalf("accepted user name %q", s)
			}
		}
		if nodeErr == nil && userErr == nil {
			t.Fatalf("%q is both a node ID and a user name", s)
		}
	})
}
