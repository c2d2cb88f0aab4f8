package clusternet

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/polis-os/polis/event"
	"github.com/polis-os/polis/event/memory"
	"github.com/polis-os/polis/supervisor/supervisortest"
)

func testKey(n int) Key {
	var k Key
	k[0], k[1] = 1, byte(n)
	return k
}

// testPeer is node n: 192.168.0.n, pods in 10.244.n.0/24.
func testPeer(n int) Peer {
	return Peer{
		NodeID:    fmt.Sprintf("node-%d", n),
		Address:   netip.AddrFrom4([4]byte{192, 168, 0, byte(n)}),
		PodCIDR:   netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 244, byte(n), 0}), 24),
		PublicKey: testKey(n).PublicKey(),
	}
}

func testConfig(mode Mode) Config {
	self := testPeer(1)
	c, err := Config{
		Mode:       mode,
		PrivateKey: testKey(1),
		Address:    self.Address,
		PodCIDR:    self.PodCIDR,
		Peers:      &memory.Value[[]Peer]{},
	}.withDefaults()
	if err != nil {
		panic(err)
	}
	return c
}

func TestDecideWireGuard(t *testing.T) {
	c := testConfig(ModeWireGuard)
	noKey := testPeer(5)
	noKey.PublicKey = Key{}
	overlapOwn := testPeer(6)
	overlapOwn.PodCIDR = netip.MustParsePrefix("10.244.1.128/25")
	overlapPeer := testPeer(7)
	overlapPeer.PodCIDR = netip.MustParsePrefix("10.244.2.0/23") // holds node-2's and node-3's
	sameKey := testPeer(8)
	sameKey.PublicKey = testPeer(7).PublicKey
	noAddr := testPeer(9)
	noAddr.Address = netip.Addr{}
	unmasked := testPeer(10)
	unmasked.PodCIDR = netip.MustParsePrefix("10.244.10.7/24")

	d := decide(c, []Peer{testPeer(3), testPeer(1), testPeer(2), noKey, overlapOwn, overlapPeer, sameKey, noAddr, unmasked})

	var got []string
	for _, p := range d.peers {
		got = append(got, p.NodeID)
	}
	// node-7's /23 sorts before node-2's /24 at the same address, so it
	// wins over node-2 and node-3.
	if want := "node-7 node-10"; strings.Join(got, " ") != want {
		t.Errorf("configured peers %q, want %q", got, want)
	}
	skipped := make(map[string]string)
	for _, s := range d.skipped {
		skipped[s.NodeID] = s.Reason
	}
	for node, reason := range map[string]string{
		"node-1": "own address", "node-5": "no WireGuard public key", "node-6": "overlaps this node's own",
		"node-2": "overlaps node-7's", "node-3": "overlaps node-7's", "node-8": "same WireGuard public key as node-7", "node-9": "no cluster address",
	} {
		if r, ok := skipped[node]; !ok || !strings.Contains(r, reason) {
			t.Errorf("%s skipped for %q, want a reason with %q", node, r, reason)
		}
	}
	p10 := testPeer(10)
	want := wgPeer{PublicKey: p10.PublicKey, Endpoint: netip.MustParseAddrPort("192.168.0.10:51820"), AllowedIPs: []netip.Prefix{netip.MustParsePrefix("10.244.10.0/24")}}
	if got := d.device.Peers[p10.PublicKey]; !got.equal(want) {
		t.Errorf("node-10's WireGuard peer %+v, want %+v", got, want)
	}
	if r := d.routes[netip.MustParsePrefix("10.244.10.0/24")]; r != (route{Dst: netip.MustParsePrefix("10.244.10.0/24"), Device: DefaultDevice}) {
		t.Errorf("node-10's route %v", r)
	}
	if len(d.routes) != 2 || len(d.device.Peers) != 2 {
		t.Errorf("%d routes and %d WireGuard peers, want 2 of each", len(d.routes), len(d.device.Peers))
	}
}

