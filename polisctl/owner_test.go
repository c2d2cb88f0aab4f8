package polisctl

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/polis-os/polis/internal/failpoint"
	"github.com/polis-os/polis/ownerdir"
)

// copyDir copies the files of a configuration directory, as a thief of
// the owner's workstation would.
func copyDir(t *testing.T, from string) string {
	t.Helper()
	to := filepath.Join(t.TempDir(), "stolen")
	if err := os.MkdirAll(to, 0o700); err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(from)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(from, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(to, e.Name()), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return to
}

// ticket rotate replaces the register ticket; owner rotate-key replaces the
// owner key, and a copy of the old credentials no longer works.
func TestTicketAndOwnerKeyRotation(t *testing.T) {
	c := bootstrap(t)
	r := &runner{t: t, config: filepath.Join(t.TempDir(), "config")}
	r.ok("take-ownership", "--curator", c.first.Curator().String(), "--owner-key", writeKey(t, c, false), "--yes")

	ticket := func(out string) string {
		t.Helper()
		for line := range strings.Lines(out) {
			if v, ok := strings.CutPrefix(strings.TrimSpace(line), "Register ticket: "); ok {
				return v
			}
			if v, ok := strings.CutPrefix(strings.TrimSpace(line), "New register ticket: "); ok {
				return v
			}
		}
		t.Fatalf("no ticket in %q", out)
		return ""
	}
	old := ticket(r.ok("ticket"))
	rotated := ticket(r.ok("ticket", "rotate"))
	if rotated == old || len(rotated) != 64 {
		t.Fatalf("ticket rotate gave %s (the old one was %s)", rotated, old)
	}
	if now := ticket(r.ok("ticket")); now != rotated {
		t.Errorf("ticket shows %s after rotation to %s", now, rotated)
	}

	stolen := copyDir(t, r.config)
	oldKey, err := os.ReadFile(filepath.Join(r.config, ownerdir.KeyFile))
	if err != nil {
		t.Fatal(err)
	}
	out := r.ok("owner", "rotate-key")
	if !strings.Contains(out, "revoked") {
		t.Errorf("owner rotate-key printed %q", out)
	}
	newKey, err := os.ReadFile(filepath.Join(r.config, ownerdir.KeyFile))
	if err != nil {
		t.Fatal(err)
	}
	if string(newKey) == string(oldKey) {
		t.Fatal("owner rotate-key left the key as it was")
	}
	if _, err := os.Stat(filepath.Join(r.config, ownerdir.NewKeyFile)); !os.IsNotExist(err) {
		t.Errorf("%s is left behind: %v", ownerdir.NewKeyFile, err)
	}
	if st, err := os.Stat(filepath.Join(r.config, ownerdir.KeyFile)); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("the new key file: %v, mode %v; want 0600", err, st.Mode().Perm())
	}
	r.ok("cluster", "info")
	thief := &runner{t: t, config: stolen}
	thief.fails([]string{"cluster", "info"}, "revoked")
}

// An owner rotate-key interrupted after the cluster accepted the new key,
// before key.der was replaced, leaves the owner the documented way back:
// take-ownership --owner-key key.der.new. The old key is no longer the
// owner's, so a key.der.new that take-ownership cannot read would lock the
// owner out.
func TestOwnerKeyRotationInterrupted(t *testing.T) {
	c := bootstrap(t)
	r := &runner{t: t, config: filepath.Join(t.TempDir(), "config")}
	r.ok("take-ownership", "--curator", c.first.Curator().String(), "--owner-key", writeKey(t, c, false), "--yes")
	oldKey, err := os.ReadFile(filepath.Join(r.config, ownerdir.KeyFile))
	if err != nil {
		t.Fatal(err)
	}

	// The key.der write comes after the RotateOwnerKey RPC: failing it is
	// the command stopping right after the cluster accepted the new key.
	keyWrite := filepath.Join(r.config, ownerdir.KeyFile) + ": write"
	var hit atomic.Bool
	reset := failpoint.Set(func(name string) error {
		if name == keyWrite {
			hit.Store(true)
			return errors.New("interrupted")
		}
		return nil
	})
	r.fails([]string{"owner", "rotate-key"}, "interrupted", "take-ownership --owner-key", ownerdir.NewKeyFile)
	reset()
	if !hit.Load() {
		t.Fatalf("rotate-key never reached %q", keyWrite)
	}
	if now, err := os.ReadFile(filepath.Join(r.config, ownerdir.KeyFile)); err != nil || string(now) != string(oldKey) {
		t.Fatalf("key.der after the interruption: %v; want the old key still there", err)
	}
	// The cluster took the new key: the old credentials are revoked.
	r.fails([]string{"cluster", "info"}, "revoked")

	pending := filepath.Join(r.config, ownerdir.NewKeyFile)
	if st, err := os.Stat(pending); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("%s: %v; want it there, mode 0600", pending, err)
	}
	r.ok("take-ownership", "--curator", c.first.Curator().String(), "--owner-key", pending, "--yes")
	r.ok("cluster", "info")
}
