package clusternet

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/polis-os/polis/event/memory"
	"github.com/polis-os/polis/supervisor/supervisortest"
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

// lab is one test's set of namespaces, made and entered through netlink
// only (no iproute2), so that the same tests run inside a VM whose init is
// this test binary (vm_linux_test.go).
type lab struct {
	t     testing.TB
	ns    map[string]netns.NsHandle
	shape labShape
}

// labShape is the cluster link's kind. The default (zero) is a veth pair
// as the kernel makes it: MTU 1500, with every offload, so that TCP's
// 64 KiB segments cross it whole and no checksum is computed. jumboLink
// is the VM cluster's link instead.
type labShape struct {
	// linkMTU is the cluster link's MTU (1500 if 0); the Pods' links and
	// the tunnel get TunnelMTU of it, as the node gives them.
	linkMTU int
	// noOffloads turns the cluster link's checksum, scatter-gather and
	// segmentation offloads off: every packet is cut to the MTU and
	// checksummed by the CPU, as a VM's virtio-net NIC makes the kernel
	// do when qemu's backend (the launcher's switch socket) offers no
	// offloads.
	noOffloads bool
}

// jumboLink is the link of the VM clusters' nodes: the switch's jumbo
// frames, no offloads (launch/vm).
var jumboLink = labShape{linkMTU: 9000, noOffloads: true}

// newLab makes the namespaces and links above, or skips t when this is not
// root or the host cannot make them.
func newLab(t testing.TB) *lab { return newShapedLab(t, labShape{}) }

// newShapedLab is newLab with the cluster link of shape.
func newShapedLab(t testing.TB, shape labShape) *lab {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("network namespaces need root")
	}
	l := &lab{t: t, ns: make(map[string]netns.NsHandle), shape: shape}
	for _, name := range []string{"node-a", "node-b", "pod-a", "pod-b"} {
		h, err := newNetns()
		if err != nil {
			t.Skipf("cannot make a network namespace: %v", err)
		}
		t.Cleanup(func() { h.Close() })
		l.ns[name] = h
		lo, err := l.handle(name).LinkByName("lo")
		if err != nil {
			t.Fatal(err)
		}
		l.check(name, "setting lo up", l.handle(name).LinkSetUp(lo))
	}
	l.veth("node-a", "ca", "192.168.0.1/16", "node-b", "cb", "192.168.0.2/16", shape.linkMTU)
	if shape.noOffloads {
		l.in("node-a", func() error { return offloadsOff("ca") })
		l.in("node-b", func() error { return offloadsOff("cb") })
	}
	for n, side := range []string{"a", "b"} {
		node, pod := "node-"+side, "pod-"+side
		l.veth(node, "p"+side, fmt.Sprintf("10.77.%d.1/24", n+1), pod, "eth0", fmt.Sprintf("10.77.%d.2/24", n+1), l.tunnelMTU())
		eth0, err := l.handle(pod).LinkByName("eth0")
		l.check(pod, "finding eth0", err)
		gw := net.IPv4(10, 77, byte(n+1), 1)
		l.check(pod, "adding the default route", l.handle(pod).RouteAdd(&netlink.Route{LinkIndex: eth0.Attrs().Index, Gw: gw}))
		l.in(node, func() error { return os.WriteFile("/proc/sys/net/ipv4/ip_forward", []byte("1"), 0o644) })
	}
	return l
}

// newNetns makes a network namespace without entering it.
func newNetns() (netns.NsHandle, error) {
	runtime.LockOSThread()
	orig, err := netns.Get()
	if err != nil {
		runtime.UnlockOSThread()
		return 0, err
	}
	defer orig.Close()
	h, err := netns.New()
	if err != nil {
		runtime.UnlockOSThread()
		return 0, err
	}
	if err := netns.Set(orig); err != nil {
		// The thread is in the wrong namespace: leave it locked, so Go
		// ends it with this goroutine.
		h.Close()
		return 0, fmt.Errorf("returning to the original namespace: %w", err)
	}
	runtime.UnlockOSThread()
	return h, nil
}

func (l *lab) check(ns, what string, err error) {
	l.t.Helper()
	if err != nil {
		l.t.Fatalf("%s: %s: %v", ns, what, err)
	}
}