func TestDecidePlain(t *testing.T) {
	c := testConfig(ModePlain)
	noKey := testPeer(2)
	noKey.PublicKey = Key{}
	mixed := testPeer(3)
	mixed.Address = netip.MustParseAddr("fd00::3")
	d := decide(c, []Peer{noKey, mixed})
	if d.device != nil {
		t.Error("plain mode wants a WireGuard device")
	}
	want := route{Dst: noKey.PodCIDR, Via: noKey.Address}
	if len(d.routes) != 1 || d.routes[noKey.PodCIDR] != want {
		t.Errorf("routes %v, want only %v (a peer without a key is fine in plain mode)", d.routes, want)
	}
	if len(d.skipped) != 1 || d.skipped[0].NodeID != "node-3" {
		t.Errorf("skipped %v, want node-3 (address and pods of different families)", d.skipped)
	}
}

// reconcileOnce runs one reconcile of c against k with peers.
func reconcileOnce(t *testing.T, c Config, k kernel, peers []Peer) error {
	t.Helper()
	r := &reconciler{c: c, k: k, log: zaptest.NewLogger(t)}
	return r.reconcile(peers, "test")
}

// checkKernel fails t unless k holds exactly the device and routes that
// configuring peers must give.
func checkKernel(t *testing.T, c Config, k *fakeKernel, peers ...int) {
	t.Helper()
	dev, routes := k.state()
	if c.Mode == ModePlain {
		if dev != nil {
			t.Error("a WireGuard device exists in plain mode")
		}
	} else {
		if dev == nil {
			t.Fatal("no WireGuard device")
		}
		if dev.PrivateKey != c.PrivateKey || dev.ListenPort != c.ListenPort || !dev.Up {
			t.Errorf("device key/port/up %v/%d/%v", dev.PrivateKey == c.PrivateKey, dev.ListenPort, dev.Up)
		}
		if len(dev.Peers) != len(peers) {
			t.Errorf("%d WireGuard peers, want %d", len(dev.Peers), len(peers))
		}
	}
	if len(routes) != len(peers) {
		t.Errorf("%d routes, want %d: %v", len(routes), len(peers), routes)
	}
	for _, n := range peers {
		p := testPeer(n)
		want := route{Dst: p.PodCIDR, Via: p.Address}
		if c.Mode == ModeWireGuard {
			want = route{Dst: p.PodCIDR, Device: c.Device}
			wp, ok := dev.Peers[p.PublicKey]
			if !ok || wp.Endpoint != netip.AddrPortFrom(p.Address, uint16(c.ListenPort)) || len(wp.AllowedIPs) != 1 || wp.AllowedIPs[0] != p.PodCIDR {
				t.Errorf("%s's WireGuard peer %+v", p.NodeID, wp)
			}
		}
		if routes[p.PodCIDR] != want {
			t.Errorf("%s's route %v, want %v", p.NodeID, routes[p.PodCIDR], want)
		}
	}
}

func TestReconcile(t *testing.T) {
	for _, mode := range []Mode{ModeWireGuard, ModePlain} {
		t.Run(string(mode), func(t *testing.T) {
			c := testConfig(mode)
			k := newFakeKernel()
			steps := []struct {
				name  string
				peers []int
			}{
				{"first peers", []int{2, 3}},
				{"a peer comes", []int{2, 3, 4}},
				{"a peer goes", []int{2, 4}},
				{"all go", nil},
				{"back", []int{3}},
			}
			for _, s := range steps {
				var peers []Peer
				for _, n := range s.peers {
					peers = append(peers, testPeer(n))
				}
				if err := reconcileOnce(t, c, k, peers); err != nil {
					t.Fatalf("%s: %v", s.name, err)
				}
				checkKernel(t, c, k, s.peers...)
				// Idempotent: again, and as a restarted reconciler
				// would, changes nothing.
				before := k.changeCount()
				if err := reconcileOnce(t, c, k, peers); err != nil {
					t.Fatalf("%s, again: %v", s.name, err)
				}
				if n := k.changeCount() - before; n != 0 {
					t.Errorf("%s: reconciling the same peers again made %d changes", s.name, n)
				}
			}
		})
	}
}

