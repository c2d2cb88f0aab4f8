package kubelet

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/netip"
	"sync"
	"testing"

	"github.com/polis-os/polis/internal/testutil"
	"github.com/polis-os/polis/kube/pki"
	"github.com/polis-os/polis/supervisor/supervisortest"
)

func TestLabelPatch(t *testing.T) {
	p := LabelPrefix
	for _, tc := range []struct {
		name                string
		labels, annotations map[string]string
		want                map[string]string
		patch               string // "" when none is needed
	}{
		{
			name:   "as registered: only the annotation",
			labels: map[string]string{p + "zone": "a", "kubernetes.io/hostname": "n"},
			want:   map[string]string{p + "zone": "a"},
			patch:  `{"metadata":{"annotations":{"node.polis-os.io/labels":"node.polis-os.io/zone"}}}`,
		},
		{
			name:        "in sync",
			labels:      map[string]string{p + "zone": "a", "example.com/rack": "7", "other": "x"},
			annotations: map[string]string{LabelsAnnotation: "example.com/rack," + p + "zone"},
			want:        map[string]string{p + "zone": "a", "example.com/rack": "7"},
		},
		{
			name:        "changed, added, removed; others' labels kept",
			labels:      map[string]string{p + "zone": "a", "example.com/rack": "7", "other": "x", p + "old": "1"},
			annotations: map[string]string{LabelsAnnotation: "example.com/rack," + p + "zone"},
			want:        map[string]string{p + "zone": "b", p + "new": "2"},
			patch:       `{"metadata":{"annotations":{"node.polis-os.io/labels":"node.polis-os.io/new,node.polis-os.io/zone"},"labels":{"example.com/rack":null,"node.polis-os.io/new":"2","node.polis-os.io/old":null,"node.polis-os.io/zone":"b"}}}`,
		},
		{
			name:        "all removed",
			labels:      map[string]string{p + "zone": "a", "other": "x"},
			annotations: map[string]string{LabelsAnnotation: p + "zone"},
			want:        map[string]string{},
			patch:       `{"metadata":{"annotations":{"node.polis-os.io/labels":""},"labels":{"node.polis-os.io/zone":null}}}`,
		},
		{
			name:        "none, none before",
			labels:      map[string]string{"other": "x"},
			annotations: map[string]string{LabelsAnnotation: ""},
			want:        nil,
		},
	} {
		patch, needed := labelPatch(tc.labels, tc.annotations, tc.want)
		if needed != (tc.patch != "") || string(patch) != tc.patch {
			t.Errorf("%s: patch %s (needed %v), want %q", tc.name, patch, needed, tc.patch)
		}
	}
}

// nodeStore is an apiserver's Node for labelling tests: GET and JSON merge
// PATCH of its metadata, as the node itself (its client certificate), 404
// until registered.
type nodeStore struct {
	mu                  sync.Mutex
	name                string
	registered          bool
	labels, annotations map[string]string
	patches             int
}

func (n *nodeStore) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/readyz" {
		_, _ = w.Write([]byte("ok"))
		return
	}
	if cn := r.TLS.PeerCertificates[0].Subject.CommonName; cn != pki.NodeUserPrefix+n.name || r.URL.Path != "/api/v1/nodes/"+n.name {
		http.Error(w, "forbidden", http.StatusForbidden)
		return
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if !n.registered {
		http.Error(w, "not found", http.StatusNotFound)
		return
	}
	switch r.Method {
	case http.MethodGet:
	case http.MethodPatch:
		if r.Header.Get("Content-Type") != "application/merge-patch+json" {
			http.Error(w, "unsupported patch", http.StatusUnsupportedMediaType)
			return
		}
		var p struct {
			Metadata struct{ Labels, Annotations map[string]*string }
		}
		body, _ := io.ReadAll(r.Body)
		if err := json.Unmarshal(body, &p); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		merge := func(dst map[string]string, src map[string]*string) {
			for k, v := range src {
				if v == nil {
					delete(dst, k)
				} else {
					dst[k] = *v
				}
			}
		}
		merge(n.labels, p.Metadata.Labels)
		merge(n.annotations, p.Metadata.Annotations)
		n.patches++
	default:
		http.Error(w, "method", http.StatusMethodNotAllowed)
		return
	}
	_ = json.NewEncoder(w).Encode(map[string]any{"metadata": map[string]any{"name": n.name, "labels": n.labels, "annotations": n.annotations}})
}