// handle is a netlink handle in namespace ns, closed when the test ends.
func (l *lab) handle(ns string) *netlink.Handle {
	l.t.Helper()
	h, err := netlink.NewHandleAt(l.ns[ns], unix.NETLINK_ROUTE)
	l.check(ns, "opening netlink", err)
	l.t.Cleanup(h.Close)
	return h
}

// tunnelMTU is the MTU of the tunnel and the Pods' links: TunnelMTU of
// the cluster link's, or 0 for the defaults when the link has 1500.
func (l *lab) tunnelMTU() int {
	if l.shape.linkMTU == 0 {
		return 0
	}
	return TunnelMTU(l.shape.linkMTU)
}

// veth joins namespaces a and b with a veth pair, its ends named nameA and
// nameB, addressed addrA and addrB, with MTU mtu (the kernel's default if
// 0), and up.
func (l *lab) veth(a, nameA, addrA, b, nameB, addrB string, mtu int) {
	l.t.Helper()
	ha, hb := l.handle(a), l.handle(b)
	link := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: nameA}, PeerName: nameB, PeerNamespace: netlink.NsFd(l.ns[b])}
	l.check(a, "adding veth "+nameA, ha.LinkAdd(link))
	for _, end := range []struct {
		h        *netlink.Handle
		ns, name string
		addr     string
	}{{ha, a, nameA, addrA}, {hb, b, nameB, addrB}} {
		ln, err := end.h.LinkByName(end.name)
		l.check(end.ns, "finding "+end.name, err)
		addr, err := netlink.ParseAddr(end.addr)
		l.check(end.ns, "parsing "+end.addr, err)
		l.check(end.ns, "addressing "+end.name, end.h.AddrAdd(ln, addr))
		if mtu != 0 {
			l.check(end.ns, fmt.Sprintf("setting %s's MTU to %d", end.name, mtu), end.h.LinkSetMTU(ln, mtu))
		}
		l.check(end.ns, "setting "+end.name+" up", end.h.LinkSetUp(ln))
	}
}

// offloads are the link features a VM's NIC lacks behind the switch
// (labShape.noOffloads), each as the ethtool ioctl's one-feature commands
// to read and to set it.
var offloads = []struct {
	get, set uint32
	what     string
}{
	{unix.ETHTOOL_GTSO, unix.ETHTOOL_STSO, "segmentation offload"},
	{unix.ETHTOOL_GGSO, unix.ETHTOOL_SGSO, "generic segmentation offload"},
	{unix.ETHTOOL_GSG, unix.ETHTOOL_SSG, "scatter-gather"},
	{unix.ETHTOOL_GTXCSUM, unix.ETHTOOL_STXCSUM, "transmit checksums"},
	{unix.ETHTOOL_GRXCSUM, unix.ETHTOOL_SRXCSUM, "receive checksums"},
}

// offloadsOff turns link name's offloads off, in the calling thread's
// namespace.
func offloadsOff(name string) error {
	for _, o := range offloads {
		if _, err := ethtoolValue(name, o.set, 0); err != nil {
			return fmt.Errorf("turning %s's %s off: %w", name, o.what, err)
		}
	}
	return nil
}

// ethtoolValue runs one of the ethtool ioctl's commands that take a
// struct ethtool_value {cmd, data} on link name, in the calling thread's
// namespace, and returns the data the kernel left in it.
func ethtoolValue(name string, cmd, data uint32) (uint32, error) {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return 0, err
	}
	defer unix.Close(fd)
	value := [2]uint32{cmd, data}
	// The ifreq: the name, then a pointer to the value in its union.
	var ifr [40]byte
	copy(ifr[:unix.IFNAMSIZ-1], name)
	*(*unsafe.Pointer)(unsafe.Pointer(&ifr[unix.IFNAMSIZ])) = unsafe.Pointer(&value)
	_, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.SIOCETHTOOL, uintptr(unsafe.Pointer(&ifr[0])))
	runtime.KeepAlive(&value)
	if errno != 0 {
		return 0, errno
	}
	return value[1], nil
}

