package curator

import (
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	cpb "github.com/polis-os/polis/api/curator/v1"
	"github.com/polis-os/polis/event"
	"github.com/polis-os/polis/identity"
	"github.com/polis-os/polis/kube/controlplane"
	"github.com/polis-os/polis/kube/pki"
)

// storedKubernetesPKI waits until the cluster's Kubernetes PKI is in etcd
// (the leader creates it when it takes over) and returns it.
func (c *testCluster) storedKubernetesPKI() *pki.Cluster {
	c.t.Helper()
	ctx := ctxT(c.t)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		k, err := pki.Load(ctx, c.etcd)
		if err == nil {
			return k
		}
		if !errors.Is(err, pki.ErrNoCluster) {
			c.t.Fatalf("loading the Kubernetes PKI: %v", err)
		}
		select {
		case <-ctx.Done():
			c.t.Fatalf("the leader never stored a Kubernetes PKI: %v", ctx.Err())
		case <-tick.C:
		}
	}
}

// leaderKubernetesPKI waits until curator s leads with the Kubernetes PKI
// in hand, and returns that.
func leaderKubernetesPKI(t testing.TB, s *Service) *pki.Cluster {
	t.Helper()
	ctx := ctxT(t)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		if l, _ := event.Get(ctx, &s.leader); l != nil {
			l.kube.mu.Lock()
			k := l.kube.cluster
			l.kube.mu.Unlock()
			if k != nil {
				return k
			}
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the curator never led with the Kubernetes PKI: %v", ctx.Err())
		case <-tick.C:
		}
	}
}

// The leader creates the Kubernetes PKI when a cluster's first curator
// starts leading, in its own namespace, and a new leader loads the same one
// instead of making another.
func TestKubernetesPKICreatedOnce(t *testing.T) {
	c := newTestCluster(t)
	stored := c.storedKubernetesPKI()
	if !slices.Equal(leaderKubernetesPKI(t, c.curator).CACert, stored.CACert) {
		t.Fatal("the leader holds another Kubernetes CA than the one in etcd")
	}
	ca, err := pki.ParseCertificate(stored.CACert)
	if err != nil {
		t.Fatal(err)
	}
	if want := kubernetesClusterName(c.ca.Certificate().Raw); ca.Subject.CommonName != "Kubernetes CA of "+want {
		t.Errorf("Kubernetes CA named %q, want it to name %q", ca.Subject.CommonName, want)
	}

	follower := c.startFollower()
	c.curator.election.Resign()
	if got := leaderKubernetesPKI(t, follower); !slices.Equal(got.CACert, stored.CACert) || !slices.Equal(got.ServiceAccountKey, stored.ServiceAccountKey) {
		t.Error("the new leader holds another Kubernetes PKI than the first one stored")
	}
	if again := c.storedKubernetesPKI(); !slices.Equal(again.CACert, stored.CACert) || !slices.Equal(again.CAKey, stored.CAKey) {
		t.Error("the Kubernetes PKI in etcd changed with the leader")
	}
}

