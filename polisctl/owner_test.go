package polisctl

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
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
	oldKey, err := os.ReadFile(filepath.Join(r.config, keyFile))
	if err != nil {
		t.Fatal(err)
	}
	out := r.ok("owner", "rotate-key")
	if !strings.Contains(out, "revoked") {
		t.Errorf("owner rotate-key printed %q", out)
	}
	newKey, err := os.ReadFile(filepath.Join(r.config, keyFile))
	if err != nil {
		t.Fatal(err)
	}
	if string(newKey) == string(oldKey) {
		t.Fatal("owner rotate-key left the key as it was")
	}
	if _, err := os.Stat(filepath.Join(r.config, newKeyFile)); !os.IsNotExist(err) {
		t.Errorf("%s is left behind: %v", newKeyFile, err)
	}
	if st, err := os.Stat(filepath.Join(r.config, keyFile)); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("the new key file: %v, mode %v; want 0600", err, st.Mode().Perm())
	}
	r.ok("cluster", "info")
	thief := &runner{t: t, config: stolen}
	thief.fails([]string{"cluster", "info"}, "revoked")
}