// in runs f on a thread inside namespace ns. Sockets f opens stay in ns.
func (l *lab) in(ns string, f func() error) {
	l.t.Helper()
	if err := inNetns(l.ns[ns], f); err != nil {
		l.t.Fatalf("in %s: %v", ns, err)
	}
}

func inNetns(h netns.NsHandle, f func() error) error {
	runtime.LockOSThread()
	orig, err := netns.Get()
	if err != nil {
		runtime.UnlockOSThread()
		return err
	}
	defer orig.Close()
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

// hasWireGuard reports whether the kernel can make WireGuard links, trying
// in namespace ns.
func (l *lab) hasWireGuard(ns string) bool {
	h := l.handle(ns)
	probe := &netlink.GenericLink{LinkAttrs: netlink.LinkAttrs{Name: "wgprobe"}, LinkType: "wireguard"}
	if err := h.LinkAdd(probe); err != nil {
		return false
	}
	h.LinkDel(probe)
	return true
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
		Peers: peers, Status: status, kernel: l.kernel("node-" + side), MTU: l.tunnelMTU(),
	}
	supervisortest.Harness(l.t, func(ctx context.Context) error { return Run(ctx, c) })
	return status
}

// checkPodToPod serves one TCP echo in pod-b and checks, from pod-a, that
// msg comes back.
func (l *lab) checkPodToPod(t *testing.T, msg []byte) {
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
	if _, err := conn.Write(msg); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len(msg))
	if _, err := io.ReadFull(conn, got); err != nil || !bytes.Equal(got, msg) {
		t.Fatalf("echo from pod-b: %q, %v", got, err)
	}
}

// capture records every frame that link in namespace ns receives or
// sends from now on; the function it returns stops and returns them, one
// after the other. A frame the link handled before that call is in it:
// packet sockets get their copy as the frame passes.
func (l *lab) capture(ns, link string) func() []byte {
	l.t.Helper()
	ln, err := l.handle(ns).LinkByName(link)
	l.check(ns, "finding "+link, err)
	proto := uint16(unix.ETH_P_ALL<<8&0xff00 | unix.ETH_P_ALL>>8) // network byte order
	var fd int
	l.in(ns, func() (err error) {
		fd, err = unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, int(proto))
		if err != nil {
			return fmt.Errorf("packet socket: %w", err)
		}
		return unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: proto, Ifindex: ln.Attrs().Index})
	})
	l.t.Cleanup(func() { unix.Close(fd) })
	return func() []byte {
		var all []byte
		buf := make([]byte, 65536)
		for {
			n, _, err := unix.Recvfrom(fd, buf, unix.MSG_DONTWAIT)
			if err == unix.EINTR {
				continue
			}
			if err != nil {
				return all
			}
			all = append(all, buf[:n]...)
		}
	}
}

// TestNetnsJumboLink checks the lab's VM-shaped link (jumboLink), which
// BenchmarkPodToPod's jumbo- cases measure: the MTUs the node gives, the
// offloads off, and a Pod's 64 KiB crossing it in segments plainly routed.
func TestNetnsJumboLink(t *testing.T) {
	l := newShapedLab(t, jumboLink)
	for _, want := range []struct {
		ns, link string
		mtu      int
	}{{"node-a", "ca", 9000}, {"node-b", "cb", 9000}, {"pod-a", "eth0", 8920}, {"node-b", "pb", 8920}} {
		ln, err := l.handle(want.ns).LinkByName(want.link)
		if err != nil || ln.Attrs().MTU != want.mtu {
			t.Errorf("%s in %s: %v, MTU %v; want MTU %d", want.link, want.ns, err, ln, want.mtu)
		}
	}
	l.in("node-a", func() error {
		for _, o := range offloads {
			if on, err := ethtoolValue("ca", o.get, 0); err != nil || on != 0 {
				t.Errorf("ca's %s: %d, %v; want off", o.what, on, err)
			}
		}
		return nil
	})
	keyA, _ := newPrivateKey()
	keyB, _ := newPrivateKey()
	peers := &memory.Value[[]Peer]{}
	statusA := l.runNode(ModePlain, "a", keyA, peers)
	statusB := l.runNode(ModePlain, "b", keyB, peers)
	peers.Set([]Peer{labNode("a", keyA), labNode("b", keyB)})
	for _, s := range []*memory.Value[*Status]{statusA, statusB} {
		waitStatus(t, s, func(s *Status) bool { return s.InSync })
	}
	l.checkPodToPod(t, bytes.Repeat([]byte("jumbo "), 64<<10/6))
}