func TestReconcileChangedPeer(t *testing.T) {
	c := testConfig(ModeWireGuard)
	k := newFakeKernel()
	p2 := testPeer(2)
	if err := reconcileOnce(t, c, k, []Peer{p2}); err != nil {
		t.Fatal(err)
	}
	// node-2 moves to another address and gets a new key.
	p2.Address = netip.MustParseAddr("192.168.0.22")
	p2.PublicKey = testKey(22).PublicKey()
	if err := reconcileOnce(t, c, k, []Peer{p2}); err != nil {
		t.Fatal(err)
	}
	dev, _ := k.state()
	if _, ok := dev.Peers[testPeer(2).PublicKey]; ok || len(dev.Peers) != 1 {
		t.Errorf("the old key is still a peer: %v", dev.Peers)
	}
	if wp := dev.Peers[p2.PublicKey]; wp.Endpoint.Addr() != p2.Address {
		t.Errorf("endpoint %v, want %v", wp.Endpoint, p2.Address)
	}
}

func TestReconcileRepairs(t *testing.T) {
	c := testConfig(ModeWireGuard)
	k := newFakeKernel()
	peers := []Peer{testPeer(2), testPeer(3)}
	if err := reconcileOnce(t, c, k, peers); err != nil {
		t.Fatal(err)
	}
	// Someone takes the device down, deletes a peer, changes the port
	// and adds a stale marked route.
	k.dev.Up = false
	delete(k.dev.Peers, testPeer(3).PublicKey)
	k.dev.ListenPort = 1
	stale := netip.MustParsePrefix("10.244.99.0/24")
	k.routes[stale] = route{Dst: stale, Via: netip.MustParseAddr("192.168.0.99")}
	if err := reconcileOnce(t, c, k, peers); err != nil {
		t.Fatal(err)
	}
	checkKernel(t, c, k, 2, 3)

	// Switching to plain mode removes the device; back again makes it.
	plain := testConfig(ModePlain)
	if err := reconcileOnce(t, plain, k, peers); err != nil {
		t.Fatal(err)
	}
	checkKernel(t, plain, k, 2, 3)
	if err := reconcileOnce(t, c, k, peers); err != nil {
		t.Fatal(err)
	}
	checkKernel(t, c, k, 2, 3)
}

func TestClear(t *testing.T) {
	for _, mode := range []Mode{ModeWireGuard, ModePlain} {
		c := testConfig(mode)
		k := newFakeKernel()
		if err := reconcileOnce(t, c, k, []Peer{testPeer(2), testPeer(3)}); err != nil {
			t.Fatal(err)
		}
		c.kernel = k
		if err := Clear(c); err != nil {
			t.Fatal(err)
		}
		if dev, routes := k.state(); dev != nil || len(routes) != 0 {
			t.Errorf("%s: after Clear, device %v and routes %v", mode, dev, routes)
		}
	}
}

func TestDiffNew(t *testing.T) {
	c := testConfig(ModeWireGuard)
	p := diff(decide(c, []Peer{testPeer(3), testPeer(2)}), nil, nil)
	if !p.createDevice || !p.setUp || p.configure.PrivateKey == nil || p.configure.ListenPort == nil {
		t.Errorf("plan for a new device: %v", p)
	}
	if len(p.configure.Set) != 2 || len(p.add) != 2 || p.add[0].Dst != testPeer(2).PodCIDR || len(p.replace) != 0 {
		t.Errorf("plan for a new device: %v, routes %v", p, p.add)
	}
}

// waitStatus waits until the status satisfies pred.
func waitStatus(t *testing.T, s *memory.Value[*Status], pred func(*Status) bool) *Status {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := event.Get(ctx, event.ValueWatch[*Status](s), event.Filter(func(s *Status) bool { return s != nil && pred(s) }))
	if err != nil {
		t.Fatalf("waiting for the status: %v", err)
	}
	return st
}

