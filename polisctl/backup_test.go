package polisctl

import (
	"bytes"
	"crypto/ed25519"
	"crypto/sha256"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/polis-os/polis/curator/backup"
)

// TestBackup takes a backup through polisctl and inspects it; a backup
// opens only with the owner key, and a damaged or truncated one is refused
// with an error saying so.
func TestBackup(t *testing.T) {
	c := bootstrap(t)
	r := &runner{t: t, config: filepath.Join(t.TempDir(), "config")}
	r.ok("take-ownership", "--yes", "--curator", c.first.Curator().String(), "--owner-key", writeKey(t, c, false))
	id := c.first.Credentials(t).NodeID
	r.ok("node", "label", id, "backup=before")

	dir := t.TempDir()
	file := filepath.Join(dir, "cluster.backup")
	out := r.ok("cluster", "backup", file)
	if !strings.Contains(out, "Backup written to "+file) {
		t.Errorf("backup printed %q", out)
	}
	st, err := os.Stat(file)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o600 {
		t.Errorf("the backup file is %v, want 0600", st.Mode().Perm())
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Errorf("the backup's directory holds %d entries, want only the backup (no temporary file left)", len(ents))
	}
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(data), "backup=before") || strings.Contains(string(data), id) {
		t.Error("the backup file holds cluster data in the clear")
	}

	out = r.ok("cluster", "backup", "--inspect", file)
	for _, want := range []string{"Nodes:         1\n", "Taken from:    " + id, "Revision:", "SHA-256 checked"} {
		if !strings.Contains(out, want) {
			t.Errorf("inspect printed %q; want %q in it", out, want)
		}
	}

	// Another key: refused, saying whose key it wants.
	r.fails([]string{"cluster", "backup", "--inspect", file, "--owner-key", writeKey(t, &testCluster{ownerKey: mustKey(t)}, false)},
		"not encrypted to this owner key")
	// Cut short, or altered anywhere: refused as damaged.
	short := filepath.Join(dir, "short.backup")
	if err := os.WriteFile(short, data[:len(data)*2/3], 0o600); err != nil {
		t.Fatal(err)
	}
	r.fails([]string{"cluster", "backup", "--inspect", short}, short, "damaged or incomplete")
	flipped := append([]byte(nil), data...)
	flipped[len(flipped)/2] ^= 1
	altered := filepath.Join(dir, "altered.backup")
	if err := os.WriteFile(altered, flipped, 0o600); err != nil {
		t.Fatal(err)
	}
	r.fails([]string{"cluster", "backup", "--inspect", altered}, altered, "damaged or incomplete")
	notBackup := filepath.Join(dir, "not.backup")
	if err := os.WriteFile(notBackup, []byte("hello\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	r.fails([]string{"cluster", "backup", "--inspect", notBackup}, "damaged or incomplete", "not a readable age file")

	// Well encrypted to the owner key, hash and all, but not a database
	// (anyone with the owner's public key can make one): refused.
	junk := make([]byte, 16<<10)
	for i := range junk {
		junk[i] = byte(i * 7)
	}
	sum := sha256.Sum256(junk)
	var forged bytes.Buffer
	if err := backup.Write(&forged, c.ownerKey.Public().(ed25519.PublicKey), backup.Info{}, bytes.NewReader(append(junk, sum[:]...))); err != nil {
		t.Fatal(err)
	}
	notDB := filepath.Join(dir, "forged.backup")
	if err := os.WriteFile(notDB, forged.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	r.fails([]string{"cluster", "backup", "--inspect", notDB}, notDB, "damaged or incomplete")

	// A backup that cannot be written leaves nothing behind.
	r.fails([]string{"cluster", "backup", filepath.Join(dir, "missing", "x.backup")}, "creating the backup file")
	// Inspecting read nothing into the backup's directory.
	if ents, _ := os.ReadDir(dir); len(ents) != 5 {
		t.Errorf("the backup's directory holds %d entries, want the 5 files the test wrote", len(ents))
	}
}
