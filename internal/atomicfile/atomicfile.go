// Package atomicfile writes files that readers and a crash see whole or
// not at all: the content goes to a temporary file in the destination's
// directory, is synced, and is renamed over the destination, and the
// directory is synced so that the rename survives a crash. If anything
// fails before the rename the temporary file is removed and the
// destination is untouched.
//
// It serves streamed content (a snapshot, a backup) that a caller produces
// through an io.Writer; localstorage's checksummed files follow the same
// steps with a failpoint of their own between them.
package atomicfile

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// Write creates or replaces path with what fill writes, with the given
// permission bits. tmpPattern names the temporary file as os.CreateTemp
// does ("" is "." + path's base name + ".tmp-*"), so that whoever cleans
// up after a crash can recognise it. An error from fill is returned as it
// is and leaves nothing behind; once the file is renamed, only a failure to
// sync the directory is returned, with the new file in place.
func Write(path, tmpPattern string, perm os.FileMode, fill func(w io.Writer) error) error {
	dir := filepath.Dir(path)
	if tmpPattern == "" {
		tmpPattern = "." + filepath.Base(path) + ".tmp-*"
	}
	tmp, err := os.CreateTemp(dir, tmpPattern)
	if err != nil {
		return fmt.Errorf("creating a temporary file for %s: %w", path, err)
	}
	done := false
	defer func() {
		if !done {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	if err := tmp.Chmod(perm); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if err := fill(tmp); err != nil {
		return err
	}
	if err := tmp.Sync(); err != nil {
		return fmt.Errorf("writing %s: syncing: %w", path, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	done = true
	return SyncDir(dir)
}

// SyncDir makes a rename or removal in dir durable.
func SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("syncing %s: %w", dir, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("syncing %s: %w", dir, err)
	}
	return nil
}
