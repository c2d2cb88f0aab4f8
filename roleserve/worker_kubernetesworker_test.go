package roleserve

import (
	"context"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	cpb "github.com/polis-os/polis/api/curator/v1"
	"github.com/polis-os/polis/internal/testutil"
	"github.com/polis-os/polis/kube/pki"
	"github.com/polis-os/polis/supervisor"
)

// kubeletIssuer is the fake curator's IssueKubeletCredentials: it signs
// for node from a real Kubernetes CA, or refuses while refuse is set.
type kubeletIssuer struct {
	mu     sync.Mutex
	ca     *pki.Cluster
	node   string
	refuse error
	calls  int
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
	return &cpb.IssueKubeletCredentialsResponse{
		ClientCertificate: der(client), ServingCertificate: der(serving), CaCertificate: der(k.ca.CACert),
		// Nothing answers there: the Node is never Ready in this test.
		ApiServers:       []*cpb.KubernetesAPIServer{{NodeId: "node-c", Address: "127.0.0.1", Port: 1}},
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
// log file.
func testRuntime(t *testing.T) (rt *KubernetesRuntime, bundle, log string) {
	t.Helper()
	dir := t.TempDir()
	log = filepath.Join(dir, "log")
	bin := filepath.Join(dir, "bin")
	run := filepath.Join(dir, "run")
	if err := os.MkdirAll(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, body := range map[string]string{
		"containerd": "touch $RUN/up\ntrap 'echo containerd-stop >>$LOG; exit 0' TERM\nsleep 600 & wait\n",
		"ctr":        "[ \"$5\" != version ] || test -e $RUN/up\n",
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
		w := newWorkerKubernetesWorker(&Graph{}, NewValues(), KubernetesConfig{Bundle: tc.bundle, Runtime: tc.runtime}, kubeAddr)
		w.cgroupV2 = func(string) bool { return tc.cgroupV2 }
		if got := w.blocked(tc.held, tc.m, tc.labels); !strings.Contains(got, tc.want) || (tc.want == "") != (got == "") {
			t.Errorf("%s: note %q, want %q", tc.name, got, tc.want)
		}
	}

	// Through the worker's run: the status, and nothing more.
	v := NewValues()
	var g Graph
	w := newWorkerKubernetesWorker(&g, v, KubernetesConfig{}, kubeAddr)
	supervisor.TestHarness(t, w.run)
	if st := waitFor(t, &v.KubernetesWorker, "nil before the roles", func(*KubernetesWorkerStatus) bool { return true }); st != nil {
		t.Errorf("status %v before the roles are known", st)
	}
	v.Membership.Set(nil)
	v.LocalLabels.Set(nil)
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
// credentials (a refusal is in the status and retried), runs containerd
// and kubelet, reports them running and that the Node is not Ready, asks
// again for the apiservers while none answers, and
// when the role goes stops the kubelet, then containerd, before it says
// so.
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
	var g Graph
	w := newWorkerKubernetesWorker(&g, v, KubernetesConfig{Bundle: bundle, Runtime: rt}, kubeAddr)
	w.cgroupV2 = func(string) bool { return true }
	w.retry = 500 * time.Millisecond
	supervisor.TestHarness(t, w.run)
	v.Membership.Set(m)
	v.LocalLabels.Set(map[string]string{"zone": "a"})
	v.LocalRoles.Set(workerRoles)

	waitFor(t, &v.KubernetesWorker, "the curator's refusal", func(s *KubernetesWorkerStatus) bool {
		return s != nil && strings.HasPrefix(s.Note, noteCredentials) && strings.Contains(s.Note, "does not hold the KubernetesWorker role")
	})
	f.kubelet.mu.Lock()
	f.kubelet.refuse = nil
	f.kubelet.mu.Unlock()
	st := waitFor(t, &v.KubernetesWorker, "containerd, kubelet, kube-proxy and DNS running", func(s *KubernetesWorkerStatus) bool {
		return s != nil && s.ContainerdRunning && s.KubeletRunning && s.ProxyRunning && s.DNSRunning && s.Note != "" && s.Note != noteStarting
	})
	if st.NodeReady {
		t.Error("the Node is Ready, yet no apiserver answers")
	}
	// The scripts note their arguments once they run.
	var data []byte
	for deadline := time.Now().Add(time.Minute); !strings.Contains(string(data), "--hostname-override") || !strings.Contains(string(data), "proxy --config=") || !strings.Contains(string(data), "coredns -conf"); {
		if time.Now().After(deadline) {
			t.Fatalf("the kubelet never noted its arguments: %q", data)
		}
		time.Sleep(10 * time.Millisecond) // polling interval of a deadline-bounded wait
		data, _ = os.ReadFile(log)
	}
	if args := string(data); !strings.Contains(args, "--hostname-override="+creds.NodeID) || !strings.Contains(args, "--node-labels=node.polis-os.io/zone=a") || !strings.Contains(args, "--node-ip="+kubeAddr.String()) {
		t.Errorf("kubelet started with %q", args)
	}
	// No apiserver answers: the worker asks the curator again for the
	// list, without waiting for the credentials' renewal.
	for deadline := time.Now().Add(time.Minute); ; {
		f.kubelet.mu.Lock()
		calls := f.kubelet.calls
		f.kubelet.mu.Unlock()
		if calls >= 4 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the curator was asked %d times, want a refusal, an answer and refreshes", calls)
		}
		time.Sleep(10 * time.Millisecond) // polling interval of a deadline-bounded wait
	}
	// The kubeconfig's certificate is the one the curator signed for
	// this node.
	kc, err := os.ReadFile(filepath.Join(rt.RunDir, "kubelet.kubeconfig"))
	if err != nil || !strings.Contains(string(kc), `user: "system:node:`+creds.NodeID+`"`) {
		t.Errorf("kubeconfig %s: %v", kc, err)
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
	waitFor(t, &v.KubernetesWorker, "the role gone", func(s *KubernetesWorkerStatus) bool { return s != nil && !s.Held })
	data, err = os.ReadFile(log)
	if err != nil {
		t.Fatal(err)
	}
	if k, c := strings.Index(string(data), "kubelet-stop"), strings.Index(string(data), "containerd-stop"); k < 0 || c < k {
		t.Errorf("want the kubelet stopped, then containerd, before the status says the role is gone; log:\n%s", data)
	}
	for _, stop := range []string{"proxy-stop", "dns-stop"} {
		if !strings.Contains(string(data), stop) {
			t.Errorf("no %s before the status says the role is gone; log:\n%s", stop, data)
		}
	}
}