func newP256(t *testing.T) *ecdsa.PrivateKey {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func pkixDER(t *testing.T, pub any) []byte {
	t.Helper()
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	return der
}

// The owner gets a Kubernetes client certificate for its own key, from the
// stored Kubernetes CA, naming the owner's Kubernetes user in
// system:masters for a day, with the apiservers of the controller nodes;
// bad keys, a cluster without a controller node and callers other than the
// owner are refused.
func TestIssueKubernetesCredentials(t *testing.T) {
	c, m, ctx := managementTest(t)
	first := identity.NodeID(c.nodeKey.Public().(ed25519.PublicKey))
	key := newP256(t)
	req := &cpb.IssueKubernetesCredentialsRequest{PublicKey: pkixDER(t, &key.PublicKey)}

	// A new cluster has no controller node: nothing to talk to.
	_, err := m.IssueKubernetesCredentials(ctx, req)
	wantStatus(t, "without a controller node", err, codes.FailedPrecondition, "no node holds the KubernetesController role")

	if _, err := m.UpdateNodeRoles(ctx, &cpb.UpdateNodeRolesRequest{NodeId: first, KubernetesController: proto.Bool(true)}); err != nil {
		t.Fatalf("giving the first node KubernetesController: %v", err)
	}
	// A node that holds no Kubernetes role is no apiserver; a second
	// controller node is, on the port its status reports.
	c.seedNode(cpb.NodeState_NODE_STATE_UP)
	other := c.seedNode(cpb.NodeState_NODE_STATE_UP).node
	other.Roles = &cpb.Roles{ConsensusMember: &cpb.ConsensusMemberRole{}, KubernetesController: &cpb.KubernetesControllerRole{}}
	other.Status.Kubernetes = &cpb.KubernetesStatus{Running: []string{"apiserver"}, ApiserverPort: 16443}
	c.putNode(other)
	before := time.Now()
	resp, err := m.IssueKubernetesCredentials(ctx, req)
	after := time.Now()
	if err != nil {
		t.Fatalf("IssueKubernetesCredentials: %v", err)
	}
	stored := c.storedKubernetesPKI()
	storedCA, err := pki.ParseCertificate(stored.CACert)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(resp.CaCertificate, storedCA.Raw) {
		t.Error("the response's CA is not the stored Kubernetes CA")
	}
	cert, err := x509.ParseCertificate(resp.ClientCertificate)
	if err != nil {
		t.Fatalf("client certificate: %v", err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(storedCA)
	if _, err := cert.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Errorf("the client certificate does not verify against the stored Kubernetes CA: %v", err)
	}
	polisRoots := x509.NewCertPool()
	polisRoots.AddCert(c.ca.Certificate())
	if _, err := cert.Verify(x509.VerifyOptions{Roots: polisRoots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err == nil {
		t.Error("the Kubernetes client certificate verifies against the Polis cluster CA")
	}
	if !key.PublicKey.Equal(cert.PublicKey) {
		t.Error("the client certificate is not for the key sent")
	}
	if cert.Subject.CommonName != KubernetesAdminUser || !slices.Equal(cert.Subject.Organization, []string{pki.MastersGroup}) ||
		resp.User != KubernetesAdminUser || !slices.Equal(resp.Groups, []string{pki.MastersGroup}) {
		t.Errorf("certificate subject %v, response user %q groups %v; want %s in %s", cert.Subject, resp.User, resp.Groups, KubernetesAdminUser, pki.MastersGroup)
	}
	wantLifetime(t, "the client certificate", cert, before, after, KubernetesAdminLifetime)
	want := []*cpb.KubernetesAPIServer{
		{NodeId: first, Address: c.status.Address.Addr().String(), Port: controlplane.DefaultPort},
		{NodeId: other.Id, Address: other.Status.ExternalAddress, Port: 16443},
	}
	slices.SortFunc(want, func(a, b *cpb.KubernetesAPIServer) int { return strings.Compare(a.NodeId, b.NodeId) })
	if !slices.EqualFunc(resp.ApiServers, want, func(a, b *cpb.KubernetesAPIServer) bool { return proto.Equal(a, b) }) {
		t.Errorf("apiservers %v, want %v", resp.ApiServers, want)
	}

	// Bad keys are named.
	edPub, _, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	rsaKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	p384, err := ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, mentions string
		der            []byte
	}{
		{"no key", "no public key", nil},
		{"not DER", "not a DER PKIX public key", []byte("-----BEGIN PUBLIC KEY-----")},
		{"ed25519", "not an ECDSA P-256 key", pkixDER(t, edPub)},
		{"RSA", "*rsa.PublicKey, not an ECDSA P-256 key", pkixDER(t, &rsaKey.PublicKey)},
		{"P-384", "not on P-256", pkixDER(t, &p384.PublicKey)},
	} {
		_, err := m.IssueKubernetesCredentials(ctx, &cpb.IssueKubernetesCredentialsRequest{PublicKey: tc.der})
		wantStatus(t, tc.name, err, codes.InvalidArgument, tc.mentions)
	}

	// Only the owner: not a node, not another user.
	_, err = cpb.NewManagementServiceClient(c.asFirstNode()).IssueKubernetesCredentials(ctx, req)
	wantStatus(t, "as a node", err, codes.PermissionDenied, "")
	aliceKey := mustKey(t)
	alice, err := c.ca.IssueUser("alice", aliceKey.Public().(ed25519.PublicKey), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	_, err = cpb.NewManagementServiceClient(c.asUserCert(alice, aliceKey)).IssueKubernetesCredentials(ctx, req)
	wantStatus(t, "as another user", err, codes.PermissionDenied, "")
}

// A stored PKI that cannot be used is reported, and never replaced: every
// controller node and every issued certificate depends on it.
func TestCorruptKubernetesPKI(t *testing.T) {
	c := newTestCluster(t)
	first := identity.NodeID(c.nodeKey.Public().(ed25519.PublicKey))
	if _, err := c.management().UpdateNodeRoles(ctxT(t), &cpb.UpdateNodeRolesRequest{NodeId: first, KubernetesController: proto.Bool(true)}); err != nil {
		t.Fatal(err)
	}
	follower := c.startFollower()
	if _, err := c.etcd.Put(ctxT(t), pki.StoreKey, "{not a PKI"); err != nil {
		t.Fatal(err)
	}
	c.curator.election.Resign()
	if _, err := event.Get(ctxT(t), &follower.leader, event.Filter(func(l *leaderState) bool { return l != nil })); err != nil {
		t.Fatal(err)
	}
	key := newP256(t)
	m := cpb.NewManagementServiceClient(c.at(followerAddress(t, follower)).asOwner())
	_, err := m.IssueKubernetesCredentials(ctxT(t), &cpb.IssueKubernetesCredentialsRequest{PublicKey: pkixDER(t, &key.PublicKey)})
	wantStatus(t, "with a corrupt PKI", err, codes.Internal, pki.StoreKey)
	resp, err := c.etcd.Get(ctxT(t), pki.StoreKey)
	if err != nil || len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != "{not a PKI" {
		t.Errorf("the corrupt PKI was replaced: %v, %v", resp, err)
	}
}

// A node holding KubernetesWorker gets kubelet certificates for its own
// keys, naming itself and only itself (the request cannot name a node),
// from the stored Kubernetes CA: a client certificate for
// system:node:<ID> in system:nodes and a serving certificate for its
// address. A node without the role, bad keys and a cluster without a
// controller node are refused, each saying why.
func TestIssueKubeletCredentials(t *testing.T) {
	c := newTestCluster(t)
	ctx := ctxT(t)
	first := identity.NodeID(c.nodeKey.Public().(ed25519.PublicKey))
	asNode := func(tn *testNode) cpb.CuratorServiceClient {
		cert, err := c.ca.IssueNode(tn.key.Public().(ed25519.PublicKey), time.Now())
		if err != nil {
			t.Fatal(err)
		}
		return cpb.NewCuratorServiceClient(c.asNode(cert, tn.key))
	}
	worker := c.seedNode(cpb.NodeState_NODE_STATE_UP)
	worker.node.Roles = &cpb.Roles{KubernetesWorker: &cpb.KubernetesWorkerRole{}}
	c.putNode(worker.node)
	plain := c.seedNode(cpb.NodeState_NODE_STATE_UP)
	clientKey, servingKey := newP256(t), newP256(t)
	req := &cpb.IssueKubeletCredentialsRequest{ClientKeySpki: pkixDER(t, &clientKey.PublicKey), ServingKeySpki: pkixDER(t, &servingKey.PublicKey)}

	_, err := asNode(worker).IssueKubeletCredentials(ctx, req)
	wantStatus(t, "without a controller node", err, codes.FailedPrecondition, "no node holds the KubernetesController role")
	if _, err := c.management().UpdateNodeRoles(ctx, &cpb.UpdateNodeRolesRequest{NodeId: first, KubernetesController: proto.Bool(true)}); err != nil {
		t.Fatalf("giving the first node KubernetesController: %v", err)
	}

	// Nodes without the worker role: a plain one, and the controller.
	_, err = asNode(plain).IssueKubeletCredentials(ctx, req)
	wantStatus(t, "a node without KubernetesWorker", err, codes.FailedPrecondition, "does not hold the KubernetesWorker role")
	_, err = cpb.NewCuratorServiceClient(c.asFirstNode()).IssueKubeletCredentials(ctx, req)
	wantStatus(t, "the controller node", err, codes.FailedPrecondition, "does not hold the KubernetesWorker role")

	before := time.Now()
	resp, err := asNode(worker).IssueKubeletCredentials(ctx, req)
	after := time.Now()
	if err != nil {
		t.Fatalf("IssueKubeletCredentials: %v", err)
	}
	storedCA, err := pki.ParseCertificate(c.storedKubernetesPKI().CACert)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(resp.CaCertificate, storedCA.Raw) {
		t.Error("the response's CA is not the stored Kubernetes CA")
	}
	roots := x509.NewCertPool()
	roots.AddCert(storedCA)
	wantName := pki.NodeUserPrefix + worker.node.Id
	if resp.NodeName != worker.node.Id {
		t.Errorf("node name %q, want the caller's ID %s", resp.NodeName, worker.node.Id)
	}
	client, err := x509.ParseCertificate(resp.ClientCertificate)
	if err != nil {
		t.Fatalf("client certificate: %v", err)
	}
	if _, err := client.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Errorf("the client certificate does not verify as a client's: %v", err)
	}
	if client.Subject.CommonName != wantName || !slices.Equal(client.Subject.Organization, []string{pki.NodesGroup}) || !clientKey.PublicKey.Equal(client.PublicKey) {
		t.Errorf("client certificate for %v, key sent? %v; want %s in %s for the client key", client.Subject, clientKey.PublicKey.Equal(client.PublicKey), wantName, pki.NodesGroup)
	}
	serving, err := x509.ParseCertificate(resp.ServingCertificate)
	if err != nil {
		t.Fatalf("serving certificate: %v", err)
	}
	if _, err := serving.Verify(x509.VerifyOptions{Roots: roots, DNSName: worker.node.Status.ExternalAddress, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
		t.Errorf("the serving certificate does not verify for the node's address %s: %v", worker.node.Status.ExternalAddress, err)
	}
	if !servingKey.PublicKey.Equal(serving.PublicKey) {
		t.Error("the serving certificate is not for the serving key sent")
	}
	wantLifetime(t, "the kubelet's client certificate", client, before, after, KubeletCertificateLifetime)
	wantLifetime(t, "the kubelet's serving certificate", serving, before, after, KubeletCertificateLifetime)
	if len(resp.ApiServers) != 1 || resp.ApiServers[0].NodeId != first {
		t.Errorf("apiservers %v, want the first node's alone", resp.ApiServers)
	}
	if resp.ProxyCertificate != nil || resp.DnsCertificate != nil {
		t.Error("node services' certificates issued without their keys")
	}

	// With the node services' keys: their certificates, under their fixed
	// names, in no group, for the keys sent.
	proxyKey, dnsKey := newP256(t), newP256(t)
	withServices := &cpb.IssueKubeletCredentialsRequest{ClientKeySpki: req.ClientKeySpki, ServingKeySpki: req.ServingKeySpki, ProxyKeySpki: pkixDER(t, &proxyKey.PublicKey), DnsKeySpki: pkixDER(t, &dnsKey.PublicKey)}
	before = time.Now()
	resp, err = asNode(worker).IssueKubeletCredentials(ctx, withServices)
	after = time.Now()
	if err != nil {
		t.Fatalf("IssueKubeletCredentials with the node services' keys: %v", err)
	}
	for _, sv := range []struct {
		der  []byte
		user string
		key  *ecdsa.PrivateKey
	}{{resp.ProxyCertificate, pki.ProxyUser, proxyKey}, {resp.DnsCertificate, pki.DNSUser, dnsKey}} {
		cert, err := x509.ParseCertificate(sv.der)
		if err != nil {
			t.Fatalf("%s's certificate: %v", sv.user, err)
		}
		if _, err := cert.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
			t.Errorf("%s's certificate does not verify as a client's: %v", sv.user, err)
		}
		if cert.Subject.CommonName != sv.user || len(cert.Subject.Organization) != 0 || !sv.key.PublicKey.Equal(cert.PublicKey) {
			t.Errorf("certificate for %v (groups %v), for the key sent: %v; want %s in no group", cert.Subject.CommonName, cert.Subject.Organization, sv.key.PublicKey.Equal(cert.PublicKey), sv.user)
		}
		wantLifetime(t, sv.user+"'s certificate", cert, before, after, KubeletCertificateLifetime)
	}

	// Bad keys are named.
	p384, err := ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, mentions string
		req            *cpb.IssueKubeletCredentialsRequest
	}{
		{"no client key", "client_key_spki: no public key", &cpb.IssueKubeletCredentialsRequest{ServingKeySpki: req.ServingKeySpki}},
		{"no serving key", "serving_key_spki: no public key", &cpb.IssueKubeletCredentialsRequest{ClientKeySpki: req.ClientKeySpki}},
		{"P-384 serving key", "not on P-256", &cpb.IssueKubeletCredentialsRequest{ClientKeySpki: req.ClientKeySpki, ServingKeySpki: pkixDER(t, &p384.PublicKey)}},
		{"one key twice", "use two keys", &cpb.IssueKubeletCredentialsRequest{ClientKeySpki: req.ClientKeySpki, ServingKeySpki: req.ClientKeySpki}},
		{"P-384 proxy key", "proxy_key_spki", &cpb.IssueKubeletCredentialsRequest{ClientKeySpki: req.ClientKeySpki, ServingKeySpki: req.ServingKeySpki, ProxyKeySpki: pkixDER(t, &p384.PublicKey)}},
		{"the DNS key is the client key", "dns_key_spki is a key of another", &cpb.IssueKubeletCredentialsRequest{ClientKeySpki: req.ClientKeySpki, ServingKeySpki: req.ServingKeySpki, DnsKeySpki: req.ClientKeySpki}},
		{"one key for both services", "dns_key_spki is a key of another", &cpb.IssueKubeletCredentialsRequest{ClientKeySpki: req.ClientKeySpki, ServingKeySpki: req.ServingKeySpki, ProxyKeySpki: withServices.ProxyKeySpki, DnsKeySpki: withServices.ProxyKeySpki}},
	} {
		_, err := asNode(worker).IssueKubeletCredentials(ctx, tc.req)
		wantStatus(t, tc.name, err, codes.InvalidArgument, tc.mentions)
	}

	// The owner is no node.
	_, err = cpb.NewCuratorServiceClient(c.asOwner()).IssueKubeletCredentials(ctx, req)
	wantStatus(t, "as the owner", err, codes.PermissionDenied, "")
}

// wantLifetime checks that cert, issued by a call made between before and
// after, expires lifetime after the moment it was issued. A certificate
// holds whole seconds, so its NotAfter (issue time plus lifetime, cut to
// the second) may lie up to a second before before+lifetime; and a call
// may cross a second, so it is bounded above by after, not before.
func wantLifetime(t *testing.T, what string, cert *x509.Certificate, before, after time.Time, lifetime time.Duration) {
	t.Helper()
	lo, hi := before.Add(lifetime).Truncate(time.Second), after.Add(lifetime)
	if cert.NotAfter.Before(lo) || cert.NotAfter.After(hi) {
		t.Errorf("%s expires at %v, want between %v and %v (issued between %v and %v, for %v)", what, cert.NotAfter, lo, hi, before, after, lifetime)
	}
}
