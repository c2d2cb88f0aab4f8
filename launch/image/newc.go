package image

import (
	"fmt"
	"io"
	"io/fs"
	"path"
	"strings"
)

// Mode bits of the newc header (the st_mode of the file the entry makes).
const (
	newcTypeDir     = 0o040000
	newcTypeRegular = 0o100000
	newcTypeSymlink = 0o120000
	newcTypeCharDev = 0o020000
)

// newcMagic opens every entry of a newc archive ("new ASCII" cpio without
// checksums), the only format the kernel's initramfs unpacker reads.
const newcMagic = "070701"

// newcTrailer is the name of the entry that ends an archive.
const newcTrailer = "TRAILER!!!"

// NewcWriter writes a newc (cpio "new ASCII") archive, the format of a
// Linux initramfs. Entries have fixed owner (root) and time (zero) so that
// the same inputs always give the same bytes; parent directories are added
// on demand, because the kernel's unpacker does not create them. Close
// writes the trailer; it does not close the underlying writer.
type NewcWriter struct {
	w      io.Writer
	ino    uint32
	dirs   map[string]bool
	closed bool
}

// NewNewcWriter returns a writer of a newc archive to w.
func NewNewcWriter(w io.Writer) *NewcWriter {
	return &NewcWriter{w: w, dirs: map[string]bool{".": true}}
}

// checkName accepts a slash-separated relative path inside the archive.
func checkName(name string) error {
	if name == "" || strings.HasPrefix(name, "/") || path.Clean(name) != name || name == "." || name == ".." || strings.HasPrefix(name, "../") {
		return fmt.Errorf("initramfs entry %q: want a clean relative path such as \"lib/modules/x.ko\"", name)
	}
	return nil
}

// Mkdir adds a directory and any missing parents.
func (w *NewcWriter) Mkdir(name string, perm fs.FileMode) error {
	if err := checkName(name); err != nil {
		return err
	}
	return w.mkdirAll(name, perm)
}

func (w *NewcWriter) mkdirAll(name string, perm fs.FileMode) error {
	if w.dirs[name] {
		return nil
	}
	if err := w.mkdirAll(path.Dir(name), 0o755); err != nil {
		return err
	}
	w.dirs[name] = true
	return w.entry(name, newcTypeDir|uint32(perm.Perm()), 2, nil)
}

// WriteFile adds a regular file holding data, creating its parents.
func (w *NewcWriter) WriteFile(name string, perm fs.FileMode, data []byte) error {
	if err := checkName(name); err != nil {
		return err
	}
	if err := w.mkdirAll(path.Dir(name), 0o755); err != nil {
		return err
	}
	return w.entry(name, newcTypeRegular|uint32(perm.Perm()), 1, data)
}

// Symlink adds a symbolic link name pointing at target.
func (w *NewcWriter) Symlink(target, name string) error {
	if err := checkName(name); err != nil {
		return err
	}
	if target == "" {
		return fmt.Errorf("initramfs symlink %q: empty target", name)
	}
	if err := w.mkdirAll(path.Dir(name), 0o755); err != nil {
		return err
	}
	return w.entry(name, newcTypeSymlink|0o777, 1, []byte(target))
}

// CharDevice adds a character device node. The kernel opens /dev/console
// for init before init can mount devtmpfs, so the archive must carry it.
func (w *NewcWriter) CharDevice(name string, perm fs.FileMode, major, minor uint32) error {
	if err := checkName(name); err != nil {
		return err
	}
	if err := w.mkdirAll(path.Dir(name), 0o755); err != nil {
		return err
	}
	if w.closed {
		return fmt.Errorf("initramfs entry %q: the archive is already closed", name)
	}
	w.ino++
	return w.writeDev(name, w.ino, newcTypeCharDev|uint32(perm.Perm()), 1, nil, major, minor)
}

// Close ends the archive with its trailer entry.
func (w *NewcWriter) Close() error {
	if w.closed {
		return nil
	}
	w.closed = true
	return w.write(newcTrailer, 0, 0, 1, nil)
}

func (w *NewcWriter) entry(name string, mode, nlink uint32, data []byte) error {
	if w.closed {
		return fmt.Errorf("initramfs entry %q: the archive is already closed", name)
	}
	w.ino++
	return w.write(name, w.ino, mode, nlink, data)
}

// write emits one header, the NUL-terminated name and the data, each of
// the two padded to a multiple of four bytes as newc requires.
func (w *NewcWriter) write(name string, ino, mode, nlink uint32, data []byte) error {
	return w.writeDev(name, ino, mode, nlink, data, 0, 0)
}

func (w *NewcWriter) writeDev(name string, ino, mode, nlink uint32, data []byte, rdevMajor, rdevMinor uint32) error {
	if uint64(len(data)) > 0xffffffff {
		return fmt.Errorf("initramfs entry %q: %d bytes is more than newc can describe", name, len(data))
	}
	// Fields: ino mode uid gid nlink mtime filesize devmajor devminor
	// rdevmajor rdevminor namesize check.
	hdr := fmt.Sprintf("%s%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x",
		newcMagic, ino, mode, 0, 0, nlink, 0, len(data), 0, 0, rdevMajor, rdevMinor, len(name)+1, 0)
	buf := make([]byte, 0, len(hdr)+len(name)+4)
	buf = append(buf, hdr...)
	buf = append(buf, name...)
	buf = append(buf, 0)
	buf = append(buf, make([]byte, pad4(len(buf)))...)
	if _, err := w.w.Write(buf); err != nil {
		return fmt.Errorf("writing initramfs entry %q: %w", name, err)
	}
	if len(data) == 0 {
		return nil
	}
	if _, err := w.w.Write(data); err != nil {
		return fmt.Errorf("writing initramfs entry %q: %w", name, err)
	}
	if p := pad4(len(data)); p > 0 {
		if _, err := w.w.Write(make([]byte, p)); err != nil {
			return fmt.Errorf("writing initramfs entry %q: %w", name, err)
		}
	}
	return nil
}

// pad4 is how many bytes bring n to a multiple of four.
func pad4(n int) int { return (4 - n%4) % 4 }
