package main

import (
	"net"

	"golang.org/x/sys/unix"
)

// senderInfo is what the kernel knows of a sending connection: whether
// losses (retransmissions) or the congestion window limited it. Empty
// when the kernel does not say.
func senderInfo(c *net.TCPConn) map[string]any {
	raw, err := c.SyscallConn()
	if err != nil {
		return nil
	}
	var info *unix.TCPInfo
	raw.Control(func(fd uintptr) {
		info, err = unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO)
	})
	if err != nil || info == nil {
		return nil
	}
	return map[string]any{"retrans": info.Total_retrans, "cwnd": info.Snd_cwnd, "mss": info.Snd_mss, "srtt_us": info.Rtt}
}