func (n *nodeStore) snapshot() (labels map[string]string, patches int) {
	n.mu.Lock()
	defer n.mu.Unlock()
	return maps.Clone(n.labels), n.patches
}

// serveAPI serves h over TLS as an apiserver would: a serving certificate
// for localhost from the cluster's CA, clients verified by it.
func serveAPI(t *testing.T, c *pki.Cluster, h http.Handler) netip.AddrPort {
	t.Helper()
	serving, err := c.IssueServing([]netip.Addr{netip.MustParseAddr("127.0.0.1")}, netip.MustParseAddr("10.96.0.1"), []string{"localhost"}, now)
	if err != nil {
		t.Fatal(err)
	}
	return testutil.ServeMutualTLS(t, h, serving.Cert, serving.Key, c.CACert)
}

// The runner keeps the Node's labels as the node's Polis labels say: once
// the Node is registered (with the labels of the kubelet's start), and
// after every SetLabels; labels others set stay.
func TestRunnerKeepsLabels(t *testing.T) {
	c, err := pki.NewCluster("test", now)
	if err != nil {
		t.Fatal(err)
	}
	node := &nodeStore{name: "node-1", labels: map[string]string{}, annotations: map[string]string{}}
	api := serveAPI(t, c, node)
	cfg, _ := fakeRuntime(t, t.TempDir())
	asNodeOne(t, &cfg, c, api)
	cfg.Labels = NodeLabels(map[string]string{"zone": "a"})
	r, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	supervisortest.Harness(t, r.Run)
	waitStatus(t, r, "containerd and kubelet running", func(s *Status) bool { return s.ContainerdRunning && s.KubeletRunning })

	// Registered by the kubelet, with its start's labels and one of
	// another's; later, Polis' labels change.
	node.mu.Lock()
	node.registered = true
	node.labels = map[string]string{LabelPrefix + "zone": "a", "kubernetes.io/hostname": "node-1"}
	node.mu.Unlock()
	r.SetLabels(NodeLabels(map[string]string{"zone": "b", "example.com/rack": "7"}))
	waitLabels(t, node, map[string]string{LabelPrefix + "zone": "b", "example.com/rack": "7", "kubernetes.io/hostname": "node-1"})

	r.SetLabels(NodeLabels(map[string]string{"zone": "b"}))
	waitLabels(t, node, map[string]string{LabelPrefix + "zone": "b", "kubernetes.io/hostname": "node-1"})
	r.SetLabels(NodeLabels(map[string]string{}))
	waitLabels(t, node, map[string]string{"kubernetes.io/hostname": "node-1"})
	// In sync: the same labels again patch nothing.
	_, before := node.snapshot()
	r.SetLabels(map[string]string{})
	r.SetLabels(NodeLabels(map[string]string{"zone": "c"}))
	waitLabels(t, node, map[string]string{LabelPrefix + "zone": "c", "kubernetes.io/hostname": "node-1"})
	if _, after := node.snapshot(); after != before+1 {
		t.Errorf("%d patches for one change, want 1", after-before)
	}
}

func waitLabels(t *testing.T, n *nodeStore, want map[string]string) {
	t.Helper()
	testutil.Eventually(t, waitTimeout, fmt.Sprintf("the Node's labels %v", want), func() error {
		if got, _ := n.snapshot(); !maps.Equal(got, want) {
			return fmt.Errorf("they are %v", got)
		}
		return nil
	})
}
