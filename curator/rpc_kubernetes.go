package curator

import (
	"cmp"
	"context"
	"crypto/ecdsa"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"sync"
	"time"

	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	cpb "github.com/polis-os/polis/api/curator/v1"
	"github.com/polis-os/polis/event"
	"github.com/polis-os/polis/kube/controlplane"
	"github.com/polis-os/polis/kube/pki"
	"github.com/polis-os/polis/supervisor"
)

// The cluster's Kubernetes PKI (kube/pki) lives in the curator's etcd
// namespace at pki.StoreKey: the CA and the service-account key that every
// controller node's kubernetes worker loads (pki.Load) to serve with the
// same CA and accept the same tokens. The apiserver reaches etcd only below
// its own prefix, so the CA key cannot be read through Kubernetes. The
// leader makes sure it exists each time it starts leading (pki.Ensure:
// created once per cluster, in one transaction, whoever races), and signs
// the owner's Kubernetes client certificates with it
// (IssueKubernetesCredentials).

// Who the owner is in Kubernetes, and for how long a certificate says so.
const (
	// KubernetesAdminUser is the Kubernetes user name of the owner's
	// client certificates.
	KubernetesAdminUser = "polis-owner"
	// KubernetesAdminLifetime is how long an owner's Kubernetes client
	// certificate is valid. Short, because Kubernetes cannot revoke a
	// client certificate: one that leaks, or that outlives a rotation of
	// the owner key, stops working within this time. polisctl kubeconfig
	// renews it.
	KubernetesAdminLifetime = 24 * time.Hour
	// KubeletCertificateLifetime is how long a kubelet's certificates are
	// valid: short for the same reason, so that a node whose
	// KubernetesWorker role is taken away (or whose certificates leak)
	// loses its Kubernetes identity within a day. Its kubernetes worker
	// renews them at half their life.
	KubeletCertificateLifetime = 24 * time.Hour
)

// ensurePKITimeout bounds the leader's creation or reading of the PKI when
// it takes over; a failure is retried with the supervisor's backoff.
const ensurePKITimeout = 30 * time.Second

// kubernetesPKI is the leader's copy of the Kubernetes PKI, read (or
// created) once per term.
type kubernetesPKI struct {
	mu      sync.Mutex
	cluster *pki.Cluster
}

// kubernetesPKI returns the cluster's Kubernetes PKI, making sure it exists
// in etcd on the first call of this term. created says whether this call
// created it.
func (s *Service) kubernetesPKI(ctx context.Context, l *leaderState) (c *pki.Cluster, created, first bool, err error) {
	l.kube.mu.Lock()
	defer l.kube.mu.Unlock()
	if l.kube.cluster != nil {
		return l.kube.cluster, false, false, nil
	}
	c, created, err = pki.Ensure(ctx, s.cfg.Client, kubernetesClusterName(l.ca.Certificate().Raw), s.cfg.Now())
	if err != nil {
		return nil, false, false, err
	}
	l.kube.cluster = c
	return c, created, true, nil
}

// kubernetesClusterName names a cluster in its Kubernetes CA's subject:
// from the fingerprint of its cluster CA, so that two clusters' Kubernetes
// CAs are told apart at a glance.
func kubernetesClusterName(clusterCA []byte) string {
	sum := sha256.Sum256(clusterCA)
	return "Polis cluster " + hex.EncodeToString(sum[:6])
}

// runKubernetesPKI makes sure, each time this curator starts leading, that
// the cluster's Kubernetes PKI exists (creating it in a new cluster), so
// that controller nodes find it without waiting for anyone to ask for a
// kubeconfig. A failure (etcd unreachable, a corrupt stored PKI) ends the
// run, which the supervisor restarts with backoff; the leader serves every
// other call meanwhile.
//
//	reads:  s.leader
//	writes: the PKI in etcd (pki.StoreKey), the leader's copy of it
func (s *Service) runKubernetesPKI(ctx context.Context) error {
	var in event.Inputs
	defer in.Close()
	leader := event.Input(&in, &s.leader, nil)
	supervisor.Signal(ctx, supervisor.SignalHealthy)
	for {
		if _, err := in.Wait(ctx); err != nil {
			return err
		}
		l := leader.Latest()
		if l == nil {
			continue
		}
		ectx, cancel := context.WithTimeout(ctx, ensurePKITimeout)
		_, created, first, err := s.kubernetesPKI(ectx, l)
		cancel()
		if err != nil {
			return fmt.Errorf("making sure the Kubernetes PKI exists: %w", err)
		}
		if first {
			verb := "loaded"
			if created {
				verb = "created"
			}
			supervisor.Logger(ctx).Info("Kubernetes PKI "+verb, zap.String("key", pki.StoreKey))
		}
	}
}

