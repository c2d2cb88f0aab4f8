package localstorage

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"google.golang.org/protobuf/proto"
)

// File is one file of the layout.
type File struct {
	// Path is the file's absolute path.
	Path string
	// Secret files are written with mode 0600 and must live in a 0700
	// directory; others with 0644.
	Secret bool
}

func (f File) mode() os.FileMode {
	if f.Secret {
		return 0o600
	}
	return 0o644
}

// Read returns the file's content. A missing file is an error that matches
// fs.ErrNotExist.
func (f File) Read() ([]byte, error) {
	b, err := os.ReadFile(f.Path)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", f.Path, err)
	}
	return b, nil
}

// Exists reports whether the file exists.
func (f File) Exists() (bool, error) {
	_, err := os.Stat(f.Path)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("checking %s: %w", f.Path, err)
	}
	return true, nil
}

// Write replaces the file's content atomically: readers and a crash see the
// old content or the new one, never a mix. The directory must exist (see
// Root.Create).
func (f File) Write(data []byte) error {
	dir := filepath.Dir(f.Path)
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(f.Path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("writing %s: %w", f.Path, err)
	}
	done := false
	defer func() {
		if !done {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	if err := tmp.Chmod(f.mode()); err != nil {
		return fmt.Errorf("writing %s: %w", f.Path, err)
	}
	if _, err := tmp.Write(data); err != nil {
		return fmt.Errorf("writing %s: %w", f.Path, err)
	}
	if err := tmp.Sync(); err != nil {
		return fmt.Errorf("writing %s: syncing: %w", f.Path, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("writing %s: %w", f.Path, err)
	}
	if err := os.Rename(tmp.Name(), f.Path); err != nil {
		return fmt.Errorf("writing %s: %w", f.Path, err)
	}
	done = true
	return syncDir(dir)
}

// syncDir makes a rename in dir durable.
func syncDir(dir string) error {
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

// Remove deletes the file; a missing file is not an error.
func (f File) Remove() error {
	if err := os.Remove(f.Path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("removing %s: %w", f.Path, err)
	}
	return syncDir(filepath.Dir(f.Path))
}

// ReadProto reads the file into m. A file that does not parse is an error
// naming the file.
func (f File) ReadProto(m proto.Message) error {
	b, err := f.Read()
	if err != nil {
		return err
	}
	if err := proto.Unmarshal(b, m); err != nil {
		return fmt.Errorf("%s is corrupt: %w", f.Path, err)
	}
	return nil
}

// WriteProto writes m to the file atomically.
func (f File) WriteProto(m proto.Message) error {
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
	if err != nil {
		return fmt.Errorf("encoding %s: %w", f.Path, err)
	}
	return f.Write(b)
}
