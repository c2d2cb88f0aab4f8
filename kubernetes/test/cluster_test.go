package test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	cpb "github.com/polis-os/polis/api/curator/v1"
	"github.com/polis-os/polis/kube/bundle"
	"github.com/polis-os/polis/kube/kubetest"
)

// buildBinaries builds polis-node, polis-launch and polisctl from the
// main module (the parent of this module) into dir, without the race
// detector: the real binaries an operator runs. polis-launch finds
// polis-node beside itself.
func buildBinaries(t *testing.T, dir string) {
	t.Helper()
	mod, err := bundle.FindModule(".")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("go", "build", "-o", dir+string(filepath.Separator),
		"github.com/polis-os/polis/cmd/polis-node",
		"github.com/polis-os/polis/cmd/polis-launch",
		"github.com/polis-os/polis/cmd/polisctl")
	cmd.Dir = filepath.Dir(mod)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building the binaries: %v\n%s", err, b)
	}
}

// shortTempDir is a temporary directory with a short path: the nodes keep
// unix sockets (etcd's, the apiserver's confined etcd endpoint) deep inside
// their storage, and a socket's path is limited to about 100 bytes.
func shortTempDir(t *testing.T) string {
	t.Helper()
	d, err := os.MkdirTemp("", "kube-")
	if err != nil {
		t.Fatal(err)
	}
	if os.Getenv("POLIS_KEEP") != "" {
		// Kept for a look at the nodes' storage and consoles.
		t.Logf("POLIS_KEEP: keeping %s", d)
		return d
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	return d
}

// launched is a polis-launch process and what it printed.
type launched struct {
	cmd    *exec.Cmd
	mu     sync.Mutex
	output bytes.Buffer
	lines  chan string
}

func (l *launched) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.output.Write(p)
}

func (l *launched) printed() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.output.String()
}

// launchKubernetes runs polis-launch --kubernetes and waits until it says
// the cluster is ready; the cluster is stopped (Ctrl-C, as an operator
// would) when the test ends.
func launchKubernetes(t *testing.T, bin, dir, bundlePath string, first netip.Addr, nodes int) {
	t.Helper()
	runLaunch(t, bin, "", timeout, "--kubernetes", "--kubernetes-bundle", bundlePath,
		"--nodes", strconv.Itoa(nodes), "--first-address", first.String(), "--dir", dir, "--keep")
}

// runLaunch runs polis-launch with args in workDir ("": the test's) and
// waits up to wait until it says the cluster is ready; the cluster is
// stopped (Ctrl-C, as an operator would) when the test ends. It returns
// what polis-launch printed up to then.
func runLaunch(t *testing.T, bin, workDir string, wait time.Duration, args ...string) string {
	t.Helper()
	l := &launched{}
	l.cmd = exec.Command(filepath.Join(bin, "polis-launch"), args...)
	l.cmd.Dir = workDir
	l.cmd.Stderr = l
	stdout, err := l.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := l.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	ready := make(chan struct{})
	scanned := make(chan struct{})
	go func() {
		defer close(scanned)
		sc := bufio.NewScanner(stdout)
		closed := false
		for sc.Scan() {
			fmt.Fprintln(l, sc.Text())
			if !closed && strings.HasPrefix(sc.Text(), "cluster ready:") {
				close(ready)
				closed = true
			}
		}
	}()
	exited := make(chan error, 1)
	go func() {
		<-scanned // Wait closes the pipe: read it to the end first
		exited <- l.cmd.Wait()
	}()
	t.Cleanup(func() {
		l.cmd.Process.Signal(syscall.SIGINT)
		select {
		case err := <-exited:
			if err != nil {
				t.Errorf("polis-launch stopped with %v:\n%s", err, l.printed())
			}
		case <-time.After(3 * time.Minute):
			l.cmd.Process.Kill()
			<-exited
			t.Errorf("polis-launch did not stop within 3 minutes of Ctrl-C:\n%s", l.printed())
		}
		t.Logf("polis-launch printed:\n%s", l.printed())
	})
	select {
	case <-ready:
	case err := <-exited:
		exited <- err // for the cleanup
		t.Fatalf("polis-launch ended with %v before the cluster was ready:\n%s", err, l.printed())
	case <-time.After(wait):
		t.Fatalf("polis-launch %s: no ready cluster within %v:\n%s", strings.Join(args, " "), wait, l.printed())
	}
	return l.printed()
}