func TestRun(t *testing.T) {
	k := newFakeKernel()
	peers := &memory.Value[[]Peer]{}
	status := &memory.Value[*Status]{}
	c := testConfig(ModeWireGuard)
	c.Peers, c.Status, c.kernel = peers, status, k
	supervisortest.Harness(t, func(ctx context.Context) error { return Run(ctx, c) })

	noKey := testPeer(4)
	noKey.PublicKey = Key{}
	peers.Set([]Peer{testPeer(2), testPeer(3), noKey})
	st := waitStatus(t, status, func(s *Status) bool { return s.InSync && len(s.Peers) == 2 })
	if len(st.Skipped) != 1 || st.Skipped[0].NodeID != "node-4" {
		t.Errorf("skipped %v, want node-4", st.Skipped)
	}
	checkKernel(t, c, k, 2, 3)

	// A failure is in the status, names what failed, and is retried
	// without new peers.
	k.mu.Lock()
	k.fail["AddRoute"] = errors.New("injected")
	k.mu.Unlock()
	peers.Set([]Peer{testPeer(2), testPeer(3), testPeer(5)})
	st = waitStatus(t, status, func(s *Status) bool { return s.LastError != "" })
	if !strings.Contains(st.LastError, "adding route 10.244.5.0/24 dev polis-wg to node-5's pods: injected") || st.InSync {
		t.Errorf("status after a failure: in sync %v, error %q", st.InSync, st.LastError)
	}
	st = waitStatus(t, status, func(s *Status) bool { return s.InSync })
	if st.LastErrorAt.IsZero() || st.LastError != "" {
		t.Errorf("status after recovery: error %q at %v", st.LastError, st.LastErrorAt)
	}
	checkKernel(t, c, k, 2, 3, 5)

	peers.Set([]Peer{testPeer(5)})
	waitStatus(t, status, func(s *Status) bool { return s.InSync && len(s.Peers) == 1 })
	checkKernel(t, c, k, 5)
}

// With no new peers, the periodic resync finds what someone else changed
// in the kernel (a route and a WireGuard peer deleted) and puts it back.
func TestRunResyncRepairs(t *testing.T) {
	k := newFakeKernel()
	peers := &memory.Value[[]Peer]{}
	status := &memory.Value[*Status]{}
	c := testConfig(ModeWireGuard)
	c.Peers, c.Status, c.kernel, c.Resync = peers, status, k, 20*time.Millisecond
	supervisortest.Harness(t, func(ctx context.Context) error { return Run(ctx, c) })
	peers.Set([]Peer{testPeer(2), testPeer(3)})
	first := waitStatus(t, status, func(s *Status) bool { return s.InSync && len(s.Peers) == 2 })
	checkKernel(t, c, k, 2, 3)

	k.mu.Lock()
	delete(k.routes, testPeer(3).PodCIDR)
	delete(k.dev.Peers, testPeer(3).PublicKey)
	k.mu.Unlock()
	waitStatus(t, status, func(s *Status) bool { return s.InSync && s.Changed.After(first.Changed) })
	checkKernel(t, c, k, 2, 3)
}

func TestConfigErrors(t *testing.T) {
	peers := &memory.Value[[]Peer]{}
	for _, tc := range []struct {
		c    Config
		want string
	}{
		{Config{Peers: peers}, "private key"},
		{Config{Mode: "ipsec", Peers: peers}, `mode "ipsec"`},
		{Config{Mode: ModePlain}, "no peers"},
		{Config{Mode: ModePlain, Peers: peers, ListenPort: 70000}, "listen port 70000"},
		{Config{Mode: ModePlain, Peers: peers, Device: "a-very-long-device-name"}, "longer than"},
	} {
		_, err := tc.c.withDefaults()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: error %v, want one with %q", tc.c, err, tc.want)
		}
	}
}

