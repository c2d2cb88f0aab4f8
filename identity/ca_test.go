package identity

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"net"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestNewCA(t *testing.T) {
	now := testNow()
	ca := mustCA(t, now)
	c := ca.Certificate()
	if !c.IsCA || !c.MaxPathLenZero || c.KeyUsage != x509.KeyUsageCertSign {
		t.Errorf("CA certificate: IsCA %v, MaxPathLenZero %v, KeyUsage %v", c.IsCA, c.MaxPathLenZero, c.KeyUsage)
	}
	if !c.NotBefore.Equal(now.Add(-ClockSkew)) || !c.NotAfter.Equal(now.Add(CALifetime)) {
		t.Errorf("CA valid %s to %s, want %s to %s", c.NotBefore, c.NotAfter, now.Add(-ClockSkew), now.Add(CALifetime))
	}
	if _, err := NewVerifier(c); err != nil {
		t.Errorf("NewVerifier(CA certificate): %v", err)
	}
}

func TestIssueNode(t *testing.T) {
	now := testNow()
	ca := mustCA(t, now)
	key := mustKey(t)
	cert, err := ca.IssueNode(pubOf(key), now)
	if err != nil {
		t.Fatal(err)
	}
	id := NodeID(pubOf(key))
	if cert.Subject.CommonName != id || !slices.Equal(cert.Subject.OrganizationalUnit, []string{ouNode}) {
		t.Errorf("subject %s, want CN %s OU %s", cert.Subject, id, ouNode)
	}
	// A node certificate names no host: no address a node reported about
	// itself is in it, and it can serve nothing.
	if len(cert.DNSNames)+len(cert.IPAddresses)+len(cert.URIs) != 0 {
		t.Errorf("node certificate names hosts: %v %v %v", cert.DNSNames, cert.IPAddresses, cert.URIs)
	}
	if !slices.Equal(cert.ExtKeyUsage, []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}) {
		t.Errorf("extended key usage %v, want client authentication only", cert.ExtKeyUsage)
	}
	if cert.IsCA {
		t.Error("node certificate is a CA")
	}
	if !cert.NotAfter.Equal(now.Add(NodeCertificateLifetime)) || !cert.NotBefore.Equal(now.Add(-ClockSkew)) {
		t.Errorf("valid %s to %s", cert.NotBefore, cert.NotAfter)
	}
	if _, err := cert.Verify(x509.VerifyOptions{Roots: ca.Verifier().roots, CurrentTime: now, DNSName: id}); err == nil {
		t.Error("a node certificate verifies as a server certificate")
	}
	got, err := ca.Verifier().Identify([]*x509.Certificate{cert}, now)
	if err != nil {
		t.Fatalf("Identify: %v", err)
	}
	if got.Kind != KindNode || got.NodeID != id || !got.PublicKey.Equal(pubOf(key)) || !got.NotAfter.Equal(cert.NotAfter) || !got.IsNode(id) {
		t.Errorf("Identify = %+v, want node %s", got, id)
	}
	if got.IsNode(NodeID(pubOf(mustKey(t)))) {
		t.Error("IsNode true for another node")
	}
	if _, err := ca.IssueNode(pubOf(key)[:31], now); err == nil {
		t.Error("IssueNode accepted a short key")
	}
}

