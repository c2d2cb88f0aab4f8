package vm

import (
	"bufio"
	"encoding/binary"
	"io"
	"net"
	"net/netip"
	"time"
)

// SOCKS5 (RFC 1928), the part a client reaching nodes needs: no
// authentication (the proxy listens on loopback only), the CONNECT
// command, IPv4 and IPv6 addresses (nodes have no names to resolve).
const (
	socks5Version     = 5
	socks5NoAuth      = 0
	socks5NoMethod    = 0xff
	socks5Connect     = 1
	socks5IPv4        = 1
	socks5IPv6        = 4
	socks5OK          = 0
	socks5NotAllowed  = 2
	socks5Unreachable = 4
	socks5CmdNotSupp  = 7
	socks5AddrNotSupp = 8
)

// socks5 serves one SOCKS5 connection whose first bytes are in br.
func (p *Proxy) socks5(c net.Conn, br *bufio.Reader) {
	// Greeting: version, the methods the client offers.
	var hdr [2]byte
	if _, err := io.ReadFull(br, hdr[:]); err != nil {
		return
	}
	methods := make([]byte, hdr[1])
	if _, err := io.ReadFull(br, methods); err != nil {
		return
	}
	method := byte(socks5NoMethod)
	for _, m := range methods {
		if m == socks5NoAuth {
			method = socks5NoAuth
		}
	}
	if _, err := c.Write([]byte{socks5Version, method}); err != nil || method != socks5NoAuth {
		return
	}
	// Request: version, command, reserved, address type, address, port.
	var req [4]byte
	if _, err := io.ReadFull(br, req[:]); err != nil {
		return
	}
	reply := func(code byte) error {
		// The bound address is not meaningful here: all zeros.
		_, err := c.Write([]byte{socks5Version, code, 0, socks5IPv4, 0, 0, 0, 0, 0, 0})
		return err
	}
	if req[0] != socks5Version {
		return
	}
	var addr netip.Addr
	switch req[3] {
	case socks5IPv4:
		var b [4]byte
		if _, err := io.ReadFull(br, b[:]); err != nil {
			return
		}
		addr = netip.AddrFrom4(b)
	case socks5IPv6:
		var b [16]byte
		if _, err := io.ReadFull(br, b[:]); err != nil {
			return
		}
		addr = netip.AddrFrom16(b)
	default:
		// A name (type 3) or something else: the cluster network
		// has addresses only.
		reply(socks5AddrNotSupp)
		return
	}
	var port [2]byte
	if _, err := io.ReadFull(br, port[:]); err != nil {
		return
	}
	if req[1] != socks5Connect {
		reply(socks5CmdNotSupp)
		return
	}
	ap := netip.AddrPortFrom(addr, binary.BigEndian.Uint16(port[:]))
	if !p.network.Contains(ap.Addr().Unmap()) {
		reply(socks5NotAllowed)
		return
	}
	node, err := p.dialNode(ap)
	if err != nil {
		reply(socks5Unreachable)
		return
	}
	defer node.Close()
	if !p.track(node, true) { // ended by Close, as in tunnel
		return
	}
	defer p.track(node, false)
	if err := reply(socks5OK); err != nil {
		return
	}
	c.SetReadDeadline(time.Time{})
	splice(c, br, node)
}
