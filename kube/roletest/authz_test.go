package roletest

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"io"
	"net/http"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	cpb "github.com/polis-os/polis/api/curator/v1"
	"github.com/polis-os/polis/event"
	"github.com/polis-os/polis/node/nodetest"
	"github.com/polis-os/polis/roleserve"
)

// asKubernetesUser is an HTTPS client of the apiserver with cert (DER)
// for key, trusting ca (DER).
func asKubernetesUser(t *testing.T, ca, cert []byte, key *ecdsa.PrivateKey) *http.Client {
	t.Helper()
	caCert, err := x509.ParseCertificate(ca)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(caCert)
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12,
		Certificates: []tls.Certificate{{Certificate: [][]byte{cert}, PrivateKey: key}}}}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr}
}

func spki(t *testing.T, key *ecdsa.PrivateKey) []byte {
	t.Helper()
	der, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	return der
}

func newKey(t *testing.T) *ecdsa.PrivateKey {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// wantCode sends a request and checks the answer's status code.
func wantCode(t *testing.T, hc *http.Client, method, url, body string, want int) {
	t.Helper()
	req, err := http.NewRequestWithContext(nodetest.Context(t), method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	got, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode != want {
		t.Errorf("%s %s: %s %s, want %d", method, url, resp.Status, bytes.TrimSpace(got), want)
	}
}

// checkAuthorization runs against a ready apiserver: the owner's
// credentials from polisctl kubeconfig's RPC are Kubernetes' superuser,
// and a kubelet's from IssueKubeletCredentials are held to its own Node by
// the Node authorizer and NodeRestriction. The node is given
// KubernetesWorker for that (in process mode it runs no kubelet, and says
// so).
func checkAuthorization(t *testing.T, c *controller, st *roleserve.KubernetesStatus) {
	server := "https://" + st.APIServer.String()
	ownerKey := newKey(t)
	owner, err := c.mgmt.IssueKubernetesCredentials(nodetest.Context(t), &cpb.IssueKubernetesCredentialsRequest{PublicKey: spki(t, ownerKey)})
	if err != nil {
		t.Fatalf("IssueKubernetesCredentials: %v", err)
	}
	asOwner := asKubernetesUser(t, owner.CaCertificate, owner.ClientCertificate, ownerKey)
	wantCode(t, asOwner, http.MethodGet, server+"/api/v1/nodes", "", http.StatusOK)
	wantCode(t, asOwner, http.MethodGet, server+"/api/v1/namespaces/default/secrets", "", http.StatusOK)

	if _, err := c.mgmt.UpdateNodeRoles(nodetest.Context(t), &cpb.UpdateNodeRolesRequest{NodeId: c.id, KubernetesWorker: proto.Bool(true)}); err != nil {
		t.Fatalf("giving KubernetesWorker: %v", err)
	}
	defer func() {
		if _, err := c.mgmt.UpdateNodeRoles(nodetest.Context(t), &cpb.UpdateNodeRolesRequest{NodeId: c.id, KubernetesWorker: proto.Bool(false)}); err != nil {
			t.Errorf("taking KubernetesWorker away: %v", err)
		}
	}()
	w, err := event.Get(nodetest.Context(t), &c.node.Agent.Values().KubernetesWorker, event.Filter(func(s *roleserve.KubernetesWorkerStatus) bool { return s != nil && s.Held }))
	if err != nil {
		t.Fatal(err)
	}
	if w.KubeletRunning || !strings.Contains(w.Note, "no container runtime") {
		t.Errorf("a process-mode node's worker status: %v", w)
	}
	m, err := event.Get(nodetest.Context(t), &c.node.Agent.Values().Membership, event.Filter(func(m *roleserve.ClusterMembership) bool { return m != nil }))
	if err != nil {
		t.Fatal(err)
	}
	clientKey, servingKey := newKey(t), newKey(t)
	var kubelet *cpb.IssueKubeletCredentialsResponse
	nodetest.Eventually(t, "kubelet credentials (the leader sees the role)", func() error {
		kubelet, err = cpb.NewCuratorServiceClient(m.Curator).IssueKubeletCredentials(nodetest.Context(t), &cpb.IssueKubeletCredentialsRequest{ClientKeySpki: spki(t, clientKey), ServingKeySpki: spki(t, servingKey)})
		return err
	})
	if kubelet.NodeName != c.id {
		t.Fatalf("kubelet credentials for %q, want %s", kubelet.NodeName, c.id)
	}
	asKubelet := asKubernetesUser(t, kubelet.CaCertificate, kubelet.ClientCertificate, clientKey)
	// Its own Node: allowed (not there yet: no kubelet registered it).
	wantCode(t, asKubelet, http.MethodGet, server+"/api/v1/nodes/"+c.id, "", http.StatusNotFound)
	// Secrets not bound to its pods, another Node: refused.
	wantCode(t, asKubelet, http.MethodGet, server+"/api/v1/namespaces/default/secrets", "", http.StatusForbidden)
	wantCode(t, asKubelet, http.MethodGet, server+"/api/v1/namespaces/kube-system/secrets/anything", "", http.StatusForbidden)
	other := `{"apiVersion":"v1","kind":"Node","metadata":{"name":"node-000000000000000000000000"}}`
	wantCode(t, asKubelet, http.MethodPost, server+"/api/v1/nodes", other, http.StatusForbidden)
}
