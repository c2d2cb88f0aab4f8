package vm

import (
	"encoding/binary"
	"io"
	"net"
	"path/filepath"
	"testing"
	"time"
)

// nic is a test end of a switch port, speaking qemu's stream framing.
type nic struct {
	t    *testing.T
	conn net.Conn
	mac  [6]byte
}

func plug(t *testing.T, s *Switch, mac string) *nic {
	t.Helper()
	c, err := net.Dial("unix", s.Socket())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	hw, err := ParseMAC(mac)
	if err != nil {
		t.Fatal(err)
	}
	return &nic{t: t, conn: c, mac: hw}
}

func (n *nic) send(dst [6]byte, payload string) {
	n.t.Helper()
	f := append(append(append([]byte{}, dst[:]...), n.mac[:]...), 0x08, 0x00)
	f = append(f, payload...)
	buf := binary.BigEndian.AppendUint32(nil, uint32(len(f)))
	if _, err := n.conn.Write(append(buf, f...)); err != nil {
		n.t.Fatal(err)
	}
}

// recv returns the payload of the next frame, or "" if none arrives
// within wait.
func (n *nic) recv(wait time.Duration) string {
	n.t.Helper()
	n.conn.SetReadDeadline(time.Now().Add(wait))
	var hdr [4]byte
	if _, err := io.ReadFull(n.conn, hdr[:]); err != nil {
		return ""
	}
	f := make([]byte, binary.BigEndian.Uint32(hdr[:]))
	if _, err := io.ReadFull(n.conn, f); err != nil {
		n.t.Fatal(err)
	}
	return string(f[14:])
}

// waitPorts waits until the switch has accepted n ports: a dial returns
// before the switch accepted it.
func waitPorts(t *testing.T, s *Switch, n int) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; {
		s.mu.Lock()
		have := len(s.ports)
		s.mu.Unlock()
		if have == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the switch has %d ports, want %d", have, n)
		}
		time.Sleep(time.Millisecond) // polling the switch's own state
	}
}

// flush returns once the switch has handled every frame n sent so far:
// it handles a port's frames in order, so once a tap saw a frame sent
// after them (to n itself, which goes nowhere), they were forwarded or
// dropped.
func flush(t *testing.T, s *Switch, n *nic) {
	t.Helper()
	seen := make(chan struct{}, 1)
	untap := s.Tap(func(f []byte) {
		if string(f[14:]) == "flush" && [6]byte(f[6:12]) == n.mac {
			seen <- struct{}{}
		}
	})
	defer untap()
	n.send(n.mac, "flush")
	select {
	case <-seen:
	case <-time.After(10 * time.Second):
		t.Fatal("the switch did not handle a port's frames")
	}
}

var broadcast = [6]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}