func TestNetnsPlain(t *testing.T)     { testNetns(t, ModePlain) }
func TestNetnsWireGuard(t *testing.T) { testNetns(t, ModeWireGuard) }

func testNetns(t *testing.T, mode Mode) {
	l := newLab(t)
	keyA, _ := newPrivateKey()
	keyB, _ := newPrivateKey()
	peersA, peersB := &memory.Value[[]Peer]{}, &memory.Value[[]Peer]{}
	if mode == ModeWireGuard && !l.hasWireGuard("node-a") {
		if requireWireGuard {
			t.Fatal("this kernel must have WireGuard, and `ip link add type wireguard` fails")
		}
		// What a node without the module says: the step and the cause.
		status := l.runNode(mode, "a", keyA, peersA)
		peersA.Set([]Peer{labNode("b", keyB)})
		st := waitStatus(t, status, func(s *Status) bool { return s.LastError != "" })
		if want := "creating WireGuard device polis-wg: the kernel has no WireGuard"; !strings.Contains(st.LastError, want) {
			t.Errorf("error %q, want one with %q", st.LastError, want)
		}
		t.Skip("the host kernel has no WireGuard (`ip link add type wireguard` fails: CONFIG_WIREGUARD unset or module absent); the VM tests cover it")
	}
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
	// Whatever crosses the cluster link is seen from node-b's end: in
	// WireGuard mode the message must not be among it in clear; in plain
	// mode it must (or the capture sees nothing, and proves nothing).
	capture := l.capture("node-b", "cb")
	marker := []byte("pod-a to pod-b: a marker never seen in clear")
	l.checkPodToPod(t, marker)
	wire := capture()
	switch inClear := bytes.Contains(wire, marker); {
	case mode == ModeWireGuard && inClear:
		t.Error("the marker crossed the cluster link in clear")
	case mode == ModePlain && !inClear:
		t.Errorf("the capture did not see the marker in plain mode (%d bytes captured)", len(wire))
	}

	// What node-a itself sends to pod-b: in WireGuard mode it leaves
	// with the tunnel's own address (the first of node-a's pod range),
	// which node-b's WireGuard accepts from node-a, where the cluster
	// address would be dropped; in plain mode with the cluster address.
	wantSource := netip.MustParseAddr("192.168.0.1")
	if mode == ModeWireGuard {
		wantSource = netip.MustParseAddr("10.77.1.1")
	}
	if got := l.sourceSeen("node-a", "pod-b", "10.77.2.2"); got != wantSource {
		t.Errorf("pod-b saw node-a's own connection come from %v, want %v", got, wantSource)
	}

	// A second reconciler, as after a restart, finds everything in place.
	again := l.runNode(mode, "a", keyA, peersA)
	if st := waitStatus(t, again, func(s *Status) bool { return s.InSync }); !st.Changed.IsZero() {
		t.Errorf("a restarted reconciler changed the kernel at %v", st.Changed)
	}

	// node-b leaves: node-a drops its route (and WireGuard peer).
	peersA.Set(both[:1])
	waitStatus(t, statusA, func(s *Status) bool { return s.InSync && len(s.Peers) == 0 })
	k := l.kernel("node-a")
	if routes, _, err := k.Routes(); err != nil || len(routes) != 0 {
		t.Errorf("routes left after node-b left: %v, %v", routes, err)
	}
	if mode == ModeWireGuard {
		if dev, err := k.Device(DefaultDevice); err != nil || dev == nil || len(dev.Peers) != 0 || dev.MTU != DefaultMTU {
			t.Errorf("WireGuard device after node-b left: %+v, %v (want MTU %d, no peers)", dev, err, DefaultMTU)
		}
		// The link's MTU is changed in place, as when the cluster link's
		// changed: the device stays.
		if err := k.SetMTU(DefaultDevice, TunnelMTU(9000)); err != nil {
			t.Fatal(err)
		}
		if dev, err := k.Device(DefaultDevice); err != nil || dev == nil || dev.MTU != 8920 {
			t.Errorf("WireGuard device after SetMTU(8920): %+v, %v", dev, err)
		}
	}

	// Clear on node-b removes its route and device. (node-b's reconciler
	// would put them back at its next resync, a minute away.)
	kb := l.kernel("node-b")
	if err := Clear(Config{kernel: kb}); err != nil {
		t.Fatal(err)
	}
	if routes, _, err := kb.Routes(); err != nil || len(routes) != 0 {
		t.Errorf("routes left after Clear: %v, %v", routes, err)
	}
	if dev, err := kb.Device(DefaultDevice); err != nil || dev != nil {
		t.Errorf("WireGuard device after Clear: %+v, %v", dev, err)
	}
}

