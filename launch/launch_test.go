package launch

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/polis-os/polis/node/pid1"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestOptionsDefaults(t *testing.T) {
	var o Options
	if err := o.setDefaults(); err != nil {
		t.Fatal(err)
	}
	want := []string{"127.77.0.1", "127.77.0.2", "127.77.0.3"}
	if o.Nodes != 3 || len(o.Addresses) != 3 {
		t.Fatalf("defaults: %d nodes, addresses %v", o.Nodes, o.Addresses)
	}
	for i, a := range o.Addresses {
		if a.String() != want[i] {
			t.Errorf("address %d is %v, want %s", i, a, want[i])
		}
	}
	if o.ConsensusPort != 7834 || o.CuratorPort != 7835 || o.LogFormat != "console" {
		t.Errorf("defaults: ports %d/%d, log format %q", o.ConsensusPort, o.CuratorPort, o.LogFormat)
	}
}

func TestOptionsRefused(t *testing.T) {
	a := netip.MustParseAddr("127.79.0.1")
	cases := []struct {
		o    Options
		want string
	}{
		{Options{Nodes: -1}, "want 1 to 200"},
		{Options{Nodes: 2, Addresses: []netip.Addr{a}}, "1 addresses for 2 nodes"},
		{Options{Nodes: 2, Addresses: []netip.Addr{a, a}}, "given twice"},
		{Options{Nodes: 1, Addresses: []netip.Addr{netip.IPv4Unspecified()}}, "want one a node can be reached on"},
		{Options{ConsensusPort: 9000, CuratorPort: 9000}, "both 9000"},
		{Options{LogFormat: "xml"}, "want console or json"},
		{Options{Kubernetes: true, Images: []Image{{Ref: "demo", Path: "x"}}}, "VM cluster with Kubernetes only"},
		{Options{VM: &VMOptions{}, Images: []Image{{Ref: "demo", Path: "x"}}}, "VM cluster with Kubernetes only"},
		{Options{VM: &VMOptions{}, PodRange: netip.MustParsePrefix("10.77.0.0/16")}, "overlaps the VM network 10.77.0.0/24"},
		{Options{PodRange: netip.MustParsePrefix("10.96.0.0/16")}, "overlaps the Kubernetes service range"},
		{Options{PodNodePrefixLength: 30}, "node prefix length 30"},
		{Options{PodNodePrefixLength: -1}, "pod node prefix length -1 (--pod-node-prefix)"},
		{Options{PodNodePrefixLength: 33}, "pod node prefix length 33 (--pod-node-prefix): want 0 (the default) to 32"},
	}
	if strconv.IntSize == 64 {
		// 2^32+24, which a conversion to uint32 would make 24 and the
		// curator accept; a variable, since the constant overflows a
		// 32-bit int.
		var wide uint64 = 1<<32 + 24
		cases = append(cases, struct {
			o    Options
			want string
		}{Options{PodNodePrefixLength: int(wide)}, "pod node prefix length 4294967320 (--pod-node-prefix)"})
	}
	for _, tc := range cases {
		if err := tc.o.setDefaults(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: error %v, want one containing %q", tc.o, err, tc.want)
		}
	}
}

// A port in use (another cluster on the same addresses) is found before
// anything starts.
func TestLaunchRefusesBusyPorts(t *testing.T) {
	a := netip.MustParseAddr("127.79.0.1")
	l, err := net.Listen("tcp", netip.AddrPortFrom(a, 7835).String())
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	base := t.TempDir()
	_, err = Launch(context.Background(), Options{Nodes: 1, Addresses: []netip.Addr{a}, BaseDir: filepath.Join(base, "c"), NodeBinary: "/nonexistent"})
	if err == nil || !strings.Contains(err.Error(), "is not free") {
		t.Fatalf("Launch with a busy port: %v", err)
	}
	if _, err := os.Stat(filepath.Join(base, "c")); !os.IsNotExist(err) {
		t.Errorf("Launch created its directory before refusing: %v", err)
	}
}

// Only a cluster launched with Kubernetes passes the bundle to its nodes.
func TestNodeArgsKubernetes(t *testing.T) {
	n := &Node{Address: netip.MustParseAddr("127.79.0.1"), Dir: t.TempDir()}
	o := Options{KubernetesBundle: "/opt/polis-kube"}
	if err := o.setDefaults(); err != nil {
		t.Fatal(err)
	}
	if args := strings.Join(nodeArgs(n, &o), " "); strings.Contains(args, "--kubernetes-bundle") {
		t.Errorf("without Kubernetes, the node is given the bundle: %s", args)
	}
	o.Kubernetes = true
	if args := strings.Join(nodeArgs(n, &o), " "); !strings.Contains(args, "--kubernetes-bundle /opt/polis-kube") {
		t.Errorf("with Kubernetes, the node is not given the bundle: %s", args)
	}
}

