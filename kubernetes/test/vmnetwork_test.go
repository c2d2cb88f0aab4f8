package test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	nodev1 "github.com/polis-os/polis/api/node/v1"
	"github.com/polis-os/polis/launch/demoimage"
)

// netbenchPort is where the netbench Pods serve (./netbench).
const netbenchPort = 5201

// tunnelDevice is the node's WireGuard device (clusternet.DefaultDevice;
// clusternet is not imported, which would add WireGuard's control
// library to this module for one name).
const tunnelDevice = "polis-wg"

// measurePodNetwork measures, between workers a and b, TCP round trips and
// throughput on three paths, alternating them in each of a few rounds so
// that all see the same load:
//
//   - Pod to Pod over WireGuard: bench-a to bench-b by Pod IP, as every
//     Pod's traffic to another node goes;
//   - Pod to Pod, plain routing: plain-a to plain-b by Pod IP, the two
//     Pods' addresses routed through the other node's cluster address in
//     clear (a /32 route each way, added by a host-network netbench with
//     CAP_NET_ADMIN; more specific than the peer's pod range, which goes
//     through the tunnel): the same bridges and veths as the first path,
//     without the tunnel, which is what WireGuard's share is measured
//     against;
//   - node to node: two host-network Pods, by the nodes' addresses, in
//     clear over the switch (neither tunnel nor bridges).
//
// It logs the figures, each with how busy the host's CPUs and each
// machine's qemu were meanwhile (sampleCPU) and what the controller spent
// its CPU on, by cgroup (its /metrics, cgroupCPUDuring); nothing is
// asserted of them (docs/benchmarks.md keeps them). It checks that the
// plain path's routes take it out of the cluster interface, not the
// tunnel, and removes them when done.
func (c *vmCluster) measurePodNetwork(ctx context.Context, t *testing.T, a, b string) {
	t.Helper()
	type benchPod struct {
		name, vm string
		host     bool
	}
	pods := []benchPod{
		{"bench-a", a, false}, {"bench-b", b, false},
		{"plain-a", a, false}, {"plain-b", b, false},
		{"bench-host-a", a, true}, {"bench-host-b", b, true},
	}
	root := int64(0)
	for _, p := range pods {
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: p.name, Labels: map[string]string{"app": "netbench"}},
			Spec: corev1.PodSpec{
				NodeName:    c.ids[p.vm],
				HostNetwork: p.host,
				Containers: []corev1.Container{{
					Name: "netbench", Image: "netbench", ImagePullPolicy: corev1.PullIfNotPresent,
					Command: []string{demoimage.Entrypoint, "serve", fmt.Sprintf(":%d", netbenchPort)},
				}},
			},
		}
		if p.host {
			// Routes in the node's network namespace: root with
			// CAP_NET_ADMIN (not privileged, which the apiserver
			// refuses).
			pod.Spec.Containers[0].SecurityContext = &corev1.SecurityContext{
				RunAsUser:    &root,
				Capabilities: &corev1.Capabilities{Add: []corev1.Capability{"NET_ADMIN"}},
			}
		}
		if _, err := c.cs.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatalf("creating %s: %v", p.name, err)
		}
	}
	defer func() {
		if err := c.cs.CoreV1().Pods("default").DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{LabelSelector: "app=netbench"}); err != nil {
			t.Errorf("deleting the netbench Pods: %v", err)
		}
	}()
	podIP := map[string]string{}
	waitList(ctx, t, "the netbench Pods Running", func() (bool, string, error) {
		list, err := c.cs.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=netbench"})
		if err != nil {
			return false, "", err
		}
		var seen []string
		running := 0
		for _, p := range list.Items {
			seen = append(seen, fmt.Sprintf("%s:%s %s", p.Name, p.Status.Phase, podWaiting(&p)))
			if p.Status.Phase == corev1.PodRunning && p.Status.PodIP != "" {
				running++
				podIP[p.Name] = p.Status.PodIP
			}
		}
		return running == len(pods), strings.Join(seen, " "), nil
	})
	nodes := c.nodeStatuses(t)
	nodeA, nodeB := nodes[c.ids[a]].GetStatus().GetExternalAddress(), nodes[c.ids[b]].GetStatus().GetExternalAddress()

	// The plain path: each end's Pod routed through its node's address,
	// on the other node.
	plainRoutes := []struct{ on, dst, via string }{
		{"bench-host-a", podIP["plain-b"], nodeB},
		{"bench-host-b", podIP["plain-a"], nodeA},
	}
	for _, r := range plainRoutes {
		defer func() {
			if _, err := c.tryKubectl("exec", r.on, "--", demoimage.Entrypoint, "unroute", r.dst); err != nil {
				t.Errorf("removing the plain route to %s on %s: %v", r.dst, r.on, err)
			}
		}()
		out := c.kubectl("exec", r.on, "--", demoimage.Entrypoint, "route", r.dst, r.via)
		var got struct{ Kind, Dst, Dev string }
		if err := json.Unmarshal([]byte(strings.TrimSpace(out)), &got); err != nil || got.Kind != "route" {
			t.Fatalf("netbench route %s %s on %s printed %q: want its route line", r.dst, r.via, r.on, out)
		}
		if got.Dev == "" || got.Dev == tunnelDevice {
			t.Fatalf("on %s, %s is routed out of %q after netbench route %s %s: want the cluster interface, not the tunnel", r.on, r.dst, got.Dev, r.dst, r.via)
		}
	}

	port := fmt.Sprint(netbenchPort)
	paths := []struct {
		name, from, to string
	}{
		{"Pod to Pod, WireGuard", "bench-a", net.JoinHostPort(podIP["bench-b"], port)},
		{"Pod to Pod, plain routing", "plain-a", net.JoinHostPort(podIP["plain-b"], port)},
		{"node to node, clear", "bench-host-a", net.JoinHostPort(nodeB, port)},
	}
	const rounds, roundTrips, seconds = 3, 200, 5
	type result struct{ rttMedians, throughputs []float64 }
	results := make([]result, len(paths))
	// One kubectl exec per path and round (each a round trip through
	// the launcher's proxy and the apiserver, seconds under TCG):
	// netbench both prints the round trips' line, then the throughput's.
	measure := func(from, to string) (rtt, tput map[string]float64) {
		out := c.kubectl("exec", from, "--", demoimage.Entrypoint, "both", to, fmt.Sprint(roundTrips), fmt.Sprint(seconds))
		for _, line := range strings.Split(out, "\n") {
			var raw map[string]any
			if json.Unmarshal([]byte(strings.TrimSpace(line)), &raw) != nil {
				continue
			}
			m := map[string]float64{}
			for k, v := range raw {
				if f, ok := v.(float64); ok {
					m[k] = f
				}
			}
			switch raw["kind"] {
			case "rtt":
				rtt = m
			case "tput":
				tput = m
			}
		}
		if rtt == nil || tput == nil {
			t.Fatalf("netbench both %s from %s printed %q: want a round trips' line and a throughput's", to, from, out)
		}
		return rtt, tput
	}
	// How busy the host and each machine were during each measurement:
	// all three machines share the host's CPUs, the controller's too,
	// though it carries none of the traffic (docs/benchmarks.md).
	var vms []string // every machine of the cluster, the controller's too
	consoles, _ := filepath.Glob(filepath.Join(c.dir, "*", "console.log"))
	for _, f := range consoles {
		vms = append(vms, filepath.Base(filepath.Dir(f)))
	}
	cpuDuring := func(f func()) string {
		before, err := sampleCPU(c.dir, vms)
		f()
		after, aerr := sampleCPU(c.dir, vms)
		if err != nil || aerr != nil {
			return fmt.Sprintf("not read (%v, %v)", err, aerr)
		}
		return after.since(before, vms)
	}
	// And what the controller spent its share on, by cgroup (its
	// agent with etcd, the apiserver, ...), from its /metrics: one
	// client, whose connection the scrapes of every round share.
	controller := controllerMetrics(nodes, c.config, c.proxy)
	defer controller.close()
	checkControllerAccounting(ctx, t, controller)
	for r := range rounds {
		for i, p := range paths {
			var rtt, tput map[string]float64
			var cpu string
			// The scrapes outside the host's samples, which they
			// would otherwise load.
			byCgroup := cgroupCPUDuring(ctx, controller, func() {
				cpu = cpuDuring(func() { rtt, tput = measure(p.from, p.to) })
			})
			mbs := tput["bytes"] / tput["seconds"] / 1e6
			t.Logf("round %d, %s (%s → %s): round trip min %.0f µs, median %.0f µs, 90th percentile %.0f µs; throughput %.2f MB/s (the sender at the end: %.0f segments sent again, congestion window %.0f segments of %.0f bytes, smoothed round trip %.0f µs); CPU meanwhile: %s; controller by cgroup: %s",
				r+1, p.name, p.from, p.to, rtt["min_us"], rtt["median_us"], rtt["p90_us"], mbs, tput["retrans"], tput["cwnd"], tput["mss"], tput["srtt_us"], cpu, byCgroup)
			results[i].rttMedians = append(results[i].rttMedians, rtt["median_us"])
			results[i].throughputs = append(results[i].throughputs, mbs)
		}
	}
	median := func(xs []float64) float64 {
		s := slices.Clone(xs)
		slices.Sort(s)
		return s[len(s)/2]
	}
	wg, plain, clear := results[0], results[1], results[2]
	t.Logf("the pod network between workers, median of %d rounds: round trip %.0f µs Pod to Pod over WireGuard, %.0f µs Pod to Pod plain-routed, %.0f µs node to node; throughput %.2f MB/s over WireGuard, %.2f MB/s plain-routed, %.2f MB/s node to node (WireGuard %.0f%% of plain routing, %.0f%% of node to node)",
		rounds, median(wg.rttMedians), median(plain.rttMedians), median(clear.rttMedians),
		median(wg.throughputs), median(plain.throughputs), median(clear.throughputs),
		100*median(wg.throughputs)/median(plain.throughputs), 100*median(wg.throughputs)/median(clear.throughputs))
}