// kubernetesSigning is what issuing Kubernetes credentials needs: the
// apiservers, read from a fenced node snapshot so that a role given just
// before is seen, and the cluster's Kubernetes PKI. With no apiserver it
// fails with FailedPrecondition and the message noServers.
func (r *rpcServer) kubernetesSigning(ctx context.Context, l *leaderState, noServers string) ([]*cpb.KubernetesAPIServer, *pki.Cluster, error) {
	snap, err := r.s.nodes.fenced(ctx)
	if err != nil {
		return nil, nil, err
	}
	servers := kubernetesAPIServers(snap)
	if len(servers) == 0 {
		return nil, nil, status.Error(codes.FailedPrecondition, noServers)
	}
	cluster, _, _, err := r.s.kubernetesPKI(ctx, l)
	switch {
	case errors.Is(err, pki.ErrCorruptCluster):
		// Never replaced by itself: every controller node depends on it.
		return nil, nil, status.Errorf(codes.Internal, "the cluster's Kubernetes PKI in etcd (%s) cannot be used: %v", pki.StoreKey, err)
	case err != nil:
		return nil, nil, status.Errorf(codes.Unavailable, "reading the Kubernetes PKI: %v", err)
	}
	return servers, cluster, nil
}

// IssueKubernetesCredentials signs the caller's public key with the
// Kubernetes CA as the owner's Kubernetes identity, and names the
// apiservers, read from a fenced node snapshot so that a role given just
// before is seen.
func (r *rpcServer) IssueKubernetesCredentials(ctx context.Context, req *cpb.IssueKubernetesCredentialsRequest) (*cpb.IssueKubernetesCredentialsResponse, error) {
	caller := callerFrom(ctx)
	l := leaderFrom(ctx)
	// The permission is the owner's alone (rpcauth.UserHolds); say so here too, as
	// RotateOwnerKey does, so that delegating permissions later cannot
	// hand out Kubernetes' superuser by accident.
	if caller.UserName != OwnerUserName {
		return nil, status.Errorf(codes.PermissionDenied, "%s is not the owner", caller)
	}
	pub, err := pki.ParseClientPublicKey(req.PublicKey)
	if err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "public_key: %v; want the DER of a PKIX ECDSA P-256 public key", err)
	}
	servers, cluster, err := r.kubernetesSigning(ctx, l, "no node holds the KubernetesController role, so no apiserver runs: give one to a consensus member (polisctl node add-role NODE kubernetes-controller)")
	if err != nil {
		return nil, err
	}
	groups := []string{pki.MastersGroup}
	certPEM, err := cluster.SignClient(pub, KubernetesAdminUser, groups, KubernetesAdminLifetime, r.s.cfg.Now())
	if err != nil {
		return nil, status.Errorf(codes.Internal, "signing the Kubernetes client certificate: %v", err)
	}
	cert, err := pki.ParseCertificate(certPEM)
	if err != nil {
		return nil, status.Errorf(codes.Internal, "the Kubernetes client certificate just signed: %v", err)
	}
	ca, err := pki.ParseCertificate(cluster.CACert)
	if err != nil {
		return nil, status.Errorf(codes.Internal, "the Kubernetes CA certificate: %v", err)
	}
	return &cpb.IssueKubernetesCredentialsResponse{
		ClientCertificate: cert.Raw,
		CaCertificate:     ca.Raw,
		ApiServers:        servers,
		User:              KubernetesAdminUser,
		Groups:            groups,
	}, nil
}

// kubernetesAPIServers lists, in node ID order, where the apiserver of
// each UP node holding KubernetesController listens: at its external
// address, on the port its status reports (KubernetesStatus), else
// controlplane.DefaultPort.
func kubernetesAPIServers(snap *nodeSnapshot) []*cpb.KubernetesAPIServer {
	var out []*cpb.KubernetesAPIServer
	for _, id := range slices.Sorted(maps.Keys(snap.nodes)) {
		n := snap.nodes[id]
		if n.State != cpb.NodeState_NODE_STATE_UP || n.Roles.GetKubernetesController() == nil {
			continue
		}
		addr, err := netip.ParseAddr(n.Status.GetExternalAddress())
		if err != nil {
			continue // not reported yet: nowhere to reach it
		}
		// The port the node reports, once its apiserver runs; until then
		// the one it will run on unless configured otherwise.
		port := cmp.Or(n.Status.GetKubernetes().GetApiserverPort(), controlplane.DefaultPort)
		out = append(out, &cpb.KubernetesAPIServer{NodeId: id, Address: addr.String(), Port: port})
	}
	return out
}

