package roleserve

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	cpb "github.com/polis-os/polis/api/curator/v1"
	"github.com/polis-os/polis/clusternet"
	"github.com/polis-os/polis/internal/testutil"
	"github.com/polis-os/polis/kube/dns"
	"github.com/polis-os/polis/kube/kubelet"
	"github.com/polis-os/polis/kube/kubetest"
	"github.com/polis-os/polis/kube/nodeservice"
	"github.com/polis-os/polis/kube/pki"
	"github.com/polis-os/polis/kube/proxy"
	"github.com/polis-os/polis/supervisor/supervisortest"
)

// kubeletIssuer is the fake curator's IssueKubeletCredentials: it signs
// for node from a real Kubernetes CA, or refuses while refuse is set.
type kubeletIssuer struct {
	mu     sync.Mutex
	ca     *pki.Cluster
	node   string
	refuse error
	calls  int
	// apiServer is the apiserver the answers name; none answers if unset.
	apiServer netip.AddrPort
}

func (k *kubeletIssuer) issue(req *cpb.IssueKubeletCredentialsRequest) (*cpb.IssueKubeletCredentialsResponse, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.calls++
	if k.refuse != nil {
		return nil, k.refuse
	}
	clientPub, err := pki.ParseClientPublicKey(req.ClientKeySpki)
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	servingPub, err := pki.ParseClientPublicKey(req.ServingKeySpki)
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	now := time.Now()
	client, err := k.ca.SignClient(clientPub, pki.NodeUserPrefix+k.node, []string{pki.NodesGroup}, time.Hour, now)
	if err != nil {
		return nil, err
	}
	serving, err := k.ca.SignServing(servingPub, pki.NodeUserPrefix+k.node, []netip.Addr{kubeAddr}, nil, time.Hour, now)
	if err != nil {
		return nil, err
	}
	var services [2][]byte
	for i, sv := range []struct {
		spki []byte
		user string
	}{{req.ProxyKeySpki, pki.ProxyUser}, {req.DnsKeySpki, pki.DNSUser}} {
		pub, err := pki.ParseClientPublicKey(sv.spki)
		if err != nil {
			return nil, status.Error(codes.InvalidArgument, err.Error())
		}
		if services[i], err = k.ca.SignClient(pub, sv.user, nil, time.Hour, now); err != nil {
			return nil, err
		}
	}
	der := func(p []byte) []byte {
		c, err := pki.ParseCertificate(p)
		if err != nil {
			panic(err)
		}
		return c.Raw
	}
	// Unless apiServer is set, nothing answers: the Node is never Ready.
	api := &cpb.KubernetesAPIServer{NodeId: "node-c", Address: "127.0.0.1", Port: 1}
	if k.apiServer.IsValid() {
		api.Address, api.Port = k.apiServer.Addr().String(), uint32(k.apiServer.Port())
	}
	return &cpb.IssueKubeletCredentialsResponse{
		ClientCertificate: der(client), ServingCertificate: der(serving), CaCertificate: der(k.ca.CACert),
		ApiServers:       []*cpb.KubernetesAPIServer{api},
		NodeName:         k.node,
		ProxyCertificate: der(services[0]),
		DnsCertificate:   der(services[1]),
	}, nil
}

func (f *fakeCurator) IssueKubeletCredentials(_ context.Context, req *cpb.IssueKubeletCredentialsRequest) (*cpb.IssueKubeletCredentialsResponse, error) {
	if f.kubelet == nil {
		return nil, status.Error(codes.Unimplemented, "fake curator: no kubelet issuer")
	}
	return f.kubelet.issue(req)
}

