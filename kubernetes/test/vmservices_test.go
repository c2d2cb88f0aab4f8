package test

import (
	"context"
	"regexp"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"

	"github.com/polis-os/polis/kube/nodeservice"
	"github.com/polis-os/polis/launch/demoimage"
)

// serviceByNameTimeout bounds the wait for a new Service to be reached by
// name.
const serviceByNameTimeout = 10 * time.Minute

// checkServicesByName, on the VM Pods test's cluster, the way the README
// shows Services: every worker's status says kube-proxy and its DNS server
// run; a ClusterIP Service "demo" in front of the two demo replicas (one
// on each worker) is reached from a demo Pod by the Service's names (demo,
// and demo.default.svc.cluster.local), and both replicas answer over
// repeated requests, so the Service's traffic crosses to the other worker
// over the pod network; a name outside the cluster's domain is not
// answered; the apiserver is reached through the kubernetes Service. It
// logs Service created → reachable by name.
func checkServicesByName(ctx context.Context, t *testing.T, cs *kubernetes.Clientset, owner *ownerConn, kubectl func(args ...string) (string, error), pods []corev1.Pod) {
	t.Helper()
	waitList(ctx, t, "every worker's kube-proxy and DNS server running", func() (bool, string, error) {
		var seen []string
		running := 0
		for _, n := range owner.nodes(t) {
			if n.GetRoles().GetKubernetesWorker() == nil {
				continue
			}
			k := n.Status.GetKubernetes()
			seen = append(seen, n.Id+": "+k.String())
			if k.GetProxyRunning() && k.GetDnsRunning() {
				running++
			}
		}
		return running == 2, strings.Join(seen, "; "), nil
	})
	replicas := map[string]bool{}
	for _, p := range pods {
		replicas[p.Name] = false
	}
	client := pods[0].Name
	get := func(u string) (string, error) {
		return kubectl("exec", client, "--", demoimage.Entrypoint, "get", u)
	}

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
	// Seconds when it works (3-4 s under TCG at load 5); a bound of its
	// own so that a DNS server that is refused, or a proxy that programs
	// nothing, fails this phase in minutes rather than the whole test's.
	byName, cancel := context.WithTimeout(ctx, serviceByNameTimeout)
	defer cancel()
	waitList(byName, t, "the Service reached by name from a demo Pod", func() (bool, string, error) {
		out, err := get("http://demo/")
		last = out
		return err == nil && hello.MatchString(out), out, nil
	})
	t.Logf("Service created → reached by name from a Pod: %v", time.Since(created).Round(100*time.Millisecond))
	for i := 0; i < 40 && !allSeen(replicas); i++ {
		u := "http://demo/"
		if i%2 == 1 {
			u = "http://demo.default.svc.cluster.local/"
		}
		out, err := get(u)
		if err != nil {
			t.Fatalf("GET %s from %s: %v\n%s", u, client, err, out)
		}
		m := hello.FindStringSubmatch(out)
		if m == nil {
			t.Fatalf("GET %s from %s: %q, want hello from a replica", u, client, out)
		}
		if _, ok := replicas[m[1]]; !ok {
			t.Errorf("GET %s from %s answered by %s, none of the replicas %v", u, client, m[1], replicas)
		}
		replicas[m[1]] = true
		last = out
	}
	if !allSeen(replicas) {
		t.Errorf("over repeated requests only some replicas answered (the one on the other worker not reached through the Service?): %v (last: %q)", replicas, last)
	}
	if out, err := get("http://nothing.example/"); err == nil {
		t.Errorf("GET http://nothing.example/ succeeded: %q", out)
	}

	// The apiserver through the `kubernetes` Service: its endpoint is the
	// controller's own address, outside the pod network, which only the
	// egress rule (clusternet's) lets the answers find their way back
	// from. The demo's client knows no cluster CA, so reaching it shows
	// as the TLS handshake's refusal of the apiserver's certificate; an
	// unreachable apiserver as a timeout.
	// Each try takes the client's 10 s when nothing answers.
	api, cancelAPI := context.WithTimeout(ctx, 2*time.Minute)
	defer cancelAPI()
	waitList(api, t, "the apiserver reached from a demo Pod through the kubernetes Service", func() (bool, string, error) {
		out, _ := get("https://kubernetes.default.svc.cluster.local/")
		return strings.Contains(out, "x509: certificate signed by unknown authority"), out, nil
	})
}

func allSeen(m map[string]bool) bool {
	for _, v := range m {
		if !v {
			return false
		}
	}
	return len(m) > 0
}

// checkServicesWeighted checks, on worker vm's console, that kube-proxy
// and the DNS server each run in their cgroup under kube-services, whose
// CPU weight is below the kubelet's (kube/nodeservice): the kernel took
// the cgroup, and the cpu controller was there to weigh it.
func (c *vmCluster) checkServicesWeighted(t *testing.T, vm string) {
	t.Helper()
	for _, svc := range []string{"proxy", "dns"} {
		cgroup := `"/sys/fs/cgroup/kube-services/` + svc + `"`
		if _, ok := c.consoleLine(t, vm, time.Time{}, nodeservice.WeightedMessage, cgroup); ok {
			continue
		}
		if _, unweighted := c.consoleLine(t, vm, time.Time{}, nodeservice.UnweightedMessage, cgroup); unweighted {
			t.Errorf("%s: the %s service runs in %s without a CPU weight (its console says why)", vm, svc, cgroup)
		} else {
			t.Errorf("%s: no %q line for %s on its console", vm, nodeservice.WeightedMessage, cgroup)
		}
	}
}