func TestIssueCurator(t *testing.T) {
	now := testNow()
	ca := mustCA(t, now)
	key := mustKey(t)
	ips := []netip.Addr{loopback, netip.MustParseAddr("::ffff:10.0.0.1"), netip.MustParseAddr("fd00::1")}
	cert, err := ca.IssueCurator(pubOf(key), ips, now)
	if err != nil {
		t.Fatal(err)
	}
	id := NodeID(pubOf(key))
	if cert.Subject.CommonName != id || !slices.Equal(cert.Subject.OrganizationalUnit, []string{ouCurator}) {
		t.Errorf("subject %s, want CN %s OU %s", cert.Subject, id, ouCurator)
	}
	if !slices.Equal(cert.DNSNames, []string{id}) {
		t.Errorf("DNS names %v, want [%s]", cert.DNSNames, id)
	}
	wantIPs := []net.IP{net.IPv4(127, 0, 0, 1), net.IPv4(10, 0, 0, 1), net.ParseIP("fd00::1")}
	if !slices.EqualFunc(cert.IPAddresses, wantIPs, net.IP.Equal) {
		t.Errorf("IPs %v, want %v", cert.IPAddresses, wantIPs)
	}
	if !slices.Equal(cert.ExtKeyUsage, []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}) {
		t.Errorf("extended key usage %v, want server authentication only", cert.ExtKeyUsage)
	}
	if !cert.NotAfter.Equal(now.Add(CuratorCertificateLifetime)) || !cert.NotBefore.Equal(now.Add(-ClockSkew)) {
		t.Errorf("valid %s to %s", cert.NotBefore, cert.NotAfter)
	}
	for _, name := range []string{id, "127.0.0.1", "10.0.0.1", "fd00::1"} {
		if err := cert.VerifyHostname(name); err != nil {
			t.Errorf("VerifyHostname(%s): %v", name, err)
		}
	}
	if got, err := classifyCurator(cert); err != nil || got != id {
		t.Errorf("classifyCurator = %q, %v; want %s", got, err, id)
	}
	// A curator certificate identifies no caller.
	if id, err := ca.Verifier().Identify([]*x509.Certificate{cert}, now); err == nil {
		t.Errorf("Identify accepted a curator certificate as %s", id)
	}
	if _, err := ca.IssueCurator(pubOf(key), []netip.Addr{{}}, now); err == nil {
		t.Error("IssueCurator accepted an invalid IP")
	}
	if _, err := ca.IssueCurator(pubOf(key)[:31], nil, now); err == nil {
		t.Error("IssueCurator accepted a short key")
	}
}

func TestIssueNodeAPI(t *testing.T) {
	now := testNow()
	ca := mustCA(t, now)
	key := mustKey(t)
	cert, err := ca.IssueNodeAPI(pubOf(key), netip.MustParseAddr("::ffff:10.0.0.1"), now)
	if err != nil {
		t.Fatal(err)
	}
	id := NodeID(pubOf(key))
	if cert.Subject.CommonName != id || !slices.Equal(cert.Subject.OrganizationalUnit, []string{ouNodeAPI}) {
		t.Errorf("subject %s, want CN %s OU %s", cert.Subject, id, ouNodeAPI)
	}
	if !slices.Equal(cert.DNSNames, []string{id}) {
		t.Errorf("DNS names %v, want [%s]", cert.DNSNames, id)
	}
	if want := []net.IP{net.IPv4(10, 0, 0, 1)}; !slices.EqualFunc(cert.IPAddresses, want, net.IP.Equal) {
		t.Errorf("IPs %v, want %v", cert.IPAddresses, want)
	}
	if !slices.Equal(cert.ExtKeyUsage, []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}) {
		t.Errorf("extended key usage %v, want server authentication only", cert.ExtKeyUsage)
	}
	if !cert.NotAfter.Equal(now.Add(NodeAPICertificateLifetime)) || !cert.NotBefore.Equal(now.Add(-ClockSkew)) {
		t.Errorf("valid %s to %s", cert.NotBefore, cert.NotAfter)
	}
	for _, name := range []string{id, "10.0.0.1"} {
		if err := cert.VerifyHostname(name); err != nil {
			t.Errorf("VerifyHostname(%s): %v", name, err)
		}
	}
	if got, err := classifyNodeAPI(cert); err != nil || got != id {
		t.Errorf("classifyNodeAPI = %q, %v; want %s", got, err, id)
	}
	// It is neither a caller nor a curator.
	if id, err := ca.Verifier().Identify([]*x509.Certificate{cert}, now); err == nil {
		t.Errorf("Identify accepted a node API certificate as %s", id)
	}
	if _, err := classifyCurator(cert); err == nil {
		t.Error("classifyCurator accepted a node API certificate")
	}
	// Without a usable address it names the node ID only.
	for _, addr := range []netip.Addr{{}, netip.IPv4Unspecified(), netip.IPv6Unspecified()} {
		cert, err := ca.IssueNodeAPI(pubOf(key), addr, now)
		if err != nil {
			t.Fatalf("address %v: %v", addr, err)
		}
		if len(cert.IPAddresses) != 0 || !slices.Equal(cert.DNSNames, []string{id}) {
			t.Errorf("address %v: names %v and %v, want only %s", addr, cert.DNSNames, cert.IPAddresses, id)
		}
	}
	if _, err := ca.IssueNodeAPI(pubOf(key)[:31], loopback, now); err == nil {
		t.Error("IssueNodeAPI accepted a short key")
	}
}

