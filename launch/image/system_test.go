package image

import (
	"bytes"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/diskfs/go-diskfs/backend/file"
	"github.com/diskfs/go-diskfs/filesystem/squashfs"

	"github.com/polis-os/polis/node/pid1"
)

// systemTree writes a small tree laid out like /system.
func systemTree(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	for _, f := range []struct {
		path string
		mode fs.FileMode
		data string
	}{
		{"bin/polis-kube", 0o755, "#!kubelet and friends\n"},
		{"bin/runc", 0o755, strings.Repeat("runc", 100_000)}, // several data blocks
		{"cni/bin/bridge", 0o755, "bridge"},
		{"images/pause.tar", 0o644, "a tar"},
		{"ro/readme", 0o600, "owner only"},
	} {
		p := filepath.Join(dir, filepath.FromSlash(f.path))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(f.data), f.mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, f.mode); err != nil {
			t.Fatal(err)
		}
	}
	// A read-only directory: the builder must still fill it.
	if err := os.Chmod(filepath.Join(dir, "ro"), 0o555); err != nil {
		t.Fatal(err)
	}
	return dir
}

// readSquashfs opens a squashfs image with go-diskfs' reader.
func readSquashfs(t *testing.T, p string) *squashfs.FileSystem {
	t.Helper()
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	st, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	sq, err := squashfs.Read(file.New(f, true), st.Size(), 0, 0)
	if err != nil {
		t.Fatalf("reading %s back as squashfs: %v", p, err)
	}
	return sq
}

