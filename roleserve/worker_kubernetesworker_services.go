package roleserve

import (
	"cmp"
	"net/netip"
	"path/filepath"
	"strconv"

	"github.com/polis-os/polis/kube/dns"
	"github.com/polis-os/polis/kube/kubelet"
	"github.com/polis-os/polis/kube/nodeservice"
	"github.com/polis-os/polis/kube/proxy"
)

// nodeService is one node service's spec and runner.
type nodeService struct {
	spec   nodeservice.Spec
	runner *nodeservice.Runner
}

// nodeServices are the services every worker node runs beside the
// kubelet, reaching the apiservers through the kubelet's local proxy.
type nodeServices struct {
	proxy, dns *nodeService
}

// nodeServiceSpecs renders the services' specs for issued credentials.
func (w *workerKubernetesWorker) nodeServiceSpecs(issued *issuedCredentials) (proxySpec, dnsSpec nodeservice.Spec, err error) {
	rt := w.cfg.Runtime
	server := "https://localhost:" + strconv.Itoa(int(cmp.Or(rt.ProxyPort, kubelet.DefaultProxyPort)))
	proxySpec, err = proxy.Config{
		Bundle: w.cfg.Bundle, BinDir: rt.BinDir, Dir: filepath.Join(rt.RunDir, proxy.Name),
		// The node's own range as "the cluster's": kube-proxy treats
		// traffic from it as local and does not masquerade it, so a
		// Pod's connection to a Service reaches an endpoint on another
		// node with the Pod's own address, which that node's WireGuard
		// peer entry accepts; the node's address would be dropped there.
		// Traffic from other nodes' Pods never passes this node's
		// Service rules.
		NodeName: issued.nodeName, NodeIP: w.address, ClusterCIDR: w.proxyClusterCIDR(),
		Server: server, CA: issued.creds.CA, Cert: issued.proxy.Cert, Key: issued.proxy.Key,
	}.Spec()
	if err != nil {
		return proxySpec, dnsSpec, err
	}
	dnsSpec, err = dns.Config{
		Binary: filepath.Join(rt.BinDir, "polis-coredns"), Dir: filepath.Join(rt.RunDir, dns.Name), NodeIP: w.address,
		Server: server, CA: issued.creds.CA, Cert: issued.dns.Cert, Key: issued.dns.Key,
	}.Spec()
	if rt.ServicesCgroup != "" {
		proxySpec.Cgroup = filepath.Join(rt.ServicesCgroup, proxySpec.Name)
		dnsSpec.Cgroup = filepath.Join(rt.ServicesCgroup, dnsSpec.Name)
	}
	return proxySpec, dnsSpec, err
}

// nodeServices makes the services' runners.
func (w *workerKubernetesWorker) nodeServices(issued *issuedCredentials) (*nodeServices, error) {
	proxySpec, dnsSpec, err := w.nodeServiceSpecs(issued)
	if err != nil {
		return nil, err
	}
	out := &nodeServices{}
	for _, x := range []struct {
		spec nodeservice.Spec
		to   **nodeService
	}{{proxySpec, &out.proxy}, {dnsSpec, &out.dns}} {
		r, err := nodeservice.New(x.spec)
		if err != nil {
			return nil, err
		}
		*x.to = &nodeService{spec: x.spec, runner: r}
	}
	return out, nil
}

// renew hands the services their new credentials (which restarts them).
func (s *nodeServices) renew(w *workerKubernetesWorker, issued *issuedCredentials) error {
	proxySpec, dnsSpec, err := w.nodeServiceSpecs(issued)
	if err != nil {
		return err
	}
	if err := s.proxy.runner.Renew(proxySpec.Files); err != nil {
		return err
	}
	return s.dns.runner.Renew(dnsSpec.Files)
}

// proxyClusterCIDR is kube-proxy's cluster range (whose sources' traffic
// to a Service it leaves unmasqueraded): the cluster's pod range, or
// this node's alone while the curator has not said the cluster's.
func (w *workerKubernetesWorker) proxyClusterCIDR() netip.Prefix {
	if w.runningClusterPodRange.IsValid() {
		return w.runningClusterPodRange
	}
	return w.runningPodRange
}
