package image

import (
	"bytes"
	"context"
	"debug/elf"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestVmlinuxFromDebianKernel takes the ELF kernel out of the bzImage the
// image boots (fetched into the user's cache like any build does) and
// checks what qemu will rely on: the stream's CRC matched (or the call
// fails), it is an x86-64 ELF with a PVH entry point, and its entry code
// is intact. A damaged payload is refused.
func TestVmlinuxFromDebianKernel(t *testing.T) {
	cache, err := os.UserCacheDir()
	if err != nil {
		t.Skip("no cache directory:", err)
	}
	dir := filepath.Join(cache, "polis", "image")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	unlock, err := lockCache(dir, t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	k, err := fetchKernel(ctx, KernelPackage, filepath.Join(dir, "kernel"), t.Logf)
	unlock()
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("fetching the kernel package: %v", err)
		}
		t.Skipf("the kernel package is not at hand (%v); skipping", err)
	}
	bz, err := os.ReadFile(k.Image)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	v, err := vmlinuxFromBzImage(bz)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s: %d bytes compressed, %d decompressed in %v", filepath.Base(k.Image), len(bz), len(v), time.Since(start))
	f, err := elf.NewFile(bytes.NewReader(v))
	if err != nil {
		t.Fatal(err)
	}
	if f.Type != elf.ET_EXEC || f.Machine != elf.EM_X86_64 {
		t.Errorf("got an ELF %v for %v, want an executable for x86-64", f.Type, f.Machine)
	}
	if !bytes.Contains(v, []byte("Linux version "+k.Release)) {
		t.Errorf("the decompressed kernel does not carry its banner for %s", k.Release)
	}

	off, n, err := bzImagePayload(bz)
	if err != nil {
		t.Fatal(err)
	}
	damaged := bytes.Clone(bz)
	damaged[off+n/2] ^= 0x40
	if _, err := vmlinuxFromBzImage(damaged); err == nil {
		t.Error("a kernel with a damaged payload was accepted")
	}
}

func TestVmlinuxRefusesWhatIsNotABzImage(t *testing.T) {
	for name, in := range map[string][]byte{
		"empty":    nil,
		"ELF":      append([]byte("\x7fELF"), make([]byte, 1024)...),
		"zeroes":   make([]byte, 4096),
		"not XZ":   fakeBzImage([]byte("\x1f\x8b\x08\x00 gzip, not xz, as some kernels are built")),
		"short XZ": fakeBzImage([]byte{0xfd, '7', 'z', 'X', 'Z', 0, 0, 1}),
	} {
		if _, err := vmlinuxFromBzImage(in); err == nil {
			t.Errorf("%s: accepted", name)
		} else if !strings.Contains(err.Error(), "bzImage") && !strings.Contains(err.Error(), "XZ") {
			t.Errorf("%s: the error %q says neither what was expected nor what was found", name, err)
		}
	}
}

// fakeBzImage is a setup header (boot protocol 2.15) whose payload is p.
func fakeBzImage(p []byte) []byte {
	b := make([]byte, 5*512)
	b[0x1f1] = 4
	copy(b[0x202:], "HdrS")
	b[0x206], b[0x207] = 0x0f, 0x02
	b[0x24c] = byte(len(p)) // payload_length; payload_offset 0
	return append(b, p...)
}

func TestDecodeX86BCJ(t *testing.T) {
	buf := []byte{
		0x90,
		0xe8, 0x06, 0x01, 0x00, 0x00, // CALL at 1: absolute 0x106 is relative 0x100
		0xe9, 0x01, 0x00, 0x00, 0x00, // JMP at 6: absolute 1 is relative -10
		0xe8, 0x11, 0x22, 0x33, 0x44, // top byte 0x44: not a near branch, kept
		0x90, 0x90, 0x90, 0x90,
	}
	want := []byte{
		0x90,
		0xe8, 0x00, 0x01, 0x00, 0x00,
		0xe9, 0xf6, 0xff, 0xff, 0xff,
		0xe8, 0x11, 0x22, 0x33, 0x44,
		0x90, 0x90, 0x90, 0x90,
	}
	decodeX86BCJ(buf, 0)
	if !bytes.Equal(buf, want) {
		t.Errorf("decoded\n%x\nwant\n%x", buf, want)
	}
}