// TestSystemDisk builds a system disk from a small tree and reads it back:
// the same files, contents and permissions, owned by root, with
// the disk's ID; a rebuild with nothing changed keeps the disk, a changed
// file makes a new one.
func TestSystemDisk(t *testing.T) {
	dir := systemTree(t)
	out := t.TempDir()
	img := &Image{}
	reused, err := systemDisk(dir, img, out, t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	if reused || img.System != filepath.Join(out, "system.squashfs") || len(img.SystemID) != 64 {
		t.Fatalf("first build: reused %v, disk %q, ID %q", reused, img.System, img.SystemID)
	}
	head := make([]byte, 4)
	if f, err := os.Open(img.System); err != nil {
		t.Fatal(err)
	} else {
		_, err = f.Read(head)
		f.Close()
		if err != nil || string(head) != "hsqs" {
			t.Fatalf("the disk starts with %q (%v), not squashfs' magic hsqs", head, err)
		}
	}

	if st, err := os.Stat(img.System); err != nil || st.Size()%4096 != 0 {
		t.Errorf("the disk's size is %d (%v), not whole 4 KiB: the kernel would not see its end", st.Size(), err)
	}
	sq := readSquashfs(t, img.System)
	for _, f := range []struct {
		path string
		mode fs.FileMode
		data string
	}{
		{"bin/polis-kube", 0o755, "#!kubelet and friends\n"},
		{"bin/runc", 0o755, strings.Repeat("runc", 100_000)},
		{"cni/bin/bridge", 0o755, "bridge"},
		{"images/pause.tar", 0o644, "a tar"},
		{"ro/readme", 0o600, "owner only"},
		{strings.TrimPrefix(pid1.SystemIDPath, pid1.SystemRoot+"/"), 0o444, img.SystemID + "\n"},
	} {
		b, err := sq.ReadFile(f.path)
		if err != nil {
			t.Errorf("%s: %v", f.path, err)
			continue
		}
		if string(b) != f.data {
			t.Errorf("%s holds %d bytes, not the %d written", f.path, len(b), len(f.data))
		}
		st, err := sq.Stat(f.path)
		if err != nil {
			t.Fatal(err)
		}
		if st.Mode().Perm() != f.mode || !st.Mode().IsRegular() {
			t.Errorf("%s: mode %v, want a regular file %v", f.path, st.Mode(), f.mode)
		}
		if s, ok := st.Sys().(*squashfs.StatT); !ok || s.UID != 0 || s.GID != 0 {
			t.Errorf("%s: owner %+v, want root (0:0)", f.path, st.Sys())
		}
	}
	for d, mode := range map[string]fs.FileMode{".": 0o755, "bin": 0o755, "ro": 0o555} {
		st, err := sq.Stat(d)
		if err != nil {
			t.Fatal(err)
		}
		if !st.IsDir() || st.Mode().Perm() != mode {
			t.Errorf("directory %s: mode %v, want %v", d, st.Mode(), mode)
		}
	}

	// Nothing changed: the same disk, not rewritten.
	before, _ := os.Stat(img.System)
	again := &Image{}
	if reused, err := systemDisk(dir, again, out, t.Logf); err != nil || !reused || again.SystemID != img.SystemID {
		t.Fatalf("rebuild with nothing changed: reused %v, ID %.12s (was %.12s), %v", reused, again.SystemID, img.SystemID, err)
	}
	if after, _ := os.Stat(img.System); !os.SameFile(before, after) {
		t.Error("the unchanged disk was rewritten")
	}
	// One byte changed, at the same size: a new disk with a new ID.
	if err := os.WriteFile(filepath.Join(dir, "cni", "bin", "bridge"), []byte("Bridge"), 0o755); err != nil {
		t.Fatal(err)
	}
	changed := &Image{}
	if reused, err := systemDisk(dir, changed, out, t.Logf); err != nil || reused || changed.SystemID == img.SystemID {
		t.Fatalf("rebuild after a change: reused %v, ID %.12s (was %.12s), %v", reused, changed.SystemID, img.SystemID, err)
	}
	if b, err := readSquashfs(t, changed.System).ReadFile("cni/bin/bridge"); err != nil || !bytes.Equal(b, []byte("Bridge")) {
		t.Errorf("the rebuilt disk holds %q, %v; want the changed file", b, err)
	}
	// A mode change alone is a change too.
	if err := os.Chmod(filepath.Join(dir, "images", "pause.tar"), 0o600); err != nil {
		t.Fatal(err)
	}
	if reused, err := systemDisk(dir, &Image{}, out, t.Logf); err != nil || reused {
		t.Errorf("rebuild after a mode change: reused %v, %v", reused, err)
	}
}

// TestSystemDiskRefuses: what a system disk cannot hold is named, and
// nothing is written.
func TestSystemDiskRefuses(t *testing.T) {
	for name, setup := range map[string]func(dir string) error{
		"a named pipe": func(dir string) error { return syscall.Mkfifo(filepath.Join(dir, "bin", "fifo"), 0o644) },
		"a symlink":    func(dir string) error { return os.Symlink("polis-kube", filepath.Join(dir, "bin", "kubelet")) },
		"its own ID": func(dir string) error {
			return os.WriteFile(filepath.Join(dir, filepath.Base(pid1.SystemIDPath)), nil, 0o644)
		},
	} {
		t.Run(name, func(t *testing.T) {
			dir := systemTree(t)
			if err := setup(dir); err != nil {
				t.Fatal(err)
			}
			out := t.TempDir()
			_, err := systemDisk(dir, &Image{}, out, t.Logf)
			if err == nil {
				t.Fatal("the system disk was built")
			}
			t.Logf("refused: %v", err)
			if ents, _ := os.ReadDir(out); len(ents) != 0 {
				t.Errorf("files left in the output directory: %v", ents)
			}
		})
	}
	if _, err := systemDisk(filepath.Join(t.TempDir(), "missing"), &Image{}, t.TempDir(), t.Logf); err == nil {
		t.Error("a missing tree made a system disk")
	}
}

// BenchmarkSystemDisk measures the system disk's build from a tree of real
// Go binaries (POLIS_BENCH_SYSTEM_TREE, default Go's own tool directory),
// written anew each time (cold) and found current (warm: the tree hashed,
// nothing written); it reports the tree's and the disk's sizes.
func BenchmarkSystemDisk(b *testing.B) {
	tree := os.Getenv("POLIS_BENCH_SYSTEM_TREE")
	if tree == "" {
		out, err := exec.Command("go", "env", "GOTOOLDIR").Output()
		if err != nil {
			b.Skip(err)
		}
		tree = strings.TrimSpace(string(out))
	}
	_, size, err := hashSystemTree(tree)
	if err != nil {
		b.Skip(err)
	}
	discard := func(string, ...any) {}
	b.Run("cold", func(b *testing.B) {
		var img *Image
		for b.Loop() {
			img = &Image{}
			if _, err := systemDisk(tree, img, b.TempDir(), discard); err != nil {
				b.Fatal(err)
			}
		}
		st, err := os.Stat(img.System)
		if err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(size)/1e6, "tree-MB")
		b.ReportMetric(float64(st.Size())/1e6, "disk-MB")
	})
	b.Run("warm", func(b *testing.B) {
		out := b.TempDir()
		if _, err := systemDisk(tree, &Image{}, out, discard); err != nil {
			b.Fatal(err)
		}
		for b.Loop() {
			if reused, err := systemDisk(tree, &Image{}, out, discard); err != nil || !reused {
				b.Fatalf("reused %v, %v", reused, err)
			}
		}
		b.ReportMetric(float64(size)/1e6, "tree-MB")
	})
}