// A device whose MTU is not the configured one (a link with another MTU
// since the device was made) gets it set in place, keeping its peers and
// routes; once it matches, nothing changes.
func TestReconcileSetsMTU(t *testing.T) {
	c := testConfig(ModeWireGuard)
	k := newFakeKernel()
	if err := reconcileOnce(t, c, k, []Peer{testPeer(2)}); err != nil {
		t.Fatal(err)
	}
	if dev, _ := k.state(); dev.MTU != DefaultMTU {
		t.Fatalf("a new device has MTU %d, want %d", dev.MTU, DefaultMTU)
	}
	c.MTU = TunnelMTU(9000)
	before := k.changeCount()
	if err := reconcileOnce(t, c, k, []Peer{testPeer(2)}); err != nil {
		t.Fatal(err)
	}
	if dev, _ := k.state(); dev.MTU != 8920 {
		t.Errorf("after the MTU changed, the device has %d, want 8920", dev.MTU)
	}
	if n := k.changeCount() - before; n != 1 {
		t.Errorf("changing the MTU took %d kernel changes, want 1 (the device kept, its peers and routes untouched)", n)
	}
	checkKernel(t, c, k, 2)
	before = k.changeCount()
	if err := reconcileOnce(t, c, k, []Peer{testPeer(2)}); err != nil {
		t.Fatal(err)
	}
	if n := k.changeCount() - before; n != 0 {
		t.Errorf("a device in line took %d kernel changes", n)
	}
}

func TestTunnelMTU(t *testing.T) {
	for link, want := range map[int]int{1500: 1420, 9000: 8920, 65536: 65456, 1300: 1280} {
		if got := TunnelMTU(link); got != want {
			t.Errorf("TunnelMTU(%d) = %d, want %d", link, got, want)
		}
	}
}

// A route the kernel keeps refusing fails every attempt, but blocks
// neither the other peers' routes nor the removal of a departed peer's,
// and the error names it and its peer.
func TestReconcileRouteRefused(t *testing.T) {
	for _, mode := range []Mode{ModeWireGuard, ModePlain} {
		t.Run(string(mode), func(t *testing.T) {
			c := testConfig(mode)
			k := newFakeKernel()
			if err := reconcileOnce(t, c, k, []Peer{testPeer(2), testPeer(3)}); err != nil {
				t.Fatal(err)
			}
			refused := testPeer(4).PodCIDR
			k.mu.Lock()
			k.failRoute[refused] = errors.New("injected")
			k.mu.Unlock()
			// node-2 leaves; node-4, whose route is refused, and node-5
			// come. The second attempt meets the same refusal.
			peers := []Peer{testPeer(3), testPeer(4), testPeer(5)}
			for attempt := 1; attempt <= 2; attempt++ {
				err := reconcileOnce(t, c, k, peers)
				if err == nil || !strings.Contains(err.Error(), "10.244.4.0/24") || !strings.Contains(err.Error(), "node-4") || !strings.Contains(err.Error(), "injected") {
					t.Errorf("attempt %d: error %v, want one naming node-4's route 10.244.4.0/24", attempt, err)
				}
				_, routes := k.state()
				for _, n := range []int{3, 5} {
					if _, ok := routes[testPeer(n).PodCIDR]; !ok {
						t.Errorf("attempt %d: node-%d has no route: %v", attempt, n, routes)
					}
				}
				if _, ok := routes[testPeer(2).PodCIDR]; ok {
					t.Errorf("attempt %d: departed node-2's route is still there", attempt)
				}
			}
			k.mu.Lock()
			delete(k.failRoute, refused)
			k.mu.Unlock()
			if err := reconcileOnce(t, c, k, peers); err != nil {
				t.Fatal(err)
			}
			checkKernel(t, c, k, 3, 4, 5)
		})
	}
}

// When the device cannot take its peers, no route is pointed at it (the
// peer it would carry to is missing), but a departed peer's route still
// goes.
func TestReconcileDeviceRefused(t *testing.T) {
	c := testConfig(ModeWireGuard)
	k := newFakeKernel()
	if err := reconcileOnce(t, c, k, []Peer{testPeer(2), testPeer(3)}); err != nil {
		t.Fatal(err)
	}
	k.mu.Lock()
	k.fail["ConfigureDevice"] = errors.New("injected")
	k.mu.Unlock()
	err := reconcileOnce(t, c, k, []Peer{testPeer(3), testPeer(4)})
	if err == nil || !strings.Contains(err.Error(), "configuring WireGuard device polis-wg: injected") {
		t.Errorf("error %v, want one naming the device's configuration", err)
	}
	_, routes := k.state()
	if _, ok := routes[testPeer(4).PodCIDR]; ok {
		t.Error("node-4's route points at a device that has not got node-4 as a peer")
	}
	if _, ok := routes[testPeer(2).PodCIDR]; ok {
		t.Error("departed node-2's route is still there")
	}
	if err := reconcileOnce(t, c, k, []Peer{testPeer(3), testPeer(4)}); err != nil {
		t.Fatal(err)
	}
	checkKernel(t, c, k, 3, 4)
}