// podNetworkOf is what vm's node reports of its pod network: how many
// peers its kernel routes to, whether in sync, and the summary of its
// kubernetesWorker value in its role server graph, which names them.
func (c *vmCluster) podNetworkOf(t *testing.T, vm string) (peers uint32, inSync bool, graph string) {
	t.Helper()
	k := c.nodeStatuses(t)[c.ids[vm]].GetStatus().GetKubernetes()
	var g nodev1.GetRoleServerGraphResponse
	if err := protojson.Unmarshal([]byte(polisctlRun(t, c.bin, c.config, "node", "graph", c.ids[vm], "-o", "json")), &g); err != nil {
		t.Fatalf("polisctl node graph %s: %v", vm, err)
	}
	for _, v := range g.Values {
		if v.Name == "kubernetesWorker" {
			graph = v.Summary
		}
	}
	return k.GetNetworkPeers(), k.GetNetworkInSync(), graph
}

// waitPeers waits until vm's node routes to exactly the workers named
// (VM names), in sync, by its status and its graph.
func (c *vmCluster) waitPeers(ctx context.Context, t *testing.T, vm string, want ...string) {
	t.Helper()
	waitList(ctx, t, fmt.Sprintf("%s's pod network routing to %v", vm, want), func() (bool, string, error) {
		peers, inSync, graph := c.podNetworkOf(t, vm)
		ok := int(peers) == len(want) && inSync
		for other, id := range c.ids {
			if other != vm && strings.Contains(graph, id) != slices.Contains(want, other) {
				ok = false
			}
		}
		return ok, fmt.Sprintf("%d peers, in sync %v; graph: %s", peers, inSync, graph), nil
	})
}

