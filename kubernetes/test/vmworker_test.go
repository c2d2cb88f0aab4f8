package test

import (
	"bufio"
	"context"
	"fmt"
	"maps"
	"net"
	"net/netip"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	cpb "github.com/polis-os/polis/api/curator/v1"
	"github.com/polis-os/polis/kube/bundle"
	"github.com/polis-os/polis/kube/kubelet"
	"github.com/polis-os/polis/launch/demoimage"
)

// vmKubeletRunDir is where a VM node's kubelet keeps its kubeconfig: the
// runtime's RunDir on the node's ephemeral storage (node.kubernetesRuntime).
const vmKubeletRunDir = "/polis/ephemeral/kubelet"

// vmCluster is what the phases after the launch share.
type vmCluster struct {
	// dir is the launch's directory: each VM's console log is
	// dir/VM/console.log.
	dir         string
	bin, config string
	// owner lists the node records (nodeStatuses).
	owner *ownerConn
	proxy *url.URL
	cs    *kubernetes.Clientset
	// ids: VM name → Polis node ID.
	ids map[string]string
	// workers are the worker VMs' names.
	workers []string
	// tryKubectl runs the bundled kubectl once; kubectl until it
	// succeeds (within the test's deadline).
	tryKubectl func(args ...string) (string, error)
	kubectl    func(args ...string) string
}

// buildTestImage builds the command in pkg, a directory of this module
// ("./test/authzprobe"), static, and packs it as an OCI layout in outDir,
// the way demoimage packs polis-demo: at demoimage.Entrypoint.
func buildTestImage(ctx context.Context, t *testing.T, pkg, outDir string) {
	t.Helper()
	mod, err := bundle.FindModule(".")
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(t.TempDir(), filepath.Base(pkg))
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-ldflags=-s -w", "-o", bin, pkg)
	cmd.Dir = mod
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building %s: %v\n%s", pkg, err, out)
	}
	b, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	img, err := demoimage.Image(b)
	if err != nil {
		t.Fatal(err)
	}
	if err := demoimage.WriteLayout(outDir, img); err != nil {
		t.Fatal(err)
	}
}

// nodeStatuses is the node records (polisctl node list): node ID → its
// record.
func (c *vmCluster) nodeStatuses(t *testing.T) map[string]*cpb.Node {
	t.Helper()
	return c.owner.nodes(t)
}

