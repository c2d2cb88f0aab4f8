package roletest

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	cpb "github.com/polis-os/polis/api/curator/v1"
	"github.com/polis-os/polis/consensus"
	"github.com/polis-os/polis/event"
	"github.com/polis-os/polis/kube/kubetest"
	"github.com/polis-os/polis/kube/pki"
	"github.com/polis-os/polis/node/nodetest"
	"github.com/polis-os/polis/roleserve"
)

// Two controller nodes serve one Kubernetes: the second, given
// ConsensusMember and KubernetesController, serves with the CA the first
// created (each apiserver's certificate verifies against the CA kept in
// etcd, and nothing else is trusted), and an object written through one
// apiserver is read through the other.
func TestTwoControllers(t *testing.T) {
	bundle := kubetest.Bundle(t)
	c := nodetest.FormClusterWith(t, 2, &subnets, withBundle(t, bundle))
	// A new cluster's first node holds ConsensusMember only.
	if _, err := c.Management.UpdateNodeRoles(nodetest.Context(t), &cpb.UpdateNodeRolesRequest{
		NodeId: c.IDs[0], KubernetesController: proto.Bool(true),
	}); err != nil {
		t.Fatalf("UpdateNodeRoles: %v", err)
	}
	if _, err := c.Management.UpdateNodeRoles(nodetest.Context(t), &cpb.UpdateNodeRolesRequest{
		NodeId: c.IDs[1], ConsensusMember: proto.Bool(true), KubernetesController: proto.Bool(true),
	}); err != nil {
		t.Fatalf("UpdateNodeRoles: %v", err)
	}
	var servers []string
	for i := range c.Nodes {
		ctl := &controller{node: c.Node(i), id: c.IDs[i], bundle: bundle, mgmt: c.Management}
		servers = append(servers, "https://"+ctl.waitKube(t, "ready", ready).APIServer.String())
	}

	// The cluster's Kubernetes PKI, as kept in etcd; an administrator's
	// client certificate from it.
	cluster := loadPKI(t, c.Node(0))
	admin, err := cluster.IssueClient("polis-test-admin", []string{"system:masters"}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	cert, err := tls.X509KeyPair(admin.Cert, admin.Key)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(cluster.CACert) {
		t.Fatal("the stored CA certificate does not parse")
	}
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots, Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr, Timeout: time.Minute}

	// Written through the first apiserver, read through the second.
	const path = "/api/v1/namespaces/default/configmaps"
	body := `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"polis-roletest"},"data":{"written-through":"` + servers[0] + `"}}`
	created := call(t, hc, http.MethodPost, servers[0]+path, body, http.StatusCreated)
	read := call(t, hc, http.MethodGet, servers[1]+path+"/polis-roletest", "", http.StatusOK)
	if created.Metadata.UID == "" || read.Metadata.UID != created.Metadata.UID || read.Data["written-through"] != servers[0] {
		t.Errorf("read through %s: %+v; created through %s: %+v", servers[1], read, servers[0], created)
	}
}

// object is what the test reads of a Kubernetes object.
type object struct {
	Metadata struct {
		UID string `json:"uid"`
	} `json:"metadata"`
	Data map[string]string `json:"data"`
}

// call makes one request to an apiserver and decodes the object it
// answers, which must come with status want.
func call(t *testing.T, hc *http.Client, method, url, body string, want int) object {
	t.Helper()
	req, err := http.NewRequestWithContext(nodetest.Context(t), method, url, bytes.NewBufferString(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != want {
		t.Fatalf("%s %s: %s, want %d: %s", method, url, resp.Status, want, data)
	}
	var o object
	if err := json.Unmarshal(data, &o); err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	return o
}

// loadPKI reads the cluster's Kubernetes PKI from etcd through n's
// consensus member, in the curator's namespace where it is kept.
func loadPKI(t *testing.T, n *nodetest.Node) *pki.Cluster {
	t.Helper()
	l, err := event.Get(nodetest.Context(t), &n.Agent.Values().LocalControlPlane, event.Filter(func(l *roleserve.LocalControlPlane) bool { return l != nil }))
	if err != nil {
		t.Fatal(err)
	}
	st, err := event.Get(nodetest.Context(t), l.Consensus.Status(), event.Filter(consensus.IsVoter))
	if err != nil {
		t.Fatal(err)
	}
	cli, err := st.ClientFor("curator")
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	cluster, err := pki.Load(nodetest.Context(t), cli)
	if err != nil {
		t.Fatal(fmt.Errorf("loading the Kubernetes PKI: %w", err))
	}
	return cluster
}
