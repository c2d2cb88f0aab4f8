package localstorage

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

func newRoot(t *testing.T) *Root {
	t.Helper()
	r, err := New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Create(); err != nil {
		t.Fatal(err)
	}
	return r
}

func TestNewRefusesRelativeRoot(t *testing.T) {
	if _, err := New("relative/dir"); err == nil {
		t.Fatal("New accepted a relative root")
	}
}

func TestLayoutStaysUnderRoot(t *testing.T) {
	r := newRoot(t)
	files := []File{r.ESP.NodeParameters, r.ESP.SealedConfiguration, r.ESP.ClusterDirectory,
		r.Data.Node.Key, r.Data.Node.Certificate, r.Data.Node.CACertificate, r.Data.Roles}
	seen := map[string]bool{}
	for _, f := range files {
		if !strings.HasPrefix(f.Path, r.Dir+string(filepath.Separator)) {
			t.Errorf("%s is outside the root %s", f.Path, r.Dir)
		}
		if seen[f.Path] {
			t.Errorf("%s is used twice", f.Path)
		}
		seen[f.Path] = true
	}
	if !r.Data.Node.Key.Secret || !r.ESP.SealedConfiguration.Secret {
		t.Error("the node key and the sealed configuration must be secret")
	}
}

func TestCreateModes(t *testing.T) {
	dir := t.TempDir()
	r, err := New(dir)
	if err != nil {
		t.Fatal(err)
	}
	// A private directory that exists with loose permissions is tightened.
	if err := os.MkdirAll(r.Data.Path, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(r.Data.Path, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := r.Create(); err != nil {
		t.Fatal(err)
	}
	for _, d := range r.directories() {
		fi, err := os.Stat(d.Path)
		if err != nil {
			t.Fatal(err)
		}
		if d.Private && fi.Mode().Perm() != 0o700 {
			t.Errorf("%s has mode %v, want 0700", d.Path, fi.Mode().Perm())
		}
	}
	// Idempotent.
	if err := r.Create(); err != nil {
		t.Fatal(err)
	}
	// A file where a directory belongs is an error, not silently used.
	r2, _ := New(t.TempDir())
	if err := os.WriteFile(filepath.Join(r2.Dir, "data"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := r2.Create(); err == nil {
		t.Fatal("Create accepted a file in place of the data directory")
	}
}

func TestWriteIsAtomicAndSecret(t *testing.T) {
	r := newRoot(t)
	key := r.Data.Node.Key
	if ok, err := key.Exists(); err != nil || ok {
		t.Fatalf("Exists before writing = %v, %v", ok, err)
	}
	if _, err := key.Read(); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("Read of a missing file = %v, want ErrNotExist", err)
	}
	if err := key.Write([]byte("first")); err != nil {
		t.Fatal(err)
	}
	// Even over a file someone left world-readable, a secret ends up 0600.
	if err := os.Chmod(key.Path, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := key.Write([]byte("second")); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(key.Path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("secret written with mode %v", fi.Mode().Perm())
	}
	if b, err := key.Read(); err != nil || string(b) != "second" {
		t.Fatalf("Read = %q, %v", b, err)
	}
	entries, err := os.ReadDir(filepath.Dir(key.Path))
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 {
		t.Errorf("directory holds %d entries after writes, want only the file (no temporaries)", len(entries))
	}
	if ok, _ := key.Exists(); !ok {
		t.Error("Exists after writing = false")
	}
	if err := key.Remove(); err != nil {
		t.Fatal(err)
	}
	if err := key.Remove(); err != nil {
		t.Fatalf("removing a missing file: %v", err)
	}
}

// A write that cannot complete leaves the old content in place.
func TestFailedWriteKeepsOldContent(t *testing.T) {
	if os.Geteuid() == 0 {
		// root ignores directory permissions; make the rename fail instead
		// by replacing the target with a non-empty directory.
		r := newRoot(t)
		f := r.Data.Roles
		if err := os.MkdirAll(filepath.Join(f.Path, "x"), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := f.Write([]byte("new")); err == nil {
			t.Fatal("write over a directory succeeded")
		}
		if _, err := os.Stat(filepath.Join(f.Path, "x")); err != nil {
			t.Fatalf("the old content is gone: %v", err)
		}
		assertNoTemporaries(t, filepath.Dir(f.Path), 2) // node/ and roles.pb
		return
	}
	r := newRoot(t)
	f := r.Data.Roles
	if err := f.Write([]byte("old")); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(r.Data.Path, 0o500); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Chmod(r.Data.Path, 0o700) })
	if err := f.Write([]byte("new")); err == nil {
		t.Fatal("write into a read-only directory succeeded")
	}
	if b, _ := f.Read(); string(b) != "old" {
		t.Fatalf("content after a failed write = %q", b)
	}
}

func assertNoTemporaries(t *testing.T, dir string, want int) {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if strings.Contains(e.Name(), ".tmp-") {
			t.Errorf("temporary file %s left behind", e.Name())
		}
	}
	if len(entries) != want {
		t.Errorf("%s holds %d entries, want %d", dir, len(entries), want)
	}
}

func TestProto(t *testing.T) {
	r := newRoot(t)
	f := r.ESP.ClusterDirectory
	if err := f.WriteProto(wrapperspb.String("curators")); err != nil {
		t.Fatal(err)
	}
	var got wrapperspb.StringValue
	if err := f.ReadProto(&got); err != nil || got.Value != "curators" {
		t.Fatalf("ReadProto = %v, %v", got.Value, err)
	}
	if err := f.Write([]byte{0xff, 0xff, 0xff}); err != nil {
		t.Fatal(err)
	}
	err := f.ReadProto(&got)
	if err == nil || !strings.Contains(err.Error(), f.Path) {
		t.Fatalf("ReadProto of garbage = %v, want an error naming the file", err)
	}
}

func TestUnsealed(t *testing.T) {
	r := newRoot(t)
	f := r.ESP.SealedConfiguration
	if err := WriteSealed(f, Unsealed{}, []byte("join credentials")); err != nil {
		t.Fatal(err)
	}
	raw, _ := f.Read()
	if !bytes.HasPrefix(raw, []byte("POLIS-UNSEALED-INSECURE")) {
		t.Fatalf("unsealed file does not say it is insecure: %q", raw)
	}
	got, err := ReadSealed(f, Unsealed{})
	if err != nil || string(got) != "join credentials" {
		t.Fatalf("ReadSealed = %q, %v", got, err)
	}
	if err := f.Write([]byte("sealed by something else")); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadSealed(f, Unsealed{}); !errors.Is(err, ErrNotSealedByThis) {
		t.Fatalf("ReadSealed of foreign data = %v, want ErrNotSealedByThis", err)
	}
}

// A file written without the checksum header, as the development builds
// before it wrote every file, is refused even though its content parses
// (see the package doc: no migration), with an error that says it may be
// from such a build. A file truncated inside its header says truncated.
func TestHeaderlessFileRefused(t *testing.T) {
	r := newRoot(t)
	if err := r.Create(); err != nil {
		t.Fatal(err)
	}
	f := r.ESP.ClusterDirectory
	old, err := proto.Marshal(wrapperspb.String("curators"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(f.Path, old, 0o644); err != nil {
		t.Fatal(err)
	}
	var got wrapperspb.StringValue
	err = f.ReadProto(&got)
	if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), f.Path) || !strings.Contains(err.Error(), "before checksums") {
		t.Fatalf("reading a file without a header: %v; want a CorruptError naming the file and saying it may be from an older build", err)
	}

	if err := f.WriteProto(wrapperspb.String("curators")); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(f.Path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(f.Path, b[:30], 0o644); err != nil {
		t.Fatal(err)
	}
	err = f.ReadProto(&got)
	if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "truncated") || strings.Contains(err.Error(), "before checksums") {
		t.Fatalf("reading a file cut inside its header: %v; want a CorruptError saying truncated", err)
	}
}
