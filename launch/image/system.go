package image

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/diskfs/go-diskfs/backend/file"
	"github.com/diskfs/go-diskfs/filesystem/squashfs"

	"github.com/polis-os/polis/node/pid1"
)

// systemFormatVersion changes when the system disk's format changes (file
// system, compression, what the builder adds), so that a cached disk of an
// older format is rebuilt.
const systemFormatVersion = "polis-system-4"

// systemPad is what the system disk's size is rounded up to: whole
// sectors, and pages.
const systemPad = 4096

// systemBlockSize is the squashfs data block size: the default of
// mksquashfs and of go-diskfs. Larger blocks compress better but make
// every small read decompress more.
const systemBlockSize = 128 << 10

// hashSystemTree returns the hash of everything the system disk is made
// of: each entry's path, type and permissions and a regular file's
// content, in the walk's (lexical) order. Contents, not modification
// times: a tree rebuilt with the same bytes keeps its disk.
func hashSystemTree(dir string) (string, int64, error) {
	h := sha256.New()
	fmt.Fprintf(h, "%s\n", systemFormatVersion)
	var total int64
	err := walkSystemTree(dir, func(rel string, d fs.DirEntry, info fs.FileInfo) error {
		switch {
		case d.IsDir():
			fmt.Fprintf(h, "d %s %o\n", rel, info.Mode().Perm())
		default:
			fmt.Fprintf(h, "f %s %o %d\n", rel, info.Mode().Perm(), info.Size())
			n, err := hashFile(h, filepath.Join(dir, rel))
			if err != nil {
				return err
			}
			total += n
		}
		return nil
	})
	if err != nil {
		return "", 0, err
	}
	return hex.EncodeToString(h.Sum(nil)), total, nil
}

func hashFile(h hash.Hash, p string) (int64, error) {
	f, err := os.Open(p)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	return io.Copy(h, f)
}

// walkSystemTree calls fn for every entry under dir but dir itself, with
// its path relative to dir (slash-separated), refusing what a system disk
// cannot hold and the name the builder writes itself. It holds
// directories and regular files only: devices, sockets and pipes have no
// place among programs and data, and symlinks go-diskfs' squashfs writer
// (v1.9.4) cannot write (it reads a link's target relative to the
// process's working directory, not its staging directory); a tree that
// needs another name for a program can copy it.
func walkSystemTree(dir string, fn func(rel string, d fs.DirEntry, info fs.FileInfo) error) error {
	st, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("the system tree: %w", err)
	}
	if !st.IsDir() {
		return fmt.Errorf("the system tree %s is not a directory", dir)
	}
	idName := strings.TrimPrefix(pid1.SystemIDPath, pid1.SystemRoot+"/")
	return filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return fmt.Errorf("the system tree: %w", err)
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		if rel == "." {
			return nil
		}
		rel = filepath.ToSlash(rel)
		if rel == idName {
			return fmt.Errorf("the system tree %s has its own %s; the image builder writes that file", dir, rel)
		}
		info, err := d.Info()
		if err != nil {
			return fmt.Errorf("the system tree: %w", err)
		}
		if t := info.Mode().Type(); t != 0 && t != fs.ModeDir {
			return fmt.Errorf("the system tree: %s is not a directory or a regular file (%v); a system disk holds only those", rel, t)
		}
		return fn(rel, d, info)
	})
}