// TestNetnsForeignRoute checks, against the kernel's own matching of
// routes, that a route someone else added to exactly a peer's pod range
// (proto static, not the reconciler's mark) survives the peer coming and
// going: neither taken over (a route replacement matches by destination,
// not protocol) nor deleted with the peer.
func TestNetnsForeignRoute(t *testing.T) {
	l := newLab(t)
	h := l.handle("node-a")
	ca, err := h.LinkByName("ca")
	l.check("node-a", "finding ca", err)
	podsB := labNode("b", Key{}).PodCIDR
	dst := &net.IPNet{IP: podsB.Addr().AsSlice(), Mask: net.CIDRMask(podsB.Bits(), 32)}
	theirs := &netlink.Route{Dst: dst, LinkIndex: ca.Attrs().Index, Scope: netlink.SCOPE_LINK, Protocol: unix.RTPROT_STATIC}
	l.check("node-a", "adding the foreign route", h.RouteAdd(theirs))
	// checkTheirs fails t unless node-a's only route to podsB is theirs.
	checkTheirs := func(when string) {
		t.Helper()
		got, err := h.RouteListFiltered(netlink.FAMILY_V4, &netlink.Route{Dst: dst, Table: unix.RT_TABLE_MAIN}, netlink.RT_FILTER_DST|netlink.RT_FILTER_TABLE)
		if err != nil {
			t.Fatalf("%s: listing routes to %v: %v", when, podsB, err)
		}
		if len(got) != 1 || got[0].Protocol != unix.RTPROT_STATIC || got[0].LinkIndex != ca.Attrs().Index || got[0].Gw != nil {
			t.Errorf("%s: routes to %v are %v, want only the foreign one, dev ca proto static", when, podsB, got)
		}
	}

	keyA, keyB := testKey(1), testKey(2)
	peers := &memory.Value[[]Peer]{}
	status := l.runNode(ModePlain, "a", keyA, peers)
	peers.Set([]Peer{labNode("a", keyA), labNode("b", keyB)})
	st := waitStatus(t, status, func(s *Status) bool { return s.InSync && len(s.Peers)+len(s.Skipped) == 2 })
	if len(st.Peers) != 0 || len(st.Skipped) != 2 || st.Skipped[1].NodeID != "node-b" || !strings.Contains(st.Skipped[1].Reason, "did not add") {
		t.Errorf("status %+v, want node-b skipped for the foreign route", st)
	}
	checkTheirs("with node-b a peer")

	peers.Set([]Peer{labNode("a", keyA)})
	waitStatus(t, status, func(s *Status) bool { return s.InSync && len(s.Peers)+len(s.Skipped) == 1 })
	checkTheirs("after node-b left")

	// A route to that range added after the reconciler looked at the
	// table is refused by the kernel, not made over the foreign one.
	k := l.kernel("node-a")
	err = k.AddRoute(route{Dst: podsB, Via: labNode("b", keyB).Address})
	if !errors.Is(err, unix.EEXIST) || !strings.Contains(err.Error(), "10.77.2.0/24 already has a route this node did not add") {
		t.Errorf("adding a route to %v: %v, want EEXIST naming the destination", podsB, err)
	}
	checkTheirs("after an added route was refused")
}
