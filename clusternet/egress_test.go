package clusternet

import (
	"context"
	"errors"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/polis-os/polis/event/memory"
	"github.com/polis-os/polis/supervisor/supervisortest"
)

var testClusterPodRange = netip.MustParsePrefix("10.244.0.0/16")

// The egress rule follows the configuration: retried after a failure,
// set, and set again after someone deleted it (at the resync).
func TestRunEgress(t *testing.T) {
	k := newFakeKernel()
	peers := &memory.Value[[]Peer]{}
	status := &memory.Value[*Status]{}
	c := testConfig(ModeWireGuard)
	c.Peers, c.Status, c.kernel, c.Resync = peers, status, k, 20*time.Millisecond
	c.ClusterPodRange = testClusterPodRange
	k.fail["SetEgress"] = errors.New("injected")
	supervisortest.Harness(t, func(ctx context.Context) error { return Run(ctx, c) })
	peers.Set([]Peer{testPeer(2)})

	st := waitStatus(t, status, func(s *Status) bool { return s.LastError != "" })
	if !strings.Contains(st.LastError, "egress rule: injected") {
		t.Errorf("error %q, want the egress rule's", st.LastError)
	}
	waitStatus(t, status, func(s *Status) bool { return s.InSync })
	if pod, cluster, ok := k.egressRule(); !ok || pod != c.PodCIDR || cluster != testClusterPodRange {
		t.Fatalf("egress rule %v %v (there: %v), want %v %v", pod, cluster, ok, c.PodCIDR, testClusterPodRange)
	}
	checkKernel(t, c, k, 2)

	k.mu.Lock()
	k.egress = nil
	k.mu.Unlock()
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, _, ok := k.egressRule(); ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the egress rule someone deleted was not set again at a resync")
		}
		time.Sleep(10 * time.Millisecond)
	}

}

// Without the cluster's pod range, a rule an earlier run left is deleted.
func TestReconcileEgressWithoutClusterRange(t *testing.T) {
	k := newFakeKernel()
	k.egress = &[2]netip.Prefix{testPeer(1).PodCIDR, testClusterPodRange}
	c := testConfig(ModePlain)
	if err := reconcileOnce(t, c, k, []Peer{testPeer(2)}); err != nil {
		t.Fatal(err)
	}
	if _, _, ok := k.egressRule(); ok {
		t.Error("the egress rule stayed with no cluster pod range configured")
	}
}

func TestClearDeletesEgress(t *testing.T) {
	k := newFakeKernel()
	k.egress = &[2]netip.Prefix{testPeer(1).PodCIDR, testClusterPodRange}
	if err := Clear(Config{kernel: k}); err != nil {
		t.Fatal(err)
	}
	if _, _, ok := k.egressRule(); ok {
		t.Error("Clear left the egress rule")
	}
}

func TestConfigEgressRanges(t *testing.T) {
	c := testConfig(ModeWireGuard)
	c.ClusterPodRange = netip.MustParsePrefix("10.250.0.0/16") // does not hold 10.244.1.0/24
	if _, err := c.withDefaults(); err == nil || !strings.Contains(err.Error(), "not inside the cluster's") {
		t.Errorf("a cluster range that does not hold the node's: %v", err)
	}
}

// The WireGuard device holds the first address of the node's pod range,
// so that what the node itself sends through the tunnel has a source the
// peers accept; an address someone else gave it goes, and a device in
// line is left alone.
func TestReconcileTunnelAddress(t *testing.T) {
	k := newFakeKernel()
	c := testConfig(ModeWireGuard)
	if err := reconcileOnce(t, c, k, []Peer{testPeer(2)}); err != nil {
		t.Fatal(err)
	}
	want := []netip.Prefix{netip.MustParsePrefix("10.244.1.1/32")}
	dev, _ := k.state()
	if !slices.Equal(dev.Addresses, want) {
		t.Fatalf("device addresses %v, want %v", dev.Addresses, want)
	}

	stray := netip.MustParsePrefix("192.0.2.7/24")
	k.mu.Lock()
	k.dev.Addresses = []netip.Prefix{stray}
	k.mu.Unlock()
	if err := reconcileOnce(t, c, k, []Peer{testPeer(2)}); err != nil {
		t.Fatal(err)
	}
	if dev, _ := k.state(); !slices.Equal(dev.Addresses, want) {
		t.Errorf("device addresses %v after repair, want %v", dev.Addresses, want)
	}

	before := k.changeCount()
	if err := reconcileOnce(t, c, k, []Peer{testPeer(2)}); err != nil {
		t.Fatal(err)
	}
	if k.changeCount() != before {
		t.Error("a device already in line was changed again")
	}
}

func TestTunnelAddress(t *testing.T) {
	for in, want := range map[string]string{
		"10.244.1.0/24":   "10.244.1.1/32",
		"10.244.1.77/24":  "10.244.1.1/32", // unmasked
		"fd00:1:2::/64":   "fd00:1:2::1/128",
		"10.244.1.255/32": "", // no room
	} {
		got, ok := tunnelAddress(netip.MustParsePrefix(in))
		if (want == "") == ok || ok && got.String() != want {
			t.Errorf("tunnelAddress(%s) = %v, %v; want %q", in, got, ok, want)
		}
	}
	if _, ok := tunnelAddress(netip.Prefix{}); ok {
		t.Error("an address for no pod range")
	}
}
