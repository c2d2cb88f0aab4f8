package vm

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
)

// Switch is a learning ethernet switch in the launcher's process, owned
// by one run: no root, no bridge or tap devices, nothing host-wide. Each
// VM's NIC reaches it through qemu's stream netdev on a unix socket,
// framing each ethernet frame with its length (4 bytes, big-endian).
//
// It forwards a frame to the port its destination MAC was last seen on,
// and floods broadcasts and unknown destinations. Cut isolates a machine
// (by its MAC) as an unplugged cable would: its frames are dropped both
// ways until Reconnect; CutExcept does the same but for the machines it
// names, a partition in which the machine still reaches some (the
// launcher, an operator on its side). A port whose queue is full drops
// frames instead of slowing the others down, as a real switch does. Tap
// shows a test every frame that crosses it.
type Switch struct {
	ln     *net.UnixListener
	socket string

	mu    sync.Mutex
	ports map[*port]bool
	where map[[6]byte]*port // learned: MAC → port
	// cut holds the machines cut off, each with the machines it still
	// reaches (none after Cut).
	cut  map[[6]byte]map[[6]byte]bool
	wg   sync.WaitGroup
	done bool

	// taps are the functions Tap added, replaced (never changed in place)
	// under mu; nil when there are none, so that a switch nobody taps pays
	// one atomic load per frame.
	taps atomic.Pointer[[]*tap]
}

type tap struct{ f func(frame []byte) }

type port struct {
	conn net.Conn
	out  chan []byte
	mac  [6]byte // the first source MAC seen on it
	has  bool
}

// portQueue is how many frames wait for a slow port before it drops them.
const portQueue = 512

// SwitchMTU is the MTU of the machines' NICs on a Switch: jumbo frames, as
// a data centre's or a cloud's network offers them, and six times fewer
// frames through qemu and this switch for the same bytes. The pod
// network takes its MTU from the link (clusternet.LinkMTU), so the VM
// suites run it at one other than a 1500-byte link's. It did not change
// the paths' throughput under TCG, which the emulated CPUs bound, not the
// frames (docs/benchmarks.md). The frames fit maxFrame.
const SwitchMTU = 9000

// maxFrame bounds a frame (jumbo frames included); a longer length is a
// broken peer, and its port is closed.
const maxFrame = 65536

// NewSwitch listens on socket (a unix socket path) and serves ports until
// Close.
func NewSwitch(socket string) (*Switch, error) {
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: socket, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("virtual switch: %w", err)
	}
	s := &Switch{ln: ln, socket: socket, ports: map[*port]bool{}, where: map[[6]byte]*port{}, cut: map[[6]byte]map[[6]byte]bool{}}
	s.wg.Add(1)
	go s.accept()
	return s, nil
}

// Socket is the path qemu connects to.
func (s *Switch) Socket() string { return s.socket }

func (s *Switch) accept() {
	defer s.wg.Done()
	for {
		c, err := s.ln.Accept()
		if err != nil {
			return
		}
		p := &port{conn: c, out: make(chan []byte, portQueue)}
		s.mu.Lock()
		if s.done {
			s.mu.Unlock()
			c.Close()
			return
		}
		s.ports[p] = true
		s.wg.Add(2)
		s.mu.Unlock()
		go s.read(p)
		go s.write(p)
	}
}

func (s *Switch) read(p *port) {
	defer s.wg.Done()
	defer s.drop(p)
	var hdr [4]byte
	for {
		if _, err := io.ReadFull(p.conn, hdr[:]); err != nil {
			return
		}
		n := binary.BigEndian.Uint32(hdr[:])
		if n < 14 || n > maxFrame {
			return
		}
		frame := make([]byte, n)
		if _, err := io.ReadFull(p.conn, frame); err != nil {
			return
		}
		s.forward(p, frame)
	}
}

func (s *Switch) write(p *port) {
	defer s.wg.Done()
	for f := range p.out {
		buf := make([]byte, 4+len(f))
		binary.BigEndian.PutUint32(buf, uint32(len(f)))
		copy(buf[4:], f)
		if _, err := p.conn.Write(buf); err != nil {
			p.conn.Close()
			for range p.out { // drain until drop closes it
			}
			return
		}
	}
}

// drop removes a port whose peer went away.
func (s *Switch) drop(p *port) {
	p.conn.Close()
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.ports[p] {
		return
	}
	delete(s.ports, p)
	for mac, q := range s.where {
		if q == p {
			delete(s.where, mac)
		}
	}
	close(p.out)
}

