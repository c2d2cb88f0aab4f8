package test

import (
	"context"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"

	cpb "github.com/polis-os/polis/api/curator/v1"
	"github.com/polis-os/polis/kube/bundle"
	"github.com/polis-os/polis/launch/demoimage"
)

// Services and cluster DNS on a VM worker, the way the README shows them:
// polis-launch --vm --kubernetes with one controller and one worker; the
// worker's status says kube-proxy and the DNS server run; two replicas of
// the demo image behind a ClusterIP Service "demo" are reached from
// another Pod by the Service's names (demo, and
// demo.default.svc.cluster.local), both replicas answering over repeated
// requests. All Pods share the one worker: Pods on different workers need
// the pod network between nodes. It logs Service created → reachable by
// name, and the resident memory of kube-proxy and CoreDNS on the worker
// (their /metrics on the node's loopback, read from a host-network Pod).
// It needs qemu (skipped without it, outside CI).
func TestVMClusterServicesByName(t *testing.T) {
	if _, err := exec.LookPath("qemu-system-x86_64"); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("qemu-system-x86_64 is missing; scripts/test installs it: %v", err)
		}
		t.Skip("qemu-system-x86_64 is not installed (apt-get install qemu-system-x86)")
	}
	mod, err := bundle.FindModule(".")
	if err != nil {
		t.Fatal(err)
	}
	root := filepath.Dir(mod)
	bin := t.TempDir()
	buildBinaries(t, bin)
	dir := shortTempDir(t)
	ctx, cancel := context.WithTimeout(context.Background(), vmTimeout)
	defer cancel()
	imageDir := filepath.Join(dir, "demo-image")
	if err := demoimage.Build(ctx, root, imageDir); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	printed := runLaunch(t, bin, root, vmTimeout, "--vm", "--kubernetes", "--image", "demo="+imageDir, "--nodes", "2",
		"--consensus-members=false", "--dir", dir, "--keep")
	t.Logf("polis-launch: cluster ready, the worker's Node Ready, %v after it started", time.Since(start).Round(time.Second))
	m := proxyLine.FindStringSubmatch(printed)
	if m == nil {
		t.Fatalf("polis-launch named no proxy:\n%s", printed)
	}
	proxy, err := url.Parse(m[1])
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel = context.WithTimeout(context.Background(), vmTimeout)
	defer cancel()
	config := filepath.Join(dir, "polisctl")
	polisctlRun(t, bin, config, "kubeconfig")
	kubeconfig := filepath.Join(config, "kubeconfig")
	cs := proxiedClient(t, kubeconfig, proxy)
	linkBundle(t, dir)

	// The worker's status: kube-proxy and the DNS server run.
	waitList(ctx, t, "the worker's kube-proxy and DNS server running", func() (bool, string, error) {
		var resp cpb.ListNodesResponse
		if err := protojson.Unmarshal([]byte(polisctlRun(t, bin, config, "node", "list", "-o", "json")), &resp); err != nil {
			return false, "", err
		}
		for _, n := range resp.Nodes {
			if n.Status.GetExternalAddress() == "10.77.0.2" {
				k := n.Status.GetKubernetes()
				return k.GetProxyRunning() && k.GetDnsRunning(), k.String(), nil
			}
		}
		return false, "no node at 10.77.0.2", nil
	})

	// Two replicas of the demo image, and a client Pod, all on the worker;
	// Pods need their namespace's default ServiceAccount, which the
	// controller-manager makes once it runs.
	waitList(ctx, t, "the default ServiceAccount", func() (bool, string, error) {
		_, err := cs.CoreV1().ServiceAccounts("default").Get(ctx, "default", metav1.GetOptions{})
		return err == nil, "", err
	})
	createPods(ctx, t, cs)
	pods := waitList(ctx, t, "the demo replicas and the client Running", func() (bool, string, error) {
		list, err := cs.CoreV1().Pods("default").List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, "", err
		}
		var seen []string
		running := 0
		for _, p := range list.Items {
			seen = append(seen, p.Name+":"+string(p.Status.Phase)+" "+podWaiting(&p))
			if p.Status.Phase == corev1.PodRunning {
				running++
			}
		}
		return running == 4, strings.Join(seen, " "), nil
	})
	t.Logf("Pods Running: %s", pods)
	list, err := cs.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=demo"})
	if err != nil {
		t.Fatal(err)
	}
	replicas := map[string]bool{}
	for _, p := range list.Items {
		replicas[p.Name] = false
	}

	kubectl := func(args ...string) (string, error) {
		cmd := exec.CommandContext(ctx, filepath.Join(dir, "polis-kube"), append([]string{"kubectl", "--kubeconfig", kubeconfig}, args...)...)
		cmd.Env = append(os.Environ(), "HTTPS_PROXY=", "https_proxy=", "HTTP_PROXY=", "http_proxy=")
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	get := func(pod, u string) (string, error) {
		return kubectl("exec", pod, "--", demoimage.Entrypoint, "get", u)
	}

	// The Service; from its creation until the client reaches it by name.
	created := time.Now()
	if _, err := cs.CoreV1().Services("default").Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "demo"},
		Spec: corev1.ServiceSpec{
			Selector: map[string]string{"app": "demo"},
			Ports:    []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(demoimage.Port)}},
		},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating the demo Service: %v", err)
	}
	hello := regexp.MustCompile(`hello from (\S+)`)
	var last string
	waitList(ctx, t, "the Service reached by name from the client", func() (bool, string, error) {
		out, err := get("client", "http://demo/")
		last = out
		return err == nil && hello.MatchString(out), out, nil
	})
	t.Logf("Service created → reached by name from another Pod: %v", time.Since(created).Round(100*time.Millisecond))
	// Its full name, and both replicas over repeated requests.
	for i := 0; i < 40 && !allSeen(replicas); i++ {
		u := "http://demo/"
		if i%2 == 1 {
			u = "http://demo.default.svc.cluster.local/"
		}
		out, err := get("client", u)
		if err != nil {
			t.Fatalf("GET %s from the client: %v\n%s", u, err, out)
		}
		m := hello.FindStringSubmatch(out)
		if m == nil {
			t.Fatalf("GET %s from the client: %q, want hello from a replica", u, out)
		}
		if _, ok := replicas[m[1]]; !ok {
			t.Errorf("GET %s from the client answered by %s, none of the replicas %v", u, m[1], replicas)
		}
		replicas[m[1]] = true
		last = out
	}
	if !allSeen(replicas) {
		t.Errorf("over repeated requests only some replicas answered: %v (last: %q)", replicas, last)
	}
	// A name outside the cluster's domain is not answered.
	if out, err := get("client", "http://nothing.example/"); err == nil {
		t.Errorf("GET http://nothing.example/ succeeded: %q", out)
	}

	// Memory of the node services on the idle worker, from their metrics
	// on the node's loopback.
	for name, u := range map[string]string{"kube-proxy": "http://127.0.0.1:10249/metrics", "CoreDNS": "http://127.0.0.1:9153/metrics"} {
		out, err := get("hostprobe", u)
		if err != nil {
			t.Errorf("%s's metrics: %v\n%s", name, err, out)
			continue
		}
		if rss := metric(out, "process_resident_memory_bytes"); rss > 0 {
			t.Logf("%s on the worker: resident memory %.1f MiB", name, rss/(1<<20))
		} else {
			t.Errorf("%s's metrics hold no process_resident_memory_bytes", name)
		}
	}
}