// checkNodeAuthorizer runs authzprobe on worker vm with that node's kubelet
// credentials: its own Node and a Secret its own Pod uses are readable, the
// other worker's Secret, all Secrets and the other Node are not.
func (c *vmCluster) checkNodeAuthorizer(ctx context.Context, t *testing.T, vm, otherVM string) {
	own, other := c.ids[vm], c.ids[otherVM]
	secrets := c.cs.CoreV1().Secrets("default")
	for _, name := range []string{"authz-own", "authz-other"} {
		s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name}, StringData: map[string]string{"key": "secret of " + name}}
		if _, err := secrets.Create(ctx, s, metav1.CreateOptions{}); err != nil {
			t.Fatalf("creating Secret %s: %v", name, err)
		}
	}
	secretEnv := func(secret string) []corev1.EnvVar {
		return []corev1.EnvVar{{Name: "S", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: secret}, Key: "key"}}}}
	}
	// The other worker's Pod uses authz-other: the Node authorizer lets
	// only that node read it.
	holder := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "authz-holder"},
		Spec: corev1.PodSpec{NodeName: other, Containers: []corev1.Container{{
			Name: "demo", Image: "demo", ImagePullPolicy: corev1.PullIfNotPresent, Env: secretEnv("authz-other"),
		}}},
	}
	if _, err := c.cs.CoreV1().Pods("default").Create(ctx, holder, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating the Pod that holds authz-other: %v", err)
	}
	root := int64(0)
	hostDir := corev1.HostPathDirectory
	probe := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "authz-probe"},
		Spec: corev1.PodSpec{
			NodeName:      own,
			HostNetwork:   true, // the kubeconfig's server is the node's loopback proxy
			RestartPolicy: corev1.RestartPolicyNever,
			Containers: []corev1.Container{{
				Name: "probe", Image: "authz", ImagePullPolicy: corev1.PullIfNotPresent,
				Command:         []string{demoimage.Entrypoint, vmKubeletRunDir + "/kubelet.kubeconfig", own, "authz-own", other, "authz-other"},
				Env:             secretEnv("authz-own"),
				SecurityContext: &corev1.SecurityContext{RunAsUser: &root},
				VolumeMounts:    []corev1.VolumeMount{{Name: "kubelet", MountPath: vmKubeletRunDir, ReadOnly: true}},
			}},
			Volumes: []corev1.Volume{{Name: "kubelet", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: vmKubeletRunDir, Type: &hostDir}}}},
		},
	}
	if _, err := c.cs.CoreV1().Pods("default").Create(ctx, probe, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating the probe Pod: %v", err)
	}
	waitList(ctx, t, "the probe Pod done", func() (bool, string, error) {
		p, err := c.cs.CoreV1().Pods("default").Get(ctx, "authz-probe", metav1.GetOptions{})
		if err != nil {
			return false, "", err
		}
		return p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed, string(p.Status.Phase) + " " + podWaiting(p), nil
	})
	logs, err := c.cs.CoreV1().Pods("default").GetLogs("authz-probe", &corev1.PodLogOptions{}).DoRaw(ctx)
	if err != nil {
		t.Fatalf("the probe's logs: %v", err)
	}
	got := map[string]string{}
	for sc := bufio.NewScanner(strings.NewReader(string(logs))); sc.Scan(); {
		if what, code, ok := strings.Cut(sc.Text(), " "); ok {
			got[what] = code
		}
	}
	want := map[string]string{
		"get-own-node":           "200",
		"get-own-pods-secret":    "200",
		"get-other-nodes-secret": "403",
		"list-secrets":           "403",
		"patch-other-node":       "403",
		"delete-other-node":      "403",
	}
	if !maps.Equal(got, want) {
		t.Errorf("with %s's kubelet credentials, on %s: %v, want %v; the probe printed:\n%s", own, vm, got, want, logs)
	}
	n, err := c.cs.CoreV1().Nodes().Get(ctx, other, metav1.GetOptions{})
	if err == nil && n.Labels["authzprobe"] != "" {
		t.Errorf("%s's kubelet labelled %s", own, other)
	}
}

// checkLabelsFollow changes vm's Polis label and waits for its Node to
// follow.
func (c *vmCluster) checkLabelsFollow(ctx context.Context, t *testing.T, vm string) {
	id := c.ids[vm]
	changed := time.Now()
	polisctlRun(t, c.bin, c.config, "node", "label", id, launchNodeLabel+"="+vm+"-relabelled", "polis-test=yes")
	waitList(ctx, t, "the Node's labels following the node's", func() (bool, string, error) {
		n, err := c.cs.CoreV1().Nodes().Get(ctx, id, metav1.GetOptions{})
		if err != nil {
			return false, "", err
		}
		l := n.Labels
		return l[kubelet.LabelPrefix+launchNodeLabel] == vm+"-relabelled" && l[kubelet.LabelPrefix+"polis-test"] == "yes", fmt.Sprint(l), nil
	})
	polisctlRun(t, c.bin, c.config, "node", "label", id, "polis-test-")
	waitList(ctx, t, "a removed label gone from the Node", func() (bool, string, error) {
		n, err := c.cs.CoreV1().Nodes().Get(ctx, id, metav1.GetOptions{})
		if err != nil {
			return false, "", err
		}
		_, there := n.Labels[kubelet.LabelPrefix+"polis-test"]
		return !there, fmt.Sprint(n.Labels), nil
	})
	t.Logf("labels changed in Polis → the Node's labels: %v (set and removed)", time.Since(changed).Round(100*time.Millisecond))
}

