package pid1

import (
	"bytes"
	"encoding/binary"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/polis-os/polis/node/diskseal"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestParseCommandLine(t *testing.T) {
	p, args, err := parseCommandLine("console=ttyS0 panic=-1 polis.address=10.77.0.2/24 polis.lease-ttl=3s quiet polis.curator-port=7001 polis.kubernetes-registry=docker.io=http://10.77.0.254:5000 polis.kubernetes-registry=demo.local=http://10.77.0.254:5000\n")
	if err != nil || p.String() != "10.77.0.2/24" {
		t.Fatalf("parseCommandLine = %v, %v; want 10.77.0.2/24", p, err)
	}
	if want := []string{"--lease-ttl", "3s", "--curator-port", "7001", "--kubernetes-registry", "docker.io=http://10.77.0.254:5000", "--kubernetes-registry", "demo.local=http://10.77.0.254:5000"}; !slices.Equal(args, want) {
		t.Errorf("agent arguments %q, want %q", args, want)
	}
	for _, tc := range []struct{ cmdline, want string }{
		{"console=ttyS0", AddressParameter},
		{"polis.address=10.77.0.2", AddressParameter},
		{"polis.address=0.0.0.0/0", AddressParameter},
		{"polis.address=x/24", AddressParameter},
		{"polis.address=10.77.0.2/24 polis.lease_ttl=3s", "unknown parameter polis.lease_ttl"},
		{"polis.address=10.77.0.2/24 polis.storage=/", "unknown parameter polis.storage"},
		{"polis.address=10.77.0.2/24 polis.lease-ttl", "polis.lease-ttl has no value"},
	} {
		if _, _, err := parseCommandLine(tc.cmdline); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("parseCommandLine(%q): %v, want an error naming %s", tc.cmdline, err, tc.want)
		}
	}
	// The disk benchmark's parameter is not the agent's.
	const bench = "polis.address=10.77.0.2/24 polis.diskbench=no-workqueue polis.diskbench-start=1800000000"
	if _, args, err := parseCommandLine(bench); err != nil || len(args) != 0 {
		t.Errorf("parseCommandLine(%q) = %q, %v", bench, args, err)
	}
	for cmdline, want := range map[string]string{"polis.diskbench=no-workqueue": DiskBenchNoWorkqueue, "polis.diskbench=default": DiskBenchDefault, "quiet": ""} {
		if got, start, err := diskBenchMode(cmdline); err != nil || got != want || !start.IsZero() {
			t.Errorf("diskBenchMode(%q) = %q, %v, %v; want %q", cmdline, got, start, err, want)
		}
	}
	if _, start, err := diskBenchMode("polis.diskbench=default polis.diskbench-start=1800000000"); err != nil || start.Unix() != 1800000000 {
		t.Errorf("diskBenchMode with a start: %v, %v", start, err)
	}
	for _, bad := range []string{"polis.diskbench=fast", "polis.diskbench-start=soon"} {
		if _, _, err := diskBenchMode(bad); err == nil {
			t.Errorf("diskBenchMode(%q) accepted it", bad)
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

// TestFormatData formats a blank data disk of the launcher's size as the
// agent does on a first boot: it is ext4, labelled, and has one inode per
// dataInodeRatio bytes, not the formatter's default of eight times as
// many, whose tables cost seconds to write under TCG.
func TestFormatData(t *testing.T) {
	const size = 2 << 30
	p := filepath.Join(t.TempDir(), "data.img")
	f, err := os.Create(p)
	if err == nil {
		err = f.Truncate(size)
	}
	if err == nil {
		err = f.Close()
	}
	if err != nil {
		t.Fatal(err)
	}
	if err := format(p, "ext4", "polis-data"); err != nil {
		t.Fatal(err)
	}
	if kind, err := probe(p); err != nil || kind != "ext4" {
		t.Fatalf("probe after formatting = %q, %v; want ext4", kind, err)
	}
	sb := make([]byte, 1024)
	f, err = os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.ReadAt(sb, 1024); err != nil {
		t.Fatal(err)
	}
	// The superblock: s_inodes_count at 0, s_volume_name at 120.
	if got, want := binary.LittleEndian.Uint32(sb[0:]), uint32(size/dataInodeRatio); got != want {
		t.Errorf("inodes: %d, want %d (one per %d bytes)", got, want, dataInodeRatio)
	}
	if got := string(bytes.TrimRight(sb[120:136], "\x00")); got != "polis-data" {
		t.Errorf("label %q, want polis-data", got)
	}
}

func TestHostname(t *testing.T) {
	for addr, want := range map[string]string{"10.77.0.2": "polis-10-77-0-2", "fd00::1": "polis-fd00--1"} {
		if got := Hostname(netip.MustParseAddr(addr)); got != want {
			t.Errorf("Hostname(%s) = %s, want %s", addr, got, want)
		}
	}
}

// TestDataSealingNames: Machine.DataSealing is the header's Sealing by
// name, and the agent maps these names to its status (cmd/polis-node).
func TestDataSealingNames(t *testing.T) {
	if diskseal.SealingSoftware.String() != DataSealingSoftware || diskseal.SealingTPM.String() != DataSealingTPM {
		t.Fatalf("diskseal's names %q, %q differ from DataSealing's %q, %q", diskseal.SealingSoftware, diskseal.SealingTPM, DataSealingSoftware, DataSealingTPM)
	}
}
