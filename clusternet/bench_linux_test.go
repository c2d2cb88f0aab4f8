package clusternet

import (
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/polis-os/polis/event"
	"github.com/polis-os/polis/event/memory"
	"github.com/polis-os/polis/internal/kernelprofile"
	"go.uber.org/zap"
)

// benchPeers is n peers on the lab's cluster link (192.168.0.0/16, so
// that plain routes' next hops are on-link), pods in 172.16.0.0/12.
func benchPeers(n int) []Peer {
	peers := make([]Peer, n)
	for i := range peers {
		var k Key
		rand.Read(k[:])
		j := i + 10
		peers[i] = Peer{
			NodeID:    fmt.Sprintf("node-%d", j),
			Address:   netip.AddrFrom4([4]byte{192, 168, byte(j >> 8), byte(j)}),
			PodCIDR:   netip.PrefixFrom(netip.AddrFrom4([4]byte{172, byte(16 + j>>8), byte(j), 0}), 24),
			PublicKey: k,
		}
	}
	return peers
}

// BenchmarkNewPeer is the time from a new set of peers (one more, or one
// fewer, than before) to the kernel in line with it, in a network namespace
// of its own: what a new worker waits for on every node before its pods are
// reached. It alternates between n and n+1 peers.
func BenchmarkNewPeer(b *testing.B) {
	for _, mode := range []Mode{ModePlain, ModeWireGuard} {
		for _, n := range []int{10, 1000} {
			b.Run(fmt.Sprintf("%s/peers=%d", mode, n), func(b *testing.B) {
				l := newLab(b)
				if mode == ModeWireGuard && !l.hasWireGuard("node-a") {
					b.Skip("the host kernel has no WireGuard")
				}
				key, _ := newPrivateKey()
				peers := &memory.Value[[]Peer]{}
				status := l.runNode(mode, "a", key, peers)
				all := benchPeers(n + 1)
				w := event.ValueWatch[*Status](status).Watch()
				defer w.Close()
				ctx := context.Background()
				set := func(i int) {
					want := n + i%2
					peers.Set(all[:want])
					if _, err := w.Get(ctx, event.Filter(func(s *Status) bool { return s.InSync && len(s.Peers) == want })); err != nil {
						b.Fatal(err)
					}
				}
				set(0)
				b.ResetTimer()
				for i := 1; b.Loop(); i++ {
					set(i)
				}
			})
		}
	}
}

// BenchmarkDecideDiff is the reconciler's own work for 1,000 peers of which
// one changed, without the kernel: deciding the desired state and diffing
// it against the current one.
func BenchmarkDecideDiff(b *testing.B) {
	c := testConfig(ModeWireGuard)
	peers := benchPeers(1000)
	k := newFakeKernel()
	r := &reconciler{c: c, k: k, log: zap.NewNop()}
	if err := r.reconcile(peers, "bench"); err != nil {
		b.Fatal(err)
	}
	dev, routes := k.state()
	var current []route
	for _, r := range routes {
		current = append(current, r)
	}
	peers[500].Address = netip.MustParseAddr("192.168.200.1")
	for b.Loop() {
		if p := diff(decide(c, peers), dev, current); len(p.configure.Set) != 1 {
			b.Fatalf("plan %v", p)
		}
	}
}

