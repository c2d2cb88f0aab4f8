package roleserve

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"net/netip"
	"time"

	"go.uber.org/zap"

	cpb "github.com/polis-os/polis/api/curator/v1"
	"github.com/polis-os/polis/kube/kubelet"
	"github.com/polis-os/polis/kube/pki"
	"github.com/polis-os/polis/supervisor"
)

// Credentials renewal: at half their life, and a failed renewal is tried
// again after renewRetry (the old ones still work until they expire); the
// same renewal refreshes the apiservers early when none answers.
const renewRetry = time.Minute

// renew asks the curator for credentials and the apiservers' list; it
// returns when to renew next. When the credentials are due (renewAt has
// passed), the fresh ones go to the runner and the node services, which
// restarts them. Before that (an early ask, for the list while no
// apiserver answers) only the list goes to the runner's proxy: the
// kubelet, kube-proxy and the DNS server keep running on credentials good
// past renewAt, which is unchanged, since a restarted kubelet has no Pod
// specs until an apiserver answers (it would stop restarting crashed
// containers and running probes for as long as none does).
func (w *workerKubernetesWorker) renew(ctx context.Context, m *ClusterMembership, keys *kubeletKeys, runner *kubelet.Runner, services *nodeServices, renewAt time.Time) time.Time {
	log := supervisor.Logger(ctx)
	due := !time.Now().Before(renewAt)
	// A failed renewal is tried again after retry; a failed early ask
	// leaves renewAt as it was (the next early ask is lastAsked's).
	failed := renewAt
	if due {
		failed = time.Now().Add(w.retry)
	}
	if !hasCurator(m) {
		log.Warn("cannot ask the curator for the kubelet's credentials: no curator", zap.Bool("due", due))
		return failed
	}
	issued, err := w.issue(ctx, m, keys)
	switch {
	case err != nil:
	case !due:
		err = runner.SetAPIServers(issued.servers)
	default:
		err = runner.Renew(issued.creds, issued.servers)
		if err == nil {
			err = services.renew(w, issued)
		}
	}
	if err != nil {
		log.Warn("asking the curator for the kubelet's credentials", zap.Bool("due", due), zap.Error(err))
		return failed
	}
	if !due {
		log.Info("followed the curator's list of apiservers; the credentials are not due yet", zap.Stringers("apiservers", issued.servers), zap.Time("renewAt", renewAt))
		return renewAt
	}
	log.Info("renewed the kubelet's credentials", zap.Time("next", issued.renewAt))
	return issued.renewAt
}

// kubeletKeys are the kubelet's private keys, made by the worker and kept
// in memory: the curator signs their public halves.
type kubeletKeys struct {
	client, serving *ecdsa.PrivateKey
	// proxy and dns are kube-proxy's and the DNS server's client keys.
	proxy, dns *ecdsa.PrivateKey
}

func newKubeletKeys() (*kubeletKeys, error) {
	var ks [4]*ecdsa.PrivateKey
	for i := range ks {
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return nil, err
		}
		ks[i] = k
	}
	return &kubeletKeys{client: ks[0], serving: ks[1], proxy: ks[2], dns: ks[3]}, nil
}

// issuedCredentials is the curator's answer, ready for the runner.
type issuedCredentials struct {
	nodeName string
	creds    kubelet.Credentials
	// proxy and dns are kube-proxy's and the DNS server's client
	// certificate and key (PEM).
	proxy, dns pki.Pair
	servers    []netip.AddrPort
	renewAt    time.Time
}

// issue asks the curator for the kubelet's credentials.
func (w *workerKubernetesWorker) issue(ctx context.Context, m *ClusterMembership, keys *kubeletKeys) (*issuedCredentials, error) {
	clientPub, err := x509.MarshalPKIXPublicKey(&keys.client.PublicKey)
	if err != nil {
		return nil, err
	}
	servingPub, err := x509.MarshalPKIXPublicKey(&keys.serving.PublicKey)
	if err != nil {
		return nil, err
	}
	proxyPub, err := x509.MarshalPKIXPublicKey(&keys.proxy.PublicKey)
	if err != nil {
		return nil, err
	}
	dnsPub, err := x509.MarshalPKIXPublicKey(&keys.dns.PublicKey)
	if err != nil {
		return nil, err
	}
	cctx, cancel := context.WithTimeout(ctx, rpcTimeout)
	defer cancel()
	resp, err := cpb.NewCuratorServiceClient(m.Curator).IssueKubeletCredentials(cctx, &cpb.IssueKubeletCredentialsRequest{ClientKeySpki: clientPub, ServingKeySpki: servingPub, ProxyKeySpki: proxyPub, DnsKeySpki: dnsPub})
	if err != nil {
		return nil, fmt.Errorf("IssueKubeletCredentials: %w", err)
	}
	clientKey, err := x509.MarshalECPrivateKey(keys.client)
	if err != nil {
		return nil, err
	}
	servingKey, err := x509.MarshalECPrivateKey(keys.serving)
	if err != nil {
		return nil, err
	}
	client, err := x509.ParseCertificate(resp.ClientCertificate)
	if err != nil {
		return nil, fmt.Errorf("the kubelet's client certificate from the curator: %w", err)
	}
	if len(resp.ProxyCertificate) == 0 || len(resp.DnsCertificate) == 0 {
		return nil, errors.New("the curator issued no certificates for kube-proxy and the DNS server (a curator older than this node?)")
	}
	proxyKey, err := x509.MarshalECPrivateKey(keys.proxy)
	if err != nil {
		return nil, err
	}
	dnsKey, err := x509.MarshalECPrivateKey(keys.dns)
	if err != nil {
		return nil, err
	}
	out := &issuedCredentials{
		nodeName: resp.NodeName,
		creds: kubelet.Credentials{
			CA:          pemBlock("CERTIFICATE", resp.CaCertificate),
			ClientCert:  pemBlock("CERTIFICATE", resp.ClientCertificate),
			ClientKey:   pemBlock("EC PRIVATE KEY", clientKey),
			ServingCert: pemBlock("CERTIFICATE", resp.ServingCertificate),
			ServingKey:  pemBlock("EC PRIVATE KEY", servingKey),
		},
		proxy:   pki.Pair{Cert: pemBlock("CERTIFICATE", resp.ProxyCertificate), Key: pemBlock("EC PRIVATE KEY", proxyKey)},
		dns:     pki.Pair{Cert: pemBlock("CERTIFICATE", resp.DnsCertificate), Key: pemBlock("EC PRIVATE KEY", dnsKey)},
		renewAt: client.NotBefore.Add(client.NotAfter.Sub(client.NotBefore) / 2),
	}
	if out.nodeName != m.Credentials.NodeID {
		return nil, fmt.Errorf("the curator issued kubelet credentials for %q, not for this node (%s)", out.nodeName, m.Credentials.NodeID)
	}
	for _, s := range resp.ApiServers {
		addr, err := netip.ParseAddr(s.Address)
		if err != nil || s.Port == 0 || s.Port > 65535 {
			return nil, fmt.Errorf("the curator named apiserver %s:%d, which is no address and port", s.Address, s.Port)
		}
		out.servers = append(out.servers, netip.AddrPortFrom(addr, uint16(s.Port)))
	}
	return out, nil
}

func pemBlock(typ string, der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})
}
