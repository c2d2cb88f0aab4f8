package polisctl

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	cpb "github.com/polis-os/polis/api/curator/v1"
)

// readKubeconfig parses a kubeconfig polisctl wrote, checking that it is
// the owner's alone to read.
func readKubeconfig(t *testing.T, path string) (kcFile, []byte) {
	t.Helper()
	st, err := os.Stat(path)
	if err != nil {
		t.Fatalf("no kubeconfig: %v", err)
	}
	if st.Mode().Perm() != 0o600 {
		t.Errorf("%s has mode %v, want 0600: it holds a private key", path, st.Mode().Perm())
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var f kcFile
	if err := yaml.UnmarshalStrict(b, &f); err != nil {
		t.Fatalf("the kubeconfig does not parse: %v\n%s", err, b)
	}
	return f, b
}

// polisctl kubeconfig: a clear error while no node holds
// kubernetes-controller; then a kubeconfig whose key pair works, whose
// certificate chains to the CA it names, for the owner's Kubernetes user,
// pointing at the controller node's apiserver; a file polisctl did not
// write is not replaced without --force.
func TestKubeconfig(t *testing.T) {
	c := bootstrap(t)
	first := c.first.Credentials(t)
	r := &runner{t: t, config: filepath.Join(t.TempDir(), "config")}
	r.ok("take-ownership", "--curator", c.first.Curator().String(), "--owner-key", writeKey(t, c, false), "--yes")
	path := filepath.Join(r.config, kubeconfigFile)

	r.fails([]string{"kubeconfig"}, "no node holds the KubernetesController role", "polisctl node add-role NODE kubernetes-controller")
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Fatalf("a failed kubeconfig left %s: %v", path, err)
	}

	r.ok("node", "add-role", first.NodeID, "kubernetes-controller")
	out := r.ok("kubeconfig")
	server := "https://" + c.first.Addr.String() + ":6443"
	for _, want := range []string{path, "polis-owner", "system:masters", server, "export KUBECONFIG=" + path} {
		if !strings.Contains(out, want) {
			t.Errorf("polisctl kubeconfig printed %q, which does not mention %q", out, want)
		}
	}
	f, _ := readKubeconfig(t, path)
	if f.CurrentContext != "polis" || len(f.Users) != 1 || len(f.Clusters) != 3 || len(f.Contexts) != 3 {
		t.Fatalf("kubeconfig: current context %q, %d users, %d clusters, %d contexts; want polis, 1, 3 (polis, the node's, polis-proxy), 3", f.CurrentContext, len(f.Users), len(f.Clusters), len(f.Contexts))
	}
	// A context that follows every apiserver, through polisctl
	// kube-proxy, checked under the name all their certificates carry
	// (issue 26, item 6); and the output says when to use it.
	if cl, ctx := f.Clusters[2], f.Contexts[2]; cl.Name != "polis-proxy" || cl.Cluster.Server != "https://"+DefaultKubeProxyAddress || cl.Cluster.TLSServerName != "kubernetes" || ctx.Context.Cluster != "polis-proxy" || ctx.Context.User != f.Users[0].Name {
		t.Errorf("the proxy's cluster %+v, context %+v", cl, ctx)
	}
	if !strings.Contains(out, "polisctl kube-proxy") || !strings.Contains(out, "--context polis-proxy") {
		t.Errorf("polisctl kubeconfig does not say how to follow every apiserver:\n%s", out)
	}
	for i, name := range []string{"polis", "polis-" + first.NodeID} {
		cl, ctx := f.Clusters[i], f.Contexts[i]
		if cl.Name != name || cl.Cluster.Server != server || ctx.Name != name || ctx.Context.Cluster != name || ctx.Context.User != f.Users[0].Name {
			t.Errorf("cluster %d: %+v, context %+v; want %s at %s for user %s", i, cl, ctx, name, server, f.Users[0].Name)
		}
	}
	pair, err := tls.X509KeyPair(f.Users[0].User.ClientCertificateData, f.Users[0].User.ClientKeyData)
	if err != nil {
		t.Fatalf("the kubeconfig's certificate and key are no pair: %v", err)
	}
	cert, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	caBlock, _ := pem.Decode(f.Clusters[0].Cluster.CertificateAuthorityData)
	if caBlock == nil {
		t.Fatal("the kubeconfig's CA is not PEM")
	}
	ca, err := x509.ParseCertificate(caBlock.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(ca)
	if _, err := cert.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Errorf("the client certificate does not chain to the kubeconfig's CA: %v", err)
	}
	if ca.Equal(first.CACertificate) {
		t.Error("the kubeconfig trusts the Polis cluster CA, not the Kubernetes CA")
	}
	if cert.Subject.CommonName != "polis-owner" || !slices.Equal(cert.Subject.Organization, []string{"system:masters"}) {
		t.Errorf("client certificate for %v, want polis-owner in system:masters", cert.Subject)
	}

	// Again: a fresh key, replacing the file polisctl wrote.
	r.ok("kubeconfig")
	again, _ := readKubeconfig(t, path)
	if slices.Equal(again.Users[0].User.ClientKeyData, f.Users[0].User.ClientKeyData) {
		t.Error("a second kubeconfig reuses the first one's key")
	}

	// Someone else's kubeconfig stays unless --force; a new directory is
	// made.
	other := filepath.Join(t.TempDir(), ".kube", "config")
	if err := os.MkdirAll(filepath.Dir(other), 0o700); err != nil {
		t.Fatal(err)
	}
	foreign := []byte("apiVersion: v1\nkind: Config\n# another cluster's\n")
	if err := os.WriteFile(other, foreign, 0o600); err != nil {
		t.Fatal(err)
	}
	r.fails([]string{"kubeconfig", "--output", other}, other, "polisctl did not write it", "--force")
	if b, _ := os.ReadFile(other); !slices.Equal(b, foreign) {
		t.Fatalf("a refused kubeconfig changed %s", other)
	}
	r.ok("kubeconfig", "--output", other, "--force")
	readKubeconfig(t, other)
	fresh := filepath.Join(t.TempDir(), "new", "dir", "kubeconfig")
	r.ok("kubeconfig", "--output", fresh)
	readKubeconfig(t, fresh)
}

