package systembuild

import (
	"context"
	"fmt"
	"path/filepath"

	"github.com/polis-os/polis/launch/debpkg"
)

// BusyboxPackage is the Debian package that mount and umount come from:
// busybox, statically linked, which runs the applet its file is named
// after. kubelet executes mount and umount (tmpfs-backed volumes such as
// Secrets and projected service account tokens), and the node has no
// util-linux.
const BusyboxPackage = "busybox-static"

// busyboxPath is the binary's path in the package.
const busyboxPath = "bin/busybox"

// fetchBusybox returns busybox from BusyboxPackage unpacked under dir,
// fetched and unpacked by launch/debpkg the first time.
func fetchBusybox(ctx context.Context, dir string, logf func(string, ...any)) (string, error) {
	unpacked, err := debpkg.Unpack(ctx, dir, BusyboxPackage, logf, func(unpacked string) error {
		if err := checkStatic(filepath.Join(unpacked, busyboxPath)); err != nil {
			return fmt.Errorf("the package %s: %w", BusyboxPackage, err)
		}
		return nil
	})
	if err != nil {
		return "", err
	}
	return filepath.Join(unpacked, busyboxPath), nil
}
