package roletest

import (
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
	"github.com/polis-os/polis/internal/testutil"
	"github.com/polis-os/polis/node/nodetest"
)

// A Node's spec.podCIDR is the pod range the curator gave its Polis node:
// set by the controller node's agent (the kubelet may not change its own
// Node's spec) once both exist; a Node no Polis node stands behind keeps
// an empty one. Here the range comes first (the node got it with
// KubernetesController, before its Node exists); kube/controller's own
// tests take the Node first too.
func TestNodePodCIDR(t *testing.T) {
	c := startController(t)
	st := c.waitKube(t, "ready", ready)
	server := "https://" + st.APIServer.String()
	cluster := loadPKI(t, c.node)
	admin, err := cluster.IssueClient("polis-test-admin", []string{"system:masters"}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	cert, err := tls.X509KeyPair(admin.Cert, admin.Key)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(cluster.CACert)
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots, Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr, Timeout: time.Minute}

	// The Nodes, after the range; KubernetesWorker keeps the range the
	// node has.
	for _, name := range []string{"not-a-polis-node", c.id} {
		call(t, hc, http.MethodPost, server+"/api/v1/nodes", `{"apiVersion":"v1","kind":"Node","metadata":{"name":"`+name+`"}}`, http.StatusCreated)
	}
	if _, err := c.mgmt.UpdateNodeRoles(nodetest.Context(t), &cpb.UpdateNodeRolesRequest{NodeId: c.id, KubernetesWorker: proto.Bool(true)}); err != nil {
		t.Fatal(err)
	}
	nodes, err := c.mgmt.ListNodes(nodetest.Context(t), &cpb.ListNodesRequest{NodeIds: []string{c.id}})
	if err != nil {
		t.Fatal(err)
	}
	resp, err := nodes.Recv()
	if err != nil || len(resp.Nodes) != 1 {
		t.Fatalf("ListNodes: %v, %v", resp, err)
	}
	want := resp.Nodes[0].GetNetwork().GetPodRange()
	if want == "" {
		t.Fatalf("the controller, now a worker, has no pod range: %v", resp.Nodes[0])
	}

	podCIDR := func(name string) (string, []string) {
		t.Helper()
		r, err := hc.Get(server + "/api/v1/nodes/" + name)
		if err != nil {
			t.Fatal(err)
		}
		defer r.Body.Close()
		data, _ := io.ReadAll(r.Body)
		var n struct {
			Spec struct {
				PodCIDR  string   `json:"podCIDR"`
				PodCIDRs []string `json:"podCIDRs"`
			} `json:"spec"`
		}
		if r.StatusCode != http.StatusOK || json.Unmarshal(data, &n) != nil {
			t.Fatalf("GET Node %s: %s: %s", name, r.Status, data)
		}
		return n.Spec.PodCIDR, n.Spec.PodCIDRs
	}
	testutil.Eventually(t, waitTimeout, fmt.Sprintf("Node %s given the node's range %s as podCIDR", c.id, want), func() error {
		if got, all := podCIDR(c.id); got != want || len(all) != 1 || all[0] != want {
			return fmt.Errorf("podCIDR %q (%v)", got, all)
		}
		return nil
	})
	if got, _ := podCIDR("not-a-polis-node"); got != "" {
		t.Errorf("a Node without a Polis node got podCIDR %q", got)
	}
}