func TestIssueUser(t *testing.T) {
	now := testNow()
	ca := mustCA(t, now)
	u := mustUser(t, ca, "owner", now)
	if u.cert.Subject.CommonName != "owner" || !slices.Equal(u.cert.Subject.OrganizationalUnit, []string{ouUser}) {
		t.Errorf("subject %s", u.cert.Subject)
	}
	if !slices.Equal(u.cert.ExtKeyUsage, []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}) {
		t.Errorf("extended key usage %v, want client auth only", u.cert.ExtKeyUsage)
	}
	if len(u.cert.DNSNames)+len(u.cert.IPAddresses) != 0 {
		t.Errorf("user certificate names hosts: %v %v", u.cert.DNSNames, u.cert.IPAddresses)
	}
	if !u.cert.NotAfter.Equal(now.Add(UserCertificateLifetime)) {
		t.Errorf("expires %s, want %s", u.cert.NotAfter, now.Add(UserCertificateLifetime))
	}
	got, err := ca.Verifier().Identify([]*x509.Certificate{u.cert}, now)
	if err != nil {
		t.Fatalf("Identify: %v", err)
	}
	if got.Kind != KindUser || got.UserName != "owner" || got.NodeID != "" || got.IsNode("owner") {
		t.Errorf("Identify = %+v, want user owner", got)
	}
	for _, name := range []string{"", "Owner", NodeID(pubOf(u.key)), "node-x"} {
		if _, err := ca.IssueUser(name, pubOf(u.key), now); err == nil {
			t.Errorf("IssueUser(%q) accepted it", name)
		}
	}
	// A user certificate can serve nothing: it is not good for server
	// authentication.
	_, err = u.cert.Verify(x509.VerifyOptions{Roots: ca.Verifier().roots, CurrentTime: now, DNSName: "owner"})
	if err == nil {
		t.Error("a user certificate verifies as a server certificate")
	}
}

func TestIssueClampsToCA(t *testing.T) {
	now := testNow()
	ca := mustCA(t, now)
	late := now.Add(CALifetime - 24*time.Hour)
	n := mustNode(t, ca, late)
	if !n.cert.NotAfter.Equal(ca.Certificate().NotAfter) {
		t.Errorf("node certificate issued a day before the CA expires runs to %s, want the CA's %s", n.cert.NotAfter, ca.Certificate().NotAfter)
	}
	if _, err := ca.IssueNode(pubOf(n.key), now.Add(CALifetime)); err == nil {
		t.Error("an expired CA issued a certificate")
	}
}

func TestRandomSerials(t *testing.T) {
	seen := map[string]bool{}
	for range 100 {
		s, err := SerialNumber()
		if err != nil {
			t.Fatal(err)
		}
		if s.Sign() <= 0 || s.BitLen() > 128 {
			t.Fatalf("serial %v: want positive, at most 128 bits", s)
		}
		if seen[s.String()] {
			t.Fatalf("serial %v repeated", s)
		}
		seen[s.String()] = true
	}
}

func TestNeedsRenewal(t *testing.T) {
	now := testNow()
	ca := mustCA(t, now)
	for _, c := range []node{mustNode(t, ca, now), mustUser(t, ca, "owner", now)} {
		cert := c.cert
		life := cert.NotAfter.Sub(cert.NotBefore)
		at := RenewAt(cert)
		if want := cert.NotBefore.Add(life / 3 * 2); !at.Equal(want) {
			t.Errorf("%s: RenewAt = %s, want %s", cert.Subject.CommonName, at, want)
		}
		for _, tc := range []struct {
			now  time.Time
			want bool
		}{
			{cert.NotBefore.Add(-time.Hour), false},
			{cert.NotBefore, false},
			{now, false},
			{at.Add(-time.Nanosecond), false},
			{at, true},
			{at.Add(time.Nanosecond), true},
			{cert.NotAfter, true},
			{cert.NotAfter.Add(time.Hour), true},
		} {
			if got := NeedsRenewal(cert, tc.now); got != tc.want {
				t.Errorf("%s: NeedsRenewal at %s (renew at %s) = %v, want %v", cert.Subject.CommonName, tc.now, at, got, tc.want)
			}
		}
	}
}