// testRuntime is a container runtime of shell scripts standing in for
// containerd, ctr and polis-kube; they note what they do in the returned
// log file. containerd's socket is a link to a health server of the
// test's (kubetest.ContainerdHealth), made anew by each stand-in containerd.
func testRuntime(t *testing.T) (rt *KubernetesRuntime, bundle, log string) {
	t.Helper()
	dir := t.TempDir()
	health, _, _ := kubetest.ContainerdHealth(t, dir)
	log = filepath.Join(dir, "log")
	bin := filepath.Join(dir, "bin")
	run := filepath.Join(dir, "run")
	if err := os.MkdirAll(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, body := range map[string]string{
		"containerd": "ln -sf " + health + " $RUN/containerd.sock\ntrap 'echo containerd-stop >>$LOG; exit 0' TERM\nsleep 600 & wait\n",
		"ctr":        "",
		// kubelet and kube-proxy: "$1-stop" is kubelet-stop or proxy-stop.
		"polis-kube":    "echo \"$*\" >>$LOG\ntrap 'echo $1-stop >>$LOG; exit 0' TERM\nsleep 600 & wait\n",
		"polis-coredns": "echo \"coredns $*\" >>$LOG\ntrap 'echo dns-stop >>$LOG; exit 0' TERM\nsleep 600 & wait\n",
	} {
		if err := os.WriteFile(filepath.Join(bin, name), []byte("#!/bin/sh\nLOG="+log+"\nRUN="+run+"\n"+body), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return &KubernetesRuntime{
		BinDir: bin, CNIBinDir: filepath.Join(dir, "cni"), PauseImage: filepath.Join(dir, "pause.tar"),
		StateDir: filepath.Join(dir, "state"), RunDir: run,
		ProxyPort: testutil.FreePort(t, netip.MustParseAddr("127.0.0.1")).Port(),
	}, filepath.Join(bin, "polis-kube"), log
}

// Without a runtime, without cgroup v2, without a bundle, before a curator
// can be asked and before the labels are known, a held KubernetesWorker is
// not run and the status says which.
func TestKubernetesWorkerNotRun(t *testing.T) {
	rt := &KubernetesRuntime{BinDir: "/b", CNIBinDir: "/c", PauseImage: "/p.tar", StateDir: "/s", RunDir: "/r", CgroupMount: "/sys/fs/cgroup"}
	m := fakeMembership(t, newFakeCurator(), testCredentials(t))
	labels := map[string]string{}
	for _, tc := range []struct {
		name     string
		held     bool
		runtime  *KubernetesRuntime
		cgroupV2 bool
		bundle   string
		m        *ClusterMembership
		labels   map[string]string
		want     string
	}{
		{"not held", false, nil, false, "", nil, nil, ""},
		{"no runtime", true, nil, true, "/k", m, labels, noteNoRuntime},
		{"no cgroup v2", true, rt, false, "/k", m, labels, "no cgroup v2 (no cgroup.controllers in /sys/fs/cgroup)"},
		{"no bundle", true, rt, true, "", m, labels, noteNoKubelet},
		{"no curator", true, rt, true, "/k", nil, labels, noteNoCurator},
		{"no labels yet", true, rt, true, "/k", m, nil, noteNoLabels},
		{"all there", true, rt, true, "/k", m, labels, ""},
	} {
		w := newWorkerKubernetesWorker(&Graph{}, NewValues(), KubernetesConfig{Bundle: tc.bundle, Runtime: tc.runtime}, kubeAddr, "")
		w.cgroupV2 = func(string) bool { return tc.cgroupV2 }
		if got := w.blocked(tc.held, tc.m, tc.labels, testPodRange); !strings.Contains(got, tc.want) || (tc.want == "") != (got == "") {
			t.Errorf("%s: note %q, want %q", tc.name, got, tc.want)
		}
	}
	noRange := newWorkerKubernetesWorker(&Graph{}, NewValues(), KubernetesConfig{Bundle: "/k", Runtime: rt}, kubeAddr, "")
	noRange.cgroupV2 = func(string) bool { return true }
	if got := noRange.blocked(true, m, labels, netip.Prefix{}); got != notePodRange {
		t.Errorf("no pod range yet: note %q, want %q", got, notePodRange)
	}

	// Through the worker's run: the status, and nothing more.
	v := NewValues()
	v.ClusterPodRange.Set(testClusterPodRange)
	var g Graph
	w := newWorkerKubernetesWorker(&g, v, KubernetesConfig{}, kubeAddr, filepath.Join(t.TempDir(), "wireguard.key"))
	supervisortest.Harness(t, w.run)
	if st := waitFor(t, &v.KubernetesWorker, "nil before the roles", func(*KubernetesWorkerStatus) bool { return true }); st != nil {
		t.Errorf("status %v before the roles are known", st)
	}
	v.Membership.Set(nil)
	v.LocalLabels.Set(nil)
	v.LocalPodRange.Set(netip.Prefix{})
	v.LocalRoles.Set(workerRoles)
	st := waitFor(t, &v.KubernetesWorker, "the role held", func(s *KubernetesWorkerStatus) bool { return s != nil && s.Held })
	if st.Note != noteNoRuntime || st.ContainerdRunning || st.KubeletRunning || st.NodeReady {
		t.Errorf("status %+v, want nothing running and %q", st, noteNoRuntime)
	}
	if p := kubernetesProto(nil, st); p.GetWorkerNote() != noteNoRuntime || p.GetKubeletRunning() {
		t.Errorf("reported %v", p)
	}
	v.LocalRoles.Set(noRoles)
	waitFor(t, &v.KubernetesWorker, "the role gone", func(s *KubernetesWorkerStatus) bool { return s != nil && !s.Held && s.Note == "" })
}

// With everything there, the worker asks the curator for the kubelet's
// credentials (a refusal is in the status and retried), runs containerd,
// and while no apiserver answers holds the kubelet back, says so, and
// asks the curator again for the apiservers; when the role goes it stops
// containerd before it says so.
func TestKubernetesWorkerRuns(t *testing.T) {
	creds := testCredentials(t)
	ca, err := pki.NewCluster("test", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	f := newFakeCurator()
	f.kubelet = &kubeletIssuer{ca: ca, node: creds.NodeID, refuse: status.Error(codes.FailedPrecondition, "node does not hold the KubernetesWorker role")}
	m := fakeMembership(t, f, creds)
	rt, bundle, log := testRuntime(t)
	v := NewValues()
	v.ClusterPodRange.Set(testClusterPodRange)
	var g Graph
	keyFile := filepath.Join(t.TempDir(), "wireguard.key")
	w := newWorkerKubernetesWorker(&g, v, KubernetesConfig{Bundle: bundle, Runtime: rt}, kubeAddr, keyFile)
	w.cgroupV2 = func(string) bool { return true }
	w.retry = 500 * time.Millisecond
	// The pod network, as clusternet.Run would get it: its config, and
	// whether what the role leaves was removed.
	netCfgs := make(chan clusternet.Config, 1)
	var cleared atomic.Int32
	w.runPodNetwork = func(ctx context.Context, c clusternet.Config) error {
		netCfgs <- c
		<-ctx.Done()
		return ctx.Err()
	}
	w.leftovers = []cleanupStep{{name: "everything", run: func(context.Context) error { cleared.Add(1); return nil }}}
	// The cluster link has jumbo frames: the tunnel and the Pods get
	// them less WireGuard's overhead.
	w.linkMTU = func(a netip.Addr) (int, error) {
		if a != kubeAddr {
			return 0, fmt.Errorf("no link holds %v", a)
		}
		return 9000, nil
	}
	supervisortest.Harness(t, w.run)
	v.Membership.Set(m)
	v.LocalLabels.Set(map[string]string{"zone": "a"})
	v.LocalPodRange.Set(testPodRange)
	v.LocalRoles.Set(workerRoles)

	waitFor(t, &v.KubernetesWorker, "the curator's refusal", func(s *KubernetesWorkerStatus) bool {
		return s != nil && strings.HasPrefix(s.Note, noteCredentials) && strings.Contains(s.Note, "does not hold the KubernetesWorker role")
	})
	f.kubelet.mu.Lock()
	f.kubelet.refuse = nil
	f.kubelet.mu.Unlock()
	// No apiserver answers: containerd, kube-proxy and the DNS server
	// run, the kubelet waits for one.
	st := waitFor(t, &v.KubernetesWorker, "containerd, kube-proxy and DNS running, the kubelet waiting for an apiserver", func(s *KubernetesWorkerStatus) bool {
		return s != nil && s.ContainerdRunning && s.ProxyRunning && s.DNSRunning && strings.Contains(s.Note, "waiting for an apiserver")
	})
	if st.NodeReady || st.KubeletRunning {
		t.Errorf("status %+v: a kubelet runs, or the Node is Ready, yet no apiserver answers", st)
	}
	// The scripts note their arguments once they run.
	testutil.Eventually(t, time.Minute, "kube-proxy and the DNS server noting their arguments", func() error {
		data, _ := os.ReadFile(log)
		if !strings.Contains(string(data), "proxy --config=") || !strings.Contains(string(data), "coredns -conf") {
			return fmt.Errorf("noted %q", data)
		}
		return nil
	})
	// No apiserver answers: the worker asks the curator again for the
	// list, without waiting for the credentials' renewal.
	testutil.Eventually(t, time.Minute, "the curator asked for a refusal, an answer and refreshes", func() error {
		f.kubelet.mu.Lock()
		calls := f.kubelet.calls
		f.kubelet.mu.Unlock()
		if calls < 4 {
			return fmt.Errorf("asked %d times, want 4 or more", calls)
		}
		return nil
	})
	// The kubeconfig's certificate is the one the curator signed for
	// this node.
	kc, err := os.ReadFile(filepath.Join(rt.RunDir, "kubelet.kubeconfig"))
	if err != nil || !strings.Contains(string(kc), `user: "system:node:`+creds.NodeID+`"`) {
		t.Errorf("kubeconfig %s: %v", kc, err)
	}
	// Pods get addresses from the node's own range.
	if cni, err := os.ReadFile(filepath.Join(rt.RunDir, "cni", "10-polis.conflist")); err != nil || !strings.Contains(string(cni), testPodRange.String()) {
		t.Errorf("CNI configuration %s does not name the node's range %s: %v", cni, testPodRange, err)
	}

	// The pod network runs beside the kubelet, with the node's own
	// address, range and WireGuard key, and the peers' value.
	var netCfg clusternet.Config
	select {
	case netCfg = <-netCfgs:
		key, err := clusternet.LoadOrCreateKey(keyFile)
		if err != nil {
			t.Fatal(err)
		}
		if c := netCfg; c.PodCIDR != testPodRange || c.Address != kubeAddr || c.PrivateKey != key || c.Peers == nil || c.Status == nil {
			t.Errorf("the pod network runs with range %v, address %v, key from the key file: %v, peers given: %v, status: %v; want %v, %v, true, true, true",
				c.PodCIDR, c.Address, c.PrivateKey == key, c.Peers != nil, c.Status != nil, testPodRange, kubeAddr)
		}
		if netCfg.ClusterPodRange != testClusterPodRange {
			t.Errorf("the pod network runs with the cluster's pod range %v, want %v (the egress rule's)", netCfg.ClusterPodRange, testClusterPodRange)
		}
		if want := 9000 - clusternet.Overhead; netCfg.MTU != want {
			t.Errorf("the pod network's MTU is %d, want %d (the cluster link's less WireGuard's overhead)", netCfg.MTU, want)
		}
		confs, _ := filepath.Glob(filepath.Join(rt.RunDir, "cni", "*.conflist"))
		if len(confs) != 1 {
			t.Errorf("CNI configurations %v, want one", confs)
		} else if data, err := os.ReadFile(confs[0]); err != nil || !strings.Contains(string(data), fmt.Sprintf(`"mtu": %d`, 9000-clusternet.Overhead)) {
			t.Errorf("the CNI configuration (err %v) gives Pods no MTU of %d:\n%s", err, 9000-clusternet.Overhead, data)
		}
	case <-time.After(time.Minute):
		t.Fatal("the pod network was never started beside the kubelet")
	}
	// What the pod network configured is the worker's status: its peers
	// by ID, sorted, and whether the kernel matched them.
	netCfg.Status.Set(&clusternet.Status{Mode: clusternet.ModeWireGuard, InSync: true, Peers: []clusternet.Peer{{NodeID: "node-b"}, {NodeID: "node-a"}}})
	waitFor(t, &v.KubernetesWorker, "the pod network's peers in the status", func(s *KubernetesWorkerStatus) bool {
		return s != nil && s.NetworkInSync && slices.Equal(s.NetworkPeers, []string{"node-a", "node-b"})
	})
	netCfg.Status.Set(&clusternet.Status{Mode: clusternet.ModeWireGuard, Peers: []clusternet.Peer{{NodeID: "node-a"}}, LastError: "injected"})
	waitFor(t, &v.KubernetesWorker, "the pod network out of sync", func(s *KubernetesWorkerStatus) bool {
		return s != nil && !s.NetworkInSync && slices.Equal(s.NetworkPeers, []string{"node-a"})
	})
	if n := cleared.Load(); n != 0 {
		t.Errorf("what the role leaves was removed %d times while the role is held", n)
	}
	// kube-proxy and the DNS server have theirs, with their own users;
	// the kubelet gives Pods the node's address as their nameserver.
	for file, user := range map[string]string{"proxy/kube-proxy.kubeconfig": pki.ProxyUser, "dns/dns.kubeconfig": pki.DNSUser} {
		kc, err := os.ReadFile(filepath.Join(rt.RunDir, file))
		if err != nil || !strings.Contains(string(kc), `user: "`+user+`"`) {
			t.Errorf("kubeconfig %s: %s: %v", file, kc, err)
		}
	}
	if kcfg, err := os.ReadFile(filepath.Join(rt.RunDir, "kubelet.yaml")); err != nil || !strings.Contains(string(kcfg), "clusterDNS:\n  - \""+kubeAddr.String()+"\"") {
		t.Errorf("kubelet configuration names no cluster DNS at %s: %s %v", kubeAddr, kcfg, err)
	}

	v.LocalRoles.Set(noRoles)
	waitFor(t, &v.KubernetesWorker, "the role gone, what it left removed", func(s *KubernetesWorkerStatus) bool { return s != nil && !s.Held && s.Note == "" })
	if n := cleared.Load(); n != 1 {
		t.Errorf("what the role left was removed %d times once the role went, want once", n)
	}
	if data := readFile(t, log); !strings.Contains(data, "containerd-stop") || strings.Contains(data, "kubelet") {
		t.Errorf("want containerd stopped, and no kubelet ever started, before the status says the role is gone; log:\n%s", data)
	}
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// labelledNode is an apiserver's Node for the labels test: GET answers
// with the labels it holds, a PATCH's labels (a JSON merge patch) are
// applied; only for the node's own certificate.
type labelledNode struct {
	mu     sync.Mutex
	name   string
	labels map[string]string
}

func (n *labelledNode) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/readyz" {
		_, _ = w.Write([]byte("ok"))
		return
	}
	if r.TLS.PeerCertificates[0].Subject.CommonName != pki.NodeUserPrefix+n.name || r.URL.Path != "/api/v1/nodes/"+n.name {
		http.Error(w, "forbidden", http.StatusForbidden)
		return
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if r.Method == http.MethodPatch {
		var p struct {
			Metadata struct{ Labels map[string]*string }
		}
		if err := json.NewDecoder(r.Body).Decode(&p); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		for k, v := range p.Metadata.Labels {
			if v == nil {
				delete(n.labels, k)
			} else {
				n.labels[k] = *v
			}
		}
	}
	_ = json.NewEncoder(w).Encode(map[string]any{"metadata": map[string]any{"labels": n.labels}})
}

func (n *labelledNode) get() map[string]string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return maps.Clone(n.labels)
}

// With an apiserver answering, the kubelet runs with the node's name,
// address and labels; a change of the node's Polis labels reaches the
// Node's labels while it runs, mapped as at registration; when the role
// goes the kubelet stops before containerd.
func TestKubernetesWorkerKeepsLabels(t *testing.T) {
	creds := testCredentials(t)
	ca, err := pki.NewCluster("test", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	node := &labelledNode{name: creds.NodeID, labels: map[string]string{kubelet.LabelPrefix + "zone": "a", "kubernetes.io/hostname": "h"}}
	serving, err := ca.IssueServing([]netip.Addr{netip.MustParseAddr("127.0.0.1")}, netip.MustParseAddr("10.96.0.1"), []string{"localhost"}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	apiServer := testutil.ServeMutualTLS(t, node, serving.Cert, serving.Key, ca.CACert)

	f := newFakeCurator()
	f.kubelet = &kubeletIssuer{ca: ca, node: creds.NodeID, apiServer: apiServer}
	rt, bundle, log := testRuntime(t)
	v := NewValues()
	v.ClusterPodRange.Set(testClusterPodRange)
	var g Graph
	w := newWorkerKubernetesWorker(&g, v, KubernetesConfig{Bundle: bundle, Runtime: rt}, kubeAddr, filepath.Join(t.TempDir(), "wireguard.key"))
	w.cgroupV2 = func(string) bool { return true }
	// Not this machine's network.
	w.runPodNetwork = func(ctx context.Context, _ clusternet.Config) error { <-ctx.Done(); return ctx.Err() }
	w.leftovers = nil
	supervisortest.Harness(t, w.run)
	v.Membership.Set(fakeMembership(t, f, creds))
	v.LocalLabels.Set(map[string]string{"zone": "a"})
	v.LocalPodRange.Set(testPodRange)
	v.LocalRoles.Set(workerRoles)
	waitFor(t, &v.KubernetesWorker, "containerd and kubelet running", func(s *KubernetesWorkerStatus) bool {
		return s != nil && s.ContainerdRunning && s.KubeletRunning
	})
	// The script notes its arguments once it runs.
	var args string
	testutil.Eventually(t, time.Minute, "the kubelet noting its arguments", func() error {
		if args = readFile(t, log); !strings.Contains(args, "--hostname-override") {
			return fmt.Errorf("noted %q", args)
		}
		return nil
	})
	if !strings.Contains(args, "--hostname-override="+creds.NodeID) || !strings.Contains(args, "--node-labels=node.polis-os.io/zone=a") || !strings.Contains(args, "--node-ip="+kubeAddr.String()) {
		t.Errorf("kubelet started with %q", args)
	}

	v.LocalLabels.Set(map[string]string{"zone": "b", "example.com/rack": "7"})
	want := map[string]string{kubelet.LabelPrefix + "zone": "b", "example.com/rack": "7", "kubernetes.io/hostname": "h"}
	testutil.Eventually(t, time.Minute, fmt.Sprintf("the Node's labels %v", want), func() error {
		if got := node.get(); !maps.Equal(got, want) {
			return fmt.Errorf("they are %v", got)
		}
		return nil
	})
	v.LocalRoles.Set(noRoles)
	waitFor(t, &v.KubernetesWorker, "the role gone", func(s *KubernetesWorkerStatus) bool { return s != nil && !s.Held })
	data := readFile(t, log)
	if k, c := strings.Index(data, "kubelet-stop"), strings.Index(data, "containerd-stop"); k < 0 || c < k {
		t.Errorf("want the kubelet stopped, then containerd, before the status says the role is gone; log:\n%s", data)
	}
	for _, stop := range []string{"proxy-stop", "dns-stop"} {
		if !strings.Contains(string(data), stop) {
			t.Errorf("no %s before the status says the role is gone; log:\n%s", stop, data)
		}
	}
}

// testPodRange is the pod range the tests' curator gave the node.
var testPodRange = netip.MustParsePrefix("10.244.7.0/24")

// testClusterPodRange holds testPodRange.
var testClusterPodRange = netip.MustParsePrefix("10.244.0.0/14")

// Two statuses are equal only if every field is: each field changed in
// turn makes them differ (a field added to the struct but not to equal
// would be missed on change, and readers would not wake).
func TestKubernetesWorkerStatusEqual(t *testing.T) {
	base := KubernetesWorkerStatus{NetworkPeers: []string{"node-a"}}
	if !base.equal(&KubernetesWorkerStatus{NetworkPeers: []string{"node-a"}}) {
		t.Error("equal statuses differ")
	}
	typ := reflect.TypeOf(base)
	for i := range typ.NumField() {
		other := base
		other.NetworkPeers = slices.Clone(base.NetworkPeers)
		f := reflect.ValueOf(&other).Elem().Field(i)
		switch f.Kind() {
		case reflect.Bool:
			f.SetBool(!f.Bool())
		case reflect.String:
			f.SetString(f.String() + "x")
		case reflect.Slice:
			f.Set(reflect.Append(f, reflect.ValueOf("node-b")))
		default:
			t.Fatalf("field %s: kind %v not covered by this test", typ.Field(i).Name, f.Kind())
		}
		if base.equal(&other) {
			t.Errorf("statuses that differ in %s are equal", typ.Field(i).Name)
		}
	}
	var nilStatus *KubernetesWorkerStatus
	if !nilStatus.equal(nil) || nilStatus.equal(&base) || base.equal(nil) {
		t.Error("nil statuses compared wrongly")
	}
}

// Given ServicesCgroup, kube-proxy and the DNS server each run in a
// cgroup of their own below it; without it, in the agent's.
func TestNodeServicesCgroups(t *testing.T) {
	for _, services := range []string{"", "/sys/fs/cgroup/kube-services"} {
		rt := &KubernetesRuntime{BinDir: "/b", CNIBinDir: "/c", PauseImage: "/p.tar", StateDir: "/s", RunDir: "/r", ServicesCgroup: services}
		var g Graph
		w := newWorkerKubernetesWorker(&g, NewValues(), KubernetesConfig{Bundle: "/b/polis-kube", Runtime: rt}, kubeAddr, "/k")
		w.runningPodRange = testPodRange
		// What the credentials hold does not matter here.
		pair := pki.Pair{Cert: []byte("cert"), Key: []byte("key")}
		issued := &issuedCredentials{nodeName: "node-a", creds: kubelet.Credentials{CA: []byte("ca")}, proxy: pair, dns: pair}
		proxySpec, dnsSpec, err := w.nodeServiceSpecs(issued)
		if err != nil {
			t.Fatal(err)
		}
		wantProxy, wantDNS := "", ""
		if services != "" {
			wantProxy, wantDNS = services+"/"+proxy.Name, services+"/"+dns.Name
		}
		if proxySpec.Cgroup != wantProxy || dnsSpec.Cgroup != wantDNS {
			t.Errorf("ServicesCgroup %q: kube-proxy's cgroup %q, the DNS server's %q; want %q, %q", services, proxySpec.Cgroup, dnsSpec.Cgroup, wantProxy, wantDNS)
		}
		// The runners take them.
		for _, spec := range []nodeservice.Spec{proxySpec, dnsSpec} {
			if _, err := nodeservice.New(spec); err != nil {
				t.Errorf("ServicesCgroup %q: %s: %v", services, spec.Name, err)
			}
		}
	}
}

// While no apiserver answers, the worker asks the curator again for the
// apiservers every retry, and hands the list to the kubelet's proxy alone:
// the credentials are not due, so the kubelet (which would have no Pod
// specs until an apiserver answers) is not restarted.
func TestKubernetesWorkerEarlyAsksKeepTheKubelet(t *testing.T) {
	creds := testCredentials(t)
	ca, err := pki.NewCluster("test", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	node := &labelledNode{name: creds.NodeID, labels: map[string]string{}}
	serving, err := ca.IssueServing([]netip.Addr{netip.MustParseAddr("127.0.0.1")}, netip.MustParseAddr("10.96.0.1"), []string{"localhost"}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	apiServer, stopAPIServer := testutil.StoppableMutualTLS(t, node, serving.Cert, serving.Key, ca.CACert)
	f := newFakeCurator()
	f.kubelet = &kubeletIssuer{ca: ca, node: creds.NodeID, apiServer: apiServer}
	rt, bundle, log := testRuntime(t)
	v := NewValues()
	v.ClusterPodRange.Set(testClusterPodRange)
	var g Graph
	w := newWorkerKubernetesWorker(&g, v, KubernetesConfig{Bundle: bundle, Runtime: rt}, kubeAddr, filepath.Join(t.TempDir(), "wireguard.key"))
	w.cgroupV2 = func(string) bool { return true }
	w.retry = 200 * time.Millisecond
	w.runPodNetwork = func(ctx context.Context, _ clusternet.Config) error { <-ctx.Done(); return ctx.Err() }
	w.leftovers = nil
	supervisortest.Harness(t, w.run)
	v.Membership.Set(fakeMembership(t, f, creds))
	v.LocalLabels.Set(map[string]string{})
	v.LocalPodRange.Set(testPodRange)
	v.LocalRoles.Set(workerRoles)
	waitFor(t, &v.KubernetesWorker, "the kubelet running", func(s *KubernetesWorkerStatus) bool { return s != nil && s.KubeletRunning })
	testutil.Eventually(t, time.Minute, "the kubelet noting its start", func() error {
		if data := readFile(t, log); !strings.Contains(data, "kubelet --config") {
			return fmt.Errorf("noted %q", data)
		}
		return nil
	})
	calls := func() int {
		f.kubelet.mu.Lock()
		defer f.kubelet.mu.Unlock()
		return f.kubelet.calls
	}
	asked := calls()
	stopAPIServer()
	// Three more asks: at least two were answered and acted on.
	testutil.Eventually(t, time.Minute, "the curator asked again for the apiservers", func() error {
		if n := calls(); n < asked+3 {
			return fmt.Errorf("asked %d times since the apiserver stopped, want 3 or more", n-asked)
		}
		return nil
	})
	if data := readFile(t, log); strings.Count(data, "kubelet --config") != 1 || strings.Contains(data, "kubelet-stop") {
		t.Errorf("the kubelet was restarted by asks for the apiservers; log:\n%s", data)
	}
	if st := waitFor(t, &v.KubernetesWorker, "the status", func(*KubernetesWorkerStatus) bool { return true }); !st.Held || !st.KubeletRunning {
		t.Errorf("status %v: the kubelet does not run", st)
	}
}

// A WireGuard key file that holds no key blocks the role before anything
// starts (no credentials asked for, no containerd), and the status names
// the file and what is wrong with it: a failure once containerd and the
// kubelet ran would kill every container at each retry.
func TestKubernetesWorkerBadKeyBlocksFirst(t *testing.T) {
	creds := testCredentials(t)
	ca, err := pki.NewCluster("test", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	f := newFakeCurator()
	f.kubelet = &kubeletIssuer{ca: ca, node: creds.NodeID}
	rt, bundle, log := testRuntime(t)
	keyFile := filepath.Join(t.TempDir(), "wireguard.key")
	if err := os.WriteFile(keyFile, []byte("not a key"), 0o600); err != nil {
		t.Fatal(err)
	}
	v := NewValues()
	v.ClusterPodRange.Set(testClusterPodRange)
	var g Graph
	w := newWorkerKubernetesWorker(&g, v, KubernetesConfig{Bundle: bundle, Runtime: rt}, kubeAddr, keyFile)
	w.cgroupV2 = func(string) bool { return true }
	var netRuns atomic.Int32
	w.runPodNetwork = func(ctx context.Context, _ clusternet.Config) error { netRuns.Add(1); <-ctx.Done(); return ctx.Err() }
	w.leftovers = nil
	supervisortest.Harness(t, w.run)
	v.Membership.Set(fakeMembership(t, f, creds))
	v.LocalLabels.Set(map[string]string{})
	v.LocalPodRange.Set(testPodRange)
	v.LocalRoles.Set(workerRoles)
	st := waitFor(t, &v.KubernetesWorker, "the key's failure in the status", func(s *KubernetesWorkerStatus) bool {
		return s != nil && s.Held && strings.HasPrefix(s.Note, noteNoKey)
	})
	if !strings.Contains(st.Note, keyFile) || !strings.Contains(st.Note, "32 bytes, not 9") {
		t.Errorf("note %q does not name the file %s and what is wrong", st.Note, keyFile)
	}
	f.kubelet.mu.Lock()
	calls := f.kubelet.calls
	f.kubelet.mu.Unlock()
	if _, err := os.Stat(log); calls != 0 || st.ContainerdRunning || netRuns.Load() != 0 || !errors.Is(err, os.ErrNotExist) {
		t.Errorf("with no usable key: %d credential asks, containerd running %v, pod network runs %d, stand-in log %v; want none of them", calls, st.ContainerdRunning, netRuns.Load(), err)
	}
}