// buildSystemDisk writes the system disk for the tree dir to out: a
// squashfs (read-only, compressed, mounted by PID 1 at pid1.SystemRoot),
// every file owned by root with its permissions kept, and the disk's ID
// (key, the hash of its inputs) at pid1.SystemIDPath so that a node can
// say which system disk it runs. The file is written beside out and
// renamed over it, so an interrupted build never leaves a disk that looks
// current.
func buildSystemDisk(dir, out, key string) error {
	tmp, err := os.CreateTemp(filepath.Dir(out), ".system-*")
	if err != nil {
		return fmt.Errorf("writing the system disk: %w", err)
	}
	defer os.Remove(tmp.Name())
	defer tmp.Close()
	sq, err := squashfs.Create(file.New(tmp, false), 0, 0, systemBlockSize)
	if err != nil {
		return fmt.Errorf("writing the system disk: %w", err)
	}
	// go-diskfs stages the tree in a workspace directory and writes the
	// squashfs from it on Finalize; staging with the os package directly
	// keeps permissions exact.
	ws := sq.Workspace()
	defer os.RemoveAll(ws)
	if err := os.Chmod(ws, 0o755); err != nil { // the disk's root: /system
		return fmt.Errorf("writing the system disk: %w", err)
	}
	type dirMode struct {
		path string
		perm fs.FileMode
	}
	var dirs []dirMode
	err = walkSystemTree(dir, func(rel string, d fs.DirEntry, info fs.FileInfo) error {
		src, dst := filepath.Join(dir, rel), filepath.Join(ws, filepath.FromSlash(rel))
		switch {
		case d.IsDir():
			// Writable while it is filled; its own mode comes after.
			dirs = append(dirs, dirMode{dst, info.Mode().Perm()})
			return os.Mkdir(dst, 0o700)
		default:
			if err := copyRegular(src, dst); err != nil {
				return err
			}
		}
		// Set, not created with: umask must not narrow the mode.
		return os.Chmod(dst, info.Mode().Perm())
	})
	for i := len(dirs) - 1; err == nil && i >= 0; i-- {
		err = os.Chmod(dirs[i].path, dirs[i].perm)
	}
	if err != nil {
		return fmt.Errorf("writing the system disk: %w", err)
	}
	if err := os.WriteFile(filepath.Join(ws, filepath.FromSlash(strings.TrimPrefix(pid1.SystemIDPath, pid1.SystemRoot+"/"))), []byte(key+"\n"), 0o444); err != nil {
		return fmt.Errorf("writing the system disk: %w", err)
	}
	root := uint32(0)
	// gzip (zlib), level 6: not zstd, which would decompress faster. The
	// zstd frames go-diskfs (v1.9.4) writes declare an 8 MiB window,
	// while the kernel's squashfs sizes its zstd workspace for one block
	// (128 KiB) and fails every data block ("zstd decompression error:
	// 64", I/O errors on read). Its zlib stream uses a 32 KiB window,
	// which the kernel's zlib inflates with no such limit.
	//
	// File data is stored uncompressed, only the tables are compressed: a
	// guest under TCG inflates at emulated speed, and starting containerd
	// and the kubelet inflated about 200 MB of binaries on the first
	// start, tens of seconds of a single vCPU (docs/benchmarks.md, issue
	// 19). The disk is a file in the host's page cache, shared by every
	// VM: its size costs little.
	if err := sq.Finalize(squashfs.FinalizeOptions{Compression: &squashfs.CompressorGzip{CompressionLevel: 6}, NoCompressData: true, NoCompressFragments: true, FileUID: &root, FileGID: &root}); err != nil {
		return fmt.Errorf("writing the system disk: squashfs: %w", err)
	}
	// A disk is read in whole sectors: the kernel sees a file of 131,429
	// bytes as 131,072, and the squashfs tables at the end would be cut
	// off (I/O errors on mount). go-diskfs (v1.9.4) does not pad, so pad
	// to 4 KiB, as mksquashfs does.
	st, err := tmp.Stat()
	if err != nil {
		return fmt.Errorf("writing the system disk: %w", err)
	}
	if err := tmp.Truncate((st.Size() + systemPad - 1) / systemPad * systemPad); err != nil {
		return fmt.Errorf("writing the system disk: padding: %w", err)
	}
	if err := tmp.Sync(); err != nil {
		return fmt.Errorf("writing the system disk: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("writing the system disk: %w", err)
	}
	if err := os.Chmod(tmp.Name(), 0o644); err != nil {
		return fmt.Errorf("writing the system disk: %w", err)
	}
	if err := os.Rename(tmp.Name(), out); err != nil {
		return fmt.Errorf("writing the system disk: %w", err)
	}
	return nil
}

// copyRegular copies a regular file's content.
func copyRegular(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	_, err = io.Copy(out, in)
	return errors.Join(err, out.Close())
}
