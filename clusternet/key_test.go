package clusternet

import (
	"os"
	"path/filepath"
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
