package pid1

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"time"

	"golang.org/x/sys/unix"

	"github.com/polis-os/polis/internal/mountinfo"
)

// newRootDir is where the tmpfs that becomes the root is mounted while
// the initramfs is moved into it.
const newRootDir = "/.polis-root"

// rootMount returns the mount at / (the last one there: mounts stack).
func rootMount(mounts []mountinfo.Mount) (mountinfo.Mount, bool) {
	var root mountinfo.Mount
	found := false
	for _, m := range mounts {
		if m.MountPoint == "/" {
			root, found = m, true
		}
	}
	return root, found
}

// pivotRootAllowed says whether pivot_root(2) can work from this root:
// the kernel refuses it (EINVAL) when the root is the initramfs' rootfs,
// a mount with no parent, which can never be moved or unmounted. runc
// pivot_roots into every container, so the machine's root must be a real
// mount on top of rootfs.
func pivotRootAllowed(root mountinfo.Mount) error {
	if root.FSType == "rootfs" || root.Parent == root.ID {
		return fmt.Errorf("the root is the initramfs' rootfs (mount %d, parent %d, %s): pivot_root(2) would fail", root.ID, root.Parent, root.FSType)
	}
	return nil
}

// readRootMount reads the root's mount from /proc/self/mountinfo.
func readRootMount() (mountinfo.Mount, error) {
	mounts, err := mountinfo.ReadFile(mountinfo.Path)
	if err != nil {
		return mountinfo.Mount{}, err
	}
	root, ok := rootMount(mounts)
	if !ok {
		return mountinfo.Mount{}, errors.New("mountinfo: nothing is mounted at /")
	}
	return root, nil
}

// switchRootIfNeeded leaves the initramfs' rootfs for a tmpfs, as
// switch_root does, when the machine still runs on rootfs: it mounts a
// tmpfs, moves the initramfs' files into it (each copied, then removed,
// so that the RAM they held is freed as it goes), moves the tmpfs onto /,
// chroots into it and executes /init again, which starts Boot over on the
// new root (it is still PID 1: exec keeps the process). On a root that is
// not rootfs it does nothing and reports the root's type.
func switchRootIfNeeded(logf func(string, ...any)) (string, error) {
	if err := os.MkdirAll("/proc", 0o755); err != nil {
		return "", fmt.Errorf("switching root: %w", err)
	}
	if err := unix.Mount("proc", "/proc", "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil && !errors.Is(err, unix.EBUSY) {
		return "", fmt.Errorf("switching root: mounting proc: %w", err)
	}
	root, err := readRootMount()
	if err != nil {
		return "", fmt.Errorf("switching root: %w", err)
	}
	if pivotRootAllowed(root) == nil {
		return root.FSType, nil
	}
	// The rest of the first run happens on the new root after exec;
	// nothing but proc is mounted yet, and proc is mounted again there.
	if err := unix.Unmount("/proc", 0); err != nil {
		return "", fmt.Errorf("switching root: unmounting proc: %w", err)
	}
	if err := os.Mkdir(newRootDir, 0o755); err != nil {
		return "", fmt.Errorf("switching root: %w", err)
	}
	if err := unix.Mount("tmpfs", newRootDir, "tmpfs", 0, "mode=0755"); err != nil {
		return "", fmt.Errorf("switching root: mounting a tmpfs on %s: %w", newRootDir, err)
	}
	t := time.Now()
	n, err := moveTree("/", newRootDir)
	if err != nil {
		return "", fmt.Errorf("switching root: moving the initramfs to a tmpfs: %w", err)
	}
	logf("polis: moved the initramfs (%.1f MB) from rootfs to a tmpfs root in %v; starting again on it", float64(n)/1e6, time.Since(t).Round(time.Millisecond))
	if err := os.Chdir(newRootDir); err != nil {
		return "", fmt.Errorf("switching root: %w", err)
	}
	if err := unix.Mount(".", "/", "", unix.MS_MOVE, ""); err != nil {
		return "", fmt.Errorf("switching root: moving %s onto /: %w", newRootDir, err)
	}
	if err := unix.Chroot("."); err != nil {
		return "", fmt.Errorf("switching root: chroot: %w", err)
	}
	if err := os.Chdir("/"); err != nil {
		return "", fmt.Errorf("switching root: %w", err)
	}
	err = unix.Exec(InitPath, os.Args, os.Environ())
	return "", fmt.Errorf("switching root: executing %s on the new root: %w", InitPath, err)
}