// A route someone else added to exactly a peer's pod range is left alone,
// through the peer coming and going: the peer is skipped with a reason,
// and the other peers are configured.
func TestReconcileForeignRoute(t *testing.T) {
	for _, mode := range []Mode{ModeWireGuard, ModePlain} {
		t.Run(string(mode), func(t *testing.T) {
			c := testConfig(mode)
			k := newFakeKernel()
			theirs := testPeer(3).PodCIDR
			k.foreign[theirs] = true
			r := &reconciler{c: c, k: k, log: zaptest.NewLogger(t)}
			if err := r.reconcile([]Peer{testPeer(2), testPeer(3), testPeer(4)}, "test"); err != nil {
				t.Fatal(err)
			}
			if !k.foreign[theirs] {
				t.Error("the foreign route to node-3's pod range was taken over")
			}
			if got := r.status.PeerIDs(); strings.Join(got, " ") != "node-2 node-4" {
				t.Errorf("configured peers %v, want node-2 and node-4", got)
			}
			if s := r.status.Skipped; len(s) != 1 || s[0].NodeID != "node-3" || !strings.Contains(s[0].Reason, "10.244.3.0/24 already has a route this node did not add") {
				t.Errorf("skipped %+v, want node-3 for its pod range's foreign route", s)
			}
			checkKernel(t, c, k, 2, 4)
			// Again, nothing changes; and when node-3 goes, nor does its
			// range's route.
			before := k.changeCount()
			if err := r.reconcile([]Peer{testPeer(2), testPeer(3), testPeer(4)}, "test"); err != nil {
				t.Fatal(err)
			}
			if n := k.changeCount() - before; n != 0 {
				t.Errorf("reconciling the same peers again made %d changes", n)
			}
			if err := r.reconcile([]Peer{testPeer(2)}, "test"); err != nil {
				t.Fatal(err)
			}
			if !k.foreign[theirs] {
				t.Error("the foreign route to node-3's pod range went with node-3")
			}
			checkKernel(t, c, k, 2)
		})
	}
}

// A route someone else adds between the reading of the kernel and the
// change is not taken over either: the new route is added, not replaced,
// and the kernel's refusal names it.
func TestApplyNeverTakesOver(t *testing.T) {
	c := testConfig(ModePlain)
	k := newFakeKernel()
	p := diff(decide(c, []Peer{testPeer(2), testPeer(3)}), nil, nil)
	theirs := testPeer(2).PodCIDR
	k.foreign[theirs] = true
	err := p.apply(k, c.Device)
	if err == nil || !strings.Contains(err.Error(), "adding route 10.244.2.0/24 via 192.168.0.2 to node-2's pods") {
		t.Errorf("error %v, want one naming node-2's route", err)
	}
	if _, routes := k.state(); !k.foreign[theirs] || len(routes) != 1 {
		t.Errorf("routes %v (foreign one kept: %v), want node-3's alone and the foreign one kept", routes, k.foreign[theirs])
	}
}

