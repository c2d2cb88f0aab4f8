package pid1

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// mountEarly mounts the kernel's own file systems.
func mountEarly() error {
	for _, m := range []struct {
		fstype, target, data string
		flags                uintptr
	}{
		{"proc", "/proc", "", unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC},
		{"sysfs", "/sys", "", unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC},
		{"devtmpfs", "/dev", "mode=0755", unix.MS_NOSUID},
		{"tmpfs", "/run", "mode=0755", unix.MS_NOSUID | unix.MS_NODEV},
		{"tmpfs", "/tmp", "mode=1777", unix.MS_NOSUID | unix.MS_NODEV},
	} {
		if err := os.MkdirAll(m.target, 0o755); err != nil {
			return fmt.Errorf("mounting %s: %w", m.target, err)
		}
		if err := unix.Mount(m.fstype, m.target, m.fstype, m.flags, m.data); err != nil && !errors.Is(err, unix.EBUSY) {
			return fmt.Errorf("mounting %s on %s: %w", m.fstype, m.target, err)
		}
	}
	return nil
}