func (s *Switch) forward(from *port, frame []byte) {
	if taps := s.taps.Load(); taps != nil {
		for _, t := range *taps {
			t.f(frame)
		}
	}
	var dst, src [6]byte
	copy(dst[:], frame[0:6])
	copy(src[:], frame[6:12])
	s.mu.Lock()
	defer s.mu.Unlock()
	if !from.has {
		from.mac, from.has = src, true
	}
	if src != from.mac {
		// A second MAC behind one port (qemu's NIC has one): it is cut
		// when either is.
		if _, ok := s.cut[src]; ok {
			return
		}
	}
	s.where[src] = from
	send := func(p *port) {
		if p == from || (p.has && s.blocked(from.mac, p.mac)) || (!p.has && s.isCut(from.mac)) {
			return
		}
		select {
		case p.out <- frame:
		default: // the port is too slow: drop, as a switch does
		}
	}
	if dst[0]&1 == 0 { // unicast
		if p, ok := s.where[dst]; ok {
			send(p)
			return
		}
	}
	for p := range s.ports {
		send(p)
	}
}

// ParseMAC parses a MAC address such as 52:54:0a:4d:00:01.
func ParseMAC(mac string) ([6]byte, error) {
	hw, err := net.ParseMAC(mac)
	if err != nil || len(hw) != 6 {
		return [6]byte{}, fmt.Errorf("MAC address %q: want six bytes such as 52:54:00:12:34:56", mac)
	}
	return [6]byte(hw), nil
}

// blocked reports whether frames between the machines a and b are
// dropped; s.mu is held.
func (s *Switch) blocked(a, b [6]byte) bool {
	if reach, ok := s.cut[a]; ok && !reach[b] {
		return true
	}
	if reach, ok := s.cut[b]; ok && !reach[a] {
		return true
	}
	return false
}

// isCut reports whether mac is cut off from anyone; s.mu is held.
func (s *Switch) isCut(mac [6]byte) bool {
	_, ok := s.cut[mac]
	return ok
}

// Cut isolates the machine with the MAC: nothing it sends is forwarded,
// nothing is forwarded to it.
func (s *Switch) Cut(mac string) error { return s.CutExcept(mac) }

// CutExcept isolates the machine with the MAC from every machine but
// those in reach: a partition with the machine and reach on one side.
// It replaces an earlier Cut or CutExcept of the same machine.
func (s *Switch) CutExcept(mac string, reach ...string) error {
	hw, err := ParseMAC(mac)
	if err != nil {
		return err
	}
	keep := map[[6]byte]bool{}
	for _, r := range reach {
		o, err := ParseMAC(r)
		if err != nil {
			return err
		}
		keep[o] = true
	}
	s.mu.Lock()
	s.cut[hw] = keep
	s.mu.Unlock()
	return nil
}

// Reconnect undoes Cut and CutExcept.
func (s *Switch) Reconnect(mac string) error {
	hw, err := ParseMAC(mac)
	if err != nil {
		return err
	}
	s.mu.Lock()
	delete(s.cut, hw)
	s.mu.Unlock()
	return nil
}

// Tap makes the switch call f with every ethernet frame a port sends it,
// before the frame is forwarded: what crosses the wire, including frames
// that Cut then drops. It is how a test sees what the machines send each
// other (for example, that a marker never crosses in clear). f is called
// from the goroutine reading the port, concurrently for different ports,
// and holds up that port while it runs: it must be quick and safe for
// concurrent use. It must not modify the frame; it may keep it, since the
// switch never reuses a frame's bytes. untap removes f; a frame already
// being forwarded may still reach f while untap returns.
func (s *Switch) Tap(f func(frame []byte)) (untap func()) {
	t := &tap{f: f}
	s.mu.Lock()
	defer s.mu.Unlock()
	var taps []*tap
	if old := s.taps.Load(); old != nil {
		taps = append(taps, *old...)
	}
	taps = append(taps, t)
	s.taps.Store(&taps)
	return func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		old := s.taps.Load()
		if old == nil {
			return
		}
		var rest []*tap
		for _, o := range *old {
			if o != t {
				rest = append(rest, o)
			}
		}
		if len(rest) == 0 {
			s.taps.Store(nil)
			return
		}
		s.taps.Store(&rest)
	}
}

// Close stops the switch and disconnects every port.
func (s *Switch) Close() error {
	s.mu.Lock()
	s.done = true
	ports := make([]*port, 0, len(s.ports))
	for p := range s.ports {
		ports = append(ports, p)
	}
	s.mu.Unlock()
	err := s.ln.Close()
	for _, p := range ports {
		p.conn.Close()
	}
	s.wg.Wait()
	if errors.Is(err, net.ErrClosed) {
		err = nil
	}
	return err
}
