package vm

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/polis-os/polis/internal/testutil"
)

// TestCapture: every frame that crosses the switch is in the pcap file, in
// order, readable as pcap (header, then a record per frame), and the file
// is current while the capture runs, not only once it is closed.
func TestCapture(t *testing.T) {
	s, err := NewSwitch(filepath.Join(t.TempDir(), "sw.sock"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	path := filepath.Join(t.TempDir(), "wire.pcap")
	c, err := StartCapture(s, path)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	a, b := plug(t, s, "52:54:00:00:00:0a"), plug(t, s, "52:54:00:00:00:0b")
	waitPorts(t, s, 2)
	a.send(broadcast, "first")
	b.expect("first", "b got %q")
	b.send(a.mac, "second secret")
	a.expect("second secret", "a got %q")
	// Current while running: poll the file (with a deadline) for both.
	testutil.Eventually(t, 10*time.Second, "the running capture holding the frames sent", func() error {
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Contains(data, []byte("second secret")) {
			return fmt.Errorf("it holds %q", data)
		}
		return nil
	})
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("capture file mode: %v %v, want 0600", fi.Mode(), err)
	}
	if len(data) < 24 || binary.LittleEndian.Uint32(data) != 0xa1b2c3d4 || binary.LittleEndian.Uint32(data[20:]) != 1 {
		t.Fatalf("no pcap Ethernet header: % x", data[:min(len(data), 24)])
	}
	var payloads []string
	for rest := data[24:]; len(rest) > 0; {
		if len(rest) < 16 {
			t.Fatalf("a truncated record header: % x", rest)
		}
		n := binary.LittleEndian.Uint32(rest[8:])
		if orig := binary.LittleEndian.Uint32(rest[12:]); orig != n || int(n) > len(rest)-16 {
			t.Fatalf("record of %d bytes (original %d) in %d left", n, orig, len(rest)-16)
		}
		payloads = append(payloads, string(rest[16+14:16+n]))
		rest = rest[16+n:]
	}
	if len(payloads) != 2 || payloads[0] != "first" || payloads[1] != "second secret" {
		t.Errorf("captured %q, want the two frames in order", payloads)
	}
	// Closed: frames are no longer taken (and a late one does not panic).
	a.send(b.mac, "after")
	b.expect("after", "b got %q")
	if err := c.Close(); err != nil {
		t.Errorf("a second Close: %v", err)
	}
}
