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
	"github.com/polis-os/polis/launch/systembuild"
	"github.com/polis-os/polis/launch/vm"
)

// Kubernetes in a launched cluster (Options.Kubernetes): every node is
// given the bundle (polis-node --kubernetes-bundle; a VM finds it, and the
// container runtime, on its system disk), and once the cluster has formed
// the first node is given KubernetesController, whose kubernetes worker
// runs the control plane; the launch returns when that node's apiserver
// answers /readyz. In a VM cluster every other node is given
// KubernetesWorker (and the label LaunchNodeLabel first), and the launch
// also waits for their Nodes to be Ready. Without Options.Kubernetes nothing
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

// kubernetesSystem readies a VM cluster for Kubernetes: the system tree
// its system disk is made from (VMOptions.SystemDir, else the one
// launch/systembuild builds, or finds up to date, in
// systembuild.OutDirForTests, under that directory's lock so that a
// launch and a test never write it at once), the bundle beside it for the
// operator's kubectl, and the memory and CPUs a Kubernetes node needs.
func (c *Cluster) kubernetesSystem(ctx context.Context) error {
	o := c.opts.VM
	if o.MemoryMB == 0 {
		o.MemoryMB = vm.KubernetesMemoryMB
	}
	if o.CPUs == 0 {
		o.CPUs = vm.KubernetesCPUs
	}
	if o.Image != nil {
		// The caller's image: its system disk is its own affair.
		return nil
	}
	if o.SystemDir == "" {
		out := systembuild.OutDirForTests()
		if err := os.MkdirAll(out, 0o755); err != nil {
			return fmt.Errorf("launch: the system tree's directory: %w", err)
		}
		lock, err := os.OpenFile(filepath.Join(out, ".lock"), os.O_CREATE|os.O_RDWR, 0o644)
		if err != nil {
			return fmt.Errorf("launch: %w", err)
		}
		defer lock.Close()
		if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
			return fmt.Errorf("launch: locking %s: %w", lock.Name(), err)
		}
		defer syscall.Flock(int(lock.Fd()), syscall.LOCK_UN)
		c.progress("building the node's system tree (Kubernetes, containerd, runc, CNI plugins) into %s: a quarter of an hour the first time, seconds after", out)
		if err := (systembuild.Builder{Progress: progressWriter{c}}).Build(ctx, out); err != nil {
			return fmt.Errorf("launch: the system tree: %w; or give one already built (polis-launch --system-dir)", err)
		}
		o.SystemDir = out
	}
	if c.opts.KubernetesBundle == "" {
		c.opts.KubernetesBundle = filepath.Join(o.SystemDir, systembuild.KubeBundle)
	}
	return nil
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
	// Given now, the workers' kubelets start while the apiserver does,
	// and wait for it.
	workers := c.platform.kubernetesWorkers(c.Nodes)
	rolesGiven := time.Now()
	for _, n := range workers {
		// A Polis label, given before the role so that the kubelet
		// registers the Node with it (node.polis-os.io/launch-node):
		// which VM a Node is, at a glance.
		if _, err := mgmt.UpdateNodeLabels(ctx, &cpb.UpdateNodeLabelsRequest{NodeId: n.ID(), Set: map[string]string{LaunchNodeLabel: fmt.Sprintf("node%d", n.Index)}}); err != nil {
			return fmt.Errorf("launch: labelling %v: %w", n, err)
		}
		if _, err := mgmt.UpdateNodeRoles(ctx, &cpb.UpdateNodeRolesRequest{NodeId: n.ID(), KubernetesWorker: &yes}); err != nil {
			return fmt.Errorf("launch: giving %v the kubernetes-worker role: %w", n, err)
		}
		c.progress("%v: kubernetes-worker", n)
	}
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
	tr := &http.Transport{TLSClientConfig: &tls.Config{
		RootCAs:      roots,
		MinVersion:   tls.VersionTLS12,
		Certificates: []tls.Certificate{{Certificate: [][]byte{creds.ClientCertificate}, PrivateKey: key}},
	},
		// HTTP/2: an ask that times out resets its stream, not the
		// connection, so a starting apiserver is not given a new TLS
		// handshake at every slow answer.
		ForceAttemptHTTP2: true,
	}
	dial, wait := c.platform.apiserverReach()
	if dial != nil {
		tr.DialContext = dial
	}
	hc := &http.Client{Transport: tr}
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
	err = c.pollWithin(ctx, wait, first.String()+": apiserver ready", func(ctx context.Context) (bool, error) {
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
	return c.waitNodesReady(ctx, workers, wait, rolesGiven)
}

// LaunchNodeLabel is the Polis label the launcher gives each worker of a
// VM cluster with Kubernetes before its role: nodeN, its VM's name (and
// directory under the base directory).
const LaunchNodeLabel = "launch-node"

// kubernetesVMTimeout bounds each Kubernetes step of a VM cluster (the
// apiserver ready; every worker's Node Ready): under TCG, on a loaded
// machine, each takes minutes.
const kubernetesVMTimeout = 15 * time.Minute

// waitNodesReady waits until every one of workers reports its Node Ready
// in its status (NodeStatus.kubernetes.node_ready, as its kubelet's own
// credentials read it), saying how long each took since the roles were
// given.
func (c *Cluster) waitNodesReady(ctx context.Context, workers []*Node, wait time.Duration, since time.Time) error {
	if len(workers) == 0 {
		return nil
	}
	ready := map[string]bool{}
	return c.pollWithin(ctx, wait, "the workers' Nodes Ready", func(ctx context.Context) (bool, error) {
		nodes, err := c.ListNodes(ctx)
		if err != nil {
			return false, nil
		}
		for _, n := range workers {
			for _, cn := range nodes {
				if cn.Id == n.ID() && cn.GetStatus().GetKubernetes().GetNodeReady() && !ready[cn.Id] {
					ready[cn.Id] = true
					c.progress("%v: Node %s Ready (%v after the roles were given)", n, cn.Id, time.Since(since).Round(100*time.Millisecond))
				}
			}
		}
		return len(ready) == len(workers), nil
	})
}