// BenchmarkPodToPod is TCP throughput from pod-a to pod-b through both
// nodes' reconciled kernels (the lab of netns_linux_test.go): plain routes
// against WireGuard, in one kernel, so it measures what the tunnel costs
// in CPU rather than a wire. The plain and wireguard cases have the lab's
// default link, a veth with every offload, over which plain routing moves
// 64 KiB segments and computes no checksum; the jumbo- cases have the VM
// clusters' link (jumboLink), where the kernel cuts and checksums every
// packet on both paths, as it does between the nodes' VMs.
//
// Inside the VM (vm_linux_test.go) each case is also profiled: it reports
// the share of the CPU's time in the cipher (ChaCha20 and Poly1305) and in
// checksums, and logs the busiest kernel functions.
func BenchmarkPodToPod(b *testing.B) {
	for _, c := range []struct {
		name  string
		mode  Mode
		shape labShape
	}{
		{"plain", ModePlain, labShape{}},
		{"wireguard", ModeWireGuard, labShape{}},
		{"jumbo-plain", ModePlain, jumboLink},
		{"jumbo-wireguard", ModeWireGuard, jumboLink},
	} {
		mode := c.mode
		b.Run(c.name, func(b *testing.B) {
			l := newShapedLab(b, c.shape)
			if mode == ModeWireGuard && !l.hasWireGuard("node-a") {
				b.Skip("the host kernel has no WireGuard")
			}
			keyA, _ := newPrivateKey()
			keyB, _ := newPrivateKey()
			peers := &memory.Value[[]Peer]{}
			statusA := l.runNode(mode, "a", keyA, peers)
			statusB := l.runNode(mode, "b", keyB, peers)
			peers.Set([]Peer{labNode("a", keyA), labNode("b", keyB)})
			for _, s := range []*memory.Value[*Status]{statusA, statusB} {
				if _, err := event.Get(context.Background(), event.ValueWatch[*Status](s), event.Filter(func(s *Status) bool { return s != nil && s.InSync })); err != nil {
					b.Fatal(err)
				}
			}
			var ln net.Listener
			l.in("pod-b", func() (err error) {
				ln, err = net.Listen("tcp", "10.77.2.2:0")
				return err
			})
			defer ln.Close()
			done := make(chan int64)
			go func() {
				c, err := ln.Accept()
				if err != nil {
					done <- 0
					return
				}
				n, _ := io.Copy(io.Discard, c)
				c.Close()
				done <- n
			}()
			var conn net.Conn
			l.in("pod-a", func() (err error) {
				conn, err = net.DialTimeout("tcp", ln.Addr().String(), 20*time.Second)
				return err
			})
			buf := make([]byte, 64<<10)
			b.SetBytes(int64(len(buf)))
			stopProfile := profileBenchmark(b)
			for b.Loop() {
				if _, err := conn.Write(buf); err != nil {
					b.Fatal(err)
				}
			}
			stopProfile()
			conn.Close()
			<-done
		})
	}
}

// profileKernel makes profileBenchmark profile: set in the VM, whose test
// binary is PID 1 and may profile the whole machine.
var profileKernel bool

// profileBenchmark starts a profile of the machine when profileKernel is
// set; the function it returns stops it, reports the shares of the
// cipher's and the checksums' functions as the benchmark's metrics
// (cipher-%, csum-%) and logs the busiest functions.
func profileBenchmark(b *testing.B) (stop func()) {
	if !profileKernel {
		return func() {}
	}
	s, err := kernelprofile.Start(250)
	if err != nil {
		b.Fatal(err)
	}
	return func() {
		p, err := s.Stop()
		if err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(100*p.Share(isCipher), "cipher-%")
		b.ReportMetric(100*p.Share(isChecksum), "csum-%")
		var top strings.Builder
		p.Print(&top, "  ", 12)
		b.Logf("the machine's profile:\n%s", top.String())
	}
}

// isCipher says whether a kernel function is WireGuard's cipher:
// ChaCha20's (chacha_permute, chacha_crypt_generic [libchacha], ...),
// Poly1305's, or the two's glue (chacha20poly1305_crypt_sg_inplace).
func isCipher(name string) bool {
	return strings.HasPrefix(name, "chacha") || strings.HasPrefix(name, "hchacha") || strings.HasPrefix(name, "poly1305")
}

// isChecksum says whether a kernel function computes the Internet
// checksum (csum_partial, csum_partial_copy_generic).
func isChecksum(name string) bool { return strings.HasPrefix(name, "csum_partial") }
