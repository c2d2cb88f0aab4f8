package kubelet

import (
	"cmp"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/polis-os/polis/internal/mountinfo"
)

// The runtime's state that a reboot empties (RunDir is on tmpfs), unlike
// containerd's root (images, snapshots, metadata) on the data disk.
func (c Config) containerdState() string { return filepath.Join(c.RunDir, "containerd") }

// runcRoot is runc's state (one directory per container), given to the
// shim as its runc options' Root rather than runc's default under
// /run/containerd, so that it is the runner's to clean.
func (c Config) runcRoot() string { return filepath.Join(c.RunDir, "runc") }

// runtimeStateDirs are the directories cleanRuntimeState empties.
func (c Config) runtimeStateDirs() []string {
	return []string{c.containerdState(), c.runcRoot()}
}

// cleaned says what cleanRuntimeState did.
type cleaned struct {
	// Unmounted counts the mounts detached below the directories (the
	// containers' root filesystems, the sandboxes' /dev/shm and network
	// namespaces).
	Unmounted int
	// Removed counts the entries removed from the directories' tops
	// (containerd's per-plugin state, runc's namespaces).
	Removed int
}

// cleanRuntimeState makes the runtime's state what a reboot leaves: every
// mount below dirs detached, deepest first, then everything in them
// removed (the directories themselves stay). It must run only when no
// process of the runtime is left: the mounts are then no one's, and a
// containerd started next finds no task bundle, so no dead shim to clean
// up (one `containerd-shim-runc-v2 delete` each, seconds under TCG). Its
// CRI plugin and the kubelet then see the containers and sandboxes in
// containerd's metadata without tasks, as after a reboot, and stop and
// remove them the same way.
//
// Nothing is removed while a mount is still below dirs: removal through a
// container's root filesystem would delete the files of its layers.
func cleanRuntimeState(mountinfoPath string, dirs []string) (cleaned, error) {
	var done cleaned
	mounts, err := mountinfo.ReadFile(mountinfoPath)
	if err != nil {
		return done, fmt.Errorf("kubelet: %w", err)
	}
	var errs []error
	for _, m := range mountsUnder(mounts, dirs) {
		switch err := unix.Unmount(m, unix.MNT_DETACH); {
		case err == nil:
			done.Unmounted++
		case errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOENT):
			// Gone with its parent, or no longer a mount point.
		default:
			errs = append(errs, fmt.Errorf("unmounting %s: %w", m, err))
		}
	}
	if mounts, err = mountinfo.ReadFile(mountinfoPath); err != nil {
		return done, fmt.Errorf("kubelet: %w", err)
	}
	if left := mountsUnder(mounts, dirs); len(left) > 0 {
		errs = append(errs, fmt.Errorf("%d mounts are left below %s (%s, ...): nothing removed", len(left), strings.Join(dirs, ", "), left[0]))
		return done, fmt.Errorf("kubelet: cleaning the runtime's state: %w", errors.Join(errs...))
	}
	for _, dir := range dirs {
		n, err := removeContents(dir)
		done.Removed += n
		if err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return done, fmt.Errorf("kubelet: cleaning the runtime's state: %w", err)
	}
	return done, nil
}

// removeContents removes everything in dir, not dir itself, and counts
// the entries removed; a dir that does not exist is empty.
func removeContents(dir string) (int, error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("reading %s: %w", dir, err)
	}
	n := 0
	var errs []error
	for _, e := range entries {
		if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
			errs = append(errs, fmt.Errorf("removing %w", err))
			continue
		}
		n++
	}
	return n, errors.Join(errs...)
}

// mountsUnder returns the mount points of mounts strictly below one of
// dirs, in the order to unmount them: deepest first and, of mounts
// stacked on one point, the last mounted first.
func mountsUnder(mounts []mountinfo.Mount, dirs []string) []string {
	type mount struct {
		path  string
		depth int
		order int
	}
	var ms []mount
	for _, m := range mounts {
		for _, d := range dirs {
			if strings.HasPrefix(m.MountPoint, filepath.Clean(d)+"/") {
				ms = append(ms, mount{path: m.MountPoint, depth: strings.Count(m.MountPoint, "/"), order: len(ms)})
				break
			}
		}
	}
	slices.SortFunc(ms, func(a, b mount) int {
		return cmp.Or(cmp.Compare(b.depth, a.depth), cmp.Compare(b.order, a.order))
	})
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = m.path
	}
	return out
}
