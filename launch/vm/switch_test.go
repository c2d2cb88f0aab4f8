package vm

import (
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"testing"
	"time"

	"github.com/polis-os/polis/internal/testutil"
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

// expect fails the test unless n's next frame, within 10 s, carries want;
// failure is the message, with %q for what came instead ("" for
// nothing).
func (n *nic) expect(want, failure string) {
	n.t.Helper()
	if got := n.recv(10 * time.Second); got != want {
		n.t.Fatalf(failure, got)
	}
}

// plugged is a switch, closed as the test ends, with n ports it has
// accepted, for the MACs 52:54:00:00:00:0a, 0b, and so on.
func plugged(t *testing.T, n int) (*Switch, []*nic) {
	t.Helper()
	s, err := NewSwitch(filepath.Join(t.TempDir(), "sw.sock"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	var nics []*nic
	for i := range n {
		nics = append(nics, plug(t, s, fmt.Sprintf("52:54:00:00:00:%02x", 0x0a+i)))
	}
	waitPorts(t, s, n)
	return s, nics
}

// waitPorts waits until the switch has accepted n ports: a dial returns
// before the switch accepted it.
func waitPorts(t *testing.T, s *Switch, n int) {
	t.Helper()
	testutil.Eventually(t, 10*time.Second, fmt.Sprintf("the switch accepting %d ports", n), func() error {
		s.mu.Lock()
		have := len(s.ports)
		s.mu.Unlock()
		if have != n {
			return fmt.Errorf("it has %d", have)
		}
		return nil
	})
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
	s, nics := plugged(t, 3)
	a, b, c := nics[0], nics[1], nics[2]

	// A broadcast reaches every other port, and teaches the switch
	// where each sender is.
	for _, n := range []*nic{a, b, c} {
		n.send(broadcast, "hello")
		for _, o := range []*nic{a, b, c} {
			if o != n {
				o.expect("hello", "broadcast: got %q")
			}
		}
	}
	// Unicast goes to the learned port only.
	a.send(b.mac, "to b")
	b.expect("to b", "unicast: b got %q")
	// c must not see it: c's next frame is the marker sent after it.
	b.send(c.mac, "marker")
	c.expect("marker", "c saw %q before the marker: a unicast to b leaked")

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
	b.expect("bcast", "b got %q; want only c's broadcast")
	// b's unicast to a was forwarded (or dropped) before b's next frame.
	b.send(c.mac, "b marker")
	c.expect("b marker", "c got %q, want b's marker")
	if err := s.Reconnect("52:54:00:00:00:0a"); err != nil {
		t.Fatal(err)
	}
	// Positive controls: the same paths carry frames now.
	b.send(a.mac, "to a, reconnected")
	a.expect("to a, reconnected", "a's first frame after Reconnect is %q: a frame sent to it while it was cut got through")
	c.send(broadcast, "bcast, reconnected")
	a.expect("bcast, reconnected", "a got %q, want the broadcast sent after Reconnect")
	b.expect("bcast, reconnected", "b got %q, want the broadcast sent after Reconnect")
	a.send(b.mac, "back")
	b.expect("back", "b's first frame from a after Reconnect is %q: a frame the cut machine sent got through")
	a.send(broadcast, "a bcast, reconnected")
	for _, o := range []*nic{b, c} {
		o.expect("a bcast, reconnected", "got %q, want a's broadcast sent after Reconnect: one sent while cut got through")
	}

	// CutExcept: a reaches c only; b and a do not reach each other.
	if err := s.CutExcept("52:54:00:00:00:0a", "52:54:00:00:00:0c"); err != nil {
		t.Fatal(err)
	}
	a.send(b.mac, "a to b, partitioned")
	a.send(c.mac, "a to c, partitioned")
	c.expect("a to c, partitioned", "c got %q, want a's unicast: CutExcept cut a from c too")
	b.send(broadcast, "b bcast, partitioned")
	c.expect("b bcast, partitioned", "c got %q, want b's broadcast")
	c.send(broadcast, "c bcast, partitioned")
	for _, o := range []*nic{a, b} {
		o.expect("c bcast, partitioned", "got %q, want c's broadcast: the partition dropped it, or let b's through to a")
	}
	if err := s.Reconnect("52:54:00:00:00:0a"); err != nil {
		t.Fatal(err)
	}
	a.send(b.mac, "a to b, whole")
	b.expect("a to b, whole", "b's next frame from a is %q: one sent across the partition got through")

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
	_, nics := plugged(t, 2)
	a, b := nics[0], nics[1]
	const long = 10 * time.Second
	a.send(broadcast, "learn a")
	b.expect("learn a", "b got %q")
	b.send(broadcast, "learn b")
	a.expect("learn b", "a got %q")
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
	s, nics := plugged(t, 2)
	a, b := nics[0], nics[1]
	const long = 10 * time.Second

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
	b.expect("a hello", "b got %q")
	b.send(a.mac, "b to a")
	a.expect("b to a", "a got %q")
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
	a.expect("b again", "a got %q")
	expect("b again")

	untap()
	a.send(b.mac, "untapped")
	b.expect("untapped", "b got %q")
	expect()
	if s.taps.Load() != nil {
		t.Error("no taps left, but the switch still loads a list")
	}
}
