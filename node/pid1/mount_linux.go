package pid1

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// earlyMount is a file system PID 1 mounts before anything else.
type earlyMount struct {
	fstype, target, data string
	flags                uintptr
}

// earlyMounts are the kernel's own file systems and the tmpfs a machine
// needs, in mount order (proc is already there: switchRootIfNeeded
// mounted it to look at the root). /dev/pts and /dev/shm are what a
// container runtime expects of its host; cgroup2 with nsdelegate, so that
// a cgroup namespace is a delegation boundary.
var earlyMounts = []earlyMount{
	{"sysfs", "/sys", "", unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC},
	{"devtmpfs", "/dev", "mode=0755", unix.MS_NOSUID},
	{"devpts", "/dev/pts", "mode=0620,ptmxmode=0666", unix.MS_NOSUID | unix.MS_NOEXEC},
	{"tmpfs", "/dev/shm", "mode=1777", unix.MS_NOSUID | unix.MS_NODEV},
	{"tmpfs", "/run", "mode=0755", unix.MS_NOSUID | unix.MS_NODEV},
	{"tmpfs", "/tmp", "mode=1777", unix.MS_NOSUID | unix.MS_NODEV},
	{"cgroup2", CgroupRoot, "nsdelegate", unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC},
}

// mountEarly mounts earlyMounts, then makes every mount shared,
// recursively: kubelet requires shared mount propagation (volumes it
// mounts must reach the containers' mount namespaces), and mounts made
// later under a shared mount are shared too.
func mountEarly() error {
	for _, m := range earlyMounts {
		if err := os.MkdirAll(m.target, 0o755); err != nil {
			return fmt.Errorf("mounting %s: %w", m.target, err)
		}
		if err := unix.Mount(m.fstype, m.target, m.fstype, m.flags, m.data); err != nil && !errors.Is(err, unix.EBUSY) {
			return fmt.Errorf("mounting %s on %s: %w", m.fstype, m.target, err)
		}
	}
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_SHARED, ""); err != nil {
		return fmt.Errorf("making / a shared mount (recursively): %w", err)
	}
	return nil
}
