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

var broadcast = [6]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}

func TestSwitch(t *testing.T) {
	s, err := NewSwitch(filepath.Join(t.TempDir(), "sw.sock"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	a, b, c := plug(t, s, "52:54:00:00:00:0a"), plug(t, s, "52:54:00:00:00:0b"), plug(t, s, "52:54:00:00:00:0c")
	const long, short = 10 * time.Second, 200 * time.Millisecond
	// A dial returns before the switch accepted it; wait for the ports.
	for deadline := time.Now().Add(long); ; {
		s.mu.Lock()
		n := len(s.ports)
		s.mu.Unlock()
		if n == 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the switch has %d ports, want 3", n)
		}
		time.Sleep(time.Millisecond)
	}

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
	if err := s.Cut("52:54:00:00:00:0a"); err != nil {
		t.Fatal(err)
	}
	a.send(b.mac, "from cut a")
	b.send(a.mac, "to cut a")
	c.send(broadcast, "bcast")
	if got := b.recv(long); got != "bcast" {
		t.Fatalf("b got %q; want only c's broadcast", got)
	}
	if got := a.recv(short); got != "" {
		t.Fatalf("the cut machine received %q", got)
	}
	if err := s.Reconnect("52:54:00:00:00:0a"); err != nil {
		t.Fatal(err)
	}
	a.send(b.mac, "back")
	if got := b.recv(long); got != "back" {
		t.Fatalf("after Reconnect b got %q", got)
	}
	if err := s.Cut("not a mac"); err == nil {
		t.Error("Cut accepted a malformed MAC")
	}
}