// polisctlRun runs the polisctl binary as the launched cluster's owner.
func polisctlRun(t *testing.T, bin, config string, args ...string) string {
	t.Helper()
	cmd := exec.Command(filepath.Join(bin, "polisctl"), append([]string{"--config", config}, args...)...)
	var errOut bytes.Buffer
	cmd.Stderr = &errOut
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("polisctl %s: %v\n%s%s", strings.Join(args, " "), err, out, errOut.String())
	}
	return string(out)
}

// nodeID finds the ID of the node at addr in polisctl node list.
func nodeID(t *testing.T, bin, config string, addr netip.Addr) string {
	t.Helper()
	var resp cpb.ListNodesResponse
	if err := protojson.Unmarshal([]byte(polisctlRun(t, bin, config, "node", "list", "-o", "json")), &resp); err != nil {
		t.Fatal(err)
	}
	for _, n := range resp.Nodes {
		if n.Status.GetExternalAddress() == addr.String() {
			return n.Id
		}
	}
	t.Fatalf("no node at %v in %v", addr, resp.Nodes)
	return ""
}

// clientFor is a client-go clientset from a kubeconfig, in one of its
// contexts ("" for the current one).
func clientFor(t *testing.T, kubeconfig, context string) *kubernetes.Clientset {
	t.Helper()
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(
		&clientcmd.ClientConfigLoadingRules{ExplicitPath: kubeconfig},
		&clientcmd.ConfigOverrides{CurrentContext: context},
	).ClientConfig()
	if err != nil {
		t.Fatalf("kubeconfig %s: %v", kubeconfig, err)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

// The way an operator gets Kubernetes: polis-launch --kubernetes (here
// package launch, with the real polis-node processes), polisctl kubeconfig,
// and a stock client from the kubeconfig alone. A second controller node
// then serves the same objects, trusted through the same CA.
func TestLaunchedClusterWithKubernetes(t *testing.T) {
	bundlePath := kubetest.Bundle(t)
	bin := t.TempDir()
	buildBinaries(t, bin)
	dir := shortTempDir(t)
	addrs := subnets.Addrs(2)
	launchKubernetes(t, bin, dir, bundlePath, addrs[0], 2)
	config := filepath.Join(dir, "polisctl")
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()

	t.Logf("polisctl kubeconfig: %s", polisctlRun(t, bin, config, "kubeconfig"))
	kubeconfig := filepath.Join(config, "kubeconfig")
	cs := clientFor(t, kubeconfig, "")
	v, err := cs.Discovery().ServerVersion()
	if err != nil {
		t.Fatalf("server version: %v", err)
	}
	if v.GitVersion != bundle.Version {
		t.Errorf("server version %q, want %s", v.GitVersion, bundle.Version)
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "hello"}, Data: map[string]string{"greeting": "hello"}}
	if _, err := cs.CoreV1().ConfigMaps("default").Create(ctx, cm, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating a ConfigMap: %v", err)
	}
	checkConfigMapListed(ctx, t, cs)
	createDeployment(ctx, t, cs)
	waitDeploymentPods(ctx, t, cs)

	// A second controller: the same objects, served with the same CA (the
	// kubeconfig names one CA for every apiserver, and client-go checks
	// the second one's serving certificate against it).
	second := nodeID(t, bin, config, addrs[1])
	polisctlRun(t, bin, config, "node", "add-role", second, "kubernetes-controller")
	polisctlRun(t, bin, config, "kubeconfig")
	cs2 := clientFor(t, kubeconfig, "polis-"+second)
	got := waitList(ctx, t, "the ConfigMap through the second apiserver", func() (bool, string, error) {
		got, err := cs2.CoreV1().ConfigMaps("default").Get(ctx, "hello", metav1.GetOptions{})
		if err != nil {
			return false, "", err
		}
		return true, got.Data["greeting"], nil
	})
	if got != "hello" {
		t.Errorf("the second apiserver serves the ConfigMap with %q, want hello", got)
	}
	deps, err := cs2.AppsV1().Deployments("default").List(ctx, metav1.ListOptions{})
	if err != nil || len(deps.Items) != 1 || deps.Items[0].Name != "web" {
		t.Errorf("Deployments through the second apiserver: %v, %v", deps, err)
	}
}
