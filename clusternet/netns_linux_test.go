package clusternet

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vishvananda/netns"

	"github.com/polis-os/polis/event/memory"
	"github.com/polis-os/polis/supervisor"
)

// The tests in this file run the real reconciler against the real kernel,
// in network namespaces made for the test (root only):
//
//	pod-a ── node-a ══ cluster link ══ node-b ── pod-b
//	10.77.1.2   10.77.1.1 192.168.77.1   192.168.77.2   10.77.2.1   10.77.2.2
//
// Each pod namespace stands for a Pod behind its node's bridge (a veth,
// default route through its node); each node runs its own reconciler, which
// must make pod-a reach pod-b.

// lab is one test's set of namespaces, named uniquely.
type lab struct {
	t      testing.TB
	prefix string
}

var labCount atomic.Int32

// newLab makes the namespaces and links above, or skips t when this is not
// root or the host cannot make them.
func newLab(t testing.TB) *lab {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("network namespaces need root")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("iproute2's ip is not installed")
	}
	l := &lab{t: t, prefix: fmt.Sprintf("cn%d-%d-", os.Getpid(), labCount.Add(1))}
	for _, ns := range []string{"node-a", "node-b", "pod-a", "pod-b"} {
		if out, err := exec.Command("ip", "netns", "add", l.ns(ns)).CombinedOutput(); err != nil {
			t.Skipf("cannot make a network namespace: %v: %s", err, out)
		}
		t.Cleanup(func() { exec.Command("ip", "netns", "del", l.ns(ns)).Run() })
		l.ip(ns, "link set lo up")
	}
	l.ip("node-a", "link add ca type veth peer name cb netns "+l.ns("node-b"))
	l.ip("node-a", "addr add 192.168.0.1/16 dev ca")
	l.ip("node-b", "addr add 192.168.0.2/16 dev cb")
	l.ip("node-a", "link set ca up")
	l.ip("node-b", "link set cb up")
	for n, side := range []string{"a", "b"} {
		node, pod := "node-"+side, "pod-"+side
		l.ip(node, "link add p"+side+" type veth peer name eth0 netns "+l.ns(pod))
		l.ip(node, fmt.Sprintf("addr add 10.77.%d.1/24 dev p%s", n+1, side))
		l.ip(node, "link set p"+side+" up")
		l.ip(pod, fmt.Sprintf("addr add 10.77.%d.2/24 dev eth0", n+1))
		l.ip(pod, "link set eth0 up")
		l.ip(pod, fmt.Sprintf("route add default via 10.77.%d.1", n+1))
		l.in(node, func() error { return os.WriteFile("/proc/sys/net/ipv4/ip_forward", []byte("1"), 0o644) })
	}
	return l
}

func (l *lab) ns(name string) string { return l.prefix + name }

// ip runs `ip -n NS args`.
func (l *lab) ip(ns, args string) {
	l.t.Helper()
	cmd := exec.Command("ip", append([]string{"-n", l.ns(ns)}, strings.Fields(args)...)...)
	if out, err := cmd.CombinedOutput(); err != nil {
		l.t.Fatalf("ip -n %s %s: %v: %s", ns, args, err, out)
	}
}

// in runs f on a thread inside namespace ns. Sockets f opens stay in ns.
func (l *lab) in(ns string, f func() error) {
	l.t.Helper()
	if err := inNetns(l.ns(ns), f); err != nil {
		l.t.Fatalf("in %s: %v", ns, err)
	}
}

func inNetns(name string, f func() error) error {
	runtime.LockOSThread()
	orig, err := netns.Get()
	if err != nil {
		runtime.UnlockOSThread()
		return err
	}
	defer orig.Close()
	h, err := netns.GetFromName(name)
	if err != nil {
		runtime.UnlockOSThread()
		return err
	}
	defer h.Close()
	if err := netns.Set(h); err != nil {
		runtime.UnlockOSThread()
		return err
	}
	ferr := f()
	if err := netns.Set(orig); err != nil {
		// The thread is in the wrong namespace: leave it locked, so Go
		// ends it with this goroutine.
		return fmt.Errorf("returning to the original namespace: %w", err)
	}
	runtime.UnlockOSThread()
	return ferr
}

// kernel opens netlink sockets in node namespace ns.
func (l *lab) kernel(ns string) *netlinkKernel {
	l.t.Helper()
	var k *netlinkKernel
	l.in(ns, func() (err error) {
		k, err = newNetlinkKernel()
		return err
	})
	l.t.Cleanup(func() { k.Close() })
	return k
}

// hasWireGuard reports whether the host's kernel can make WireGuard links,
// trying in namespace ns.
func (l *lab) hasWireGuard(ns string) bool {
	err := exec.Command("ip", "-n", l.ns(ns), "link", "add", "wgprobe", "type", "wireguard").Run()
	exec.Command("ip", "-n", l.ns(ns), "link", "del", "wgprobe").Run()
	return err == nil
}

