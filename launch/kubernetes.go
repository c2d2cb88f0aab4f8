package launch

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	cpb "github.com/polis-os/polis/api/curator/v1"
	"github.com/polis-os/polis/kube/bundle"
)

// Kubernetes in a launched cluster (Options.Kubernetes): every node is
// given the bundle (polis-node --kubernetes-bundle), and once the cluster
// has formed the first node is given KubernetesController, whose
// kubernetes worker runs the control plane; the launch returns when that
// node's apiserver answers /readyz. Without Options.Kubernetes nothing
// here runs: no node holds a Kubernetes role, and nobody waits for the
// bundle's first build.

// KubernetesBundle is the polis-kube binary the nodes were given; empty
// unless the cluster runs Kubernetes (Options.Kubernetes).
func (c *Cluster) KubernetesBundle() string {
	if !c.opts.Kubernetes {
		return ""
	}
	return c.opts.KubernetesBundle
}

// kubernetesBundle returns the bundle the nodes run: Options'
// KubernetesBundle, else a polis-kube next to the running executable, else
// the one kube/bundle builds (or finds up to date: seconds once Go's build
// cache holds it) into bundle.OutDirForTests, the directory the tests
// share, under their lock, so that a launch and a test never link it at
// once.
func (c *Cluster) kubernetesBundle(ctx context.Context) (string, error) {
	if c.opts.KubernetesBundle != "" {
		return filepath.Abs(c.opts.KubernetesBundle)
	}
	if exe, err := os.Executable(); err == nil {
		sibling := filepath.Join(filepath.Dir(exe), bundle.Binary)
		if st, err := os.Stat(sibling); err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0 {
			return sibling, nil
		}
	}
	out := bundle.OutDirForTests()
	if err := os.MkdirAll(out, 0o755); err != nil {
		return "", fmt.Errorf("launch: the Kubernetes bundle's directory: %w", err)
	}
	lock, err := os.OpenFile(filepath.Join(out, ".lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return "", fmt.Errorf("launch: %w", err)
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return "", fmt.Errorf("launch: locking %s: %w", lock.Name(), err)
	}
	defer syscall.Flock(int(lock.Fd()), syscall.LOCK_UN)
	path, err := bundle.Builder{Progress: progressWriter{c}}.Build(ctx, out)
	if err != nil {
		return "", fmt.Errorf("launch: %w; or pass the path of a polis-kube binary (polis-launch --kubernetes-bundle)", err)
	}
	return path, nil
}

// startKubernetes gives the first node KubernetesController and waits
// until its apiserver answers /readyz, asking it as the owner with a
// Kubernetes client certificate issued for a key made here and kept in
// memory only (polisctl kubeconfig makes the operator's own).
func (c *Cluster) startKubernetes(ctx context.Context) error {
	first := c.Nodes[0]
	mgmt := cpb.NewManagementServiceClient(c.Conn())
	yes := true
	if _, err := mgmt.UpdateNodeRoles(ctx, &cpb.UpdateNodeRolesRequest{NodeId: first.ID(), KubernetesController: &yes}); err != nil {
		return fmt.Errorf("launch: giving %v the kubernetes-controller role: %w", first, err)
	}
	c.progress("%v: kubernetes-controller; waiting for its apiserver", first)
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	pub, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		return err
	}
	var creds *cpb.IssueKubernetesCredentialsResponse
	err = c.poll(ctx, "Kubernetes credentials", func(ctx context.Context) (bool, error) {
		resp, err := mgmt.IssueKubernetesCredentials(ctx, &cpb.IssueKubernetesCredentialsRequest{PublicKey: pub})
		switch status.Code(err) {
		case codes.OK:
			creds = resp
			return true, nil
		case codes.Unavailable, codes.DeadlineExceeded:
			return false, nil
		default:
			return false, fmt.Errorf("launch: asking for Kubernetes credentials: %w", err)
		}
	})
	if err != nil {
		return err
	}
	ca, err := x509.ParseCertificate(creds.CaCertificate)
	if err != nil {
		return fmt.Errorf("launch: the Kubernetes CA: %w", err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(ca)
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{
		RootCAs:      roots,
		MinVersion:   tls.VersionTLS12,
		Certificates: []tls.Certificate{{Certificate: [][]byte{creds.ClientCertificate}, PrivateKey: key}},
	}}}
	defer hc.CloseIdleConnections()
	var url string
	for _, a := range creds.ApiServers {
		if a.NodeId == first.ID() {
			url = "https://" + netip.AddrPortFrom(first.Address, uint16(a.Port)).String() + "/readyz"
		}
	}
	if url == "" {
		return fmt.Errorf("launch: the curator does not list %v among the apiservers", first)
	}
	start := time.Now()
	err = c.poll(ctx, first.String()+": apiserver ready", func(ctx context.Context) (bool, error) {
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		req, err := http.NewRequestWithContext(rctx, http.MethodGet, url, nil)
		if err != nil {
			return false, err
		}
		resp, err := hc.Do(req)
		if err != nil {
			return false, nil
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, nil
	})
	if err != nil {
		return err
	}
	c.progress("%v: apiserver ready at %s (%v after the role was given)", first, url, time.Since(start).Round(100*time.Millisecond))
	return nil
}