func TestRenew(t *testing.T) {
	now := testNow()
	ca := mustCA(t, now)
	later := now.Add(300 * 24 * time.Hour)
	n := mustNode(t, ca, now)
	renewed, err := ca.Renew(n.cert, later)
	if err != nil {
		t.Fatalf("Renew(node): %v", err)
	}
	if !renewed.PublicKey.(ed25519.PublicKey).Equal(n.cert.PublicKey) ||
		renewed.Subject.String() != n.cert.Subject.String() ||
		!slices.EqualFunc(renewed.IPAddresses, n.cert.IPAddresses, net.IP.Equal) ||
		!slices.Equal(renewed.DNSNames, n.cert.DNSNames) {
		t.Errorf("renewed node certificate differs: %s %v %v", renewed.Subject, renewed.IPAddresses, renewed.DNSNames)
	}
	if renewed.SerialNumber.Cmp(n.cert.SerialNumber) == 0 {
		t.Error("renewed certificate has the old serial")
	}
	if !renewed.NotAfter.Equal(later.Add(NodeCertificateLifetime)) || NeedsRenewal(renewed, later) {
		t.Errorf("renewed certificate expires %s", renewed.NotAfter)
	}

	u := mustUser(t, ca, "alice", now)
	renewedU, err := ca.Renew(u.cert, later)
	if err != nil {
		t.Fatalf("Renew(user): %v", err)
	}
	id, err := ca.Verifier().Identify([]*x509.Certificate{renewedU}, later)
	if err != nil || id.Kind != KindUser || id.UserName != "alice" || !id.PublicKey.Equal(pubOf(u.key)) {
		t.Errorf("renewed user certificate identifies as %+v, %v", id, err)
	}

	// Another CA's certificates, ephemeral certificates and the CA itself
	// are not renewed.
	other := mustNode(t, mustCA(t, now), now)
	if _, err := ca.Renew(other.cert, later); err == nil {
		t.Error("Renew accepted another CA's certificate")
	}
	eph, err := EphemeralCertificate(mustKey(t), now)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ca.Renew(eph, later); err == nil {
		t.Error("Renew accepted an ephemeral certificate")
	}
	if _, err := ca.Renew(ca.Certificate(), later); err == nil {
		t.Error("Renew accepted the CA certificate")
	}
}

func TestEphemeralIsKeyHolder(t *testing.T) {
	now := testNow()
	ca := mustCA(t, now)
	v := ca.Verifier()
	key := mustKey(t)
	eph, err := EphemeralCertificate(key, now)
	if err != nil {
		t.Fatal(err)
	}
	// Validity period ignored: a registering machine's clock may be off.
	for _, at := range []time.Time{now, now.Add(-48 * time.Hour), now.Add(48 * time.Hour)} {
		id, err := v.Identify([]*x509.Certificate{eph}, at)
		if err != nil {
			t.Fatalf("Identify(ephemeral) at %s: %v", at, err)
		}
		if id.Kind != KindKeyHolder || id.NodeID != "" || id.UserName != "" || !id.PublicKey.Equal(pubOf(key)) || !id.HoldsKey() || id.IsNode(NodeID(pubOf(key))) {
			t.Errorf("Identify(ephemeral) = %+v, want a key holder with the key", id)
		}
	}
	// Not with company: an ephemeral certificate comes alone.
	if _, err := v.Identify([]*x509.Certificate{eph, ca.Certificate()}, now); !errors.Is(err, ErrUntrusted) {
		t.Errorf("Identify(ephemeral + CA) = %v, want ErrUntrusted", err)
	}
}

// TestForgedSelfSigned makes self-signed certificates that copy everything
// a node or user certificate has: their holders hold keys, nothing more.
func TestForgedSelfSigned(t *testing.T) {
	now := testNow()
	ca := mustCA(t, now)
	v := ca.Verifier()
	n := mustNode(t, ca, now)
	u := mustUser(t, ca, "owner", now)
	for _, victim := range []node{n, u} {
		forged := selfSign(t, victim.cert, victim.key)
		id, err := v.Identify([]*x509.Certificate{forged}, now)
		if err != nil {
			t.Fatalf("Identify(self-signed copy of %s): %v", victim.cert.Subject.CommonName, err)
		}
		if id.Kind != KindKeyHolder || id.NodeID != "" || id.UserName != "" {
			t.Errorf("self-signed copy of %s identifies as %+v", victim.cert.Subject.CommonName, id)
		}
		// Presenting the real CA certificate alongside changes nothing.
		if id, err := v.Identify([]*x509.Certificate{forged, ca.Certificate()}, now); err == nil {
			t.Errorf("self-signed copy with the CA certificate identifies as %+v", id)
		}
	}
	// A self-signed certificate whose subject is the CA's, made with another
	// key, is not the CA.
	fakeCA := selfSign(t, ca.Certificate(), mustKey(t))
	if id, err := v.Identify([]*x509.Certificate{fakeCA}, now); err == nil {
		t.Errorf("self-signed CA look-alike identifies as %+v", id)
	}
}

