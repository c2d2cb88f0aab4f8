package image

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
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

// fetchKernel returns the kernel package pkg unpacked under dir, fetching
// it with apt-get download (no root needed; apt only needs its package
// lists) and unpacking it with dpkg-deb -x (no root, no maintainer
// scripts) the first time. A stamp file marks a finished unpack, so an
// interrupted one is redone rather than trusted.
func fetchKernel(ctx context.Context, pkg, dir string, progress func(string, ...any)) (*Kernel, error) {
	rel := kernelRelease(pkg)
	unpacked := filepath.Join(dir, pkg)
	k := &Kernel{
		Release:    rel,
		Image:      filepath.Join(unpacked, "boot", "vmlinuz-"+rel),
		ModulesDir: filepath.Join(unpacked, "lib", "modules", rel),
	}
	stamp := filepath.Join(dir, pkg+".unpacked")
	if _, err := os.Stat(stamp); err == nil {
		return k, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("kernel cache: %w", err)
	}
	deb, err := findDeb(dir, pkg)
	if err != nil {
		return nil, err
	}
	if deb == "" {
		progress("fetching %s with apt-get download", pkg)
		out, err := aptDownload(ctx, dir, pkg)
		if err != nil && unknownPackage(out) && os.Geteuid() == 0 {
			// A fresh machine's package lists may predate the pinned
			// kernel; root may refresh them (a user cannot).
			progress("apt does not know %s yet; updating its package lists (apt-get update)", pkg)
			if uout, uerr := exec.CommandContext(ctx, "apt-get", "update").CombinedOutput(); uerr != nil {
				return nil, fmt.Errorf("apt-get update: %w\n%s", uerr, strings.TrimSpace(string(uout)))
			}
			out, err = aptDownload(ctx, dir, pkg)
		}
		if err != nil {
			hint := ""
			if unknownPackage(out) {
				hint = "\napt does not know the package: its lists may be old (run apt-get update as root)"
			}
			return nil, fmt.Errorf("apt-get download %s: %w\n%s%s", pkg, err, strings.TrimSpace(string(out)), hint)
		}
		if deb, err = findDeb(dir, pkg); err != nil {
			return nil, err
		}
		if deb == "" {
			return nil, fmt.Errorf("apt-get download %s left no %s_*.deb in %s", pkg, pkg, dir)
		}
	}
	progress("unpacking %s", filepath.Base(deb))
	if err := os.RemoveAll(unpacked); err != nil {
		return nil, fmt.Errorf("kernel cache: %w", err)
	}
	cmd := exec.CommandContext(ctx, "dpkg-deb", "-x", deb, unpacked)
	if out, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("dpkg-deb -x %s: %w\n%s", deb, err, strings.TrimSpace(string(out)))
	}
	for _, p := range []string{k.Image, k.ModulesDir} {
		if _, err := os.Stat(p); err != nil {
			return nil, fmt.Errorf("the kernel package %s has no %s: %w", pkg, strings.TrimPrefix(p, unpacked), err)
		}
	}
	if err := os.WriteFile(stamp, nil, 0o644); err != nil {
		return nil, fmt.Errorf("kernel cache: %w", err)
	}
	return k, nil
}

func aptDownload(ctx context.Context, dir, pkg string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, "apt-get", "download", pkg)
	cmd.Dir = dir
	return cmd.CombinedOutput()
}

// unknownPackage recognises apt's answer for a package it has no record of.
func unknownPackage(out []byte) bool {
	return bytes.Contains(out, []byte("Couldn't find")) || bytes.Contains(out, []byte("Unable to locate"))
}

// findDeb returns the downloaded .deb of pkg in dir, or "" if there is none.
func findDeb(dir, pkg string) (string, error) {
	m, err := filepath.Glob(filepath.Join(dir, pkg+"_*.deb"))
	if err != nil {
		return "", err
	}
	switch len(m) {
	case 0:
		return "", nil
	case 1:
		return m[0], nil
	}
	return "", fmt.Errorf("kernel cache %s holds several %s packages (%s); remove all but one", dir, pkg, strings.Join(m, ", "))
}

// readFileIfExists reads a file; a missing one reads as empty.
func readFileIfExists(p string) ([]byte, error) {
	b, err := os.ReadFile(p)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	return b, err
}
