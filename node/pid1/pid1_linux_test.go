package pid1

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestParseAddress(t *testing.T) {
	p, err := parseAddress("console=ttyS0 panic=-1 polis.address=10.77.0.2/24 quiet\n")
	if err != nil || p.String() != "10.77.0.2/24" {
		t.Fatalf("parseAddress = %v, %v; want 10.77.0.2/24", p, err)
	}
	for _, bad := range []string{"console=ttyS0", "polis.address=10.77.0.2", "polis.address=0.0.0.0/0", "polis.address=x/24"} {
		if _, err := parseAddress(bad); err == nil || !strings.Contains(err.Error(), AddressParameter) {
			t.Errorf("parseAddress(%q): %v, want an error naming %s", bad, err, AddressParameter)
		}
	}
}

// TestProbe checks what PID 1 decides to do with a disk: only a blank one
// may be formatted.
func TestProbe(t *testing.T) {
	dir := t.TempDir()
	disk := func(name string, size int, set map[int][]byte) string {
		b := make([]byte, size)
		for off, v := range set {
			copy(b[off:], v)
		}
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	for _, tc := range []struct {
		path, want string
	}{
		{disk("blank", 2<<20, nil), "blank"},
		{disk("small-blank", 4096, nil), "blank"},
		{disk("ext4", 2<<20, map[int][]byte{1080: {0x53, 0xEF}}), "ext4"},
		{disk("fat32", 2<<20, map[int][]byte{82: []byte("FAT32   "), 510: {0x55, 0xAA}}), "vfat"},
		// Data past the first sector still makes a disk not blank.
		{disk("data", 2<<20, map[int][]byte{900 << 10: []byte("precious")}), "an unknown file system or data"},
	} {
		got, err := probe(tc.path)
		if err != nil || got != tc.want {
			t.Errorf("probe(%s) = %q, %v; want %q", filepath.Base(tc.path), got, err, tc.want)
		}
	}
	if _, err := probe(filepath.Join(dir, "missing")); err == nil {
		t.Error("probing a missing device succeeded")
	}
}