// IssueKubeletCredentials signs the calling node's kubelet keys with the
// Kubernetes CA: a client certificate naming the caller, and only the
// caller (the name comes from its node certificate, never from the
// request), as system:node:<ID> in system:nodes, and a serving certificate
// for its external address; and, for the keys the request carries, the
// client certificates of the node services every worker runs beside the
// kubelet (kube-proxy, the node's DNS server), under their fixed user
// names. Only a node that holds KubernetesWorker, read from etcd on the
// leader, gets them.
func (r *rpcServer) IssueKubeletCredentials(ctx context.Context, req *cpb.IssueKubeletCredentialsRequest) (*cpb.IssueKubeletCredentialsResponse, error) {
	id := callerFrom(ctx).NodeID
	l := leaderFrom(ctx)
	clientPub, err := pki.ParseClientPublicKey(req.ClientKeySpki)
	if err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "client_key_spki: %v; want the DER of a PKIX ECDSA P-256 public key", err)
	}
	servingPub, err := pki.ParseClientPublicKey(req.ServingKeySpki)
	if err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "serving_key_spki: %v; want the DER of a PKIX ECDSA P-256 public key", err)
	}
	if clientPub.Equal(servingPub) {
		return nil, status.Error(codes.InvalidArgument, "serving_key_spki is the client key: use two keys")
	}
	// The node services' keys: optional, each a key of its own.
	services := []struct {
		field string
		der   []byte
		user  string
		pub   *ecdsa.PublicKey
	}{
		{field: "proxy_key_spki", der: req.ProxyKeySpki, user: pki.ProxyUser},
		{field: "dns_key_spki", der: req.DnsKeySpki, user: pki.DNSUser},
	}
	seen := []*ecdsa.PublicKey{clientPub, servingPub}
	for i := range services {
		sv := &services[i]
		if len(sv.der) == 0 {
			continue
		}
		if sv.pub, err = pki.ParseClientPublicKey(sv.der); err != nil {
			return nil, status.Errorf(codes.InvalidArgument, "%s: %v; want the DER of a PKIX ECDSA P-256 public key", sv.field, err)
		}
		for _, k := range seen {
			if sv.pub.Equal(k) {
				return nil, status.Errorf(codes.InvalidArgument, "%s is a key of another request field: use a key of its own", sv.field)
			}
		}
		seen = append(seen, sv.pub)
	}
	n, _, err := getNode(ctx, r.s.cfg.Client, id)
	if err != nil {
		return nil, leaderWriteError(err)
	}
	if err := nodeStillUp(id, n); err != nil {
		return nil, err
	}
	if n.Roles.GetKubernetesWorker() == nil {
		return nil, status.Errorf(codes.FailedPrecondition, "node %s does not hold the KubernetesWorker role (polisctl node add-role %s kubernetes-worker)", id, id)
	}
	addr, err := netip.ParseAddr(n.Status.GetExternalAddress())
	if err != nil {
		return nil, status.Errorf(codes.FailedPrecondition, "node %s has reported no external address, which its kubelet's serving certificate must name", id)
	}
	servers, cluster, err := r.kubernetesSigning(ctx, l, "no node holds the KubernetesController role, so no apiserver runs for the kubelet to join")
	if err != nil {
		return nil, err
	}
	now := r.s.cfg.Now()
	user := pki.NodeUserPrefix + id
	clientPEM, err := cluster.SignClient(clientPub, user, []string{pki.NodesGroup}, KubeletCertificateLifetime, now)
	if err != nil {
		return nil, status.Errorf(codes.Internal, "signing the kubelet's client certificate: %v", err)
	}
	servingPEM, err := cluster.SignServing(servingPub, user, []netip.Addr{addr}, []string{id}, KubeletCertificateLifetime, now)
	if err != nil {
		return nil, status.Errorf(codes.Internal, "signing the kubelet's serving certificate: %v", err)
	}
	servicePEMs := make([][]byte, len(services))
	for i, sv := range services {
		if sv.pub == nil {
			continue
		}
		// No groups: each user's permissions are bound to it by name.
		if servicePEMs[i], err = cluster.SignClient(sv.pub, sv.user, nil, KubeletCertificateLifetime, now); err != nil {
			return nil, status.Errorf(codes.Internal, "signing the client certificate of %s: %v", sv.user, err)
		}
	}
	var ders [5][]byte
	for i, p := range [][]byte{clientPEM, servingPEM, cluster.CACert, servicePEMs[0], servicePEMs[1]} {
		if p == nil {
			continue
		}
		c, err := pki.ParseCertificate(p)
		if err != nil {
			return nil, status.Errorf(codes.Internal, "a certificate just signed: %v", err)
		}
		ders[i] = c.Raw
	}
	return &cpb.IssueKubeletCredentialsResponse{
		ClientCertificate:  ders[0],
		ServingCertificate: ders[1],
		CaCertificate:      ders[2],
		ApiServers:         servers,
		NodeName:           id,
		ProxyCertificate:   ders[3],
		DnsCertificate:     ders[4],
	}, nil
}