func TestTail(t *testing.T) {
	p := filepath.Join(t.TempDir(), "log")
	if err := os.WriteFile(p, []byte("a\nb\nc\nd\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := tail(p, 2); got != "c\nd" {
		t.Errorf("tail 2 = %q", got)
	}
	if got := tail(p, 10); got != "a\nb\nc\nd" {
		t.Errorf("tail 10 = %q", got)
	}
}

// TestVMAgentFlags: a VM node gets the options a node process gets as
// flags (nodeArgs), on its kernel command line.
func TestVMAgentFlags(t *testing.T) {
	o := Options{LeaseTTL: 3 * time.Second, HeartbeatInterval: time.Second, CuratorPort: 7001, VM: &VMOptions{}}
	if err := o.setDefaults(); err != nil {
		t.Fatal(err)
	}
	c := &Cluster{opts: o}
	got := strings.Join(c.agentFlags(), " ")
	for _, arg := range nodeArgs(&Node{}, &o) {
		if name, ok := strings.CutPrefix(arg, "--"); ok && slices.Contains(pid1.AgentFlags, name) && !strings.Contains(got, name+"=") {
			t.Errorf("a node process gets --%s, a VM node does not (%s)", name, got)
		}
	}
	for _, want := range []string{"lease-ttl=3s", "heartbeat-interval=1s", "curator-port=7001", "consensus-port=7834",
		// Under TCG (the default), raft's slower timings.
		"consensus-heartbeat=500ms", "consensus-election-timeout=5s"} {
		if !strings.Contains(got, want) {
			t.Errorf("agent flags %q lack %s", got, want)
		}
	}
	// Given, they are passed as given, to VMs and processes alike.
	o.ConsensusHeartbeat, o.ConsensusElectionTimeout = 200*time.Millisecond, 2*time.Second
	c = &Cluster{opts: o}
	got = strings.Join(c.agentFlags(), " ")
	if !strings.Contains(got, "consensus-heartbeat=200ms") || !strings.Contains(got, "consensus-election-timeout=2s") {
		t.Errorf("agent flags %q lack the raft timings given", got)
	}
	if args := strings.Join(nodeArgs(&Node{}, &o), " "); !strings.Contains(args, "--consensus-heartbeat 200ms --consensus-election-timeout 2s") {
		t.Errorf("a node process's arguments %q lack the raft timings given", args)
	}
}

// A node process that ends by itself is reported with how it ended: exit
// status 0 (a poweroff) is no "unexpected (<nil>)" exit (issue 26, item 9).
func TestExitReported(t *testing.T) {
	for _, c := range []struct {
		binary, want string
	}{
		{"/bin/true", "stopped by itself (exit status 0"},
		{"/bin/false", "exited unexpectedly (exit status 1)"},
	} {
		reports := make(chan string, 1)
		dir := t.TempDir()
		n := &Node{Index: 1, Address: netip.MustParseAddr("127.0.0.1"), Dir: dir, Log: filepath.Join(dir, "log"), m: &processMachine{binary: c.binary},
			report: func(format string, args ...any) { reports <- fmt.Sprintf(format, args...) }}
		if err := n.Start(); err != nil {
			t.Fatal(err)
		}
		select {
		case got := <-reports:
			if !strings.Contains(got, c.want) || strings.Contains(got, "<nil>") {
				t.Errorf("%s: reported %q, want %q", c.binary, got, c.want)
			}
		case <-time.After(time.Minute):
			t.Fatalf("%s: its exit was never reported", c.binary)
		}
	}
}

// A directory kept from an earlier launch is refused with what to do
// instead, before anything starts (issue 26, item 8).
func TestLaunchRefusesKeptDir(t *testing.T) {
	base := t.TempDir()
	for _, d := range []string{"node1/storage", "polisctl"} {
		if err := os.MkdirAll(filepath.Join(base, d), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(base, "polisctl", "ca.der"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	a := netip.MustParseAddr("127.79.0.2")
	_, err := Launch(context.Background(), Options{Nodes: 1, Addresses: []netip.Addr{a}, BaseDir: base, NodeBinary: "/nonexistent"})
	if err == nil || !strings.Contains(err.Error(), "launched before") || !strings.Contains(err.Error(), "polis-node --storage") {
		t.Fatalf("Launch over a kept directory: %v", err)
	}
}

// A step that runs out of time says what its condition last ran into,
// not only that the time ran out.
func TestPollReportsTheLastReason(t *testing.T) {
	c := &Cluster{}
	attempts := 0
	err := c.pollWithin(context.Background(), 300*time.Millisecond, "node 1: curator serving", func(context.Context) (bool, error) {
		attempts++
		return false, notYet{fmt.Errorf("attempt %d: connection refused", attempts)}
	})
	if err == nil || !strings.Contains(err.Error(), "node 1: curator serving: context deadline exceeded (the last attempt: attempt ") || !strings.Contains(err.Error(), "connection refused") {
		t.Errorf("pollWithin = %v; want the step, the deadline and the last attempt's reason", err)
	}
	if attempts < 2 {
		t.Errorf("%d attempts; a reason that is not yet an error must not end the wait", attempts)
	}
}
