package clusternet

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.uber.org/goleak"
)

// asInit, when set, is what the test binary does as a machine's PID 1
// (vm_linux_test.go) instead of running as a test process.
var asInit func(*testing.M)

func TestMain(m *testing.M) {
	if asInit != nil && os.Getpid() == 1 {
		asInit(m)
	}
	goleak.VerifyTestMain(m)
}

func TestLoadOrCreateKey(t *testing.T) {
	path := filepath.Join(t.TempDir(), "wg.key")
	k1, err := LoadOrCreateKey(path)
	if err != nil {
		t.Fatal(err)
	}
	if k1.IsZero() || k1.PublicKey().IsZero() {
		t.Fatal("made a zero key")
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if perm := fi.Mode().Perm(); perm != 0o600 {
		t.Errorf("key file mode %o, want 600", perm)
	}
	k2, err := LoadOrCreateKey(path)
	if err != nil {
		t.Fatal(err)
	}
	if k1 != k2 {
		t.Error("second load returned a different key")
	}
	if err := os.WriteFile(path, []byte("short"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadOrCreateKey(path); err == nil {
		t.Error("a corrupt key file was accepted")
	}
	if b, _ := os.ReadFile(path); string(b) != "short" {
		t.Error("a corrupt key file was overwritten")
	}
}

// An existing key file readable by others (a restore or copy that lost
// its mode) is made 0600 again, and its key kept.
func TestLoadOrCreateKeyFixesMode(t *testing.T) {
	path := filepath.Join(t.TempDir(), "wg.key")
	want, err := newPrivateKey()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, want[:], 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, 0o644); err != nil { // past the umask
		t.Fatal(err)
	}
	got, err := LoadOrCreateKey(path)
	if err != nil || got != want {
		t.Fatalf("LoadOrCreateKey of a 0644 key file: %v, %v; want its key", got == want, err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if perm := fi.Mode().Perm(); perm != 0o600 {
		t.Errorf("key file mode %o after loading, want 600", perm)
	}
}

// An all-zero key is a corrupt file (a zeroed block), not a key: refused,
// with an error naming the file, and left as it is.
func TestLoadOrCreateKeyZero(t *testing.T) {
	path := filepath.Join(t.TempDir(), "wg.key")
	if err := os.WriteFile(path, make([]byte, 32), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadOrCreateKey(path); err == nil || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "all zeros") {
		t.Errorf("LoadOrCreateKey of an all-zero key: %v, want an error naming %s", err, path)
	}
	if b, _ := os.ReadFile(path); len(b) != 32 || !bytes.Equal(b, make([]byte, 32)) {
		t.Error("the all-zero key file was changed")
	}
}
