package pki

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var (
	now       = time.Date(2026, 11, 24, 8, 0, 0, 0, time.UTC)
	nodeAddr  = netip.MustParseAddr("10.0.0.7")
	serviceIP = netip.MustParseAddr("10.96.0.1")
)

func newCluster(t *testing.T) *Cluster {
	t.Helper()
	c, err := NewCluster("test", now)
	if err != nil {
		t.Fatalf("NewCluster: %v", err)
	}
	return c
}

func pool(t *testing.T, c *Cluster) *x509.CertPool {
	t.Helper()
	p := x509.NewCertPool()
	if !p.AppendCertsFromPEM(c.CACert) {
		t.Fatal("CA certificate does not parse")
	}
	return p
}

func TestServingCertificate(t *testing.T) {
	c := newCluster(t)
	p, err := c.IssueServing([]netip.Addr{nodeAddr}, serviceIP, []string{"localhost"}, now)
	if err != nil {
		t.Fatalf("IssueServing: %v", err)
	}
	cert, err := ParseCertificate(p.Cert)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range append([]string{"10.0.0.7", "10.96.0.1", "localhost"}, ServiceNames...) {
		_, err := cert.Verify(x509.VerifyOptions{DNSName: name, Roots: pool(t, c), CurrentTime: now, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}})
		if err != nil {
			t.Errorf("serving certificate for %s: %v", name, err)
		}
	}
	for _, name := range []string{"10.0.0.8", "example.com"} {
		if err := cert.VerifyHostname(name); err == nil {
			t.Errorf("serving certificate is valid for %s too", name)
		}
	}
	// Another cluster's CA does not trust it.
	other := newCluster(t)
	if _, err := cert.Verify(x509.VerifyOptions{Roots: pool(t, other), CurrentTime: now}); err == nil {
		t.Error("another cluster's CA verifies the serving certificate")
	}
	if _, err := c.IssueServing(nil, serviceIP, nil, now); err == nil {
		t.Error("a serving certificate without addresses was issued")
	}
}