// A peer whose pod range holds a node's cluster address (this node's, a
// peer's, or its own) is skipped: its route would send what goes to that
// address, WireGuard's own packets to the peer included, into the tunnel
// or to the peer, cutting the node off from it.
func TestDecideAddressInPodRange(t *testing.T) {
	for _, mode := range []Mode{ModeWireGuard, ModePlain} {
		t.Run(string(mode), func(t *testing.T) {
			c := testConfig(mode) // this node is 192.168.0.1
			holdsOwn := testPeer(5)
			holdsOwn.PodCIDR = netip.MustParsePrefix("192.168.0.0/30")
			holdsPeer := testPeer(6)
			holdsPeer.PodCIDR = netip.MustParsePrefix("192.168.0.3/32")
			holdsItself := testPeer(7)
			holdsItself.PodCIDR = netip.MustParsePrefix("192.168.0.0/24")
			holdsItself.Address = netip.MustParseAddr("192.168.0.77")
			mapped := testPeer(3)
			mapped.Address = netip.MustParseAddr("::ffff:192.168.0.3")
			d := decide(c, []Peer{testPeer(2), holdsOwn, holdsPeer, holdsItself, mapped})
			var got []string
			for _, p := range d.peers {
				got = append(got, p.NodeID)
			}
			if want := "node-2 node-3"; strings.Join(got, " ") != want {
				t.Errorf("configured peers %q, want %q", got, want)
			}
			skipped := make(map[string]string)
			for _, s := range d.skipped {
				skipped[s.NodeID] = s.Reason
			}
			for node, reason := range map[string]string{
				"node-5": "pod range 192.168.0.0/30 holds this node's own address 192.168.0.1",
				"node-6": "pod range 192.168.0.3/32 holds node-3's address 192.168.0.3",
				"node-7": "pod range 192.168.0.0/24 holds",
			} {
				if r := skipped[node]; !strings.Contains(r, reason) {
					t.Errorf("%s skipped for %q, want a reason with %q", node, r, reason)
				}
			}
			if len(d.routes) != 2 {
				t.Errorf("routes %v, want node-2's and node-3's", d.routes)
			}
		})
	}
}

// A peer with this node's own public key (a cloned data disk, say) is
// skipped: WireGuard ignores such a peer without an error, so keeping it
// would route its pods into a device without it, call that in sync, and
// plan the same change at every attempt.
func TestReconcileOwnKey(t *testing.T) {
	c := testConfig(ModeWireGuard)
	k := newFakeKernel()
	clone := testPeer(4)
	clone.PublicKey = c.PrivateKey.PublicKey()
	r := &reconciler{c: c, k: k, log: zaptest.NewLogger(t)}
	peers := []Peer{testPeer(2), clone}
	if err := r.reconcile(peers, "test"); err != nil {
		t.Fatal(err)
	}
	if s := r.status.Skipped; len(s) != 1 || s[0].NodeID != "node-4" || s[0].Reason != "same WireGuard key as this node" {
		t.Errorf("skipped %+v, want node-4 for having this node's key", s)
	}
	checkKernel(t, c, k, 2)
	before := k.changeCount()
	if err := r.reconcile(peers, "test"); err != nil {
		t.Fatal(err)
	}
	if n := k.changeCount() - before; n != 0 {
		t.Errorf("reconciling the same peers again made %d changes", n)
	}
}

// An IPv4-mapped IPv6 pod range is refused: the kernel would route it as
// IPv6, which no IPv4 packet matches, and lists it back as something else
// than was asked for, so the peer would be applied again at every attempt.
func TestDecideMappedPodRange(t *testing.T) {
	for _, mode := range []Mode{ModeWireGuard, ModePlain} {
		t.Run(string(mode), func(t *testing.T) {
			mapped := testPeer(2)
			mapped.PodCIDR = netip.MustParsePrefix("::ffff:a00:0/120")
			d := decide(testConfig(mode), []Peer{mapped, testPeer(3)})
			if len(d.peers) != 1 || d.peers[0].NodeID != "node-3" || len(d.routes) != 1 {
				t.Errorf("configured %v with routes %v, want node-3 alone", d.peers, d.routes)
			}
			if len(d.skipped) != 1 || d.skipped[0].NodeID != "node-2" || !strings.Contains(d.skipped[0].Reason, "::ffff:10.0.0.0/120 is an IPv4-mapped IPv6 range") {
				t.Errorf("skipped %v, want node-2 for its IPv4-mapped range", d.skipped)
			}
		})
	}
}