// A cluster reached through a proxy (a VM cluster's, saved by the
// launcher, or --proxy) gets a kubeconfig whose apiservers name that proxy,
// so kubectl needs no HTTPS_PROXY; the relay on this machine is reached
// directly, and without a proxy nothing names one.
func TestKubeconfigProxyURL(t *testing.T) {
	resp := &cpb.IssueKubernetesCredentialsResponse{
		CaCertificate:     []byte("ca"),
		ClientCertificate: []byte("cert"),
		User:              "polis-owner",
		ApiServers: []*cpb.KubernetesAPIServer{
			{NodeId: "node-a", Address: "10.77.0.1", Port: 6443},
			{NodeId: "node-b", Address: "10.77.0.2", Port: 6443},
		},
	}
	for _, proxy := range []string{"", "socks5://127.0.0.1:4321", "http://127.0.0.1:4321"} {
		b, err := kubeconfig(resp, []byte("key"), proxy)
		if err != nil {
			t.Fatal(err)
		}
		var f kcFile
		if err := yaml.UnmarshalStrict(b, &f); err != nil {
			t.Fatalf("the kubeconfig does not parse: %v\n%s", err, b)
		}
		if len(f.Clusters) != 4 {
			t.Fatalf("%d clusters, want 4 (polis, one per apiserver, the relay):\n%s", len(f.Clusters), b)
		}
		for _, c := range f.Clusters {
			want := proxy
			if c.Name == kubeconfigProxyContext {
				want = ""
			}
			if c.Cluster.ProxyURL != want {
				t.Errorf("proxy %q: cluster %s has proxy-url %q, want %q", proxy, c.Name, c.Cluster.ProxyURL, want)
			}
		}
	}
}