// selfSign copies like (subject, names, usages) into a certificate signed by
// key itself, for key.
func selfSign(t *testing.T, like *x509.Certificate, priv ed25519.PrivateKey) *x509.Certificate {
	t.Helper()
	tmpl := *like
	tmpl.Issuer = pkix.Name{}
	tmpl.AuthorityKeyId = nil
	tmpl.Extensions, tmpl.ExtraExtensions = nil, nil
	tmpl.PublicKey = pubOf(priv)
	der, err := x509.CreateCertificate(rand.Reader, &tmpl, &tmpl, pubOf(priv), priv)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return cert
}

// TestMisissuedRefused has the CA sign certificates that are not what
// IssueNode and IssueUser make: Identify must refuse every one, so that a
// bug in issuance cannot produce an identity, and in particular no user
// certificate can pass as a node.
func TestMisissuedRefused(t *testing.T) {
	now := testNow()
	ca := mustCA(t, now)
	v := ca.Verifier()
	key := mustKey(t)
	pub := pubOf(key)
	id := NodeID(pub)
	otherID := NodeID(pubOf(mustKey(t)))
	both := []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}
	client := []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	subject := func(ou []string, cn string) pkix.Name {
		return pkix.Name{Organization: []string{organization}, OrganizationalUnit: ou, CommonName: cn}
	}
	for _, tc := range []struct {
		name string
		tmpl x509.Certificate
	}{
		{"user OU, node ID as name", x509.Certificate{Subject: subject([]string{ouUser}, id), ExtKeyUsage: client}},
		{"user OU, server usage", x509.Certificate{Subject: subject([]string{ouUser}, "owner"), ExtKeyUsage: both}},
		{"user OU, names a host", x509.Certificate{Subject: subject([]string{ouUser}, "owner"), ExtKeyUsage: client, DNSNames: []string{"owner"}}},
		{"node OU, another node's ID", x509.Certificate{Subject: subject([]string{ouNode}, otherID), ExtKeyUsage: both}},
		{"node OU, user name", x509.Certificate{Subject: subject([]string{ouNode}, "owner"), ExtKeyUsage: both}},
		{"node OU, server usage too", x509.Certificate{Subject: subject([]string{ouNode}, id), ExtKeyUsage: both}},
		{"node OU, names its address", x509.Certificate{Subject: subject([]string{ouNode}, id), ExtKeyUsage: client, IPAddresses: []net.IP{net.IPv4(10, 0, 0, 1)}}},
		{"node OU, names its ID", x509.Certificate{Subject: subject([]string{ouNode}, id), ExtKeyUsage: client, DNSNames: []string{id}}},
		{"curator OU, client usage", x509.Certificate{Subject: subject([]string{ouCurator}, id), ExtKeyUsage: client, DNSNames: []string{id}}},
		{"node and user OUs", x509.Certificate{Subject: subject([]string{ouNode, ouUser}, id), ExtKeyUsage: both}},
		{"user and node OUs", x509.Certificate{Subject: subject([]string{ouUser, ouNode}, "owner"), ExtKeyUsage: client}},
		{"no OU", x509.Certificate{Subject: subject(nil, id), ExtKeyUsage: both}},
		{"ephemeral OU", x509.Certificate{Subject: subject([]string{ouEphemeral}, id), ExtKeyUsage: client}},
		{"CA-signed CA", x509.Certificate{Subject: subject([]string{ouNode}, id), ExtKeyUsage: both, IsCA: true, KeyUsage: x509.KeyUsageCertSign}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tmpl := tc.tmpl
			cert, err := ca.issue(&tmpl, pub, now, time.Hour)
			if err != nil {
				t.Fatal(err)
			}
			// The CA did sign it, and it is valid: only its contents can
			// be refused.
			if _, err := cert.Verify(x509.VerifyOptions{Roots: v.roots, CurrentTime: now, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}); err != nil {
				t.Fatalf("test certificate does not verify: %v", err)
			}
			got, err := v.Identify([]*x509.Certificate{cert}, now)
			if !errors.Is(err, ErrUntrusted) || !strings.Contains(err.Error(), "issued by the cluster CA but") {
				t.Errorf("Identify = %+v, %v; want ErrUntrusted for its contents", got, err)
			}
		})
	}
	// The CA's own certificate is not an identity either.
	if got, err := v.Identify([]*x509.Certificate{ca.Certificate()}, now); !errors.Is(err, ErrUntrusted) {
		t.Errorf("Identify(CA certificate) = %+v, %v; want ErrUntrusted", got, err)
	}
}