// checkRoleTakenAway takes KubernetesWorker from vm: its status says
// containerd and kubelet stopped, the agent found the Kubernetes cgroup
// empty (no container, shim, containerd or kubelet), nothing answers on
// the kubelet's port, the apiserver says the Node is not Ready, and
// kubectl cannot exec into its Pod. Then it gives the role back and times its Node Ready with
// the apiserver already running: the worker's own path.
func (c *vmCluster) checkRoleTakenAway(ctx context.Context, t *testing.T, vm string, kubectl func(args ...string) (string, error)) {
	id := c.ids[vm]
	pod := c.demoPodOn(ctx, t, id)
	removed := time.Now()
	polisctlRun(t, c.bin, c.config, "node", "remove-role", id, "kubernetes-worker")
	waitList(ctx, t, vm+": containerd and kubelet stopped", func() (bool, string, error) {
		k := c.nodeStatuses(t)[id].GetStatus().GetKubernetes()
		return !k.GetContainerdRunning() && !k.GetKubeletRunning(), fmt.Sprint(k), nil
	})
	t.Logf("%s: KubernetesWorker taken away → containerd and kubelet stopped: %v", vm, time.Since(removed).Round(100*time.Millisecond))
	logs := polisctlRun(t, c.bin, c.config, "node", "logs", id, "--runnable", "root.roleserve.kubernetesworker")
	if !strings.Contains(logs, kubelet.StoppedMessage) {
		t.Errorf("%s: the agent did not find the Kubernetes cgroup empty after the stop; its kubernetesworker logged:\n%s", vm, logs)
	}
	addr := c.nodeStatuses(t)[id].GetStatus().GetExternalAddress()
	if status := connectThrough(t, c.proxy, net.JoinHostPort(addr, fmt.Sprint(kubelet.DefaultKubeletPort))); strings.Contains(status, " 200") {
		t.Errorf("%s: something still answers on the kubelet's port %d (the proxy's CONNECT: %s)", vm, kubelet.DefaultKubeletPort, status)
	}
	if out, err := kubectl("exec", pod, "--", demoimage.Entrypoint, "get", "http://localhost:8080/"); err == nil {
		t.Errorf("kubectl exec into %s on %s, whose role was taken away, worked: %s", pod, vm, out)
	}
	// Through the test's client, not a kubectl process per poll: each
	// would be a TLS handshake with the apiserver on node 1 (ownerConn).
	waitList(ctx, t, vm+"'s Node NotReady", func() (bool, string, error) {
		n, err := c.cs.CoreV1().Nodes().Get(ctx, id, metav1.GetOptions{})
		if err != nil {
			return false, "", err
		}
		for _, cond := range n.Status.Conditions {
			if cond.Type == corev1.NodeReady {
				return cond.Status != corev1.ConditionTrue, fmt.Sprintf("Ready=%s (%s)", cond.Status, cond.Reason), nil
			}
		}
		return false, "no Ready condition", nil
	})

	given := time.Now()
	polisctlRun(t, c.bin, c.config, "node", "add-role", id, "kubernetes-worker")
	if other := c.otherWorker(vm); other != "" {
		// vm, back to a worker, is a peer of the other again.
		c.logRoutesOn(ctx, t, other, vm+" given KubernetesWorker again", "UpdateNodeRoles", given)
	}
	waitList(ctx, t, vm+": Node Ready again (the node's status)", func() (bool, string, error) {
		k := c.nodeStatuses(t)[id].GetStatus().GetKubernetes()
		return k.GetNodeReady(), fmt.Sprint(k), nil
	})
	t.Logf("%s: KubernetesWorker given back, the apiserver running → Node Ready: %v", vm, time.Since(given).Round(100*time.Millisecond))
	if n, err := c.cs.CoreV1().Nodes().Get(ctx, id, metav1.GetOptions{}); err == nil {
		for _, cond := range n.Status.Conditions {
			if cond.Type == corev1.NodeReady && cond.Status == corev1.ConditionTrue {
				t.Logf("%s: the Node's Ready condition since %v after the role was given back (its kubelet's clock, to the second)", vm, cond.LastTransitionTime.Sub(given).Round(time.Second))
			}
		}
	}
	c.waitPodRunsAgain(ctx, t, vm, pod, given)
}

