package test

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/polis-os/polis/launch/demoimage"
)

// checkPodToPod: each demo Pod reaches the other, on the other worker, by
// its Pod IP (the routes the curator's pod ranges and the nodes' WireGuard
// peers make), and the request, which carries a marker of this run in its
// path, never crossed the cluster switch in clear: the launcher's capture
// of the wire (polis-launch --capture) holds the registry's plain HTTP
// (so it does see clear text) and WireGuard datagrams between the
// workers, but not the marker.
func checkPodToPod(t *testing.T, kubectl func(args ...string) string, pods []corev1.Pod, capture string) {
	t.Helper()
	if len(pods) != 2 || pods[0].Spec.NodeName == pods[1].Spec.NodeName {
		t.Fatalf("want two demo Pods on different workers, have %d", len(pods))
	}
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	marker := "polis-wire-marker-" + hex.EncodeToString(b[:])
	for i, from := range pods {
		to := pods[1-i]
		url := fmt.Sprintf("http://%s:%d/%s", to.Status.PodIP, demoimage.Port, marker)
		if out := kubectl("exec", from.Name, "--", demoimage.Entrypoint, "get", url); !strings.Contains(out, "hello from "+to.Name) {
			t.Errorf("Pod %s on %s → Pod %s on %s at %s: %q, want hello from %s", from.Name, from.Spec.NodeName, to.Name, to.Spec.NodeName, url, out, to.Name)
		}
		if logs := kubectl("logs", to.Name); !strings.Contains(logs, marker) {
			t.Errorf("Pod %s's log does not show the request from %s:\n%s", to.Name, from.Name, logs)
		}
	}
	data, err := os.ReadFile(capture)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(data, []byte("/v2/")) {
		t.Errorf("the capture of the wire (%d bytes) holds no registry request in clear: it does not show what crosses the switch", len(data))
	}
	if n := wireGuardFrames(data); n == 0 {
		t.Errorf("the capture of the wire holds no WireGuard datagram (UDP port 51820): pod traffic did not go through the tunnel")
	} else {
		t.Logf("the capture holds %d WireGuard datagrams", n)
	}
	if bytes.Contains(data, []byte(marker)) {
		t.Errorf("the marker the Pods sent each other crossed the wire in clear (capture %s)", capture)
	}
}

// wireGuardFrames counts the IPv4 UDP frames to or from port 51820
// (clusternet's default) in a pcap capture.
func wireGuardFrames(pcap []byte) int {
	n := 0
	if len(pcap) < 24 {
		return 0
	}
	for rest := pcap[24:]; len(rest) >= 16; {
		size := int(uint32(rest[8]) | uint32(rest[9])<<8 | uint32(rest[10])<<16 | uint32(rest[11])<<24)
		if size > len(rest)-16 {
			break
		}
		f := rest[16 : 16+size]
		rest = rest[16+size:]
		// Ethernet IPv4, protocol UDP, a 20-byte header (the nodes
		// send no IP options).
		if len(f) < 14+20+8 || f[12] != 0x08 || f[13] != 0x00 || f[14+9] != 17 {
			continue
		}
		ihl := int(f[14]&0x0f) * 4
		if len(f) < 14+ihl+8 {
			continue
		}
		udp := f[14+ihl:]
		src, dst := int(udp[0])<<8|int(udp[1]), int(udp[2])<<8|int(udp[3])
		if src == 51820 || dst == 51820 {
			n++
		}
	}
	return n
}