// moveTree moves everything under src (a directory on rootfs) into dst,
// except dst itself: directories, regular files, symlinks and device
// nodes (the initramfs' /dev/console). Each file is removed once copied,
// so that the copy never holds more than one file twice. It returns the
// bytes moved.
func moveTree(src, dst string) (int64, error) {
	var total int64
	err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p == dst {
			return filepath.SkipDir
		}
		rel, err := filepath.Rel(src, p)
		if err != nil {
			return err
		}
		if rel == "." {
			return nil
		}
		target := filepath.Join(dst, rel)
		info, err := d.Info()
		if err != nil {
			return err
		}
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			return err
		}
		mode := info.Mode()
		switch {
		case mode.IsDir():
			if err := os.Mkdir(target, mode.Perm()); err != nil {
				return err
			}
		case mode&fs.ModeSymlink != 0:
			link, err := os.Readlink(p)
			if err != nil {
				return err
			}
			if err := os.Symlink(link, target); err != nil {
				return err
			}
		case mode.IsRegular():
			n, err := copyFileMode(p, target, mode.Perm())
			if err != nil {
				return err
			}
			total += n
		case mode&fs.ModeDevice != 0:
			if err := unix.Mknod(target, st.Mode, int(st.Rdev)); err != nil {
				return err
			}
		default:
			return fmt.Errorf("%s: cannot move a %v", p, mode.Type())
		}
		if err := os.Lchown(target, int(st.Uid), int(st.Gid)); err != nil {
			return err
		}
		// Directories stay: empty, they hold next to no RAM, and rootfs
		// is out of sight once the tmpfs is moved over it.
		if !mode.IsDir() {
			return os.Remove(p)
		}
		return nil
	})
	return total, err
}

// copyFileMode copies a regular file with its permissions.
func copyFileMode(src, dst string, perm fs.FileMode) (int64, error) {
	in, err := os.Open(src)
	if err != nil {
		return 0, err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_EXCL|os.O_WRONLY, perm)
	if err != nil {
		return 0, err
	}
	n, err := io.Copy(out, in)
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(dst, perm)
	}
	return n, err
}

// probePivotRoot tries pivot_root(2) as runc does for a container, where
// it cannot disturb the machine: on a thread of its own, in a mount
// namespace of its own (propagation cut, so nothing it mounts reaches the
// machine's), onto a fresh tmpfs. The thread returns to the machine's
// namespace and is never handed back to the Go scheduler (it stays
// locked, so Go ends it with the goroutine, or keeps it aside if it is the
// main thread), and the probe's namespace goes with it. A nil error means a container runtime can
// pivot_root on this machine.
func probePivotRoot(scratch string) error {
	dir, err := os.MkdirTemp(scratch, ".pivot-root-probe-")
	if err != nil {
		return fmt.Errorf("pivot_root probe: %w", err)
	}
	defer os.Remove(dir)
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		// The thread may be the process' main thread, which Go never
		// ends but keeps aside: it must not stay in the probe's
		// namespace, where /proc/self/mountinfo (the main thread's)
		// would show the probe's mounts to the whole process. So the
		// thread goes back to the machine's namespace before it is
		// left, still locked, to Go.
		orig, err := os.Open("/proc/thread-self/ns/mnt")
		if err != nil {
			errc <- fmt.Errorf("the machine's mount namespace: %w", err)
			return
		}
		defer orig.Close()
		err = tryPivotRoot(dir)
		if serr := unix.Setns(int(orig.Fd()), unix.CLONE_NEWNS); serr != nil && err == nil {
			err = fmt.Errorf("returning to the machine's mount namespace: %w", serr)
		}
		errc <- err
	}()
	if err := <-errc; err != nil {
		return fmt.Errorf("pivot_root probe: %w", err)
	}
	return nil
}

// tryPivotRoot is probePivotRoot's work, on its locked thread.
func tryPivotRoot(dir string) error {
	if err := unix.Unshare(unix.CLONE_NEWNS); err != nil {
		return fmt.Errorf("a mount namespace of its own: %w", err)
	}
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("making its mounts private: %w", err)
	}
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "size=64k"); err != nil {
		return fmt.Errorf("mounting a tmpfs on %s: %w", dir, err)
	}
	old := filepath.Join(dir, "old")
	if err := os.Mkdir(old, 0o700); err != nil {
		return err
	}
	if err := unix.PivotRoot(dir, old); err != nil {
		return fmt.Errorf("pivot_root(%s, %s): %w", dir, old, err)
	}
	return nil
}