// checkReboot reboots vm through the node API: it comes back with a new
// boot, its Node Ready, and its Pod running again, with the same pod
// range, and otherVM's Pod reaches that Pod by its address (a route and
// a WireGuard peer on each side again, with the keys kept across the
// reboot).
func (c *vmCluster) checkReboot(ctx context.Context, t *testing.T, vm, otherVM string) {
	id := c.ids[vm]
	pod := c.demoPodOn(ctx, t, id)
	before := c.nodeStatuses(t)[id]
	boot, podRange := before.GetStatus().GetBootId(), before.GetNetwork().GetPodRange()
	asked := time.Now()
	polisctlRun(t, c.bin, c.config, "node", "reboot", id)
	waitList(ctx, t, vm+": rebooted, its Node Ready", func() (bool, string, error) {
		st := c.nodeStatuses(t)[id].GetStatus()
		return st.GetBootId() != boot && st.GetKubernetes().GetNodeReady(), fmt.Sprint(st.GetBootId(), " ", st.GetKubernetes()), nil
	})
	t.Logf("%s: reboot asked → back with its Node Ready: %v", vm, time.Since(asked).Round(100*time.Millisecond))
	n, err := c.cs.CoreV1().Nodes().Get(ctx, id, metav1.GetOptions{})
	if err != nil || !nodeReady(n) {
		t.Errorf("%s: kubectl's view of Node %s after the reboot: %v %v", vm, id, err, n.Status.Conditions)
	}
	running := c.waitPodRunsAgain(ctx, t, vm, pod, asked)
	if after := c.nodeStatuses(t)[id].GetNetwork().GetPodRange(); after != podRange || after == "" {
		t.Errorf("%s: pod range %q after the reboot, %q before", vm, after, podRange)
	}
	p, err := c.cs.CoreV1().Pods("default").Get(ctx, running, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if r, err := netip.ParsePrefix(podRange); err != nil || !r.Contains(netip.MustParseAddr(p.Status.PodIP)) {
		t.Errorf("%s: Pod %s's address %s after the reboot is not in the node's pod range %s", vm, running, p.Status.PodIP, podRange)
	}
	from := c.demoPodOn(ctx, t, c.ids[otherVM])
	url := fmt.Sprintf("http://%s:%d/after-reboot", p.Status.PodIP, demoimage.Port)
	if out := c.kubectl("exec", from, "--", demoimage.Entrypoint, "get", url); !strings.Contains(out, "hello from "+running) {
		t.Errorf("Pod %s on %s → Pod %s on the rebooted %s at %s: %q, want hello from %s", from, otherVM, running, vm, url, out, running)
	}
	t.Logf("%s: reboot asked → its Pod reached by Pod IP from %s's: %v", vm, otherVM, time.Since(asked).Round(100*time.Millisecond))
}

// otherWorker is a worker VM other than vm; "" if there is none.
func (c *vmCluster) otherWorker(vm string) string {
	for _, w := range c.workers {
		if w != vm {
			return w
		}
	}
	return ""
}

// demoPodOn is the name of the demo Deployment's Pod on node id.
func (c *vmCluster) demoPodOn(ctx context.Context, t *testing.T, id string) string {
	t.Helper()
	list, err := c.cs.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=demo"})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range list.Items {
		if p.Spec.NodeName == id && p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp == nil {
			return p.Name
		}
	}
	t.Fatalf("no demo Pod running on %s", id)
	return ""
}

// waitPodRunsAgain waits until a demo Pod runs on vm's node again, its
// container started after since (pod, the one that ran there before, or
// its replacement if the Node was NotReady long enough for it to be
// evicted), and times it. It returns the Pod's name.
func (c *vmCluster) waitPodRunsAgain(ctx context.Context, t *testing.T, vm, pod string, since time.Time) string {
	id := c.ids[vm]
	running := waitList(ctx, t, vm+": a demo Pod running again (before: "+pod+")", func() (bool, string, error) {
		list, err := c.cs.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=demo"})
		if err != nil {
			return false, "", err
		}
		var seen []string
		for _, p := range list.Items {
			if p.Spec.NodeName != id {
				continue
			}
			for _, s := range p.Status.ContainerStatuses {
				// The apiserver's clock is the VM's; a second of slack.
				if r := s.State.Running; r != nil && r.StartedAt.After(since.Add(-time.Second)) {
					return true, p.Name, nil
				}
			}
			seen = append(seen, fmt.Sprintf("%s %s %s", p.Name, p.Status.Phase, podWaiting(&p)))
		}
		return false, strings.Join(seen, "; "), nil
	})
	t.Logf("%s: %s running again %v after", vm, running, time.Since(since).Round(100*time.Millisecond))
	return running
}

// connectThrough asks the launcher's proxy to CONNECT to addr and returns
// the status line of its answer ("HTTP/1.1 200 ..." when addr accepted).
func connectThrough(t *testing.T, proxyURL *url.URL, addr string) string {
	t.Helper()
	conn, err := net.DialTimeout("tcp", proxyURL.Host, 10*time.Second)
	if err != nil {
		t.Fatalf("dialling the launcher's proxy: %v", err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(30 * time.Second))
	if _, err := fmt.Fprintf(conn, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", addr, addr); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil {
		t.Fatalf("the launcher's proxy's answer to CONNECT %s: %v", addr, err)
	}
	return strings.TrimSpace(line)
}
