package launch

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A restore is refused before anything starts when it cannot work: VM
// nodes, no polisctl configuration to take the owner key from, a backup
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
		{Options{RestoreBackup: backup, ConfigDir: t.TempDir(), VM: &VMOptions{}}, "process nodes only"},
		{Options{RestoreBackup: backup}, "needs the polisctl configuration"},
		{Options{RestoreBackup: backup + ".missing", ConfigDir: t.TempDir()}, "the backup"},
		{Options{RestoreBackup: backup, ConfigDir: t.TempDir()}, ""},
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