func TestIdentifyAnonymous(t *testing.T) {
	now := testNow()
	v := mustCA(t, now).Verifier()
	for _, certs := range [][]*x509.Certificate{nil, {}} {
		id, err := v.Identify(certs, now)
		if err != nil || id.Kind != KindAnonymous || id.HoldsKey() || id.PublicKey != nil {
			t.Errorf("Identify(%v) = %+v, %v; want anonymous", certs, id, err)
		}
	}
}

func TestIdentifyRefuses(t *testing.T) {
	now := testNow()
	ca := mustCA(t, now)
	v := ca.Verifier()
	n := mustNode(t, ca, now)
	other := mustNode(t, mustCA(t, now), now)
	for _, tc := range []struct {
		name  string
		certs []*x509.Certificate
		at    time.Time
		want  error
	}{
		{"a nil certificate", []*x509.Certificate{nil}, now, ErrUntrusted},
		{"another CA's node", []*x509.Certificate{other.cert}, now, ErrUntrusted},
		{"expired", []*x509.Certificate{n.cert}, n.cert.NotAfter.Add(time.Second), ErrUntrusted},
		{"not yet valid", []*x509.Certificate{n.cert}, n.cert.NotBefore.Add(-time.Second), ErrUntrusted},
	} {
		if got, err := v.Identify(tc.certs, tc.at); !errors.Is(err, tc.want) {
			t.Errorf("%s: Identify = %+v, %v; want %v", tc.name, got, err, tc.want)
		}
	}
}

func TestNewVerifierRefuses(t *testing.T) {
	now := testNow()
	n := mustNode(t, mustCA(t, now), now)
	if _, err := NewVerifier(n.cert); err == nil {
		t.Error("NewVerifier accepted a node certificate")
	}
	if _, err := NewVerifier(nil); err == nil {
		t.Error("NewVerifier accepted nil")
	}
	// A Verifier not made by NewVerifier trusts nothing, in particular not
	// the system's roots.
	for _, v := range []*Verifier{nil, {}} {
		if _, err := v.Identify(n.certs(), now); err == nil {
			t.Error("a zero Verifier identified a certificate")
		}
		if _, err := KeyHolderClientConfig(v, n.key); err == nil {
			t.Error("KeyHolderClientConfig accepted a zero Verifier")
		}
		if _, err := NodeClientConfig(v, n.tls); err == nil {
			t.Error("NodeClientConfig accepted a zero Verifier")
		}
		if _, err := NewServingCertificate(v, n.tls); err == nil {
			t.Error("NewServingCertificate accepted a zero Verifier")
		}
	}
}

func TestTLSCertificate(t *testing.T) {
	now := testNow()
	n := mustNode(t, mustCA(t, now), now)
	if _, err := TLSCertificate(n.cert, mustKey(t)); err == nil {
		t.Error("TLSCertificate paired a certificate with another key")
	}
	if _, err := TLSCertificate(nil, n.key); err == nil {
		t.Error("TLSCertificate accepted no certificate")
	}
}

func TestKindString(t *testing.T) {
	for k, want := range map[Kind]string{KindAnonymous: "anonymous", KindKeyHolder: "key-holder", KindNode: "node", KindUser: "user", Kind(7): "Kind(7)"} {
		if got := k.String(); got != want {
			t.Errorf("Kind(%d).String() = %q, want %q", int(k), got, want)
		}
	}
	var zero Identity
	if zero.Kind != KindAnonymous || zero.IsNode("") || zero.HoldsKey() || zero.String() != "anonymous" {
		t.Error("the zero Identity is not anonymous")
	}
}