// consoleLine is when the first line after since containing every one of
// substrs reached the host from vm's console (the host's clock, which
// stamps every VM's console alike); false if none has yet.
func (c *vmCluster) consoleLine(t *testing.T, vm string, since time.Time, substrs ...string) (time.Time, bool) {
	t.Helper()
	f, err := os.Open(filepath.Join(c.dir, vm, "console.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
next:
	for sc.Scan() {
		stamp, line, ok := strings.Cut(sc.Text(), " ")
		if !ok {
			continue
		}
		for _, s := range substrs {
			if !strings.Contains(line, s) {
				continue next
			}
		}
		at, err := time.Parse("2006-01-02T15:04:05.000Z", stamp)
		if err == nil && !at.Before(since) {
			return at, true
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return time.Time{}, false
}

// logRoutesOn logs how long after the curator's answer to the management
// call method (the change committed: its log line on whichever node's
// curator served it) vm's pod network changed its kernel, both after
// asked, by the host's clock.
func (c *vmCluster) logRoutesOn(ctx context.Context, t *testing.T, vm, what, method string, asked time.Time) {
	t.Helper()
	var routes, committed time.Time
	waitList(ctx, t, vm+"'s console: the pod network's kernel changed", func() (bool, string, error) {
		var ok bool
		routes, ok = c.consoleLine(t, vm, asked, "kernel changed")
		return ok, "", nil
	})
	for i := 1; i <= 3; i++ {
		if at, ok := c.consoleLine(t, fmt.Sprintf("node%d", i), asked, "ManagementService/"+method, `"code": "OK"`); ok && (committed.IsZero() || at.Before(committed)) {
			committed = at
		}
	}
	if committed.IsZero() {
		t.Errorf("no curator logged %s after %v", method, asked)
		return
	}
	t.Logf("%s → routes on %s: %v after the curator answered %s (the consoles' host stamps)",
		what, vm, routes.Sub(committed).Round(10*time.Millisecond), method)
}

// checkWorkerRemoved decommissions worker vm and deletes it: it stops being
// a WireGuard peer of the other worker and of the controller (their
// statuses and graphs), and its record is gone with polisctl node delete
// (its pod range with it: the curator's tests check the range's return to
// the pool, which no node of this cluster is left to take). It leaves the
// cluster without vm: the test's last phase.
func (c *vmCluster) checkWorkerRemoved(ctx context.Context, t *testing.T, vm, other, controller string) {
	id := c.ids[vm]
	c.nodeIDOf(t, controller)
	c.waitPeers(ctx, t, other, vm, controller)
	c.waitPeers(ctx, t, controller, vm, other)
	if c.nodeStatuses(t)[id].GetNetwork().GetPodRange() == "" {
		t.Fatalf("%s has no pod range before its removal", vm)
	}
	asked := time.Now()
	polisctlRun(t, c.bin, c.config, "node", "decommission", id)
	c.waitPeers(ctx, t, other, controller)
	t.Logf("%s decommissioned → no WireGuard peer of %s (its status and graph): %v", vm, other, time.Since(asked).Round(100*time.Millisecond))
	c.logRoutesOn(ctx, t, other, vm+" decommissioned", "DecommissionNode", asked)
	c.waitPeers(ctx, t, controller, other)

	polisctlRun(t, c.bin, c.config, "node", "delete", id)
	if _, ok := c.nodeStatuses(t)[id]; ok {
		t.Fatalf("%s is still listed after polisctl node delete", vm)
	}
}

// checkControllerReachesPods checks that controller, which holds
// KubernetesController without KubernetesWorker, routes to both workers'
// Pods (its status and graph name both workers as peers, in sync), so that
// its apiserver reaches them: its proxy to each demo Pod, at the Pod's
// address, is answered by that Pod, and its proxy to the demo Service by a
// replica (at one of the Service's endpoints: the controller runs no
// kube-proxy). The requests carry a marker in their path, which the
// launcher's capture of the wire must not hold: the controller's traffic
// to Pods goes through the tunnel too. It logs how long the first answer
// took.
func (c *vmCluster) checkControllerReachesPods(ctx context.Context, t *testing.T, controller string, pods []corev1.Pod) {
	c.nodeIDOf(t, controller)
	c.waitPeers(ctx, t, controller, c.workers...)
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	marker := "polis-controller-marker-" + hex.EncodeToString(b[:])
	// Each try takes the apiserver's dial timeout when nothing answers.
	proxied, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	start := time.Now()
	for _, p := range pods {
		waitList(proxied, t, "the apiserver's proxy to Pod "+p.Name, func() (bool, string, error) {
			out, err := c.cs.CoreV1().Pods("default").ProxyGet("http", p.Name, strconv.Itoa(demoimage.Port), "/"+marker, nil).DoRaw(proxied)
			return err == nil && strings.Contains(string(out), "hello from "+p.Name), fmt.Sprintf("%q (%v)", out, err), nil
		})
	}
	t.Logf("the apiserver on %s reached both demo Pods through its proxy: %v", controller, time.Since(start).Round(100*time.Millisecond))
	waitList(proxied, t, "the apiserver's proxy to the demo Service", func() (bool, string, error) {
		out, err := c.cs.CoreV1().Services("default").ProxyGet("http", "demo", "80", "/"+marker, nil).DoRaw(proxied)
		return err == nil && strings.Contains(string(out), "hello from demo-"), fmt.Sprintf("%q (%v)", out, err), nil
	})
	data, err := os.ReadFile(filepath.Join(c.dir, "wire.pcap"))
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(data, []byte(marker)) {
		t.Errorf("the marker of the apiserver's requests to Pods crossed the wire in clear (capture %s)", filepath.Join(c.dir, "wire.pcap"))
	}
}

// nodeIDOf is vm's Polis node ID, from its address (10.77.0.N for nodeN).
func (c *vmCluster) nodeIDOf(t *testing.T, vm string) string {
	t.Helper()
	if id, ok := c.ids[vm]; ok {
		return id
	}
	var n int
	if _, err := fmt.Sscanf(vm, "node%d", &n); err != nil {
		t.Fatalf("VM name %q: %v", vm, err)
	}
	for id, node := range c.nodeStatuses(t) {
		if node.GetStatus().GetExternalAddress() == fmt.Sprintf("10.77.0.%d", n) {
			c.ids[vm] = id
			return id
		}
	}
	t.Fatalf("no node at %s's address", vm)
	return ""
}
