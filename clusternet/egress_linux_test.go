package clusternet

import (
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/google/nftables"

	"github.com/polis-os/polis/event/memory"
)

// TestNetnsEgress checks, in the lab's namespaces, that what pod-a sends
// to node-b's own address leaves node-a with node-a's address once the
// egress rule is set, and with its own again once it is cleared, while
// pod-a's traffic to pod-b keeps pod-a's address throughout.
func TestNetnsEgress(t *testing.T) {
	l := newLab(t)
	peers := &memory.Value[[]Peer]{}
	peers.Set([]Peer{labNode("a", Key{}), labNode("b", Key{})})
	for _, side := range []string{"a", "b"} {
		status := l.runNode(ModePlain, side, Key{}, peers)
		waitStatus(t, status, func(s *Status) bool { return s.InSync })
	}
	podA := netip.MustParseAddr("10.77.1.2")
	nodeA := netip.MustParseAddr("192.168.0.1")
	podRange, clusterRange := netip.MustParsePrefix("10.77.1.0/24"), netip.MustParsePrefix("10.77.0.0/16")

	if got := l.sourceSeen("pod-a", "node-b", "192.168.0.2"); got != podA {
		t.Fatalf("without the rule node-b saw pod-a's connection come from %v, want %v", got, podA)
	}
	// The kernel's sockets belong to node-a's namespace, wherever they
	// are used from.
	k := l.kernel("node-a")
	// Twice: the second replaces the first, never adds a rule beside it.
	for range 2 {
		if err := k.SetEgress(podRange, clusterRange); err != nil {
			t.Fatal(err)
		}
	}
	if n := l.egressRules("node-a"); n != 1 {
		t.Fatalf("%d rules in %s after setting it twice, want 1", n, EgressTable)
	}
	if got := l.sourceSeen("pod-a", "node-b", "192.168.0.2"); got != nodeA {
		t.Errorf("with the rule node-b saw pod-a's connection come from %v, want node-a's %v", got, nodeA)
	}
	if got := l.sourceSeen("pod-a", "pod-b", "10.77.2.2"); got != podA {
		t.Errorf("with the rule pod-b saw pod-a's connection come from %v, want pod-a's own %v", got, podA)
	}

	for range 2 { // clearing twice is no error
		if err := k.ClearEgress(); err != nil {
			t.Fatal(err)
		}
	}
	if n := l.egressRules("node-a"); n != -1 {
		t.Fatalf("%s still holds %d rules after ClearEgress", EgressTable, n)
	}
	if got := l.sourceSeen("pod-a", "node-b", "192.168.0.2"); got != podA {
		t.Errorf("after ClearEgress node-b saw pod-a's connection come from %v, want %v", got, podA)
	}
}

// sourceSeen listens on addr in namespace ns, connects to it from
// namespace from and returns the address the listener saw the connection
// come from.
func (l *lab) sourceSeen(from, ns, addr string) netip.Addr {
	l.t.Helper()
	var ln net.Listener
	l.in(ns, func() (err error) {
		ln, err = net.Listen("tcp", net.JoinHostPort(addr, "0"))
		return err
	})
	defer ln.Close()
	accepted := make(chan netip.Addr, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			accepted <- netip.Addr{}
			return
		}
		defer c.Close()
		accepted <- c.RemoteAddr().(*net.TCPAddr).AddrPort().Addr().Unmap()
	}()
	l.in(from, func() error {
		c, err := net.DialTimeout("tcp", ln.Addr().String(), 20*time.Second)
		if err != nil {
			return err
		}
		return c.Close()
	})
	return <-accepted
}

// egressRules counts the rules of the egress table's chain in namespace
// ns; -1 if there is no such table.
func (l *lab) egressRules(ns string) int {
	l.t.Helper()
	n := -1
	l.in(ns, func() error {
		c, err := nftables.New()
		if err != nil {
			return err
		}
		t, err := c.ListTableOfFamily(EgressTable, nftables.TableFamilyIPv4)
		if err != nil {
			return nil // no such table
		}
		rules, err := c.GetRules(t, &nftables.Chain{Name: egressChain, Table: t})
		n = len(rules)
		return err
	})
	return n
}

func TestCheckEgress(t *testing.T) {
	for _, tc := range []struct {
		pod, cluster string
		ok           bool
	}{
		{"10.244.1.0/24", "10.244.0.0/14", true},
		{"10.244.0.0/14", "10.244.0.0/14", true},
		{"10.248.0.0/24", "10.244.0.0/14", false}, // outside
		{"10.0.0.0/8", "10.244.0.0/14", false},    // larger than the cluster's
		{"fd00::/64", "fd00::/48", false},         // IPv6: no rule of this kind
		{"", "10.244.0.0/14", false},
		{"10.244.1.0/24", "", false},
	} {
		pod, _ := netip.ParsePrefix(tc.pod)
		cluster, _ := netip.ParsePrefix(tc.cluster)
		if err := checkEgress(pod, cluster); (err == nil) != tc.ok {
			t.Errorf("checkEgress(%q, %q) = %v, want ok %v", tc.pod, tc.cluster, err, tc.ok)
		}
	}
}