func TestClientCertificate(t *testing.T) {
	c := newCluster(t)
	p, err := c.IssueClient("owner", []string{MastersGroup}, now)
	if err != nil {
		t.Fatalf("IssueClient: %v", err)
	}
	cert, err := ParseCertificate(p.Cert)
	if err != nil {
		t.Fatal(err)
	}
	if cert.Subject.CommonName != "owner" || !slices.Equal(cert.Subject.Organization, []string{MastersGroup}) {
		t.Errorf("subject %v, want CN owner, O %s", cert.Subject, MastersGroup)
	}
	if _, err := cert.Verify(x509.VerifyOptions{Roots: pool(t, c), CurrentTime: now, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Errorf("client certificate: %v", err)
	}
	if _, err := cert.Verify(x509.VerifyOptions{Roots: pool(t, c), CurrentTime: now, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err == nil {
		t.Error("a client certificate is valid for serving")
	}
	if _, err := c.IssueClient("", nil, now); err == nil {
		t.Error("a client certificate without user was issued")
	}
}

// TestMutualTLS serves HTTPS with a serving certificate and calls it with
// a client certificate, both from the same Cluster, as the apiserver and
// its clients will.
func TestMutualTLS(t *testing.T) {
	c := newCluster(t)
	serving, err := c.IssueServing([]netip.Addr{netip.MustParseAddr("127.0.0.1")}, serviceIP, nil, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	client, err := c.IssueClient(SchedulerUser, nil, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	srvCert, err := tls.X509KeyPair(serving.Cert, serving.Key)
	if err != nil {
		t.Fatalf("serving pair: %v", err)
	}
	cliCert, err := tls.X509KeyPair(client.Cert, client.Key)
	if err != nil {
		t.Fatalf("client pair: %v", err)
	}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, r.TLS.PeerCertificates[0].Subject.CommonName)
	}))
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{srvCert}, ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: pool(t, c)}
	srv.StartTLS()
	defer srv.Close()
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool(t, c), Certificates: []tls.Certificate{cliCert}}}}
	defer hc.CloseIdleConnections()
	resp, err := hc.Get(srv.URL)
	if err != nil {
		t.Fatalf("mTLS call: %v", err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if string(body) != SchedulerUser {
		t.Errorf("server saw %q, want %q", body, SchedulerUser)
	}
}

func TestControlPlaneFiles(t *testing.T) {
	c := newCluster(t)
	f, err := c.ControlPlaneFiles([]netip.Addr{nodeAddr}, serviceIP, "https://10.0.0.7:6443", now)
	if err != nil {
		t.Fatalf("ControlPlaneFiles: %v", err)
	}
	var names []string
	for n := range f {
		names = append(names, n)
	}
	slices.Sort(names)
	want := []string{FileCA, FileServingCert, FileServingKey, FileControllerManagerKubeconfig, FileSchedulerKubeconfig, FileServiceAccountKey, FileServiceAccountPub, FileKubeletClientCert, FileKubeletClientKey, FileReadyzProbeCert, FileReadyzProbeKey}
	slices.Sort(want)
	if !slices.Equal(names, want) {
		t.Fatalf("files %q, want %q", names, want)
	}
	for _, n := range names {
		wantSecret := n == FileServingKey || n == FileServiceAccountKey || n == FileKubeletClientKey || n == FileReadyzProbeKey || strings.HasSuffix(n, ".kubeconfig")
		if Secret(n) != wantSecret {
			t.Errorf("Secret(%q) = %v", n, Secret(n))
		}
	}
	if _, err := tls.X509KeyPair(f[FileServingCert], f[FileServingKey]); err != nil {
		t.Errorf("serving pair: %v", err)
	}
	if _, err := tls.X509KeyPair(f[FileKubeletClientCert], f[FileKubeletClientKey]); err != nil {
		t.Errorf("the apiserver's kubelet client pair: %v", err)
	}
	if kc, err := ParseCertificate(f[FileKubeletClientCert]); err != nil || kc.Subject.CommonName != APIServerKubeletUser {
		t.Errorf("the apiserver's kubelet client certificate: %v, %v", kc.Subject, err)
	}
	if _, err := tls.X509KeyPair(f[FileReadyzProbeCert], f[FileReadyzProbeKey]); err != nil {
		t.Errorf("the readyz probe's pair: %v", err)
	}
	if pc, err := ParseCertificate(f[FileReadyzProbeCert]); err != nil || pc.Subject.CommonName != ReadyzProbeUser || len(pc.Subject.Organization) != 0 {
		t.Errorf("the readyz probe's certificate: %v, %v; want %s in no group", pc.Subject, err, ReadyzProbeUser)
	}
	// Each kubeconfig names its component and embeds a client certificate
	// of that user, signed by the CA.
	dataRE := regexp.MustCompile(`client-certificate-data: (\S+)`)
	for file, user := range map[string]string{FileControllerManagerKubeconfig: ControllerManagerUser, FileSchedulerKubeconfig: SchedulerUser} {
		kc := f[file]
		if !bytes.Contains(kc, []byte(`server: "https://10.0.0.7:6443"`)) || !bytes.Contains(kc, []byte(`user: "`+user+`"`)) {
			t.Errorf("%s:\n%s", file, kc)
		}
		m := dataRE.FindSubmatch(kc)
		if m == nil {
			t.Fatalf("%s has no client certificate", file)
		}
		pemCert, err := base64.StdEncoding.DecodeString(string(m[1]))
		if err != nil {
			t.Fatal(err)
		}
		cert, err := ParseCertificate(pemCert)
		if err != nil {
			t.Fatal(err)
		}
		if cert.Subject.CommonName != user {
			t.Errorf("%s: certificate for %q, want %q", file, cert.Subject.CommonName, user)
		}
		if _, err := cert.Verify(x509.VerifyOptions{Roots: pool(t, c), CurrentTime: now, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
			t.Errorf("%s: %v", file, err)
		}
	}
}

func TestKubeconfigDeterministic(t *testing.T) {
	p := Pair{Cert: []byte("cert"), Key: []byte("key")}
	a, err := Kubeconfig("https://127.0.0.1:6443", []byte("ca"), "owner", p)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := Kubeconfig("https://127.0.0.1:6443", []byte("ca"), "owner", p)
	if !bytes.Equal(a, b) {
		t.Error("the same inputs gave different kubeconfigs")
	}
	for _, bad := range []struct{ server, user string }{{"http://127.0.0.1:6443", "owner"}, {"https://x", ""}, {"https://x", "a\"b"}} {
		if _, err := Kubeconfig(bad.server, []byte("ca"), bad.user, p); err == nil {
			t.Errorf("Kubeconfig(%q, %q) accepted", bad.server, bad.user)
		}
	}
}

func TestDamagedCluster(t *testing.T) {
	c := newCluster(t)
	other := newCluster(t)
	mixed := &Cluster{CACert: c.CACert, CAKey: other.CAKey, ServiceAccountKey: c.ServiceAccountKey}
	if _, err := mixed.IssueClient("x", nil, now); err == nil || !strings.Contains(err.Error(), "does not belong") {
		t.Errorf("a CA key of another CA: got %v", err)
	}
	broken := &Cluster{CACert: []byte("junk"), CAKey: c.CAKey}
	if _, err := broken.IssueClient("x", nil, now); err == nil || !strings.Contains(err.Error(), "CA certificate") {
		t.Errorf("a junk CA certificate: got %v", err)
	}
	if _, err := (&Cluster{ServiceAccountKey: []byte("junk")}).ServiceAccountPublicKey(); err == nil {
		t.Error("a junk service-account key gave a public key")
	}
	if _, err := NewCluster("", now); err == nil {
		t.Error("a cluster without name was accepted")
	}
}
