package test

import (
	"context"
	"net/netip"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/polis-os/polis/event"
	"github.com/polis-os/polis/internal/testutil"
	"github.com/polis-os/polis/kube/bundle"
	"github.com/polis-os/polis/kube/controlplane"
	"github.com/polis-os/polis/kube/etcdproxy"
	"github.com/polis-os/polis/kube/kubetest"
	"github.com/polis-os/polis/kube/pki"
	"github.com/polis-os/polis/supervisor"
	"github.com/polis-os/polis/supervisor/supervisortest"
)

// TestMain fails the package if a goroutine outlives the tests, except
// klog's flush daemon, which client-go starts once per process and never
// stops.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, append(kubetest.LeakOptions(), goleak.IgnoreAnyFunction("k8s.io/klog/v2.(*flushDaemon).run.func1"))...)
}

// subnets gives each test its own 127.82.N.0/24.
var subnets = testutil.Subnets{Octet: 82}

// timeout bounds each wait: the apiserver takes seconds to be ready on an
// idle machine, much more on two cores busy compiling.
const timeout = 5 * time.Minute

const prefix = "/kubernetes/"

func TestControlPlaneWithClientGo(t *testing.T) {
	bundlePath := kubetest.Bundle(t)
	addr := subnets.Addrs(1)[0]
	raw := kubetest.StartEtcd(t, testutil.FreePort(t, addr))
	port := testutil.FreePort(t, addr).Port()
	server := "https://" + netip.AddrPortFrom(addr, port).String()

	cluster, err := pki.NewCluster("test", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	files, err := cluster.ControlPlaneFiles([]netip.Addr{addr}, netip.MustParseAddr("10.96.0.1"), server, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	proxy, err := etcdproxy.New(etcdproxy.Config{Client: raw, Prefix: prefix, Socket: filepath.Join(dir, "etcd.sock")})
	if err != nil {
		t.Fatal(err)
	}
	runner, err := controlplane.New(controlplane.Config{
		Bundle: bundlePath, Dir: filepath.Join(dir, "kube"), Files: files,
		Address: addr, Port: int(port), EtcdEndpoint: proxy.Endpoint(),
	})
	if err != nil {
		t.Fatal(err)
	}
	supervisortest.HarnessTree(t, func(ctx context.Context) error {
		if err := supervisor.Run(ctx, "etcdproxy", proxy.Run); err != nil {
			return err
		}
		if err := supervisor.Run(ctx, "kubernetes", runner.Run); err != nil {
			return err
		}
		supervisor.Signal(ctx, supervisor.SignalHealthy)
		<-ctx.Done()
		return ctx.Err()
	}, supervisor.WithLogger(zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel))))

	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if _, err := event.Get(ctx, runner.Status(), event.Filter(func(s *controlplane.Status) bool { return s.Ready })); err != nil {
		t.Fatalf("waiting for the apiserver to be ready: %v", err)
	}

	// The owner, as polisctl kubeconfig will make them: a client
	// certificate in system:masters.
	owner, err := cluster.IssueClient("owner", []string{pki.MastersGroup}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	cs, err := kubernetes.NewForConfig(&rest.Config{
		Host: server,
		TLSClientConfig: rest.TLSClientConfig{
			CAData: cluster.CACert, CertData: owner.Cert, KeyData: owner.Key,
		},
	})
	if err != nil {
		t.Fatal(err)
	}

	// The server tells its version (set at the bundle's link time).
	v, err := cs.Discovery().ServerVersion()
	if err != nil {
		t.Fatalf("server version: %v", err)
	}
	if v.GitVersion != bundle.Version {
		t.Errorf("server version %q, want %s", v.GitVersion, bundle.Version)
	}

	// A ConfigMap is created and listed.
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "hello"}, Data: map[string]string{"greeting": "hello"}}
	if _, err := cs.CoreV1().ConfigMaps("default").Create(ctx, cm, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating a ConfigMap: %v", err)
	}
	checkConfigMapListed(ctx, t, cs)
	// A Deployment gets its ReplicaSet from the controller-manager and its
	// Pods, Pending with no kubelet to run them.
	createDeployment(ctx, t, cs)
	waitDeploymentPods(ctx, t, cs)

	// Every key in etcd is the apiserver's, under the confined prefix.
	for _, k := range kubetest.AllKeys(t, raw) {
		if !strings.HasPrefix(k, prefix+"/registry/") {
			t.Errorf("key %q outside %s/registry/", k, prefix)
		}
	}
}

// waitList polls check until it reports done or ctx ends. Polling with a
// deadline: the controllers' progress is not an event this test can wait
// on without a watch of its own.
func waitList(ctx context.Context, t *testing.T, what string, check func() (bool, string, error)) string {
	t.Helper()
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	var last string
	var lastErr error
	for {
		done, got, err := check()
		if done {
			return got
		}
		last, lastErr = got, err
		select {
		case <-ctx.Done():
			t.Fatalf("waiting for %s: %v; last %s, %v", what, ctx.Err(), last, lastErr)
		case <-tick.C:
		}
	}
}

// checkConfigMapListed checks that the ConfigMap "hello" created before is
// listed.
func checkConfigMapListed(ctx context.Context, t *testing.T, cs *kubernetes.Clientset) {
	t.Helper()
	cms, err := cs.CoreV1().ConfigMaps("default").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatalf("listing ConfigMaps: %v", err)
	}
	found := false
	for _, c := range cms.Items {
		found = found || (c.Name == "hello" && c.Data["greeting"] == "hello")
	}
	if !found {
		t.Errorf("the ConfigMap is not listed: %v", cms.Items)
	}
}

// createDeployment creates the Deployment "web" of two replicas.
func createDeployment(ctx context.Context, t *testing.T, cs *kubernetes.Clientset) {
	t.Helper()
	replicas := int32(2)
	labels := map[string]string{"app": "web"}
	dep := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec: appsv1.DeploymentSpec{
			Replicas: &replicas,
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "web", Image: "example.invalid/web:1"}}},
			},
		},
	}
	if _, err := cs.AppsV1().Deployments("default").Create(ctx, dep, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating a Deployment: %v", err)
	}
}

// waitDeploymentPods waits until "web" has its ReplicaSet from the
// controller-manager and its two Pods, Pending with no kubelet to run
// them, which the scheduler has seen (it reports that no node fits).
func waitDeploymentPods(ctx context.Context, t *testing.T, cs *kubernetes.Clientset) {
	t.Helper()
	pods := waitList(ctx, t, "2 Pending pods of web, seen by the scheduler", func() (bool, string, error) {
		list, err := cs.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=web"})
		if err != nil {
			return false, "", err
		}
		n := 0
		var seen []string
		for _, p := range list.Items {
			seen = append(seen, p.Name+":"+string(p.Status.Phase))
			for _, c := range p.Status.Conditions {
				if p.Status.Phase == corev1.PodPending && c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable {
					n++
				}
			}
		}
		return n == 2, strings.Join(seen, " "), nil
	})
	t.Logf("pods: %s", pods)
	rs, err := cs.AppsV1().ReplicaSets("default").List(ctx, metav1.ListOptions{LabelSelector: "app=web"})
	if err != nil {
		t.Fatal(err)
	}
	if len(rs.Items) != 1 || len(rs.Items[0].OwnerReferences) != 1 || rs.Items[0].OwnerReferences[0].Name != "web" {
		t.Errorf("ReplicaSets of web: %+v", rs.Items)
	}
}

// testWriter sends progress lines to the test's log.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}
