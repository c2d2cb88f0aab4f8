package launch

import (
	"bytes"
	"crypto/ed25519"
	"crypto/sha256"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/polis-os/polis/curator/backup"
	"github.com/polis-os/polis/identity"
)

// A restore is refused before anything starts when it cannot work: no
// polisctl configuration to take the owner key from, a backup
// that is not there.
func TestRestoreOptionsRefused(t *testing.T) {
	backup := filepath.Join(t.TempDir(), "cluster.backup")
	if err := os.WriteFile(backup, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		o    Options
		want string
	}{
		{Options{RestoreBackup: backup}, "needs the polisctl configuration"},
		{Options{RestoreBackup: backup + ".missing", ConfigDir: t.TempDir()}, "the backup"},
		// The backup's pod network is the restored cluster's: one asked
		// for would be ignored, so it is refused.
		{Options{RestoreBackup: backup, ConfigDir: t.TempDir(), PodRange: netip.MustParsePrefix("10.200.0.0/16")}, "--pod-range"},
		{Options{RestoreBackup: backup, ConfigDir: t.TempDir(), PodNodePrefixLength: 26}, "--pod-node-prefix"},
		{Options{RestoreBackup: backup, ConfigDir: t.TempDir()}, ""},
		// Without a restore, they are checked as for any new cluster.
		{Options{PodRange: netip.MustParsePrefix("10.200.0.0/16"), PodNodePrefixLength: 26}, ""},
	} {
		err := c.o.checkRestore()
		if c.want == "" {
			if err != nil {
				t.Errorf("checkRestore(%+v): %v", c.o, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("checkRestore(%+v): %v, want an error containing %q", c.o, err, c.want)
		}
	}
	// The owner key comes from the configuration; without one, the
	// restore says where it looked.
	if _, _, err := restoreOwnerKey(t.TempDir()); err == nil || !strings.Contains(err.Error(), "key.der") {
		t.Errorf("restoreOwnerKey of an empty configuration: %v", err)
	}
}

// TestDecryptSnapshot: a VM's restore gets the backup's snapshot in
// etcd's format, decrypted on the host, which the node's own check
// (backup.ReadSnapshot) accepts; a backup for another owner key, or one
// damaged, leaves nothing behind.
func TestDecryptSnapshot(t *testing.T) {
	db := bytes.Repeat([]byte("polis database "), 1000)
	sum := sha256.Sum256(db)
	owner, err := identity.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	var file bytes.Buffer
	if err := backup.Write(&file, owner.Public().(ed25519.PublicKey), backup.Info{NodeID: "node-x"}, bytes.NewReader(append(bytes.Clone(db), sum[:]...))); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "cluster.backup")
	if err := os.WriteFile(path, file.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	snap := filepath.Join(dir, "snapshot.db")
	if err := decryptSnapshot(path, owner, snap); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(snap)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("the snapshot: %v, %v; want a file 0600", fi, err)
	}
	f, err := os.Open(snap)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var got bytes.Buffer
	if err := backup.ReadSnapshot(f, &got); err != nil || !bytes.Equal(got.Bytes(), db) {
		t.Errorf("the decrypted snapshot read back: %v, %d bytes; want the %d bytes of the database", err, got.Len(), len(db))
	}

	other, err := identity.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	damaged := bytes.Clone(file.Bytes())
	damaged[len(damaged)/2] ^= 1
	if err := os.WriteFile(filepath.Join(dir, "damaged.backup"), damaged, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		path string
		key  ed25519.PrivateKey
		want string
	}{
		{path, other, "not encrypted to this owner key"},
		{filepath.Join(dir, "damaged.backup"), owner, "damaged or incomplete"},
	} {
		out := filepath.Join(dir, "refused.db")
		if err := decryptSnapshot(c.path, c.key, out); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("decryptSnapshot(%s): %v, want an error saying %q", c.path, err, c.want)
		}
		if _, err := os.Stat(out); !os.IsNotExist(err) {
			t.Errorf("decryptSnapshot(%s) failed and left %s (%v)", c.path, out, err)
		}
	}
}