func TestSwitch(t *testing.T) {
	s, err := NewSwitch(filepath.Join(t.TempDir(), "sw.sock"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	a, b, c := plug(t, s, "52:54:00:00:00:0a"), plug(t, s, "52:54:00:00:00:0b"), plug(t, s, "52:54:00:00:00:0c")
	const long = 10 * time.Second
	waitPorts(t, s, 3)

	// A broadcast reaches every other port, and teaches the switch
	// where each sender is.
	for _, n := range []*nic{a, b, c} {
		n.send(broadcast, "hello")
		for _, o := range []*nic{a, b, c} {
			if o != n {
				if got := o.recv(long); got != "hello" {
					t.Fatalf("broadcast: got %q", got)
				}
			}
		}
	}
	// Unicast goes to the learned port only.
	a.send(b.mac, "to b")
	if got := b.recv(long); got != "to b" {
		t.Fatalf("unicast: b got %q", got)
	}
	// c must not see it: c's next frame is the marker sent after it.
	b.send(c.mac, "marker")
	if got := c.recv(long); got != "marker" {
		t.Fatalf("c saw %q before the marker: a unicast to b leaked", got)
	}

	// A cut machine neither sends nor receives, broadcast or unicast.
	// Silence proves nothing (a broken switch may just be slow), so each
	// check ends with a frame sent along the same path once reconnected:
	// it must be the first to arrive, so nothing sent during the cut was
	// forwarded ahead of it. Each port's frames are forwarded in the
	// order they were sent, and a forwarded frame is queued at once.
	if err := s.Cut("52:54:00:00:00:0a"); err != nil {
		t.Fatal(err)
	}
	a.send(b.mac, "from cut a")
	a.send(broadcast, "bcast from cut a")
	flush(t, s, a)
	b.send(a.mac, "to cut a")
	c.send(broadcast, "bcast")
	// c's broadcast reached b: it was forwarded, to a as well had a not
	// been cut.
	if got := b.recv(long); got != "bcast" {
		t.Fatalf("b got %q; want only c's broadcast", got)
	}
	// b's unicast to a was forwarded (or dropped) before b's next frame.
	b.send(c.mac, "b marker")
	if got := c.recv(long); got != "b marker" {
		t.Fatalf("c got %q, want b's marker", got)
	}
	if err := s.Reconnect("52:54:00:00:00:0a"); err != nil {
		t.Fatal(err)
	}
	// Positive controls: the same paths carry frames now.
	b.send(a.mac, "to a, reconnected")
	if got := a.recv(long); got != "to a, reconnected" {
		t.Fatalf("a's first frame after Reconnect is %q: a frame sent to it while it was cut got through", got)
	}
	c.send(broadcast, "bcast, reconnected")
	if got := a.recv(long); got != "bcast, reconnected" {
		t.Fatalf("a got %q, want the broadcast sent after Reconnect", got)
	}
	if got := b.recv(long); got != "bcast, reconnected" {
		t.Fatalf("b got %q, want the broadcast sent after Reconnect", got)
	}
	a.send(b.mac, "back")
	if got := b.recv(long); got != "back" {
		t.Fatalf("b's first frame from a after Reconnect is %q: a frame the cut machine sent got through", got)
	}
	a.send(broadcast, "a bcast, reconnected")
	for _, o := range []*nic{b, c} {
		if got := o.recv(long); got != "a bcast, reconnected" {
			t.Fatalf("got %q, want a's broadcast sent after Reconnect: one sent while cut got through", got)
		}
	}

	// CutExcept: a reaches c only; b and a do not reach each other.
	if err := s.CutExcept("52:54:00:00:00:0a", "52:54:00:00:00:0c"); err != nil {
		t.Fatal(err)
	}
	a.send(b.mac, "a to b, partitioned")
	a.send(c.mac, "a to c, partitioned")
	if got := c.recv(long); got != "a to c, partitioned" {
		t.Fatalf("c got %q, want a's unicast: CutExcept cut a from c too", got)
	}
	b.send(broadcast, "b bcast, partitioned")
	if got := c.recv(long); got != "b bcast, partitioned" {
		t.Fatalf("c got %q, want b's broadcast", got)
	}
	c.send(broadcast, "c bcast, partitioned")
	for _, o := range []*nic{a, b} {
		if got := o.recv(long); got != "c bcast, partitioned" {
			t.Fatalf("got %q, want c's broadcast: the partition dropped it, or let b's through to a", got)
		}
	}
	if err := s.Reconnect("52:54:00:00:00:0a"); err != nil {
		t.Fatal(err)
	}
	a.send(b.mac, "a to b, whole")
	if got := b.recv(long); got != "a to b, whole" {
		t.Fatalf("b's next frame from a is %q: one sent across the partition got through", got)
	}

	if err := s.Cut("not a mac"); err == nil {
		t.Error("Cut accepted a malformed MAC")
	}
	if err := s.CutExcept("52:54:00:00:00:0a", "nope"); err == nil {
		t.Error("CutExcept accepted a malformed MAC")
	}
}

// TestSwitchChecksFail: the cut checks above can fail. A switch that
// ignores Cut delivers frames sent during the cut ahead of the control
// frame, which the checks' way of reading sees.
func TestSwitchChecksFail(t *testing.T) {
	s, err := NewSwitch(filepath.Join(t.TempDir(), "sw.sock"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	a, b := plug(t, s, "52:54:00:00:00:0a"), plug(t, s, "52:54:00:00:00:0b")
	const long = 10 * time.Second
	waitPorts(t, s, 2)
	a.send(broadcast, "learn a")
	if got := b.recv(long); got != "learn a" {
		t.Fatalf("b got %q", got)
	}
	b.send(broadcast, "learn b")
	if got := a.recv(long); got != "learn b" {
		t.Fatalf("a got %q", got)
	}
	// No Cut: the frame "sent while cut" arrives before the control.
	b.send(a.mac, "to a, not cut")
	b.send(a.mac, "to a, control")
	if got := a.recv(long); got == "to a, control" {
		t.Fatal("the control frame overtook the frame sent before it: the cut checks could not fail")
	}
}

// TestSwitchTap: a tap sees every frame a port sends, before it is
// forwarded (so by the time the receiver has it, the tap has too),
// including frames a cut drops; after untap it sees nothing more.
func TestSwitchTap(t *testing.T) {
	s, err := NewSwitch(filepath.Join(t.TempDir(), "sw.sock"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	a, b := plug(t, s, "52:54:00:00:00:0a"), plug(t, s, "52:54:00:00:00:0b")
	const long = 10 * time.Second
	waitPorts(t, s, 2)

	seen := make(chan string, 64)
	untap := s.Tap(func(f []byte) { seen <- string(f[14:]) })
	untap2 := s.Tap(func([]byte) {}) // removing a second tap leaves the first
	untap2()
	expect := func(want ...string) {
		t.Helper()
		for _, w := range want {
			select {
			case got := <-seen:
				if got != w {
					t.Fatalf("the tap saw %q, want %q", got, w)
				}
			case <-time.After(long):
				t.Fatalf("the tap did not see %q", w)
			}
		}
		select {
		case got := <-seen:
			t.Fatalf("the tap saw %q, more than expected", got)
		default:
		}
	}

	a.send(broadcast, "a hello")
	if got := b.recv(long); got != "a hello" {
		t.Fatalf("b got %q", got)
	}
	b.send(a.mac, "b to a")
	if got := a.recv(long); got != "b to a" {
		t.Fatalf("a got %q", got)
	}
	expect("a hello", "b to a")

	// Frames a cut drops crossed the wire: the tap sees them. The switch
	// handles a port's frames one after the other, so once the tap saw
	// the next one (sent to b itself, which goes nowhere), the first was
	// dropped, and Reconnect cannot let it by.
	if err := s.Cut("52:54:00:00:00:0b"); err != nil {
		t.Fatal(err)
	}
	b.send(a.mac, "from cut b")
	b.send(b.mac, "to itself")
	expect("from cut b", "to itself")
	if err := s.Reconnect("52:54:00:00:00:0b"); err != nil {
		t.Fatal(err)
	}
	b.send(a.mac, "b again")
	if got := a.recv(long); got != "b again" {
		t.Fatalf("a got %q", got)
	}
	expect("b again")

	untap()
	a.send(b.mac, "untapped")
	if got := b.recv(long); got != "untapped" {
		t.Fatalf("b got %q", got)
	}
	expect()
	if s.taps.Load() != nil {
		t.Error("no taps left, but the switch still loads a list")
	}
}
