package vm

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strconv"
	"sync"

	"gvisor.dev/gvisor/pkg/buffer"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/adapters/gonet"
	"gvisor.dev/gvisor/pkg/tcpip/link/channel"
	"gvisor.dev/gvisor/pkg/tcpip/link/ethernet"
	"gvisor.dev/gvisor/pkg/tcpip/network/arp"
	"gvisor.dev/gvisor/pkg/tcpip/network/ipv4"
	"gvisor.dev/gvisor/pkg/tcpip/stack"
	"gvisor.dev/gvisor/pkg/tcpip/transport/tcp"
)

// HostPort is the launcher's own machine on the switch: a userspace
// TCP/IP stack (gVisor's netstack) with an address in the cluster network,
// plugged into the switch like a VM's NIC. Through it the host reaches
// every node at the node's real address, with no root, no tap device and
// no per-node port forwarding; Proxy offers it to other programs.
type HostPort struct {
	stack  *stack.Stack
	link   *channel.Endpoint
	conn   net.Conn
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

const hostNIC tcpip.NICID = 1

// AttachHost plugs a netstack with addr (an IPv4 address and the cluster
// network's prefix) and mac into the switch.
func AttachHost(sw *Switch, addr netip.Prefix, mac string) (*HostPort, error) {
	if !addr.Addr().Is4() {
		return nil, fmt.Errorf("host port: %v: only IPv4 is supported", addr)
	}
	hw, err := ParseMAC(mac)
	if err != nil {
		return nil, fmt.Errorf("host port: %w", err)
	}
	s := stack.New(stack.Options{
		NetworkProtocols:   []stack.NetworkProtocolFactory{ipv4.NewProtocol, arp.NewProtocol},
		TransportProtocols: []stack.TransportProtocolFactory{tcp.NewProtocol},
	})
	link := channel.New(512, 1500, tcpip.LinkAddress(hw[:]))
	if e := s.CreateNIC(hostNIC, ethernet.New(link)); e != nil {
		s.Close()
		return nil, fmt.Errorf("host port: creating the NIC: %s", e)
	}
	pa := tcpip.ProtocolAddress{
		Protocol:          ipv4.ProtocolNumber,
		AddressWithPrefix: tcpip.AddressWithPrefix{Address: tcpip.AddrFrom4(addr.Addr().As4()), PrefixLen: addr.Bits()},
	}
	if e := s.AddProtocolAddress(hostNIC, pa, stack.AddressProperties{}); e != nil {
		s.Close()
		return nil, fmt.Errorf("host port: adding %v: %s", addr, e)
	}
	subnet, err := tcpip.NewSubnet(tcpip.AddrFrom4(addr.Masked().Addr().As4()), tcpip.MaskFromBytes(net.CIDRMask(addr.Bits(), 32)))
	if err != nil {
		s.Close()
		return nil, fmt.Errorf("host port: %v: %w", addr, err)
	}
	s.SetRouteTable([]tcpip.Route{{Destination: subnet, NIC: hostNIC}})
	conn, err := net.Dial("unix", sw.Socket())
	if err != nil {
		s.Close()
		return nil, fmt.Errorf("host port: plugging into the switch: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	h := &HostPort{stack: s, link: link, conn: conn, cancel: cancel}
	h.wg.Add(2)
	go h.inbound()
	go h.outbound(ctx)
	return h, nil
}

// inbound hands the switch's frames to the stack.
func (h *HostPort) inbound() {
	defer h.wg.Done()
	var hdr [4]byte
	for {
		if _, err := io.ReadFull(h.conn, hdr[:]); err != nil {
			return
		}
		frame := make([]byte, binary.BigEndian.Uint32(hdr[:]))
		if _, err := io.ReadFull(h.conn, frame); err != nil {
			return
		}
		pkt := stack.NewPacketBuffer(stack.PacketBufferOptions{Payload: buffer.MakeWithData(frame)})
		h.link.InjectInbound(0, pkt)
		pkt.DecRef()
	}
}

// outbound sends the stack's frames to the switch.
func (h *HostPort) outbound(ctx context.Context) {
	defer h.wg.Done()
	for {
		pkt := h.link.ReadContext(ctx)
		if pkt == nil {
			return
		}
		v := pkt.ToView()
		frame := v.AsSlice()
		buf := make([]byte, 4+len(frame))
		binary.BigEndian.PutUint32(buf, uint32(len(frame)))
		copy(buf[4:], frame)
		v.Release()
		pkt.DecRef()
		if _, err := h.conn.Write(buf); err != nil {
			return
		}
	}
}

// DialContext opens a TCP connection to address (IP:port) in the cluster
// network. network must be "tcp" or "tcp4".
func (h *HostPort) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	if network != "tcp" && network != "tcp4" {
		return nil, fmt.Errorf("host port: dialing %s %s: only tcp is supported", network, address)
	}
	ap, err := netip.ParseAddrPort(address)
	if err != nil || !ap.Addr().Is4() {
		return nil, fmt.Errorf("host port: dialing %q: want an IPv4 address and port", address)
	}
	c, err := gonet.DialContextTCP(ctx, h.stack, tcpip.FullAddress{NIC: hostNIC, Addr: tcpip.AddrFrom4(ap.Addr().As4()), Port: ap.Port()}, ipv4.ProtocolNumber)
	if err != nil {
		return nil, fmt.Errorf("host port: dialing %s: %w", address, err)
	}
	return c, nil
}

// Listen accepts TCP connections on port of the host port's address (tests
// use it to stand in for a node).
func (h *HostPort) Listen(port uint16) (net.Listener, error) {
	l, err := gonet.ListenTCP(h.stack, tcpip.FullAddress{NIC: hostNIC, Port: port}, ipv4.ProtocolNumber)
	if err != nil {
		return nil, fmt.Errorf("host port: listening on port %s: %w", strconv.Itoa(int(port)), err)
	}
	return l, nil
}

// Close unplugs the host port and stops its stack.
func (h *HostPort) Close() error {
	h.cancel()
	err := h.conn.Close()
	h.wg.Wait()
	h.stack.Close()
	h.stack.Wait()
	return err
}