// labNode is one node of the lab as a Peer.
func labNode(side string, k Key) Peer {
	n := map[string]int{"a": 1, "b": 2}[side]
	return Peer{
		NodeID:    "node-" + side,
		Address:   netip.AddrFrom4([4]byte{192, 168, 0, byte(n)}),
		PodCIDR:   netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 77, byte(n), 0}), 24),
		PublicKey: k.PublicKey(),
	}
}

// runNode runs a reconciler in node-side's namespace until the test ends.
func (l *lab) runNode(mode Mode, side string, key Key, peers *memory.Value[[]Peer]) *memory.Value[*Status] {
	status := &memory.Value[*Status]{}
	self := labNode(side, key)
	c := Config{
		Mode: mode, PrivateKey: key, Address: self.Address, PodCIDR: self.PodCIDR,
		Peers: peers, Status: status, kernel: l.kernel("node-" + side),
	}
	supervisor.TestHarness(l.t, func(ctx context.Context) error { return Run(ctx, c) })
	return status
}

// echo serves one TCP echo on 10.77.2.2:7777 in pod-b and checks, from
// pod-a, that a message comes back.
func (l *lab) checkPodToPod(t *testing.T) {
	t.Helper()
	var ln net.Listener
	l.in("pod-b", func() (err error) {
		ln, err = net.Listen("tcp", "10.77.2.2:0")
		return err
	})
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		io.Copy(c, c)
	}()
	var conn net.Conn
	l.in("pod-a", func() (err error) {
		conn, err = net.DialTimeout("tcp", ln.Addr().String(), 20*time.Second)
		return err
	})
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(20 * time.Second))
	msg := []byte("pod-a to pod-b")
	if _, err := conn.Write(msg); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len(msg))
	if _, err := io.ReadFull(conn, got); err != nil || !bytes.Equal(got, msg) {
		t.Fatalf("echo from pod-b: %q, %v", got, err)
	}
}

func TestNetnsPlain(t *testing.T)     { testNetns(t, ModePlain) }
func TestNetnsWireGuard(t *testing.T) { testNetns(t, ModeWireGuard) }

func testNetns(t *testing.T, mode Mode) {
	l := newLab(t)
	if mode == ModeWireGuard && !l.hasWireGuard("node-a") {
		t.Skip("the host kernel has no WireGuard (`ip link add type wireguard` fails: CONFIG_WIREGUARD unset or module absent); the VM tests cover it")
	}
	keyA, _ := newPrivateKey()
	keyB, _ := newPrivateKey()
	peersA, peersB := &memory.Value[[]Peer]{}, &memory.Value[[]Peer]{}
	statusA := l.runNode(mode, "a", keyA, peersA)
	statusB := l.runNode(mode, "b", keyB, peersB)
	// Each node is told of both, as the curator would: each skips itself.
	both := []Peer{labNode("a", keyA), labNode("b", keyB)}
	peersA.Set(both)
	peersB.Set(both)
	for _, s := range []*memory.Value[*Status]{statusA, statusB} {
		st := waitStatus(t, s, func(s *Status) bool { return s.InSync })
		if len(st.Peers) != 1 || len(st.Skipped) != 1 {
			t.Fatalf("status %+v, want one peer and itself skipped", st)
		}
	}
	l.checkPodToPod(t)

	// A second reconciler, as after a restart, finds everything in place.
	again := l.runNode(mode, "a", keyA, peersA)
	if st := waitStatus(t, again, func(s *Status) bool { return s.InSync }); !st.Changed.IsZero() {
		t.Errorf("a restarted reconciler changed the kernel at %v", st.Changed)
	}

	// node-b leaves: node-a drops its route (and WireGuard peer).
	peersA.Set(both[:1])
	waitStatus(t, statusA, func(s *Status) bool { return s.InSync && len(s.Peers) == 0 })
	k := l.kernel("node-a")
	if routes, err := k.Routes(); err != nil || len(routes) != 0 {
		t.Errorf("routes left after node-b left: %v, %v", routes, err)
	}
	if mode == ModeWireGuard {
		if dev, err := k.Device(DefaultDevice); err != nil || dev == nil || len(dev.Peers) != 0 {
			t.Errorf("WireGuard device after node-b left: %+v, %v", dev, err)
		}
	}

	// Clear on node-b removes its route and device. (node-b's reconciler
	// would put them back at its next resync, a minute away.)
	kb := l.kernel("node-b")
	if err := Clear(Config{kernel: kb}); err != nil {
		t.Fatal(err)
	}
	if routes, err := kb.Routes(); err != nil || len(routes) != 0 {
		t.Errorf("routes left after Clear: %v, %v", routes, err)
	}
	if dev, err := kb.Device(DefaultDevice); err != nil || dev != nil {
		t.Errorf("WireGuard device after Clear: %+v, %v", dev, err)
	}
}
