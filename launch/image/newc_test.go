package image

import (
	"bytes"
	"fmt"
	"io"
	"strconv"
	"testing"
)

// newcEntry is one entry read back from an archive.
type newcEntry struct {
	name  string
	mode  uint32
	nlink uint32
	rdev  [2]uint32
	data  []byte
}

// readNewc parses a newc archive independently of NewcWriter: every field,
// every padding byte and the trailer are checked.
func readNewc(t *testing.T, b []byte) []newcEntry {
	t.Helper()
	var out []newcEntry
	off := 0
	for {
		if off%4 != 0 {
			t.Fatalf("entry at offset %d is not 4-byte aligned", off)
		}
		if len(b)-off < 110 {
			t.Fatalf("archive ends at %d without a trailer", off)
		}
		h := b[off : off+110]
		if string(h[:6]) != "070701" {
			t.Fatalf("entry at %d: magic %q", off, h[:6])
		}
		field := func(i int) uint32 {
			v, err := strconv.ParseUint(string(h[6+8*i:14+8*i]), 16, 32)
			if err != nil {
				t.Fatalf("entry at %d, field %d: %v", off, i, err)
			}
			return uint32(v)
		}
		mode, nlink, size, namesize := field(1), field(4), int(field(6)), int(field(11))
		rdev := [2]uint32{field(9), field(10)}
		if field(2) != 0 || field(3) != 0 || field(5) != 0 {
			t.Errorf("entry at %d: uid, gid and mtime should be 0", off)
		}
		nameStart := off + 110
		name := b[nameStart : nameStart+namesize]
		if name[len(name)-1] != 0 {
			t.Fatalf("entry at %d: name not NUL-terminated", off)
		}
		dataStart := nameStart + namesize + pad4(110+namesize)
		for _, c := range b[nameStart+namesize : dataStart] {
			if c != 0 {
				t.Fatalf("entry %q: non-zero name padding", name)
			}
		}
		e := newcEntry{name: string(name[:len(name)-1]), mode: mode, nlink: nlink, rdev: rdev, data: b[dataStart : dataStart+size]}
		off = dataStart + size + pad4(size)
		if e.name == newcTrailer {
			if off != len(b) {
				t.Fatalf("%d bytes after the trailer", len(b)-off)
			}
			return out
		}
		out = append(out, e)
	}
}

func TestNewcRoundTrip(t *testing.T) {
	var buf bytes.Buffer
	w := NewNewcWriter(&buf)
	// Sizes 0..4 exercise every padding length of names and data.
	for i := range 5 {
		if err := w.WriteFile(fmt.Sprintf("lib/modules/m%s.ko", bytes.Repeat([]byte("x"), i)), 0o644, bytes.Repeat([]byte{byte('a' + i)}, i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.WriteFile("init", 0o755, []byte("#!agent")); err != nil {
		t.Fatal(err)
	}
	if err := w.Mkdir("dev", 0o755); err != nil {
		t.Fatal(err)
	}
	if err := w.Symlink("init", "sbin/init"); err != nil {
		t.Fatal(err)
	}
	if err := w.CharDevice("dev/console", 0o600, 5, 1); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	got := readNewc(t, buf.Bytes())
	var names []string
	for _, e := range got {
		names = append(names, e.name)
	}
	want := []string{"lib", "lib/modules", "lib/modules/m.ko", "lib/modules/mx.ko", "lib/modules/mxx.ko", "lib/modules/mxxx.ko", "lib/modules/mxxxx.ko", "init", "dev", "sbin", "sbin/init", "dev/console"}
	if fmt.Sprint(names) != fmt.Sprint(want) {
		t.Fatalf("entries %q, want %q (parents first, each once)", names, want)
	}
	byName := map[string]newcEntry{}
	for _, e := range got {
		byName[e.name] = e
	}
	if e := byName["lib/modules/mxxx.ko"]; string(e.data) != "ddd" || e.mode != newcTypeRegular|0o644 || e.nlink != 1 {
		t.Errorf("mxxx.ko: %+v", e)
	}
	if e := byName["init"]; string(e.data) != "#!agent" || e.mode != newcTypeRegular|0o755 {
		t.Errorf("init: %+v", e)
	}
	if e := byName["dev"]; e.mode != newcTypeDir|0o755 || len(e.data) != 0 {
		t.Errorf("dev: %+v", e)
	}
	if e := byName["dev/console"]; e.mode != newcTypeCharDev|0o600 || e.rdev != [2]uint32{5, 1} {
		t.Errorf("dev/console: %+v", e)
	}
	if e := byName["sbin/init"]; e.mode != newcTypeSymlink|0o777 || string(e.data) != "init" {
		t.Errorf("sbin/init: %+v", e)
	}
}

func TestNewcRejectsBadNames(t *testing.T) {
	w := NewNewcWriter(io.Discard)
	for _, name := range []string{"", "/init", "../x", "a/../../b", ".", "a//b"} {
		if err := w.WriteFile(name, 0o644, nil); err == nil {
			t.Errorf("WriteFile(%q) succeeded; want an error", name)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if err := w.WriteFile("late", 0o644, nil); err == nil {
		t.Error("WriteFile after Close succeeded")
	}
}
