package image

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/polis-os/polis/launch/debpkg"
)

// KernelPackage is the Debian package whose kernel the image boots. This
// is the one place its version is named: Debian's linux-image-amd64
// (6.1.192-2 when this was written) depends on it. A newer ABI (-57...)
// is a new package name, so bumping the kernel is changing this line.
const KernelPackage = "linux-image-6.1.0-56-amd64"

// kernelRelease is the kernel's release (its lib/modules directory name),
// which for Debian's packages is the package name without "linux-image-".
func kernelRelease(pkg string) string { return strings.TrimPrefix(pkg, "linux-image-") }

// Kernel is an unpacked kernel package.
type Kernel struct {
	// Release is the kernel's release, e.g. 6.1.0-56-amd64.
	Release string
	// Image is the bootable kernel (boot/vmlinuz-<release>).
	Image string
	// ModulesDir is lib/modules/<release>.
	ModulesDir string
}

// fetchKernel returns the kernel package pkg unpacked under dir, fetched
// and unpacked by launch/debpkg the first time.
func fetchKernel(ctx context.Context, pkg, dir string, progress func(string, ...any)) (*Kernel, error) {
	rel := kernelRelease(pkg)
	k := func(unpacked string) *Kernel {
		return &Kernel{
			Release:    rel,
			Image:      filepath.Join(unpacked, "boot", "vmlinuz-"+rel),
			ModulesDir: filepath.Join(unpacked, "lib", "modules", rel),
		}
	}
	unpacked, err := debpkg.Unpack(ctx, dir, pkg, progress, func(unpacked string) error {
		for _, p := range []string{k(unpacked).Image, k(unpacked).ModulesDir} {
			if _, err := os.Stat(p); err != nil {
				return fmt.Errorf("the kernel package %s has no %s: %w", pkg, strings.TrimPrefix(p, unpacked), err)
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return k(unpacked), nil
}

// readFileIfExists reads a file; a missing one reads as empty.
func readFileIfExists(p string) ([]byte, error) {
	b, err := os.ReadFile(p)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	return b, err
}

// placeKernelDeb puts a kernel .deb fetched by someone else (Config.KernelDeb)
// into the package cache dir, where fetchKernel finds it instead of
// downloading one. It must be KernelPackage (by its file name, which is
// what the cache goes by), and a cache that holds another build of it
// is refused rather than silently preferred.
func placeKernelDeb(deb, dir string) error {
	name := filepath.Base(deb)
	if !strings.HasPrefix(name, KernelPackage+"_") || !strings.HasSuffix(name, ".deb") {
		return fmt.Errorf("kernel package %s: want %s_VERSION_ARCH.deb, the package this image boots (launch/image.KernelPackage)", deb, KernelPackage)
	}
	abs, err := filepath.Abs(deb)
	if err != nil {
		return fmt.Errorf("kernel package %s: %w", deb, err)
	}
	if _, err := os.Stat(abs); err != nil {
		return fmt.Errorf("kernel package: %w", err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("package cache: %w", err)
	}
	m, err := filepath.Glob(filepath.Join(dir, KernelPackage+"_*.deb"))
	if err != nil {
		return err
	}
	for _, have := range m {
		if filepath.Base(have) != name {
			return fmt.Errorf("package cache %s already holds %s, not the given %s: use another cache directory", dir, filepath.Base(have), name)
		}
	}
	if len(m) == 1 {
		return nil
	}
	if err := os.Symlink(abs, filepath.Join(dir, name)); err != nil {
		return fmt.Errorf("package cache: %w", err)
	}
	return nil
}