// createPods creates the demo Deployment's two replicas (no
// anti-affinity: there is one worker), a client Pod of the same image,
// and a host-network Pod ("hostprobe") that reads the node's loopback.
func createPods(ctx context.Context, t *testing.T, cs *kubernetes.Clientset) {
	t.Helper()
	replicas := int32(2)
	labels := map[string]string{"app": "demo"}
	container := corev1.Container{Name: "demo", Image: "demo", ImagePullPolicy: corev1.PullIfNotPresent}
	dep := demoDeployment(replicas, labels, container)
	if _, err := cs.AppsV1().Deployments("default").Create(ctx, dep, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating the demo Deployment: %v", err)
	}
	client := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "client"}, Spec: corev1.PodSpec{Containers: []corev1.Container{container}}}
	if _, err := cs.CoreV1().Pods("default").Create(ctx, client, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating the client Pod: %v", err)
	}
	probe := container
	probe.Args = []string{"--listen", "127.0.0.1:18080"} // the node's own ports are the node's
	host := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "hostprobe"}, Spec: corev1.PodSpec{HostNetwork: true, Containers: []corev1.Container{probe}}}
	if _, err := cs.CoreV1().Pods("default").Create(ctx, host, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating the host-network Pod: %v", err)
	}
}

func allSeen(m map[string]bool) bool {
	for _, v := range m {
		if !v {
			return false
		}
	}
	return len(m) > 0
}

// metric returns the value of an unlabelled metric in Prometheus' text
// format, or 0.
func metric(text, name string) float64 {
	for _, line := range strings.Split(text, "\n") {
		if rest, ok := strings.CutPrefix(line, name+" "); ok {
			v, err := strconv.ParseFloat(strings.TrimSpace(rest), 64)
			if err == nil {
				return v
			}
		}
	}
	return 0
}

// demoDeployment is a Deployment "demo" of n replicas of container.
func demoDeployment(n int32, labels map[string]string, container corev1.Container) *appsv1.Deployment {
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "demo"},
		Spec: appsv1.DeploymentSpec{
			Replicas: &n,
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{container}},
			},
		},
	}
}
