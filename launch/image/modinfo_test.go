package image

import (
	"bytes"
	"encoding/binary"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// writeModule writes a minimal ELF64 relocatable file whose only content
// is a .modinfo section holding the given key=value strings, which is all
// of a kernel module the builder reads.
func writeModule(t *testing.T, dir, file string, info ...string) {
	t.Helper()
	var modinfo []byte
	for _, s := range info {
		modinfo = append(modinfo, s...)
		modinfo = append(modinfo, 0)
	}
	shstrtab := []byte("\x00.modinfo\x00.shstrtab\x00")
	const ehsize, shentsize = 64, 64
	modOff := ehsize
	strOff := modOff + len(modinfo)
	shOff := (strOff + len(shstrtab) + 7) &^ 7
	var b bytes.Buffer
	le := binary.LittleEndian
	b.Write([]byte{0x7f, 'E', 'L', 'F', 2 /* 64-bit */, 1 /* LE */, 1, 0})
	b.Write(make([]byte, 8))
	binary.Write(&b, le, uint16(1))  // ET_REL
	binary.Write(&b, le, uint16(62)) // EM_X86_64
	binary.Write(&b, le, uint32(1))
	binary.Write(&b, le, uint64(0))     // entry
	binary.Write(&b, le, uint64(0))     // phoff
	binary.Write(&b, le, uint64(shOff)) // shoff
	binary.Write(&b, le, uint32(0))     // flags
	binary.Write(&b, le, uint16(ehsize))
	binary.Write(&b, le, uint16(0)) // phentsize
	binary.Write(&b, le, uint16(0)) // phnum
	binary.Write(&b, le, uint16(shentsize))
	binary.Write(&b, le, uint16(3)) // shnum
	binary.Write(&b, le, uint16(2)) // shstrndx
	b.Write(modinfo)
	b.Write(shstrtab)
	b.Write(make([]byte, shOff-b.Len()))
	section := func(name, typ uint32, off, size int) {
		binary.Write(&b, le, name)
		binary.Write(&b, le, typ)
		binary.Write(&b, le, uint64(0)) // flags
		binary.Write(&b, le, uint64(0)) // addr
		binary.Write(&b, le, uint64(off))
		binary.Write(&b, le, uint64(size))
		binary.Write(&b, le, uint32(0)) // link
		binary.Write(&b, le, uint32(0)) // info
		binary.Write(&b, le, uint64(1)) // align
		binary.Write(&b, le, uint64(0)) // entsize
	}
	section(0, 0, 0, 0)
	section(1, 1 /* PROGBITS */, modOff, len(modinfo))
	section(10, 3 /* STRTAB */, strOff, len(shstrtab))
	p := filepath.Join(dir, filepath.FromSlash(file))
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}

// fixtureKernel is a modules tree shaped like the parts of Debian's that
// matter: a softdep through an alias two modules answer to, a module named
// differently from its file, a dependency built into the kernel.
func fixtureKernel(t *testing.T) string {
	dir := t.TempDir()
	writeModule(t, dir, "kernel/fs/ext4/ext4.ko", "name=ext4", "depends=mbcache,jbd2,crc16", "softdep=pre: crc32c", "alias=fs-ext4")
	writeModule(t, dir, "kernel/fs/jbd2/jbd2.ko", "name=jbd2", "depends=")
	writeModule(t, dir, "kernel/fs/mbcache.ko", "name=mbcache", "depends=")
	writeModule(t, dir, "kernel/lib/crc16.ko", "name=crc16", "depends=")
	writeModule(t, dir, "kernel/arch/x86/crypto/crc32c-intel.ko", "alias=crypto-crc32c", "alias=crc32c", "depends=")
	writeModule(t, dir, "kernel/crypto/crc32c_generic.ko", "name=crc32c_generic", "alias=crypto-crc32c", "alias=crc32c", "depends=")
	writeModule(t, dir, "kernel/drivers/net/virtio_net.ko", "name=virtio_net", "depends=net_failover,virtio,virtio_ring", "alias=virtio:d00000001v*")
	writeModule(t, dir, "kernel/drivers/net/net_failover.ko", "name=net_failover", "depends=failover")
	writeModule(t, dir, "kernel/net/core/failover.ko", "name=failover", "depends=")
	writeModule(t, dir, "kernel/drivers/virtio/virtio.ko", "name=virtio", "depends=")
	writeModule(t, dir, "kernel/drivers/virtio/virtio_ring.ko", "name=virtio_ring", "depends=virtio")
	writeModule(t, dir, "kernel/drivers/misc/loop_a.ko", "name=loop_a", "depends=loop_b")
	writeModule(t, dir, "kernel/drivers/misc/loop_b.ko", "name=loop_b", "depends=loop_a")
	writeModule(t, dir, "kernel/drivers/misc/needs_builtin.ko", "name=needs_builtin", "depends=unix", "softdep=pre: nothing_here post: ext4")
	if err := os.WriteFile(filepath.Join(dir, "modules.builtin"), []byte("kernel/net/unix/unix.ko\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

func resolveNames(t *testing.T, ix *ModuleIndex, wanted ...string) string {
	t.Helper()
	mods, err := ix.Resolve(wanted)
	if err != nil {
		t.Fatalf("Resolve(%q): %v", wanted, err)
	}
	var names []string
	for _, m := range mods {
		names = append(names, m.Name)
	}
	return strings.Join(names, " ")
}

func TestResolveFromModinfo(t *testing.T) {
	ix, err := IndexModules(fixtureKernel(t))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		wanted []string
		want   string
	}{
		// The softdep comes first and picks the generic crc32c; then the
		// hard dependencies in the order the module lists them.
		{[]string{"ext4"}, "crc32c_generic mbcache jbd2 crc16 ext4"},
		// Shared dependencies appear once, before their first user.
		{[]string{"virtio_net", "virtio_ring"}, "failover net_failover virtio virtio_ring virtio_net"},
		// A name with dashes, and a module wanted by alias.
		{[]string{"crc32c-intel", "fs-ext4"}, "crc32c_intel crc32c_generic mbcache jbd2 crc16 ext4"},
		// A built-in dependency needs nothing; an absent softdep is
		// skipped; post: softdeps are not pre-loads.
		{[]string{"needs_builtin"}, "needs_builtin"},
		{[]string{"unix"}, ""},
	} {
		if got := resolveNames(t, ix, tc.wanted...); got != tc.want {
			t.Errorf("Resolve(%q) = %q, want %q", tc.wanted, got, tc.want)
		}
	}
	m := ix.byName["crc32c_intel"]
	if m == nil || m.Path != "kernel/arch/x86/crypto/crc32c-intel.ko" {
		t.Errorf("a module without name= is named after its file: %+v", m)
	}
}

func TestResolveErrors(t *testing.T) {
	ix, err := IndexModules(fixtureKernel(t))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		wanted, errHas string
	}{
		{"no_such_module", "no module of that name or alias"},
		{"loop_a", "cycle: loop_a → loop_b → loop_a"},
	} {
		_, err := ix.Resolve([]string{tc.wanted})
		if err == nil || !strings.Contains(err.Error(), tc.errHas) {
			t.Errorf("Resolve(%q) error %v, want one containing %q", tc.wanted, err, tc.errHas)
		}
	}
	mods, _ := NewModuleIndex([]*Module{{Name: "a", Depends: []string{"missing"}}}, nil)
	if _, err := mods.Resolve([]string{"a"}); err == nil || !strings.Contains(err.Error(), "a depends on missing") {
		t.Errorf("a missing dependency: %v", err)
	}
}

func TestReadModuleRejectsNonModules(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "x.ko")
	if err := os.WriteFile(p, []byte("not an ELF file"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadModule(p, "x.ko"); err == nil || !strings.Contains(err.Error(), p) {
		t.Errorf("a non-ELF module: %v, want an error naming the file", err)
	}
	writeModule(t, dir, "bad.ko", "no equals sign")
	if _, err := ReadModule(filepath.Join(dir, "bad.ko"), "bad.ko"); err == nil || !strings.Contains(err.Error(), "not key=value") {
		t.Errorf("a malformed .modinfo: %v", err)
	}
}
